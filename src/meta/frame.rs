//! The items and every score column aligned with them, read from results files.

use super::MetaError;
use crate::data::Item;
use crate::results::reader::read_input_records;
use crate::results::{Body, Task};
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;

/// What a column holds (how the report groups and draws it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    JudgeArgmax,
    JudgeExpected,
    BertScore,
    Combined,
    /// A likelihood scorer's (FED, GPTScore) per-aspect score.
    Likelihood,
}

/// Which number of a results record a column holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Statistic {
    /// A judge's most probable score.
    Argmax,
    /// A judge's expected score.
    Expected,
    P,
    R,
    F,
    /// A likelihood scorer's score.
    Score,
}

impl Statistic {
    pub fn name(self) -> &'static str {
        match self {
            Statistic::Argmax => "argmax",
            Statistic::Expected => "expected",
            Statistic::P => "P",
            Statistic::R => "R",
            Statistic::F => "F",
            Statistic::Score => "score",
        }
    }
}

/// One score per item (None: no score line, or an error line).
#[derive(Clone, Debug)]
pub struct Column {
    pub label: String,
    pub family: Family,
    pub statistic: Statistic,
    /// The name that tells several results files of one kind apart (None: the only one).
    pub run: Option<String>,
    /// The rubric aspect a judge column scores; None for BERTScore.
    pub aspect: Option<String>,
    /// Human keys the rubric says this aspect is compared with (its `human` field).
    pub human: Vec<String>,
    pub values: Vec<Option<f64>>,
}

/// A judge aspect's whole score distribution per item, for comparisons of distributions.
#[derive(Clone, Debug)]
pub struct Distributions {
    /// The name that tells several judge files apart (None: the only one).
    pub run: Option<String>,
    pub aspect: String,
    /// Human keys the rubric says this aspect is compared with.
    pub human: Vec<String>,
    /// The human rating each score stands for, from the rubric (empty: it gives none).
    pub levels: Vec<(i64, f64)>,
    /// Per item, each valid score and its probability (None: no score line, or an error line).
    pub values: Vec<Option<ScoreProbabilities>>,
}

/// Items, their human ratings, and the score columns read so far.
pub struct Frame {
    pub items: Vec<Item>,
    /// Human aspect keys, in first-seen order.
    pub human_keys: Vec<String>,
    pub columns: Vec<Column>,
    /// The judge aspects' distributions, in the order their files were read.
    pub distributions: Vec<Distributions>,
    /// Provenance of each results file read, in order.
    pub sources: Vec<Value>,
    index: HashMap<String, usize>,
}

impl Column {
    /// "judge argmax", "judge[name] expected", "BERTScore[name] F", "combined argmax" …
    pub fn label_of(family: Family, run: Option<&str>, statistic: Statistic) -> String {
        let source = match family {
            Family::JudgeArgmax | Family::JudgeExpected => "judge",
            Family::BertScore => "BERTScore",
            Family::Combined => "combined",
            Family::Likelihood => "likelihood",
        };
        match run {
            Some(n) => format!("{source}[{n}] {}", statistic.name()),
            None => format!("{source} {}", statistic.name()),
        }
    }
}

impl Frame {
    /// Human aspects that no item has a rating of (only empty lists of raters) are left out:
    /// they would fill every table with undefined cells.
    pub fn new(items: Vec<Item>) -> Self {
        let mut human_keys: Vec<String> = Vec::new();
        for item in &items {
            for (key, rating) in &item.human {
                if rating.rater_count() > 0 && !human_keys.contains(key) {
                    human_keys.push(key.clone());
                }
            }
        }
        let index = items
            .iter()
            .enumerate()
            .map(|(i, it)| (it.id.clone(), i))
            .collect();
        Frame {
            items,
            human_keys,
            columns: Vec::new(),
            distributions: Vec::new(),
            sources: Vec::new(),
            index,
        }
    }

