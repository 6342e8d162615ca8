//! Stage 6 — score distributions: the judge reads, for every aspect, the model's next-token
//! distribution restricted to the aspect's valid scores. In score mode nothing is generated or
//! parsed; in json mode (`json`) a grammar lets the model write only a schema-valid object. Either
//! way every item gets valid scores, and the expected scores come with them.

pub mod compare;
mod error;
pub mod json;
pub mod layout;
mod loaded;
pub mod run;
mod scorer;
pub mod targets;
pub mod token_bytes;

pub use compare::Compare;
pub use error::JudgeError;
pub use loaded::{DEFAULT_JUDGE, JudgeSpec, LoadedJudge, check_temperature, json_cache_bytes};
pub use scorer::{JSON_CACHE_BYTES, Scorer, parse_score};
