//! Biases measured on every run: how much a score follows the response's length (its Spearman
//! correlation with the length, and its correlation with the raters once the length is
//! partialled out, as pingouin's `partial_corr(method="spearman")`), and whether the responses
//! are in the script the scorers expect (the share of Japanese script among a response's
//! letters; English-only encoders and English rubrics on Japanese responses are named).
//!
//! A response's length is its count of characters (Unicode scalar values) without white space:
//! the unit that reads the same in Japanese and English, whatever a model's tokenizer.

use super::frame::{Family, Frame};
use super::markdown::{format_r, md_text};
use super::stats::{Correlation, average_ranks, pearson_r, spearman, student_t_sf};
use serde_json::Value;

/// A response's length: its characters, white space left out.
pub fn response_length(text: &str) -> usize {
    text.chars().filter(|c| !c.is_whitespace()).count()
}

/// Whether a character is written in Japanese script: hiragana, katakana (and their
/// half-width and phonetic-extension forms), the prolonged-sound mark, CJK ideographs and the
/// iteration marks.
fn is_japanese(c: char) -> bool {
    // The middle dot and double hyphen are punctuation; the combining sound marks belong to
    // the letter before them.
    if matches!(c, '\u{30FB}' | '\u{30A0}' | '\u{3099}' | '\u{309A}') {
        return false;
    }
    matches!(c,
        '\u{3040}'..='\u{309F}'   // hiragana
        | '\u{30A0}'..='\u{30FF}' // katakana, ー
        | '\u{31F0}'..='\u{31FF}' // katakana phonetic extensions
        | '\u{FF66}'..='\u{FF9F}' // half-width katakana
        | '\u{3005}' | '\u{3006}' | '\u{303B}' // 々 〆 〻
        | '\u{3400}'..='\u{4DBF}' // CJK extension A
        | '\u{4E00}'..='\u{9FFF}' // CJK unified ideographs
        | '\u{F900}'..='\u{FAFF}' // CJK compatibility ideographs
        | '\u{20000}'..='\u{2FA1F}')
}

/// The share of a text's letters written in Japanese script (None: no letter at all, e.g.
/// "123!"). Letters are what Unicode calls alphabetic; digits, punctuation and symbols count
/// for no language.
pub fn japanese_share(text: &str) -> Option<f64> {
    let (mut letters, mut japanese) = (0usize, 0usize);
    for c in text.chars() {
        if is_japanese(c) {
            japanese += 1;
            letters += 1;
        } else if c.is_alphabetic() {
            letters += 1;
        }
    }
    (letters > 0).then(|| japanese as f64 / letters as f64)
}

/// The partial Spearman correlation of `x` and `y` given `z`, as pingouin's
/// `partial_corr(method="spearman")`: Pearson's partial correlation of the average ranks, its
/// p-value two-sided from Student's t with n − 3 degrees of freedom. None when undefined (fewer
/// than 4 units, a constant column, or `z` explaining `x` or `y` entirely).
pub fn partial_spearman(x: &[f64], y: &[f64], z: &[f64]) -> Option<Correlation> {
    let n = x.len();
    if n < 4 || y.len() != n || z.len() != n {
        return None;
    }
    let (rx, ry, rz) = (average_ranks(x), average_ranks(y), average_ranks(z));
    let rxy = pearson_r(&rx, &ry)?;
    let rxz = pearson_r(&rx, &rz)?;
    let ryz = pearson_r(&ry, &rz)?;
    let denominator = ((1.0 - rxz * rxz) * (1.0 - ryz * ryz)).sqrt();
    if denominator <= f64::EPSILON {
        return None;
    }
    let r = ((rxy - rxz * ryz) / denominator).clamp(-1.0, 1.0);
    let df = n as f64 - 3.0;
    let p = if r.abs() >= 1.0 {
        0.0
    } else {
        2.0 * student_t_sf((r * (df / (1.0 - r * r)).sqrt()).abs(), df)
    };
    Some(Correlation { r, p: p.min(1.0) })
}