    /// Mean human rating of `key` per item.
    pub fn human(&self, key: &str) -> Vec<Option<f64>> {
        self.items
            .iter()
            .map(|i| i.human.get(key).map(|r| r.mean()))
            .collect()
    }

    /// Whether `column` is compared with human aspect `key`: a judge aspect goes with the human
    /// aspect of the same key and those its rubric names (`human = [...]`) when the items have
    /// any of them, and with every human aspect otherwise.
    pub fn pairs_with(&self, column: &Column, key: &str) -> bool {
        match &column.aspect {
            Some(a) => self.aspect_pairs_with(a, &column.human, key),
            None => true,
        }
    }

    /// `pairs_with` for a judge aspect and the human keys its rubric declares.
    pub fn aspect_pairs_with(&self, aspect: &str, declared: &[String], key: &str) -> bool {
        let declared = |k: &str| k == aspect || declared.iter().any(|h| h == k);
        if self.human_keys.iter().any(|k| declared(k)) {
            declared(key)
        } else {
            true
        }
    }

    /// Read a `hyoka judge` or `hyoka bertscore` results file (typed records, one run, one line
    /// per item) and add its columns. `name` tells several judges apart in the labels (None:
    /// plain "judge"). Which human keys each aspect targets comes from the run's provenance.
    pub fn add_results(&mut self, path: &Path, name: Option<&str>) -> Result<Added, MetaError> {
        let input = crate::results::reader::ResultsInput::open(path)?;
        self.add_results_input(&input, name)
    }

