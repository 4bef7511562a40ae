//! The core's error kinds as the exception classes of `accord/_errors.py`. Every error the
//! binding raises for accord goes through [`to_py`], its own argument checks included: they
//! build the core's error first, so that a message reads the same in every language.

use accord::ErrorKind;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use pyo3::PyErr;

pyo3::import_exception!(accord._errors, AccordError);
pyo3::import_exception!(accord._errors, InvalidArgument);
pyo3::import_exception!(accord._errors, Held);
pyo3::import_exception!(accord._errors, Done);
pyo3::import_exception!(accord._errors, Timeout);
pyo3::import_exception!(accord._errors, Cancelled);
pyo3::import_exception!(accord._errors, LeaseLost);
pyo3::import_exception!(accord._errors, Connection);
pyo3::import_exception!(accord._errors, Database);
pyo3::import_exception!(accord._errors, Closed);
pyo3::import_exception!(accord._errors, Unsupported);
pyo3::import_exception!(accord._errors, Internal);
pyo3::import_exception!(accord._errors, Trimmed);

/// How Python's errors write durations (seconds, as every duration argument is given) and
/// fields (snake_case, as the keyword arguments are named): the core renders each message so.
const STYLE: accord::Style = accord::Style {
    durations: accord::Durations::Seconds,
    fields: accord::Fields::Snake,
};

/// The exception for a core error. Built lazily: no GIL is needed here.
pub fn to_py(e: accord::Error) -> PyErr {
    let message = e.message_in(&STYLE);
    match e.kind() {
        ErrorKind::InvalidArgument => InvalidArgument::new_err(message),
        ErrorKind::Held => Held::new_err(message),
        ErrorKind::Done => Done::new_err(message),
        ErrorKind::Timeout => Timeout::new_err(message),
        ErrorKind::Cancelled => Cancelled::new_err(message),
        ErrorKind::LeaseLost => LeaseLost::new_err(message),
        ErrorKind::Connection => Connection::new_err(message),
        ErrorKind::Database => Database::new_err(message),
        ErrorKind::Closed => Closed::new_err(message),
        ErrorKind::Unsupported => Unsupported::new_err(message),
        ErrorKind::Internal => Internal::new_err(message),
        ErrorKind::Trimmed => Trimmed::new_err(message),
        _ => AccordError::new_err(message),
    }
}

/// `InvalidArgument` for a field the binding checks itself (a conversion from Python), as the
/// core words its own (`accord::Error::invalid`).
pub fn invalid(field: &str, why: impl std::fmt::Display) -> PyErr {
    to_py(accord::Error::invalid(field, why))
}

/// `Result<T, accord::Error>` → `PyResult<T>`.
pub trait IntoPyResult<T> {
    fn py(self) -> pyo3::PyResult<T>;
}

impl<T> IntoPyResult<T> for accord::Result<T> {
    fn py(self) -> pyo3::PyResult<T> {
        self.map_err(to_py)
    }
}

/// `ERROR_CODES`: the code of every error kind of the core (`accord::ErrorKind::ALL`), in its
/// order, so that tests can check that each has its exception class.
pub fn codes(py: Python<'_>) -> PyResult<Bound<'_, PyTuple>> {
    PyTuple::new(py, ErrorKind::ALL.iter().map(|k| k.code()))
}

/// The exception [`to_py`] makes for a core error of the kind whose code is `code` (for the
/// tests that walk every kind, Internal included, which no call can provoke).
#[pyfunction]
pub fn _error_for_code<'py>(
    py: Python<'py>,
    code: &str,
    message: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let kind = ErrorKind::ALL
        .into_iter()
        .find(|k| k.code() == code)
        .ok_or_else(|| invalid("code", format!("{code:?} is not the code of an error kind")))?;
    Ok(to_py(accord::Error::new(kind, message))
        .into_value(py)
        .into_bound(py)
        .into_any())
}
