//! Errors as Node sees them: `Error` objects whose `code` is the core's `ErrorKind::code()`
//! (`ACCORD_HELD`, `ACCORD_TIMEOUT`, …), built on the JavaScript thread.

use napi::bindgen_prelude::*;
use napi::{sys, JsError, JsTypeError};

/// A failure on its way to JavaScript: the code of an error kind (docs/semantics.md) and a message. Wrong JavaScript
/// types become `TypeError`s (code `ACCORD_INVALID_ARGUMENT`), everything else `Error`s.
#[derive(Debug)]
pub(crate) struct Failure {
    code: &'static str,
    message: String,
    type_error: bool,
}

impl Failure {
    /// A value of the wrong JavaScript type: `field` names the argument or option. Worded as
    /// the core's `InvalidArgument` errors (`accord::Error::invalid`), thrown as a `TypeError`.
    pub fn wrong_type(field: &str, expected: &str, got: ValueType) -> Self {
        let e = accord::Error::invalid(
            field,
            format!("expected {expected}, got {}", type_name(got)),
        );
        Failure {
            type_error: true,
            ..Failure::from(e)
        }
    }

    /// An option the binding does not know (`options.namepsace`): it cannot be translated, so
    /// it is refused rather than ignored; thrown as a `TypeError`, as a wrong type is.
    pub fn unknown_option(field: &str, why: impl std::fmt::Display) -> Self {
        Failure {
            type_error: true,
            ..Failure::from(accord::Error::invalid(field, why))
        }
    }

    /// A value of the right type that is still unusable (`accord::Error::invalid`).
    pub fn invalid(field: &str, why: impl std::fmt::Display) -> Self {
        accord::Error::invalid(field, why).into()
    }

    /// A failure of napi itself on the JavaScript thread (`accord::Error::internal`).
    pub fn internal(e: Error) -> Self {
        accord::Error::internal(format!("{} (in the Node binding)", e.reason)).into()
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

/// How Node's errors write durations (milliseconds, as every duration option is given) and
/// fields (camelCase, as the options are named): the core renders each message so.
const STYLE: accord::Style = accord::Style {
    durations: accord::Durations::Millis,
    fields: accord::Fields::Camel,
};

/// The one way a core error becomes a JavaScript one: its kind's code and its message.
impl From<accord::Error> for Failure {
    fn from(e: accord::Error) -> Self {
        Failure {
            code: e.kind().code(),
            message: e.message_in(&STYLE),
            type_error: false,
        }
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

/// Every `code` an accord error can carry, one per error kind of the core, in its order
/// (`ErrorKind::ALL`): `ACCORD_INVALID_ARGUMENT`, `ACCORD_HELD`, `ACCORD_DONE`,
/// `ACCORD_TIMEOUT`, `ACCORD_CANCELLED`, `ACCORD_LEASE_LOST`, `ACCORD_CONNECTION`,
/// `ACCORD_DATABASE`, `ACCORD_CLOSED`, `ACCORD_UNSUPPORTED`, `ACCORD_INTERNAL`,
/// `ACCORD_TRIMMED` (a stream's retention deleted the events asked for). Frozen.
#[napi_derive::napi]
pub const ERROR_CODES: ReadonlyArray<String> = ReadonlyArray(std::marker::PhantomData);

/// The error codes as a frozen JavaScript array (the only constant of this type). napi
/// declares a constant's type by its Rust name, so this one reads `ReadonlyArray<string>`.
pub struct ReadonlyArray<T>(std::marker::PhantomData<T>);

impl ToNapiValue for ReadonlyArray<String> {
    unsafe fn to_napi_value(raw: sys::napi_env, _: Self) -> Result<sys::napi_value> {
        let env = Env::from_raw(raw);
        let mut codes = env.create_array(accord::ErrorKind::ALL.len() as u32)?;
        for (i, kind) in accord::ErrorKind::ALL.iter().enumerate() {
            codes.set(i as u32, kind.code())?;
        }
        let mut codes = codes.coerce_to_object()?;
        codes.freeze()?;
        // SAFETY: on the JavaScript thread with its env, as napi registers constants.
        unsafe { ToNapiValue::to_napi_value(raw, codes) }
    }
}
