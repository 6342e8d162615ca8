//! What BERTScore uses when the user names only a language: bert_score 0.3.13's `lang2model`
//! and `model2layers` tables, the Hugging Face repositories its bare model names now live in,
//! and the rescaling baselines shipped with hyoka (bert_score ships none for Japanese).

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

/// The Hugging Face repository of one of bert_score's bare model names (those of BERT, RoBERTa,
/// XLM-RoBERTa and DistilBERT in its `model2layers`): the Hub keeps these models under their
/// organisations' names, which is where transformers' `from_pretrained("roberta-large")` is
/// redirected to.
pub fn hub_repository(name: &str) -> Option<&'static str> {
    Some(match name {
        "bert-base-uncased" => "google-bert/bert-base-uncased",
        "bert-large-uncased" => "google-bert/bert-large-uncased",
        "bert-base-cased-finetuned-mrpc" => "google-bert/bert-base-cased-finetuned-mrpc",
        "bert-base-multilingual-cased" => "google-bert/bert-base-multilingual-cased",
        "bert-base-chinese" => "google-bert/bert-base-chinese",
        "roberta-base" => "FacebookAI/roberta-base",
        "roberta-large" => "FacebookAI/roberta-large",
        "roberta-large-mnli" => "FacebookAI/roberta-large-mnli",
        "roberta-base-openai-detector" => "openai-community/roberta-base-openai-detector",
        "roberta-large-openai-detector" => "openai-community/roberta-large-openai-detector",
        "xlm-roberta-base" => "FacebookAI/xlm-roberta-base",
        "xlm-roberta-large" => "FacebookAI/xlm-roberta-large",
        "distilroberta-base" => "distilbert/distilroberta-base",
        "distilbert-base-uncased" => "distilbert/distilbert-base-uncased",
        "distilbert-base-uncased-distilled-squad" => {
            "distilbert/distilbert-base-uncased-distilled-squad"
        }
        "distilbert-base-multilingual-cased" => "distilbert/distilbert-base-multilingual-cased",
        _ => return None,
    })
}

/// Whether an encoder reads English only (its vocabulary has no Japanese, or it was trained on
/// English alone): bert_score's English models and the English sentence encoders, by name.
pub fn english_only_encoder(model: &str) -> bool {
    let name = short_name(model).to_ascii_lowercase();
    let english = [
        "roberta-",
        "distilroberta-",
        "deberta-",
        "bert-base-uncased",
        "bert-large-uncased",
        "bert-base-cased",
        "bert-large-cased",
        "distilbert-base-uncased",
        "distilbert-base-cased",
        "scibert",
        "all-minilm",
        "all-mpnet",
        "all-distilroberta",
    ];
    english.iter().any(|e| name.starts_with(e))
}

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
    fn english_only_encoders_are_named() {
        for english in [
            "roberta-large",
            "FacebookAI/roberta-large@main",
            "/m/all-MiniLM-L6-v2",
        ] {
            assert!(english_only_encoder(english), "{english}");
        }
        for other in [
            "bert-base-multilingual-cased",
            "xlm-roberta-large",
            "/cache/multilingual-e5-small",
            "bert-base-chinese",
            "cl-tohoku/bert-base-japanese-v3",
        ] {
            assert!(!english_only_encoder(other), "{other}");
        }
    }

    #[test]
    fn bert_score_tables() {
        assert_eq!(encoder_for_lang("ja"), "bert-base-multilingual-cased");
        assert_eq!(encoder_for_lang("EN"), "roberta-large");
        assert_eq!(
            hub_repository(encoder_for_lang("ja")),
            Some("google-bert/bert-base-multilingual-cased")
        );
        assert_eq!(
            hub_repository("roberta-large"),
            Some("FacebookAI/roberta-large")
        );
        // Every bare name that has a repository has bert_score's layer.
        for name in [
            "bert-base-uncased",
            "xlm-roberta-large",
            "distilroberta-base",
        ] {
            let repo = hub_repository(name).expect("a bare name of bert_score's");
            assert_eq!(default_layer(repo), default_layer(name), "{name}");
        }
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