    /// `add_results` of an opened input (a stream is read once, when it is opened).
    pub fn add_results_input(
        &mut self,
        input: &crate::results::reader::ResultsInput,
        name: Option<&str>,
    ) -> Result<Added, MetaError> {
        let path = input.path.as_path();
        let n = self.items.len();
        // Judge: per aspect (in first-seen order), argmax and expected columns; BERTScore: P, R, F.
        let mut judge: Vec<AspectColumns> = Vec::new();
        let mut distributions: Vec<Vec<Option<ScoreProbabilities>>> = Vec::new();
        let mut prf = [vec![None; n], vec![None; n], vec![None; n]];
        let mut likelihood: Vec<(String, Vec<Option<f64>>)> = Vec::new();
        let mut added = Added::default();
        let items = &self.items;
        let provenance = read_input_records(input, |number, _, record| {
            if record.task() == Task::Compare {
                return Err(crate::results::ResultsError::Corrupt {
                    path: path.to_path_buf(),
                    line: number,
                    message: "pairwise results (hyoka compare) are read as a comparison of systems, apart from items' scores: give them to meta without judge or BERTScore results".into(),
                });
            }
            if record.task() == Task::Translate {
                return Err(crate::results::ResultsError::Corrupt {
                    path: path.to_path_buf(),
                    line: number,
                    message: "a store of translations (hyoka translate), not scores: give meta the translated items with -i, and the results of scoring them".into(),
                });
            }
            let Some(&row) = self.index.get(&record.id) else {
                added.unmatched += 1;
                return Ok(());
            };
            crate::results::inputs::ensure_current(&record, &items[row], path, number)?;
            added.matched += 1;
            added.unhashed += usize::from(record.input.is_none());
            match record.body {
                Err(_) if record.not_applicable => added.not_applicable += 1,
                Err(_) => added.errors += 1,
                Ok(Body::Judge(j)) => {
                    for (aspect, s) in j.scores {
                        let k = match judge.iter().position(|(a, ..)| *a == aspect) {
                            Some(k) => k,
                            None => {
                                judge.push((aspect, vec![None; n], vec![None; n]));
                                distributions.push(vec![None; n]);
                                judge.len() - 1
                            }
                        };
                        judge[k].1[row] = Some(s.score as f64);
                        judge[k].2[row] = Some(s.expected);
                        distributions[k][row] = Some(s.score_probabilities());
                    }
                }
                Ok(Body::Likelihood(l)) => {
                    for (aspect, a) in l.scores {
                        let k = match likelihood.iter().position(|(k, _)| *k == aspect) {
                            Some(k) => k,
                            None => {
                                likelihood.push((aspect, vec![None; n]));
                                likelihood.len() - 1
                            }
                        };
                        likelihood[k].1[row] = Some(a.score);
                    }
                }
                Ok(Body::BertScore(s)) => {
                    for (column, x) in prf.iter_mut().zip([s.p, s.r, s.f]) {
                        column[row] = Some(x);
                    }
                }
                Ok(Body::Compare(_) | Body::Translation(_)) => {
                    unreachable!("pairwise results and translations are refused first")
                }
            }
            Ok(())
        })?;
        let Some(provenance) = provenance else {
            return Err(MetaError::Input(format!(
                "{}: no results in this file",
                path.display()
            )));
        };
        // A likelihood scorer's columns are named after it (fed-ja, gptscore-en), and after the
        // file too when another file of that scorer came first.
        let scorer = (provenance.task == Task::Likelihood)
            .then(|| provenance.rubric.as_ref().map(|r| r.name.clone()))
            .flatten();
        let run = match (scorer, name) {
            (Some(scorer), name) => {
                let taken = (self.columns.iter())
                    .any(|c| c.family == Family::Likelihood && c.run.as_deref() == Some(&scorer));
                match name {
                    Some(n) if taken => Some(format!("{scorer}:{n}")),
                    _ => Some(scorer),
                }
            }
            (None, name) => name.map(String::from),
        };
        match provenance.task {
            Task::Judge => {
                let targets = provenance
                    .rubric
                    .as_ref()
                    .map(|r| r.aspects.clone())
                    .unwrap_or_default();
                let human = |aspect: &str| -> Vec<String> {
                    targets
                        .iter()
                        .find(|t| t.key == aspect)
                        .map(|t| t.human.clone())
                        .unwrap_or_default()
                };
                for ((aspect, ..), values) in judge.iter().zip(distributions) {
                    self.distributions.push(Distributions {
                        run: run.clone(),
                        aspect: aspect.clone(),
                        human: human(aspect),
                        levels: targets
                            .iter()
                            .find(|t| t.key == *aspect)
                            .map(|t| t.levels.clone())
                            .unwrap_or_default(),
                        values,
                    });
                }
                let (argmax, expected): (Vec<_>, Vec<_>) = judge
                    .into_iter()
                    .map(|(aspect, a, e)| ((aspect.clone(), a), (aspect, e)))
                    .unzip();
                for (statistic, family, columns) in [
                    (Statistic::Argmax, Family::JudgeArgmax, argmax),
                    (Statistic::Expected, Family::JudgeExpected, expected),
                ] {
                    for (aspect, values) in columns {
                        self.columns.push(Column {
                            label: Column::label_of(family, run.as_deref(), statistic),
                            family,
                            statistic,
                            run: run.clone(),
                            human: human(&aspect),
                            aspect: Some(aspect),
                            values,
                        });
                    }
                }
            }
            // Refused above, line by line.
            Task::Compare | Task::Translate => {
                unreachable!("pairwise results and translations are refused before their columns")
            }
            Task::Likelihood => {
                let targets = provenance
                    .rubric
                    .as_ref()
                    .map(|r| r.aspects.clone())
                    .unwrap_or_default();
                for (aspect, values) in likelihood {
                    let human = (targets.iter().find(|t| t.key == aspect))
                        .map(|t| t.human.clone())
                        .unwrap_or_default();
                    self.columns.push(Column {
                        label: Column::label_of(
                            Family::Likelihood,
                            run.as_deref(),
                            Statistic::Score,
                        ),
                        family: Family::Likelihood,
                        statistic: Statistic::Score,
                        run: run.clone(),
                        human,
                        aspect: Some(aspect),
                        values,
                    });
                }
            }
            Task::BertScore => {
                for (statistic, values) in [Statistic::P, Statistic::R, Statistic::F]
                    .into_iter()
                    .zip(prf)
                {
                    self.columns.push(Column {
                        label: Column::label_of(Family::BertScore, run.as_deref(), statistic),
                        family: Family::BertScore,
                        statistic,
                        run: run.clone(),
                        aspect: None,
                        human: Vec::new(),
                        values,
                    });
                }
            }
        }
        let mut source = serde_json::to_value(&provenance).expect("provenance serialises");
        if let Some(run) = &run {
            source["run"] = Value::String(run.clone());
        }
        source["lines"] = serde_json::json!({
            "scored": added.matched - added.errors - added.not_applicable,
            "unscored": added.errors,
            "not_applicable": added.not_applicable,
            "without_line": n - added.matched,
            "other_ids": added.unmatched,
        });
        self.sources.push(source);
        Ok(added)
    }