/// One score column against the responses' length.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LengthBias {
    /// The column, as the tables name it.
    pub column: String,
    /// Items with a score (every item has a length).
    pub items: usize,
    /// Spearman's ρ of the score with the length.
    pub with_length: Option<Correlation>,
    /// Per human aspect the column is compared with.
    pub human: Vec<LengthControlled>,
}

/// A score column against one human aspect, raw and with the length partialled out.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LengthControlled {
    pub human: String,
    /// Items with both a score and a rating.
    pub items: usize,
    /// Spearman's ρ of the score with the ratings (the item-level table's coefficient).
    pub spearman: Option<Correlation>,
    /// The same with the length partialled out of both.
    pub partial: Option<Correlation>,
    /// Spearman's ρ of the ratings with the length: whether the raters prefer long responses
    /// too.
    pub human_with_length: Option<Correlation>,
}

/// Length bias of every score column (the combined columns are sums of others: left out).
pub fn length_biases(frame: &Frame) -> Vec<LengthBias> {
    let lengths: Vec<f64> = (frame.items.iter())
        .map(|i| response_length(&i.response.text) as f64)
        .collect();
    let humans: Vec<(String, Vec<Option<f64>>)> = (frame.human_keys.iter())
        .map(|k| (k.clone(), frame.human(k)))
        .collect();
    let mut out = Vec::new();
    for column in frame
        .columns
        .iter()
        .filter(|c| c.family != Family::Combined)
    {
        let (scores, length): (Vec<f64>, Vec<f64>) = (column.values.iter().zip(&lengths))
            .filter_map(|(v, l)| v.map(|v| (v, *l)))
            .unzip();
        let human = (humans.iter())
            .filter(|(key, _)| frame.pairs_with(column, key))
            .map(|(key, h)| {
                let mut triples = (Vec::new(), Vec::new(), Vec::new());
                for ((v, h), l) in column.values.iter().zip(h).zip(&lengths) {
                    if let (Some(v), Some(h)) = (v, h) {
                        triples.0.push(*v);
                        triples.1.push(*h);
                        triples.2.push(*l);
                    }
                }
                let (s, h, l) = triples;
                LengthControlled {
                    human: key.clone(),
                    items: s.len(),
                    spearman: spearman(&s, &h),
                    partial: partial_spearman(&s, &h, &l),
                    human_with_length: spearman(&h, &l),
                }
            })
            .collect();
        out.push(LengthBias {
            column: frame.row_label(column),
            items: scores.len(),
            with_length: spearman(&scores, &length),
            human,
        });
    }
    out
}

/// Whether the responses are in Japanese script, and which scorers expect another language.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ScriptCheck {
    pub items: usize,
    /// Items whose response has at least one letter.
    pub with_letters: usize,
    /// The mean share of Japanese script among those responses' letters.
    pub mean_japanese_share: Option<f64>,
    /// Responses mostly (more than half of their letters) in Japanese script.
    pub mostly_japanese: usize,
    /// Scorers made for English that scored mostly Japanese responses: each results file's
    /// scorer, named as its provenance names it.
    pub english_scorers: Vec<String>,
}

/// The responses' script, and the English-only scorers among `sources` (the results files'
/// provenance) when most responses are Japanese.
pub fn script_check(frame: &Frame) -> ScriptCheck {
    let shares: Vec<f64> = (frame.items.iter())
        .filter_map(|i| japanese_share(&i.response.text))
        .collect();
    let mostly_japanese = shares.iter().filter(|s| **s > 0.5).count();
    let japanese_run = !shares.is_empty() && 2 * mostly_japanese > shares.len();
    let english_scorers = if japanese_run {
        frame.sources.iter().filter_map(english_scorer).collect()
    } else {
        Vec::new()
    };
    ScriptCheck {
        items: frame.items.len(),
        with_letters: shares.len(),
        mean_japanese_share: (!shares.is_empty())
            .then(|| shares.iter().sum::<f64>() / shares.len() as f64),
        mostly_japanese,
        english_scorers,
    }
}

