//! Bounds on what one render may build (added for hyoka, which renders templates that come
//! from shared rubrics and downloaded GGUF files). Every operation that can make a value much
//! larger than its inputs checks the result's size before allocating it, and the VM charges
//! fuel for each byte a string-producing instruction builds, so a template that grows a value
//! in a loop runs out of fuel instead of out of memory.

use std::fmt;

use crate::error::{Error, ErrorKind};

/// The longest string one operation may build. Prompts of any model's context are far shorter.
pub const MAX_BUILT_LEN: usize = 16 << 20;
/// The most items one operation may put in a sequence.
pub(crate) const MAX_BUILT_ITEMS: usize = 1 << 22;
/// Bytes of built strings that cost one unit of fuel.
pub(crate) const BYTES_PER_FUEL: usize = 1;

/// The error of a value that would pass its bound: the same kind as running out of fuel.
pub(crate) fn too_large(what: &str) -> Error {
    Error::new(
        ErrorKind::OutOfFuel,
        format!("{what} would be longer than the template limit of {MAX_BUILT_LEN} bytes"),
    )
}

/// Refuses a string length (computed without overflow, `None` when it overflowed) over the bound.
pub(crate) fn check_len(len: Option<usize>, what: &str) -> Result<(), Error> {
    match len {
        Some(len) if len <= MAX_BUILT_LEN => Ok(()),
        _ => Err(too_large(what)),
    }
}

/// The error of a sequence that would pass its bound.
pub(crate) fn too_many(what: &str) -> Error {
    Error::new(
        ErrorKind::OutOfFuel,
        format!("{what} would hold more than the template limit of {MAX_BUILT_ITEMS} items"),
    )
}

/// Refuses an item count over the bound.
pub(crate) fn check_items(count: usize, what: &str) -> Result<(), Error> {
    if count <= MAX_BUILT_ITEMS {
        Ok(())
    } else {
        Err(too_many(what))
    }
}

/// A string that refuses to grow past [`MAX_BUILT_LEN`]; a refused write is remembered so
/// that the caller can report it as the bound rather than as a formatting failure.
#[derive(Default)]
pub(crate) struct BoundedString {
    pub(crate) text: String,
    pub(crate) over: bool,
}

impl BoundedString {
    /// Appends `s`, or returns the bound's error.
    pub(crate) fn push_str(&mut self, s: &str, what: &str) -> Result<(), Error> {
        fmt::Write::write_str(self, s).map_err(|_| too_large(what))
    }

    /// The built string, or the bound's error if a write was refused.
    pub(crate) fn finish(self, what: &str) -> Result<String, Error> {
        if self.over {
            Err(too_large(what))
        } else {
            Ok(self.text)
        }
    }
}

impl fmt::Write for BoundedString {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.over || self.text.len().saturating_add(s.len()) > MAX_BUILT_LEN {
            self.over = true;
            return Err(fmt::Error);
        }
        self.text.push_str(s);
        Ok(())
    }
}
