//! `hyoka bench`: prefill speed on real judge prompts (a benchmark, never a test).

use crate::data;
use crate::judge::Scorer;
use crate::judge::layout::{ItemLayout, common_header, layout_item};
use crate::model::backend::device::{device_name, dtype_name};
use crate::model::backend::stage_times;
use crate::model::plan_batches;
use crate::model::tokenizer::TextFit;
use crate::model::{Batch, KvCache, Products, Row, Transformer};
use crate::prompt::PromptBuilder;
use anyhow::Context;
use clap::Args;
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Args, Debug)]
#[command(long_about = "Measure prefill speed on real judge prompts.\n\n\
Three measurements on the first N items: (1) one full prompt (first aspect) per item, batch 1; \
(2) the same prompts batched up to --batch-tokens; (3) hyoka's judge layout (all aspects in one \
prefill per item, shared header once). Then decoding: --decode-tokens greedy tokens after \
the first prompt alone, and after all N prompts together on one cache (json rubrics' path: rows \
decoded together, each row's products on its own). With --dump-tokens the token ids of (1) are \
written as JSON so that another engine (scripts/bench/bench_llama_cpp.py) can run the very same tokens.")]
pub struct BenchArgs {
    /// Judge model: local folder or .gguf file, or Hugging Face id.
    #[arg(long)]
    pub model: String,
    #[command(flatten)]
    pub runtime: super::runtime_args::RuntimeArgs,
    /// Rubric whose prompts are timed: built-in name or file.
    #[arg(long, default_value = "dialogue6-ja")]
    pub rubric: String,
    /// Items JSONL whose first --n items make the prompts.
    #[arg(long, short)]
    pub input: PathBuf,
    /// Number of items (at least 1).
    #[arg(long, default_value_t = 20, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub n: usize,
    /// Padded tokens per batch in the batched measurements (2) and (3).
    #[arg(long, default_value_t = 4096, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub batch_tokens: usize,
    /// Greedy tokens to decode after the prompts and one untimed token (0: no decoding
    /// measurement).
    #[arg(long, default_value_t = 64)]
    pub decode_tokens: usize,
    /// Write the prompts' token ids here (JSON: {"prompts": [[ids…], …]}).
    #[arg(long, value_name = "FILE")]
    pub dump_tokens: Option<PathBuf>,
    /// Peak dense bf16 FLOP/s of the device, for model FLOP utilisation (e.g. 989e12 for an H100).
    #[arg(long)]
    pub peak_flops: Option<f64>,
    /// Also report where each measurement's time goes ("stage_seconds": weight expansion,
    /// products, attention, norms, …, each stage's own seconds and calls). Every stage then
    /// waits for the device before and after it, which slows a GPU: the speed figures of such a
    /// run are not the speed.
    #[arg(long)]
    pub stage_times: bool,
}

