//! Reading JavaScript arguments with clear errors, and settling Promises on the JavaScript
//! thread so that rejections carry accord's `code`.

use std::future::Future;
use std::time::Duration;

use napi::bindgen_prelude::*;

use crate::error::{Failure, Outcome};

/// Runs `fut` on napi's tokio runtime and returns its Promise. `finish` runs on the JavaScript
/// thread with the outcome, whatever it is, and turns it into the Promise's value; a failure
/// rejects the Promise with an `Error` carrying its `code`. The pending Promise keeps the event
/// loop alive, as any pending I/O does in Node.
pub(crate) fn settle<'e, T, V, F, M>(env: &'e Env, fut: F, finish: M) -> Result<PromiseRaw<'e, V>>
where
    T: Send + 'static,
    V: ToNapiValue,
    F: Future<Output = Outcome<T>> + Send + 'static,
    M: FnOnce(&Env, Outcome<T>) -> Outcome<V> + 'static,
{
    crate::bridge::promise(env, fut, move |env, outcome| {
        finish(env, outcome).map_err(|failure| failure.into_napi(env))
    })
}

/// `settle` with a conversion of successful results only.
pub(crate) fn settle_map<'e, T, V, F, M>(env: &'e Env, fut: F, map: M) -> Result<PromiseRaw<'e, V>>
where
    T: Send + 'static,
    V: ToNapiValue,
    F: Future<Output = Outcome<T>> + Send + 'static,
    M: FnOnce(&Env, T) -> Outcome<V> + 'static,
{
    settle(env, fut, |env, outcome| {
        outcome.and_then(|value| map(env, value))
    })
}

/// `settle` for results that need no conversion.
pub(crate) fn settle_ok<'e, T, F>(env: &'e Env, fut: F) -> Result<PromiseRaw<'e, T>>
where
    T: ToNapiValue + Send + 'static,
    F: Future<Output = Outcome<T>> + Send + 'static,
{
    settle(env, fut, |_, outcome| outcome)
}

fn kind(value: &Unknown) -> Outcome<ValueType> {
    Ok(value.get_type()?)
}

fn is_nullish(t: ValueType) -> bool {
    matches!(t, ValueType::Undefined | ValueType::Null)
}

/// A required string.
pub(crate) fn string(field: &str, value: &Unknown) -> Outcome<String> {
    match kind(value)? {
        ValueType::String => Ok(unsafe { value.cast::<String>() }?),
        other => Err(Failure::wrong_type(field, "a string", other)),
    }
}

/// An optional string: `undefined` or `null` mean none.
pub(crate) fn opt_string(field: &str, value: &Unknown) -> Outcome<Option<String>> {
    if is_nullish(kind(value)?) {
        return Ok(None);
    }
    string(field, value).map(Some)
}

/// An optional boolean.
pub(crate) fn opt_bool(field: &str, value: &Unknown) -> Outcome<Option<bool>> {
    match kind(value)? {
        t if is_nullish(t) => Ok(None),
        ValueType::Boolean => Ok(Some(unsafe { value.cast::<bool>() }?)),
        other => Err(Failure::wrong_type(field, "a boolean", other)),
    }
}

fn opt_number(field: &str, value: &Unknown) -> Outcome<Option<f64>> {
    match kind(value)? {
        t if is_nullish(t) => Ok(None),
        ValueType::Number => {
            let n = unsafe { value.cast::<f64>() }?;
            if n.is_nan() {
                return Err(Failure::invalid(
                    field,
                    "NaN is not a number of milliseconds",
                ));
            }
            Ok(Some(n))
        }
        other => Err(Failure::wrong_type(field, "a number", other)),
    }
}

/// An optional integer (a safe one: exactly representable). Ranges are the core's to check
/// (`accord::limits`).
pub(crate) fn opt_integer(field: &str, value: &Unknown) -> Outcome<Option<i64>> {
    const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;
    match opt_number(field, value)? {
        None => Ok(None),
        Some(n) if n.fract() == 0.0 && n.abs() <= MAX_SAFE_INTEGER => Ok(Some(n as i64)),
        Some(n) => Err(Failure::invalid(field, format!("{n} is not an integer"))),
    }
}

/// A required integer (ranges are the core's to check).
pub(crate) fn integer(field: &str, value: &Unknown) -> Outcome<i64> {
    match opt_integer(field, value)? {
        Some(n) => Ok(n),
        None => Err(Failure::wrong_type(field, "a number", kind(value)?)),
    }
}