    /// The label shown for a column in tables: judge columns that pair with every human aspect
    /// carry their aspect, as they are rows of their own.
    pub fn row_label(&self, column: &Column) -> String {
        match &column.aspect {
            Some(a) if !self.human_keys.contains(a) => format!("{} · {a}", column.label),
            _ => column.label.clone(),
        }
    }

    /// A column's full name: its label and, for judge columns, the aspect.
    pub fn column_title(&self, column: &Column) -> String {
        match &column.aspect {
            Some(a) => format!("{} · {a}", column.label),
            None => column.label.clone(),
        }
    }
}

/// What one results file gave: lines for the frame's items (error lines among them, and lines
/// of items with nothing to score), and lines for ids that are not among them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Added {
    pub matched: usize,
    pub errors: usize,
    pub not_applicable: usize,
    pub unmatched: usize,
    /// Lines for these items without an `input_sha256` (another tool's, or an old version's):
    /// whether their item changed since they were scored cannot be told.
    pub unhashed: usize,
}

/// Each valid score of an aspect and its probability.
type ScoreProbabilities = Vec<(i64, f64)>;

/// An aspect's name, then its argmax and expected score per item.
type AspectColumns = (String, Vec<Option<f64>>, Vec<Option<f64>>);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{HumanRating, Turn};

    fn frame(keys: &[&str]) -> Frame {
        let item = Item {
            id: "a".into(),
            context: vec![],
            response: Turn {
                speaker: "S".into(),
                text: "x".into(),
            },
            reference: vec![],
            setting: None,
            system: None,
            dialogue: None,
            scope: Default::default(),
            context_id: None,
            human: keys
                .iter()
                .map(|k| (k.to_string(), HumanRating::Single(1.0)))
                .collect(),
            raters: vec![],
            meta: None,
            translation: None,
            numeric_id: false,
        };
        Frame::new(vec![item])
    }

    fn judge(aspect: &str, human: &[&str]) -> Column {
        Column {
            label: "judge expected".into(),
            family: Family::JudgeExpected,
            statistic: Statistic::Expected,
            run: None,
            aspect: Some(aspect.into()),
            human: human.iter().map(|h| h.to_string()).collect(),
            values: vec![Some(1.0)],
        }
    }

    #[test]
    fn judge_aspects_pair_by_key_then_by_the_rubric_then_with_everything() {
        let f = frame(&["breakdown", "ungrammatical", "naturalness"]);
        // Same key.
        assert!(f.pairs_with(&judge("naturalness", &[]), "naturalness"));
        assert!(!f.pairs_with(&judge("naturalness", &[]), "breakdown"));
        // The rubric's `human = ["breakdown"]`.
        assert!(f.pairs_with(&judge("coherence", &["breakdown"]), "breakdown"));
        assert!(!f.pairs_with(&judge("coherence", &["breakdown"]), "ungrammatical"));
        // Nothing declared or matching: every human aspect (exploratory rows).
        assert!(
            f.pairs_with(&judge("overall", &[]), "breakdown")
                && f.pairs_with(&judge("overall", &[]), "ungrammatical")
        );
        // A declared key the items lack falls back to everything too.
        assert!(f.pairs_with(&judge("overall", &["quality"]), "ungrammatical"));
    }
}
