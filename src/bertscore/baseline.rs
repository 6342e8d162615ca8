//! Baseline files for rescaling, in bert_score's format (`rescale_baseline/LANG/MODEL.tsv`, comma
//! separated despite the name): a header `LAYER,P,R,F`, then one row per layer, layer 0 being the
//! embeddings. A baseline is the mean score of random sentence pairs, as bert_score's
//! `get_rescale_baseline.py` computes it.

use super::defaults::short_name;
use super::{BertScoreError, BertScorer};
use crate::results::prf::Prf;
use std::path::Path;

/// All rows of a baseline file, by layer.
pub fn read(path: &Path) -> Result<Vec<(usize, Prf)>, BertScoreError> {
    let text = std::fs::read_to_string(path).map_err(|e| BertScoreError::Baseline {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    parse(&text, &path.display().to_string())
}

/// The rows of a baseline file's text; `origin` names it in errors.
pub fn parse(text: &str, origin: &str) -> Result<Vec<(usize, Prf)>, BertScoreError> {
    let err = |message: String| BertScoreError::Baseline {
        path: origin.to_string(),
        message,
    };
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let (_, header) = lines.next().ok_or_else(|| err("empty file".into()))?;
    let cols: Vec<&str> = header.split(',').map(str::trim).collect();
    if cols != ["LAYER", "P", "R", "F"] {
        return Err(err(format!(
            "line 1: header {header:?}, expected LAYER,P,R,F"
        )));
    }
    let mut rows = Vec::new();
    for (i, line) in lines {
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        let bad = |what: &str| err(format!("line {}: {what}: {line:?}", i + 1));
        if f.len() != 4 {
            return Err(bad("expected 4 fields"));
        }
        let layer: usize = f[0].parse().map_err(|_| bad("LAYER is not an integer"))?;
        let num = |k: usize, name: &str| {
            f[k].parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x < 1.0)
                .ok_or_else(|| bad(&format!("{name} is not a number below 1")))
        };
        rows.push((
            layer,
            Prf {
                p: num(1, "P")?,
                r: num(2, "R")?,
                f: num(3, "F")?,
            },
        ));
    }
    Ok(rows)
}

/// The baseline of one layer.
pub fn read_layer(path: &Path, layer: usize) -> Result<Prf, BertScoreError> {
    row(read(path)?, layer, &path.display().to_string())
}

/// The row of `layer` among a baseline's rows; `origin` names the baseline in the error.
pub fn row(rows: Vec<(usize, Prf)>, layer: usize, origin: &str) -> Result<Prf, BertScoreError> {
    rows.into_iter()
        .find(|(l, _)| *l == layer)
        .map(|(_, b)| b)
        .ok_or_else(|| BertScoreError::Baseline {
            path: origin.to_string(),
            message: format!("no row for layer {layer}"),
        })
}

pub fn write(path: &Path, rows: &[(usize, Prf)]) -> Result<(), BertScoreError> {
    let mut text = String::from("LAYER,P,R,F\n");
    for (l, b) in rows {
        text.push_str(&format!("{l},{},{},{}\n", b.p, b.r, b.f));
    }
    crate::files::write_atomic(path, text.as_bytes()).map_err(|e| BertScoreError::Baseline {
        path: path.display().to_string(),
        message: e.to_string(),
    })
}

/// Mean P/R/F over the pairs at every layer from the embeddings (0) to the encoder's last,
/// without idf. `group`: bert_score's batch_size, for its padding behaviour (see `pad_floors`).
pub fn compute(
    scorer: &BertScorer,
    candidates: &[&str],
    references: &[&str],
    batch_tokens: usize,
    group: Option<usize>,
) -> Result<Vec<(usize, Prf)>, BertScoreError> {
    let nested: Vec<Vec<&str>> = references.iter().map(|r| vec![*r]).collect();
    let (sentences, pairs) = scorer.pairs(candidates, &nested)?;
    let all: Vec<usize> = (0..sentences.len()).collect();
    let emb = scorer.embed(&sentences, &all, batch_tokens, true)?;
    let idf = scorer.idf(false, &sentences, &pairs.pairs);
    let floors = super::pad_floors(&sentences, &pairs.pairs, group);
    let per_layer = scorer.match_pairs(
        &sentences,
        &emb,
        &idf,
        &pairs.pairs,
        &floors,
        batch_tokens * 64,
    )?;
    let n = pairs.pairs.len().max(1) as f64;
    Ok(per_layer
        .iter()
        .enumerate()
        .map(|(l, prfs)| {
            let mean = |g: fn(&Prf) -> f64| prfs.iter().map(g).sum::<f64>() / n;
            (
                l,
                Prf {
                    p: mean(|x| x.p),
                    r: mean(|x| x.r),
                    f: mean(|x| x.f),
                },
            )
        })
        .collect())
}

/// `n` random pairs of distinct lines of `corpus` (seeded), as bert_score's script samples them.
pub fn sample_pairs(corpus: &[String], n: usize, seed: u64) -> Vec<(usize, usize)> {
    let mut state = seed ^ 0x9E37_79B9_7F4A_7C15;
    let mut next = |m: usize| {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) % m as u64) as usize
    };
    let m = corpus.len();
    (0..n)
        .map(|_| {
            let a = next(m);
            let mut b = next(m);
            if m > 1 {
                while b == a {
                    b = next(m);
                }
            }
            (a, b)
        })
        .collect()
}

