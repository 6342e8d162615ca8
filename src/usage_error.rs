//! The error of a setting that cannot be used as given, for any stage to return.

/// A setting that cannot be used as given, found after the settings were read (e.g. an output
/// that is also an input): `ErrorKind::Usage`.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);
