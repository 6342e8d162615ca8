//! hyoka's errors as the Python exceptions of the same kind (hyoka.errors): the library's
//! `ErrorKind` decides the class, its text (`error_text::describe`) is the message.

use hyoka::ErrorKind;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

/// `err` as the exception of its kind.
pub fn to_py(py: Python<'_>, err: &(dyn std::error::Error + 'static)) -> PyErr {
    let class = match ErrorKind::of(err) {
        ErrorKind::InvalidInput => "InvalidInputError",
        ErrorKind::Usage => "UsageError",
        ErrorKind::NotFound => "NotFoundError",
        ErrorKind::Failure => "HyokaError",
    };
    exception(py, class, hyoka::error_text::describe(err))
}

/// A closure for `map_err`: the error as its exception.
pub fn raise<E: std::error::Error + 'static>(py: Python<'_>) -> impl Fn(E) -> PyErr + '_ {
    move |e| to_py(py, &e)
}

/// A usage error (a bad keyword argument) with `message`.
pub fn usage(py: Python<'_>, message: String) -> PyErr {
    exception(py, "UsageError", message)
}

/// An exception of hyoka.errors' `class` with `message`.
pub fn exception(py: Python<'_>, class: &str, message: String) -> PyErr {
    match py
        .import("hyoka.errors")
        .and_then(|m| m.getattr(class))
        .and_then(|c| c.call1((message.clone(),)))
    {
        Ok(exc) => PyErr::from_value(exc),
        Err(_) => PyRuntimeError::new_err(message),
    }
}
