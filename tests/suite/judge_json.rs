//! json mode (roleplay8-ja): whatever the model's weights, the judge writes a JSON object with
//! exactly the rubric's keys in order and integers in range. Random-weight models put their mass
//! on arbitrary tokens (quotes, backslashes, control characters, partial UTF-8, special tokens),
//! which is what the grammar has to hold against. Two real vocabularies: SmolLM2's byte-level
//! BPE and Gemma 3's SentencePiece with byte fallback.

use crate::common;

use candle_core::{DType, Device, Tensor};
use hyoka::data::Item;
use hyoka::judge::json::{Decoding, JsonFormat, item_seed};
use hyoka::judge::layout::{ItemLayout, common_header, layout_prompt};
use hyoka::judge::run::{Judge, RunOptions};
use hyoka::model::LoadedModel;
use hyoka::model::tokenizer::TextFit;
use hyoka::prompt::PromptBuilder;
use hyoka::rubric::Rubric;
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;

const CHATML: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/// A llama-architecture model with random weights over `tokenizer`'s vocabulary.
fn random_model(dir: &Path, tokenizer: &tokenizers::Tokenizer, tokenizer_config: &str, seed: u64) {
    let vocab = tokenizer.get_vocab_size(true);
    let (hidden, inter, layers) = (32usize, 64usize, 2usize);
    let config = serde_json::json!({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
        "intermediate_size": inter, "num_attention_heads": 4, "num_key_value_heads": 2,
        "num_hidden_layers": layers, "vocab_size": vocab, "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": true, "hidden_act": "silu",
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let dev = Device::Cpu;
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    // Uniform with the given standard deviation, from a seeded xorshift (candle's CPU rng
    // cannot be seeded).
    let mut randn = |std: f32, shape: (usize, usize)| {
        let data: Vec<f32> = (0..shape.0 * shape.1)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                ((state >> 11) as f32 / (1u64 << 53) as f32 * 2.0 - 1.0) * std * 3f32.sqrt()
            })
            .collect();
        Tensor::from_vec(data, shape, &Device::Cpu).unwrap()
    };
    let mut t: HashMap<String, Tensor> = HashMap::new();
    // Large embeddings: peaked, varied next-token distributions.
    t.insert(
        "model.embed_tokens.weight".into(),
        randn(1.0, (vocab, hidden)),
    );
    t.insert(
        "model.norm.weight".into(),
        Tensor::ones(hidden, DType::F32, &dev).unwrap(),
    );
    for l in 0..layers {
        let p = format!("model.layers.{l}");
        for (name, shape) in [
            ("self_attn.q_proj", (hidden, hidden)),
            ("self_attn.k_proj", (hidden / 2, hidden)),
            ("self_attn.v_proj", (hidden / 2, hidden)),
            ("self_attn.o_proj", (hidden, hidden)),
            ("mlp.gate_proj", (inter, hidden)),
            ("mlp.up_proj", (inter, hidden)),
            ("mlp.down_proj", (hidden, inter)),
        ] {
            t.insert(format!("{p}.{name}.weight"), randn(0.3, shape));
        }
        t.insert(
            format!("{p}.input_layernorm.weight"),
            Tensor::ones(hidden, DType::F32, &dev).unwrap(),
        );
        t.insert(
            format!("{p}.post_attention_layernorm.weight"),
            Tensor::ones(hidden, DType::F32, &dev).unwrap(),
        );
    }
    candle_core::safetensors::save(&t, dir.join("model.safetensors")).unwrap();
    tokenizer.save(dir.join("tokenizer.json"), false).unwrap();
    std::fs::write(dir.join("tokenizer_config.json"), tokenizer_config).unwrap();
}

