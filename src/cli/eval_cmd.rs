//! `hyoka eval`: the flags turned into the library's evaluation (`eval::run`), its messages on
//! stderr and its tables on stdout, and the exit code of what it did.

use super::eval_files::EvalArgs;
use crate::data::select::Shard;
use crate::eval::{Reporter, refuse_input_as_output};
use crate::meta::Naming;
use std::process::ExitCode;

pub fn run(args: EvalArgs) -> anyhow::Result<ExitCode> {
    let shard = match args.shard {
        Some(s) => Some(s),
        None => Shard::from_slurm(|k| std::env::var(k).ok()).map_err(anyhow::Error::msg)?,
    };
    let (rubric, source) = crate::prompt::resolve_rubric(&args.rubric)?;
    if let Some(input) = &args.input {
        let dir = match shard {
            Some(s) => args.output.join(s.folder_name()),
            None => args.output.clone(),
        };
        refuse_input_as_output(&dir, input)?;
    }
    let translate_flags = [
        args.translate_rubric.is_some(),
        args.translate_prompt.is_some(),
        args.translate_model.is_some(),
        args.translate_bertscore_model.is_some(),
        args.translate_layer.is_some(),
        args.translate_keep_unfinished,
    ];
    if args.translate.is_none() && translate_flags.iter().any(|&f| f) {
        return Err(super::exit::usage(
            "--translate-rubric, --translate-prompt, --translate-model, --translate-bertscore-model, --translate-layer and --translate-keep-unfinished are for --translate LANG",
        ));
    }
    let spec = args.spec(rubric, source, shard);
    let items = args.items()?;
    let reporter = super::running::Terminal::default();
    let done = crate::eval::run(&spec, items, Naming::Flags, &reporter)?;
    Ok(super::exit::finish(&done.failed, 0))
}

impl Reporter for super::running::Terminal {
    fn note(&self, line: &str) {
        eprintln!("{line}");
    }

    fn table(&self, text: &str) {
        print!("{text}");
    }

    fn progress(&self, step: &str, done: usize, total: usize) -> std::ops::ControlFlow<()> {
        self.show(step, done, total);
        std::ops::ControlFlow::Continue(())
    }

    fn step_done(&self, _step: &str) {
        self.clear();
    }
}