/// A results file's scorer when it is made for English: a BERTScore encoder that reads English
/// only, or a rubric for English (the built-in ones end in `-en`).
fn english_scorer(source: &Value) -> Option<String> {
    match source.get("task").and_then(Value::as_str)? {
        "bertscore" => {
            let model = source.pointer("/models/0/name").and_then(Value::as_str)?;
            crate::bertscore::defaults::english_only_encoder(model)
                .then(|| format!("BERTScore encoder {model} (English only)"))
        }
        "judge" | "likelihood" => {
            let rubric = source.pointer("/rubric/name").and_then(Value::as_str)?;
            rubric
                .ends_with("-en")
                .then(|| format!("rubric {rubric} (English)"))
        }
        _ => None,
    }
}

/// A coefficient and its p-value, — when undefined.
fn with_p(c: Option<Correlation>) -> String {
    c.map_or("—".into(), |c| format!("{:.3} (p={:.2e})", c.r, c.p))
}

/// The sections of summary.md: each column against the length, and the responses' script.
pub fn bias_markdown(length: &[LengthBias], script: &ScriptCheck) -> String {
    let mut md = String::new();
    if !length.is_empty() {
        md.push_str(
            "\n## Length bias (Spearman; length = characters of the response)\n\n\
             ρ with length: how much a score follows the response's length. Partial ρ: the \
             correlation with the raters once the length is partialled out of both; when it is \
             much lower than ρ, the agreement comes from length. Raters' ρ with length: whether \
             the raters prefer long responses too.\n\n\
             | method | items | ρ with length | human | ρ | partial ρ (length out) | raters' ρ with length |\n\
             |---|---|---|---|---|---|---|\n",
        );
        for b in length {
            let first = format!(
                "| {} | {} | {} ",
                md_text(&b.column),
                b.items,
                with_p(b.with_length)
            );
            if b.human.is_empty() {
                md.push_str(&format!("{first}| | | | |\n"));
            }
            for h in &b.human {
                md.push_str(&format!(
                    "{first}| {} | {} | {} | {} |\n",
                    md_text(&h.human),
                    format_r(h.spearman.map(|c| c.r)),
                    with_p(h.partial),
                    format_r(h.human_with_length.map(|c| c.r)),
                ));
            }
        }
    }
    md.push_str(&format!(
        "\n## Language of the responses\n\n{} of {} responses are mostly (over half their \
         letters) in Japanese script; mean share of Japanese script {}.\n",
        script.mostly_japanese,
        script.with_letters,
        format_r(script.mean_japanese_share)
    ));
    for scorer in &script.english_scorers {
        md.push_str(&format!(
            "\n**Warning:** {} scored mostly Japanese responses: its scores say little about \
             them (translate the items first, `hyoka eval --translate en`, or use a Japanese or \
             multilingual scorer).\n",
            md_text(scorer)
        ));
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn japanese_script_is_counted_among_letters() {
        assert_eq!(japanese_share("こんにちは、世界！"), Some(1.0));
        assert_eq!(japanese_share("Hello world"), Some(0.0));
        // Digits and punctuation count for no language: 4 Japanese letters of 10.
        assert_eq!(japanese_share("AIはすごい。abcd 123"), Some(0.4));
        assert_eq!(japanese_share("ｶﾀｶﾅ ABCD"), Some(0.5));
        assert_eq!(japanese_share("123!?"), None);
        assert_eq!(response_length("はい、 そう です\n"), 7);
    }

    #[test]
    fn scorers_for_english_are_named() {
        let source = |v: &str| serde_json::from_str::<Value>(v).unwrap();
        let e = english_scorer(&source(
            r#"{"task": "bertscore", "models": [{"name": "FacebookAI/roberta-large"}]}"#,
        ));
        assert_eq!(
            e.as_deref(),
            Some("BERTScore encoder FacebookAI/roberta-large (English only)")
        );
        let e5 = r#"{"task": "bertscore", "models": [{"name": "/m/multilingual-e5-small"}]}"#;
        assert_eq!(english_scorer(&source(e5)), None);
        let en = r#"{"task": "judge", "rubric": {"name": "dialogue6-en"}}"#;
        assert_eq!(
            english_scorer(&source(en)).as_deref(),
            Some("rubric dialogue6-en (English)")
        );
        let ja = r#"{"task": "likelihood", "rubric": {"name": "fed-ja"}}"#;
        assert_eq!(english_scorer(&source(ja)), None);
    }
}
