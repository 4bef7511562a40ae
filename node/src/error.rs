//! Errors as Node sees them: `Error` objects whose `code` is the core's `ErrorKind::code()`
//! (`ACCORD_HELD`, `ACCORD_TIMEOUT`, …), built on the JavaScript thread.

use napi::bindgen_prelude::*;
use napi::{JsError, JsTypeError};

/// A failure on its way to JavaScript: the code of an error kind (docs/semantics.md) and a message. Wrong JavaScript
/// types become `TypeError`s (code `ACCORD_INVALID_ARGUMENT`), everything else `Error`s.
#[derive(Debug)]
pub(crate) struct Failure {
    code: &'static str,
    message: String,
    type_error: bool,
}

impl Failure {
    /// A value of the wrong JavaScript type: `field` names the argument or option.
    pub fn wrong_type(field: &str, expected: &str, got: ValueType) -> Self {
        Failure {
            code: accord::ErrorKind::InvalidArgument.code(),
            message: format!(
                "invalid {field}: expected {expected}, got {}",
                type_name(got)
            ),
            type_error: true,
        }
    }

    /// A value of the right type that is still unusable.
    pub fn invalid(field: &str, why: impl std::fmt::Display) -> Self {
        Failure {
            code: accord::ErrorKind::InvalidArgument.code(),
            message: format!("invalid {field}: {why}"),
            type_error: false,
        }
    }

    pub fn new(kind: accord::ErrorKind, message: impl Into<String>) -> Self {
        Failure {
            code: kind.code(),
            message: message.into(),
            type_error: false,
        }
    }

    /// A failure of napi itself on the JavaScript thread.
    pub fn internal(e: Error) -> Self {
        Failure::new(
            accord::ErrorKind::Internal,
            format!("internal error in accord's Node binding: {}", e.reason),
        )
    }

    /// The JavaScript error object, wrapped so that napi throws or rejects with it as is.
    pub fn into_napi(self, env: &Env) -> Error {
        let error = Error::new(self.code, self.message);
        let value = if self.type_error {
            JsTypeError::from(error).into_unknown(*env)
        } else {
            JsError::from(error).into_unknown(*env)
        };
        Error::from(value)
    }
}

impl From<accord::Error> for Failure {
    fn from(e: accord::Error) -> Self {
        Failure::new(e.kind(), e.message())
    }
}

/// Errors of napi itself while reading arguments (a getter that throws, say).
impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure {
            code: accord::ErrorKind::InvalidArgument.code(),
            message: e.reason.clone(),
            type_error: false,
        }
    }
}

pub(crate) type Outcome<T> = std::result::Result<T, Failure>;

fn type_name(t: ValueType) -> &'static str {
    match t {
        ValueType::Undefined => "undefined",
        ValueType::Null => "null",
        ValueType::Boolean => "a boolean",
        ValueType::Number => "a number",
        ValueType::String => "a string",
        ValueType::Symbol => "a symbol",
        ValueType::Object => "an object",
        ValueType::Function => "a function",
        ValueType::External => "an external value",
        ValueType::BigInt => "a bigint",
        _ => "an unknown value",
    }
}