/// A seq (of a stream event): a bigint, as seqs are given out, or a safe integer number. Ranges
/// are the core's to check.
pub(crate) fn seq(field: &str, value: &Unknown) -> Outcome<i64> {
    match kind(value)? {
        ValueType::BigInt => {
            let (n, lossless) = unsafe { value.cast::<BigInt>() }?.get_i64();
            if lossless {
                Ok(n)
            } else {
                Err(Failure::invalid(
                    field,
                    "the bigint is outside the signed 64-bit range",
                ))
            }
        }
        ValueType::Number => integer(field, value),
        other => Err(Failure::wrong_type(field, "a bigint or a number", other)),
    }
}

/// A required array of strings; a wrong element is named by its index (`keys[3]`).
pub(crate) fn strings(field: &str, value: &Unknown) -> Outcome<Vec<String>> {
    match kind(value)? {
        ValueType::Object if value.is_array()? => {}
        other => return Err(Failure::wrong_type(field, "an array of strings", other)),
    }
    let array = unsafe { value.cast::<Array>() }?;
    (0..array.len())
        .map(|i| {
            let item = array.get::<Unknown>(i)?;
            let item = item.ok_or_else(|| Failure::invalid(field, "changed while read"))?;
            string(&format!("{field}[{i}]"), &item)
        })
        .collect()
}

/// An optional duration in milliseconds. `Infinity` means none when `infinite_is_none`.
pub(crate) fn opt_millis(
    field: &str,
    value: &Unknown,
    infinite_is_none: bool,
) -> Outcome<Option<Duration>> {
    match opt_number(field, value)? {
        None => Ok(None),
        Some(n) if n == f64::INFINITY && infinite_is_none => Ok(None),
        Some(n) if n < 0.0 => Err(Failure::invalid(field, format!("{n} ms is negative"))),
        Some(n) => Duration::try_from_secs_f64(n / 1000.0)
            .map(Some)
            .map_err(|_| Failure::invalid(field, format!("{n} ms is out of range"))),
    }
}

/// An optional options object: `undefined` or `null` mean all defaults.
pub(crate) fn opt_object<'e>(
    field: &str,
    value: Option<Unknown<'e>>,
) -> Outcome<Option<Object<'e>>> {
    let Some(value) = value else {
        return Ok(None);
    };
    match kind(&value)? {
        t if is_nullish(t) => Ok(None),
        ValueType::Object if !value.is_array()? => Ok(Some(unsafe { value.cast::<Object>() }?)),
        ValueType::Object => Err(Failure::invalid(field, "expected an object, got an array")),
        other => Err(Failure::wrong_type(field, "an object", other)),
    }
}

/// Property `name` of an options object (`undefined` when absent).
pub(crate) fn property<'e>(object: &Object<'e>, name: &str) -> Outcome<Unknown<'e>> {
    Ok(object.get_named_property_unchecked::<Unknown>(name)?)
}

/// Optional metadata: a plain object, serialized the way `JSON.stringify` does (so `Date`s
/// become strings and `toJSON` is honoured), then checked by the core (G11).
pub(crate) fn opt_metadata(
    env: &Env,
    field: &str,
    value: &Unknown,
) -> Outcome<Option<accord::Metadata>> {
    match kind(value)? {
        t if is_nullish(t) => return Ok(None),
        ValueType::Object if !value.is_array()? => {}
        ValueType::Object => {
            return Err(Failure::invalid(field, "expected an object, got an array"))
        }
        other => return Err(Failure::wrong_type(field, "an object", other)),
    }
    let json: Object = env.get_global()?.get_named_property_unchecked("JSON")?;
    let stringify: Function<Unknown, Unknown> = json.get_named_property_unchecked("stringify")?;
    let text = match call_method(env, &stringify, json, *value) {
        Ok(text) => text,
        Err(e) => {
            return Err(Failure::invalid(
                field,
                format!("cannot be serialized as JSON: {}", e.reason),
            ))
        }
    };
    let text = string(field, &text)?;
    serde_json::from_str::<accord::Metadata>(&text)
        .map(Some)
        .map_err(|e| Failure::invalid(field, format!("is not a JSON object: {e}")))
}

/// Calls `f` with `this`. A JavaScript exception becomes an `Err` carrying it, and is no
/// longer pending (napi's `apply` leaves it pending, which would throw it synchronously).
pub(crate) fn call_method<Args, R>(
    env: &Env,
    f: &Function<Args, R>,
    this: impl ToNapiValue,
    args: Args,
) -> Result<R>
where
    Args: JsValuesTupleIntoVec,
    R: FromNapiValue,
{
    f.apply(this, args).map_err(|e| {
        let mut pending = false;
        let mut exception = std::ptr::null_mut();
        unsafe {
            sys::napi_is_exception_pending(env.raw(), &mut pending);
            if pending
                && sys::napi_get_and_clear_last_exception(env.raw(), &mut exception)
                    == sys::Status::napi_ok
            {
                return Error::from(Unknown::from_raw_unchecked(env.raw(), exception));
            }
        }
        e
    })
}

/// Milliseconds as a JavaScript number.
pub(crate) fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
