//! The core's error kinds as the exception classes of `accord/_errors.py`.

use accord::ErrorKind;
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

/// The exception for a core error. Built lazily: no GIL is needed here.
pub fn to_py(e: accord::Error) -> PyErr {
    let message = e.message().to_string();
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
        _ => AccordError::new_err(message),
    }
}

/// `InvalidArgument` for a field the binding checks itself, worded as the core words its own.
pub fn invalid(field: &str, why: impl std::fmt::Display) -> PyErr {
    InvalidArgument::new_err(format!("invalid {field}: {why}"))
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
