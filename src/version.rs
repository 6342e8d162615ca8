//! hyoka's version: a leaf every stage may read without reaching the crate's root (which
//! re-exports the error kinds of every stage).

/// hyoka's version, recorded in every output.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