fn items(n: usize) -> Vec<Item> {
    let lines = [
        "こんにちは！今日は何をしていましたか？",
        "昨日は雨で、家で本を読んでいました。",
        "\"Quotes\" and \\backslashes\\ are fine.",
        "猫が好きです😺",
    ];
    (0..n)
        .map(|i| {
            let context: Vec<Value> = (0..1 + i % 3)
                .map(|k| serde_json::json!({"speaker": if k % 2 == 0 { "user" } else { "bot" }, "text": lines[(i + k) % lines.len()]}))
                .collect();
            serde_json::from_value(serde_json::json!({
                "id": format!("rp-{i:03}"),
                "context": context,
                "response": {"speaker": "bot", "text": format!("{}（{}）", lines[(i + 1) % lines.len()], i)},
                "setting": "あなたは喫茶店の店員「ユキ」です。",
            }))
            .unwrap()
        })
        .collect()
}

/// Run the roleplay judge and check every line's object against the schema.
fn check_schema(model_dir: &Path, decoding: Decoding, n: usize) -> Vec<Value> {
    check_schema_within(model_dir, decoding, n, hyoka::judge::JSON_CACHE_BYTES)
}

/// `check_schema` with `cache_bytes` for the keys and values of the items decoded together.
fn check_schema_within(
    model_dir: &Path,
    decoding: Decoding,
    n: usize,
    cache_bytes: usize,
) -> Vec<Value> {
    let model = LoadedModel::load(
        &hyoka::model::ModelRequest::new(model_dir.to_str().unwrap()),
        &Device::Cpu,
        &hyoka::model::RuntimeSettings::new(DType::F32),
    )
    .unwrap();
    let (mut rubric, source) = Rubric::resolve("roleplay8-ja").unwrap();
    rubric.json.as_mut().unwrap().reason_max_tokens = 24;
    let models = [model];
    let judge = Judge {
        models: &models,
        rubric: &rubric,
        rubric_source: &source,
    };
    let out = tempfile::tempdir().unwrap();
    let path = out.path().join("scores.jsonl");
    let opts = RunOptions {
        batch_tokens: 4096,
        max_prompt_tokens: None,
        overwrite: false,
        greedy_baseline: None,
        decoding,
        json_cache_bytes: cache_bytes,
    };
    let (summary, _) = judge
        .run(&items(n), &path, &opts, &mut |_, _| {
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
    assert_eq!(summary.scored, n);
    let reason_key = &rubric.json.as_ref().unwrap().reason_key;
    let mut lines = Vec::new();
    for line in std::fs::read_to_string(&path).unwrap().lines() {
        let line: Value = serde_json::from_str(line).unwrap();
        let answer = line["answer"].as_str().unwrap();
        let object: serde_json::Map<String, Value> =
            serde_json::from_str(answer).unwrap_or_else(|e| panic!("{e}: {answer}"));
        let keys: Vec<&str> = object.keys().map(String::as_str).collect();
        let mut expected = vec![reason_key.as_str()];
        expected.extend(rubric.aspects.iter().map(|a| a.name.as_str()));
        assert_eq!(keys, expected, "{answer}");
        assert_eq!(
            object[reason_key].as_str().unwrap(),
            line["reason"].as_str().unwrap()
        );
        for a in &rubric.aspects {
            let written = object[&a.name]
                .as_i64()
                .unwrap_or_else(|| panic!("{} not an integer: {answer}", a.name));
            assert!((a.min..=a.max).contains(&written), "{answer}");
            let s = &line["scores"][&a.key];
            assert_eq!(s["score"].as_i64().unwrap(), written);
            let dist: Vec<f64> = s["distribution"]
                .as_object()
                .unwrap()
                .values()
                .map(|v| v.as_f64().unwrap())
                .collect();
            assert_eq!(dist.len(), (a.max - a.min + 1) as usize);
            assert!((dist.iter().sum::<f64>() - 1.0).abs() < 1e-9);
            if decoding.temperature == 0.0 {
                // Greedy writes the most probable valid score.
                let best = dist.iter().cloned().fold(f64::MIN, f64::max);
                assert_eq!(dist[(written - a.min) as usize], best, "{answer}");
            }
        }
        lines.push(line);
    }
    assert_eq!(lines.len(), n);
    lines
}

/// A random model over SmolLM2's byte-level vocabulary, with a ChatML template.
fn smollm_vocabulary_model(seed: u64) -> Option<tempfile::TempDir> {
    let gguf = common::test_model("smollm2-135m-instruct-q4_1.gguf")?;
    let tokenizer = hyoka::model::tokenizer::load_tokenizer(&gguf, None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    random_model(
        dir.path(),
        &tokenizer,
        &serde_json::json!({ "chat_template": CHATML }).to_string(),
        seed,
    );
    Some(dir)
}

#[test]
fn byte_level_vocabulary_always_gives_schema_valid_json() {
    let Some(dir) = smollm_vocabulary_model(1) else {
        return;
    };
    let sampled = check_schema(
        dir.path(),
        Decoding {
            temperature: 1.5,
            seed: 3,
        },
        100,
    );
    // The reasons really are free text (not always empty), and Japanese or odd bytes pass.
    let nonempty = sampled
        .iter()
        .filter(|l| !l["reason"].as_str().unwrap().is_empty())
        .count();
    assert!(nonempty > 50, "only {nonempty} non-empty reasons");
    check_schema(
        dir.path(),
        Decoding {
            temperature: 0.0,
            seed: 0,
        },
        20,
    );
}

#[test]
fn sentencepiece_vocabulary_always_gives_schema_valid_json() {
    let Some(tok_dir) = common::test_model("gemma-3-tokenizer") else {
        return;
    };
    let tokenizer = tokenizers::Tokenizer::from_file(tok_dir.join("tokenizer.json")).unwrap();
    let config = std::fs::read_to_string(tok_dir.join("tokenizer_config.json")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    random_model(dir.path(), &tokenizer, &config, 2);
    // Fewer items than above: 262k-entry vocabulary, every step scans it.
    check_schema(
        dir.path(),
        Decoding {
            temperature: 1.0,
            seed: 11,
        },
        40,
    );
}

#[test]
fn the_seed_decides_the_draws_and_nothing_else_does() {
    let Some(dir) = smollm_vocabulary_model(5) else {
        return;
    };
    let answers = |seed| -> Vec<String> {
        check_schema(
            dir.path(),
            Decoding {
                temperature: 1.0,
                seed,
            },
            6,
        )
        .iter()
        .map(|l| l["answer"].as_str().unwrap().to_string())
        .collect()
    };
    let a = answers(1);
    assert_eq!(a, answers(1), "same seed, same answers");
    assert_ne!(a, answers(2), "another seed, other answers");
}

/// The memory given to the decoding cache (`--json-cache-gib`) decides how many items decode
/// together, not what they write: all six in one batch, or one at a time (a budget below one
/// row's), sampled, give the same objects and score distributions.
#[test]
fn the_cache_budget_decides_how_many_rows_not_the_objects() {
    let Some(dir) = smollm_vocabulary_model(9) else {
        return;
    };
    let sampled = Decoding {
        temperature: 1.0,
        seed: 3,
    };
    let all = check_schema_within(dir.path(), sampled, 6, hyoka::judge::JSON_CACHE_BYTES);
    let alone = check_schema_within(dir.path(), sampled, 6, 1);
    for (a, b) in all.iter().zip(&alone) {
        assert_eq!(a["id"], b["id"]);
        assert_eq!(a["answer"], b["answer"], "{}", a["id"]);
        assert_eq!(a["scores"], b["scores"], "{}", a["id"]);
    }
}

/// Batched json decoding (every item of a batch fed in one forward pass per step, on one
/// preallocated cache) writes what decoding each item alone through `Transformer::extend`
/// writes: 16 items greedy on the real Gemma 3 GGUF (Q4_K_M weights, sliding-window layers,
/// 262k SentencePiece vocabulary), 8 items sampled (T = 1) on SmolLM2's (Q4_1, byte-level BPE);
/// prompts of different lengths, rows finishing at different steps. The same text and the same
/// score distributions, to the bit: the quantized kernels round activations to 8 bits, so a
/// last-bit difference anywhere (a softmax over padded keys) moved distributions by 0.056 before
/// attention ran each row on its own. Reasons are kept short and, of Gemma 3's 16 rows, every
/// fifth and the last are decoded alone to compare: the one-at-a-time path reads the output
/// heads through candle's scalar kernels (~0.3 s per token for Gemma 3's).
#[test]
fn batched_json_decoding_writes_what_one_at_a_time_writes() {
    let greedy = Decoding {
        temperature: 0.0,
        seed: 0,
    };
    let sampled = Decoding {
        temperature: 1.0,
        seed: 7,
    };
    // The Gemma 3 GGUF has no chat template: its tokenizer folder brings it.
    for (file, tokenizer, decoding, n, reason, stride) in [
        (
            "gemma-3-270m-q4_k_m.gguf",
            Some("gemma-3-tokenizer"),
            greedy,
            16,
            8,
            5,
        ),
        ("smollm2-135m-instruct-q4_1.gguf", None, sampled, 8, 16, 1),
    ] {
        let Some(gguf) = common::test_model(file) else {
            return;
        };
        let tokenizer = match tokenizer.map(common::test_model) {
            Some(None) => return,
            Some(Some(dir)) => Some(dir),
            None => None,
        };
        let model = LoadedModel::load(
            &hyoka::model::ModelRequest {
                tokenizer: tokenizer.as_deref(),
                ..hyoka::model::ModelRequest::new(gguf.to_str().unwrap())
            },
            &Device::Cpu,
            &hyoka::model::RuntimeSettings::new(DType::F32),
        )
        .unwrap();
        let (mut rubric, _) = Rubric::resolve("roleplay8-ja").unwrap();
        rubric.json.as_mut().unwrap().reason_max_tokens = reason;
        let format = JsonFormat::new(&rubric, &model.tokenizer).unwrap();
        let builder = PromptBuilder::new(&rubric).unwrap();
        let fit = TextFit::new(&model.tokenizer, 4096);
        let items = items(n);
        let layouts: Vec<ItemLayout> = items
            .iter()
            .map(|it| {
                let (t, tok) = (&model.chat_template, &model.tokenizer);
                layout_prompt(&builder, t, tok, it, &fit, format.reserve()).unwrap()
            })
            .collect();
        let header = common_header(&layouts.iter().collect::<Vec<_>>());
        let t = &model.transformer;
        let header_kv = t.prefix(&layouts[0].trunk[..header]).unwrap();
        let prompts: Vec<&[u32]> = layouts.iter().map(|l| &l.trunk[header..]).collect();
        let seeds: Vec<u64> = items
            .iter()
            .map(|it| item_seed(decoding.seed, 0, &it.id))
            .collect();
        let batched = format
            .decode_batch(t, Some(&header_kv), &prompts, decoding, &seeds)
            .unwrap();
        let mut worst = 0f64;
        let mut lengths = Vec::new();
        for (i, got) in batched.iter().enumerate() {
            let got = got.as_ref().expect("a finite model writes every object");
            lengths.push(got.reason.chars().count());
            if i % stride != 0 && i + 1 != batched.len() {
                continue;
            }
            let alone = format
                .decode(t, Some(&header_kv), prompts[i], decoding, seeds[i])
                .unwrap()
                .expect("a finite model writes every object");
            assert_eq!(got.text, alone.text, "{file} item {i}, {decoding:?}");
            for (a, b) in got.aspects.iter().zip(&alone.aspects) {
                assert_eq!(a.score, b.score);
                for (p, q) in a.probabilities().iter().zip(b.probabilities()) {
                    worst = worst.max((p - q).abs());
                }
            }
        }
        eprintln!("{file}: batched vs alone, worst |Δp| {worst:.2e}, reasons {lengths:?}");
        assert_eq!(worst, 0.0, "{file}: probabilities differ by {worst}");
        if decoding.temperature > 0.0 {
            // Drawn reasons end at different steps, so rows whose reason is done wait for the
            // others and are dropped mid-batch (greedy reasons of the small model all run to
            // the limit).
            lengths.sort_unstable();
            assert!(lengths[0] < lengths[lengths.len() - 1], "{lengths:?}");
        }
    }
}
