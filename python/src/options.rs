//! Keyword arguments as the library's settings: each option taken by name and type, a wrong
//! type or an unknown name a UsageError that names it (as the command line's flag too).

use crate::errors::usage;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The keyword arguments not yet taken, and the options asked for so far (what an unknown one
/// is told it could have been).
pub struct Options<'py> {
    py: Python<'py>,
    left: Bound<'py, PyDict>,
    asked: Vec<&'static str>,
}

impl<'py> Options<'py> {
    pub fn new(py: Python<'py>, given: Option<&Bound<'py, PyDict>>) -> PyResult<Self> {
        let left = match given {
            Some(d) => d.copy()?,
            None => PyDict::new(py),
        };
        Ok(Options {
            py,
            left,
            asked: Vec::new(),
        })
    }

    pub fn py(&self) -> Python<'py> {
        self.py
    }

    /// The option `key` as a `T`, when given and not None.
    pub fn take<T>(&mut self, key: &'static str) -> PyResult<Option<T>>
    where
        T: for<'a> FromPyObject<'a, 'py, Error = PyErr>,
    {
        self.asked.push(key);
        let Some(value) = self.left.get_item(key)? else {
            return Ok(None);
        };
        self.left.del_item(key)?;
        if value.is_none() {
            return Ok(None);
        }
        value.extract::<T>().map(Some).map_err(|e| {
            let got = value.repr().map(|r| r.to_string()).unwrap_or_default();
            let why = e.value(self.py).to_string();
            usage(
                self.py,
                format!(
                    "option {key} ({}): {got} is not a valid value: {why}",
                    flag(key)
                ),
            )
        })
    }

    /// A named choice (weights="stored"), read by `parse` (the library's `parse_choice`).
    pub fn choice<T>(
        &mut self,
        key: &'static str,
        parse: fn(&str, &str) -> Result<T, hyoka::model::ModelError>,
    ) -> PyResult<Option<T>> {
        match self.take::<String>(key)? {
            None => Ok(None),
            Some(s) => parse(key, &s)
                .map(Some)
                .map_err(|e| crate::errors::to_py(self.py, &e)),
        }
    }

    /// Every option given has been taken; one left is unknown.
    pub fn finish(self) -> PyResult<()> {
        if let Some((key, _)) = self.left.iter().next() {
            let key = key.to_string();
            return Err(usage(
                self.py,
                format!(
                    "unknown option {key} ({}); the options: {}",
                    flag(&key),
                    self.asked.join(", ")
                ),
            ));
        }
        Ok(())
    }
}

/// The command line's flag of option `key`: prefill_gemm → --prefill-gemm.
fn flag(key: &str) -> String {
    format!("--{}", key.replace('_', "-"))
}