/// A rescaling baseline shipped with hyoka: where it came from, and its rows.
pub struct BuiltinBaseline {
    /// `builtin:LANG/MODEL.tsv`, recorded in the provenance.
    pub source: String,
    pub text: &'static str,
}

/// Baselines by (language, model), in bert_score's format (models/rescale_baseline/).
const BASELINES: &[(&str, &str, &str)] = &[(
    "ja",
    "multilingual-e5-small",
    include_str!("../../models/rescale_baseline/ja/multilingual-e5-small.tsv"),
)];

/// The shipped baseline for `model` in `lang`, if there is one.
pub fn builtin_baseline(lang: &str, model: &str) -> Option<BuiltinBaseline> {
    let lang = lang.to_ascii_lowercase();
    let name = short_name(model);
    BASELINES
        .iter()
        .find(|(l, m, _)| *l == lang && *m == name)
        .map(|(l, m, text)| BuiltinBaseline {
            source: format!("builtin:{l}/{m}.tsv"),
            text,
        })
}

impl BuiltinBaseline {
    /// The row of one layer.
    pub fn layer(&self, layer: usize) -> Result<Prf, BertScoreError> {
        row(parse(self.text, &self.source)?, layer, &self.source)
    }
}

/// The languages and models that have a shipped baseline, for error messages.
pub fn builtin_baselines() -> Vec<String> {
    BASELINES
        .iter()
        .map(|(l, m, _)| format!("{l}/{m}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_baseline_that_cannot_rescale_is_refused_naming_its_line() {
        let ok = parse("LAYER,P,R,F\n0,0.3,0.3,0.3\n1,-0.1,0.2,0.25\n", "b.tsv").unwrap();
        assert_eq!(ok.len(), 2);
        // (x − b) / (1 − b) divides by zero at 1 and means nothing above it or for NaN.
        for bad in [
            "1,1.0,0.2,0.3",
            "1,0.2,NaN,0.3",
            "1,0.2,0.3,inf",
            "1,0.2,0.3,1.5",
        ] {
            let err = parse(&format!("LAYER,P,R,F\n0,0.3,0.3,0.3\n{bad}\n"), "b.tsv")
                .unwrap_err()
                .to_string();
            assert!(
                err.starts_with("b.tsv: line 3:") && err.contains("number below 1"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn shipped_baselines_parse_at_every_layer() {
        let b = builtin_baseline("ja", "intfloat/multilingual-e5-small").expect("shipped");
        for layer in 0..=12 {
            let row = b.layer(layer).unwrap();
            assert!(row.f > 0.0 && row.f < 1.0, "layer {layer}: {}", row.f);
        }
        assert!(builtin_baseline("en", "multilingual-e5-small").is_none());
    }
}
