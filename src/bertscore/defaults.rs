//! What BERTScore uses when the user names only a language: bert_score 0.3.13's `lang2model`
//! and `model2layers` tables, the encoder to fall back on when the Hugging Face Hub cannot be
//! reached, and the rescaling baselines shipped with hyoka (bert_score ships none for Japanese).

/// bert_score's `lang2model`: the encoder for a language (`en-sci`: SciBERT).
pub fn encoder_for_lang(lang: &str) -> &'static str {
    match lang.to_ascii_lowercase().as_str() {
        "en" => "roberta-large",
        "zh" => "bert-base-chinese",
        "tr" => "dbmdz/bert-base-turkish-cased",
        "en-sci" => "allenai/scibert_scivocab_uncased",
        _ => "bert-base-multilingual-cased",
    }
}

/// The encoder used when the Hub cannot be reached: multilingual-e5-small (BERT architecture,
/// XLM-R's vocabulary, Japanese and ~100 other languages), a folder of this name assembled from
/// a PyPI package by `scripts/fetch_test_models.py` (see models/multilingual-e5-small.md).
pub const OFFLINE_ENCODER: (&str, &str) =
    ("intfloat/multilingual-e5-small", "multilingual-e5-small");

/// The model's name without organisation, revision or path: what the tables below are keyed by.
pub(crate) fn short_name(model: &str) -> &str {
    let last = model
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or(model);
    last.split(['@', ':']).next().unwrap_or(last)
}

/// The layer bert_score reads for `model` (its `model2layers`, for the architectures hyoka
/// loads), and hyoka's choice for multilingual-e5-small, which bert_score does not list.
pub fn default_layer(model: &str) -> Option<usize> {
    let layer = match short_name(model) {
        "bert-base-uncased" | "bert-base-cased-finetuned-mrpc" | "bert-base-multilingual-cased" => {
            9
        }
        "bert-large-uncased" => 18,
        "bert-base-chinese" => 8,
        "bert-base-turkish-cased" => 10,
        "scibert_scivocab_uncased" => 8,
        "scibert_scivocab_cased" | "scibert_basevocab_uncased" => 9,
        "roberta-base" => 10,
        "roberta-large" => 17,
        "roberta-large-mnli" => 19,
        "roberta-base-openai-detector" => 7,
        "roberta-large-openai-detector" => 15,
        "distilroberta-base" | "distilbert-base-uncased" | "distilbert-base-multilingual-cased" => {
            5
        }
        "distilbert-base-uncased-distilled-squad" => 4,
        "xlm-roberta-base" => 9,
        "xlm-roberta-large" => 17,
        // Chosen on the development half of DBDC3-ja (models/multilingual-e5-small.md).
        "multilingual-e5-small" => E5_SMALL_LAYER,
        _ => return None,
    };
    Some(layer)
}

/// multilingual-e5-small's scoring layer (see `default_layer`).
pub const E5_SMALL_LAYER: usize = 12;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bert_score_tables() {
        assert_eq!(encoder_for_lang("ja"), "bert-base-multilingual-cased");
        assert_eq!(encoder_for_lang("EN"), "roberta-large");
        assert_eq!(default_layer("bert-base-multilingual-cased"), Some(9));
        assert_eq!(default_layer("FacebookAI/roberta-large@main"), Some(17));
        assert_eq!(default_layer("/data/models/xlm-roberta-large/"), Some(17));
        assert_eq!(
            default_layer("/cache/multilingual-e5-small"),
            Some(E5_SMALL_LAYER)
        );
        assert_eq!(
            default_layer("sentence-transformers/all-MiniLM-L6-v2"),
            None
        );
    }
}