pub fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    let (rubric, _) = crate::prompt::resolve_rubric(&args.rubric)?;
    let items = data::read_items(&args.input, false)?.items;
    if items.is_empty() {
        return Err(data::DataError::Format {
            file: args.input.clone(),
            message: "no items to benchmark".into(),
        }
        .into());
    }
    let items = &items[..args.n.min(items.len())];
    let runtime = args.runtime.options();
    let (device, settings) = runtime.settings()?;
    let model = runtime.load_model(&args.model, &device, &settings, None)?;
    let t = &model.transformer;
    let builder = PromptBuilder::new(&rubric)?;
    let fit = TextFit::new(&model.tokenizer, t.cfg.max_position);
    let layouts: Vec<ItemLayout> = items
        .iter()
        .map(|it| layout_item(&builder, &model.chat_template, &model.tokenizer, it, &fit))
        .collect::<Result<_, _>>()?;
    // (1)/(2): one full prompt per item, the first aspect's (prompt + answer prefix).
    let prompts: Vec<Vec<u32>> = layouts
        .iter()
        .map(|l| {
            let a = &l.aspects[0];
            let mut p = l.trunk.clone();
            p.extend_from_slice(&a.stem);
            p
        })
        .collect();
    if let Some(path) = &args.dump_tokens {
        crate::files::write_atomic(path, json!({"prompts": prompts}).to_string().as_bytes())
            .with_context(|| path.display().to_string())?;
    }
    let tokens: usize = prompts.iter().map(Vec::len).sum();
    let sync = || device.synchronize();

    if args.stage_times {
        stage_times::enable();
    }
    // Warm-up (allocations, kernel caches), the output head included: its first use (a quantized
    // head's row expansion, new GEMM shapes) stays out of the batch-1 figure.
    let b = Batch::new(&prompts[..1], 0, t.device())?;
    let h = t.forward(&b, None)?;
    t.logits_at(&h, &[(0, prompts[0].len() - 1)], None)?;
    sync()?;
    stage_times::take();
    let mut stages = serde_json::Map::new();
    let mut stages_of = |measurement: &str| {
        if args.stage_times {
            let totals = stage_times::take().into_iter().map(|s| {
                (
                    s.stage.to_string(),
                    json!({"seconds": s.seconds, "calls": s.calls}),
                )
            });
            stages.insert(measurement.to_string(), totals.collect());
        }
    };

    let start = Instant::now();
    for p in &prompts {
        let b = Batch::new(std::slice::from_ref(p), 0, t.device())?;
        let h = t.forward(&b, None)?;
        t.logits_at(&h, &[(0, p.len() - 1)], None)?;
    }
    sync()?;
    let single = start.elapsed().as_secs_f64();
    stages_of("prefill_batch1");

    let lens: Vec<usize> = prompts.iter().map(Vec::len).collect();
    let plan = plan_batches(&lens, args.batch_tokens);
    let start = Instant::now();
    for batch in &plan {
        let rows: Vec<Vec<u32>> = batch.iter().map(|&i| prompts[i].clone()).collect();
        let b = Batch::new(&rows, 0, t.device())?;
        let h = t.forward(&b, None)?;
        let at: Vec<(usize, usize)> = rows
            .iter()
            .enumerate()
            .map(|(r, p)| (r, p.len() - 1))
            .collect();
        t.logits_at(&h, &at, None)?;
    }
    sync()?;
    let batched = start.elapsed().as_secs_f64();
    stages_of("prefill_batched");

    let refs: Vec<&ItemLayout> = layouts.iter().collect();
    let header = common_header(&refs);
    let start = Instant::now();
    let scorer = Scorer::new(t, &layouts[0].trunk[..header])?;
    let judge_lens: Vec<usize> = refs.iter().map(|l| l.row_tokens(header)).collect();
    for batch in plan_batches(&judge_lens, args.batch_tokens) {
        let ls: Vec<&ItemLayout> = batch.iter().map(|&i| refs[i]).collect();
        scorer.score(&ls)?;
    }
    sync()?;
    let judged = start.elapsed().as_secs_f64();
    stages_of("judge");
    let judge_tokens = header + judge_lens.iter().sum::<usize>();
    let naive: usize = layouts.iter().map(|l| l.naive_tokens).sum();

    let (decode_1, decode_n) = if args.decode_tokens > 0 {
        let steps = args.decode_tokens;
        let one = decode_seconds(t, &prompts[..1], steps)?;
        stages_of("decode_batch1");
        let all = decode_seconds(t, &prompts, steps)?;
        stages_of("decode_batched");
        (
            Some(steps as f64 / one),
            Some((steps * prompts.len()) as f64 / all),
        )
    } else {
        (None, None)
    };

    let params = t.parameter_count() as f64;
    let mfu = |tok_s: f64| args.peak_flops.map(|peak| 2.0 * params * tok_s / peak);
    let mut report = json!({
        "model": args.model, "arch": t.cfg.arch.name(), "parameters": params, "device": device_name(&device),
        "dtype": dtype_name(settings.dtype), "weights": settings.weights.name(),
        "prefill_gemm": settings.prefill_gemm.name(), "gpu_kernels": settings.gpu_kernels.name(),
        "int8_body": crate::model::quant::int8_body(),
        "threads": rayon::current_num_threads(), "items": items.len(),
        "prompt_tokens": tokens, "mean_prompt_tokens": tokens as f64 / prompts.len() as f64,
        "prefill_batch1_tok_s": tokens as f64 / single,
        "prefill_batched_tok_s": tokens as f64 / batched, "batches": plan.len(),
        "judge_items_s": items.len() as f64 / judged, "judge_forward_tokens": judge_tokens,
        "judge_naive_tokens": naive, "judge_all_aspects_s": judged,
        "mfu_batched": mfu(tokens as f64 / batched),
        "decode_tokens": args.decode_tokens, "decode_batch1_tok_s": decode_1,
        "decode_rows": prompts.len(), "decode_batched_tok_s": decode_n,
    });
    if args.stage_times {
        report["stage_seconds"] = stages.into();
    }
    report["peak_rss_bytes"] = peak_rss_bytes().into();
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(ExitCode::SUCCESS)
}

/// Seconds to decode `steps` greedy tokens after each of `prompts`, all rows on one cache as
/// json rubrics decode. Neither the prompts' prefill nor a first decoding step is timed: a first
/// step's one-time costs stay out (likely the driver compiling the kernels a step first uses:
/// the first run on a fresh H100 decoded at about half speed).
fn decode_seconds(t: &Transformer, prompts: &[Vec<u32>], steps: usize) -> anyhow::Result<f64> {
    let longest = prompts.iter().map(Vec::len).max().unwrap_or(0);
    let mut cache = KvCache::new(t, prompts.len(), None, longest + steps + 1)?;
    let rows: Vec<Row> = prompts.iter().map(|p| Row::plain(p.clone())).collect();
    let hidden = t.step(&mut cache, &rows, Products::ByRowCount)?;
    let last: Vec<(usize, usize)> = prompts
        .iter()
        .enumerate()
        .map(|(r, p)| (r, p.len() - 1))
        .collect();
    let mut next = t
        .decode_logits(&hidden, &last)?
        .argmax(1)?
        .to_vec1::<u32>()?;
    let firsts: Vec<(usize, usize)> = (0..prompts.len()).map(|r| (r, 0)).collect();
    let mut step = |next: &mut Vec<u32>| -> anyhow::Result<()> {
        let rows: Vec<Row> = next.iter().map(|&id| Row::plain(vec![id])).collect();
        let hidden = t.step(&mut cache, &rows, Products::RowWise)?;
        *next = t
            .decode_logits(&hidden, &firsts)?
            .argmax(1)?
            .to_vec1::<u32>()?;
        Ok(())
    };
    step(&mut next)?;
    t.device().synchronize()?;
    stage_times::take(); // the prompts' prefill and the untimed step
    let start = Instant::now();
    for _ in 0..steps {
        step(&mut next)?;
    }
    t.device().synchronize()?;
    Ok(start.elapsed().as_secs_f64())
}

/// The process's peak resident memory (Linux's VmHWM); None where the system does not say.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
