//! `hyoka export`: results in other tools' formats.

use crate::meta::breakdown::LevelLabels;
use clap::Subcommand;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Subcommand, Debug)]
pub enum Export {
    /// Write a judge's breakdown distributions in the DBDC challenge's run format, for its
    /// official evaluation script.
    ///
    /// One `<dialogue-id>.labels.json` per dialogue, every scored system turn with its predicted
    /// label (the most probable, ties to O then T) and prob-O/T/X; items of several systems (ids
    /// SYSTEM/DIALOGUE/TURN, as `hyoka import dbdc3` writes them) go to one folder per system,
    /// as the dataset's. The aspect is the one whose rubric levels map onto O/T/X (breakdown3-ja
    /// does); for other rubrics give --aspect and --levels. The script expects every system turn
    /// of a dialogue: judge all of the dialogue's items.
    Dbdc3 {
        /// Results of `hyoka judge` (or eval's judge.jsonl).
        #[arg(value_name = "SCORES")]
        scores: PathBuf,
        /// Output folder (created).
        #[arg(short, long)]
        output: PathBuf,
        /// The judge aspect to export (needed when several map onto breakdown labels).
        #[arg(long)]
        aspect: Option<String>,
        /// SCORE=LABEL,… for an aspect whose rubric maps no levels, e.g. `1=O,0=X`.
        #[arg(long, value_name = "MAP", value_parser = LevelLabels::parse)]
        levels: Option<LevelLabels>,
    },
}

pub fn run(cmd: Export) -> anyhow::Result<ExitCode> {
    match cmd {
        Export::Dbdc3 {
            scores,
            output,
            aspect,
            levels,
        } => {
            let written =
                crate::report::dbdc3::export(&scores, &output, aspect.as_deref(), levels.as_ref())?;
            eprintln!(
                "{} turns of {} dialogues ({} as {}) written to {}",
                written.turns,
                written.dialogues,
                written.aspect,
                written.levels,
                output.display()
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}
