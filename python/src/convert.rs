//! Python values ↔ the core's: seconds as floats, metadata as dicts (JSON objects).

use std::time::Duration;

use accord::serde_json::{Map, Number, Value};
use accord::Metadata;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::errors::{self, invalid, IntoPyResult};

/// Deepest metadata nesting accepted (deeper is refused, not overflowed).
const MAX_DEPTH: usize = 64;

/// A ttl in seconds: the core's range, refused in the core's words with the value given (never
/// a converted or clamped one).
pub fn ttl(field: &str, seconds: Option<f64>) -> PyResult<Option<Duration>> {
    seconds
        .map(|s| accord::limits::ttl_number(field, s, accord::limits::TimeUnit::Seconds))
        .transpose()
        .py()
}

/// Another duration in seconds (a fleet's period or hand-off timeout, a stream's max_age):
/// a duration by the core's rule (`accord::limits::duration_number`); ranges are the core's.
pub fn duration(field: &str, seconds: Option<f64>) -> PyResult<Option<Duration>> {
    seconds
        .map(|s| accord::limits::duration_number(field, s, accord::limits::TimeUnit::Seconds))
        .transpose()
        .py()
}

/// A timeout in seconds: `None` or infinity wait without a limit.
pub fn timeout(field: &str, seconds: Option<f64>) -> PyResult<Option<Duration>> {
    let Some(seconds) = seconds else {
        return Ok(None);
    };
    if seconds.is_nan() || seconds < 0.0 {
        return Err(invalid(
            field,
            format!("{seconds} is not a number of seconds >= 0"),
        ));
    }
    Ok(Duration::try_from_secs_f64(seconds).ok())
}

/// A str as UTF-8 text: a Python str may hold a lone surrogate (`"\ud800"`), which no Unicode
/// text can; pyo3's conversion would raise UnicodeEncodeError naming no argument, so it is
/// refused here as the core words it (`accord::limits::unpaired_surrogate`), naming `field`.
pub fn text(field: &str, s: &Bound<'_, PyString>) -> PyResult<String> {
    match s.to_cow() {
        Ok(t) => Ok(t.into_owned()),
        Err(e) if e.is_instance_of::<pyo3::exceptions::PyUnicodeEncodeError>(s.py()) => {
            Err(errors::to_py(accord::limits::unpaired_surrogate(field)))
        }
        Err(e) => Err(e),
    }
}

/// A str argument named `field` (see [`text`]); anything else is a TypeError, as pyo3's own.
pub fn text_arg(field: &str, v: &Bound<'_, PyAny>) -> PyResult<String> {
    let Ok(s) = v.cast::<PyString>() else {
        return Err(PyTypeError::new_err(format!(
            "{field} must be str, not {}",
            type_name(v)
        )));
    };
    text(field, s)
}

/// An int argument named `field` as 64 bits: pyo3's conversion would raise OverflowError
/// naming no argument for one beyond them (`2**63`), so it is refused in the core's words
/// (`accord::limits::beyond_64_bits`); another type is pyo3's TypeError. Ranges are the core's.
pub fn integer(field: &str, v: &Bound<'_, PyAny>) -> PyResult<i64> {
    match v.extract::<i64>() {
        Ok(n) => Ok(n),
        Err(e) if e.is_instance_of::<pyo3::exceptions::PyOverflowError>(v.py()) => Err(
            errors::to_py(accord::limits::beyond_64_bits(field, &v.str()?.to_cow()?)),
        ),
        Err(e) => Err(e),
    }
}

/// `#[pyo3(from_py_with = convert::NAME)]` for every str and int argument, named as its field
/// (`convert::stream` reads the `stream` argument): each is read by [`text_arg`] or
/// [`integer`], so that none reaches pyo3's own conversion, whose errors name no argument.
/// `opt_…`: None (the default) or a value.
macro_rules! arguments {
    (@field $name:ident $field:literal) => { $field };
    (@field $name:ident) => { stringify!($name) };
    (optional $read:ident -> $ty:ty: $($name:ident $(= $field:literal)?),* $(,)?) => {$(
        pub fn $name(v: &Bound<'_, PyAny>) -> PyResult<Option<$ty>> {
            if v.is_none() {
                return Ok(None);
            }
            $read(arguments!(@field $name $($field)?), v).map(Some)
        }
    )*};
    ($read:ident -> $ty:ty: $($name:ident $(= $field:literal)?),* $(,)?) => {$(
        pub fn $name(v: &Bound<'_, PyAny>) -> PyResult<$ty> {
            $read(arguments!(@field $name $($field)?), v)
        }
    )*};
}

arguments!(text_arg -> String: key, url, name, prefix, group, channel, stream, value, schema, payload);
arguments!(optional text_arg -> String:
    namespace, owner, application_name, listen_url, consumer, cursor, state,
    opt_prefix = "prefix", opt_schema = "schema");
arguments!(integer -> i64: limit, page_size, seq);
arguments!(optional integer -> i64: pool_size, shards, max_handoffs_per_period, max_len);

/// An iterable of str (but not a str itself, which would be taken character by character):
/// the keys of an `offer`, the payloads of a `publish_many`. `field` and `one` (what one item
/// is) word the `TypeError`s.
pub fn strings(field: &str, one: &str, value: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    if value.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(format!(
            "{field} must be an iterable of str, not a str (put one {one} in a list)"
        )));
    }
    let Ok(items) = value.try_iter() else {
        return Err(PyTypeError::new_err(format!(
            "{field} must be an iterable of str, not {}",
            type_name(value)
        )));
    };
    let mut strings = Vec::new();
    for item in items {
        let item = item?;
        let Ok(s) = item.cast::<PyString>() else {
            return Err(PyTypeError::new_err(format!(
                "{field} must be str, not {}",
                type_name(&item)
            )));
        };
        strings.push(text(field, s)?);
    }
    Ok(strings)
}

/// A metadata argument: a dict with str keys and JSON values, or None.
pub fn metadata(field: &str, value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Metadata>> {
    match value {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => {
            let Ok(dict) = v.cast::<PyDict>() else {
                return Err(PyTypeError::new_err(format!(
                    "{field} must be a dict (a JSON object), not {}",
                    type_name(v)
                )));
            };
            object(&|| field.to_string(), dict, 0).map(Some)
        }
    }
}

/// The name of a value's type, for `TypeError` messages.
pub fn type_name(v: &Bound<'_, PyAny>) -> String {
    v.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// Where a value sits in the argument, for messages (built only when one is needed).
type Path<'a> = &'a dyn Fn() -> String;

fn too_deep(path: Path<'_>) -> PyErr {
    invalid(
        "metadata",
        format!("{} is nested more than {MAX_DEPTH} levels deep", path()),
    )
}

fn object(path: Path<'_>, dict: &Bound<'_, PyDict>, depth: usize) -> PyResult<Map<String, Value>> {
    if depth > MAX_DEPTH {
        return Err(too_deep(path));
    }
    let mut map = Map::new();
    for (k, v) in dict.iter() {
        let Ok(key) = k.cast::<PyString>() else {
            return Err(PyTypeError::new_err(format!(
                "keys of {} must be str, not {}",
                path(),
                type_name(&k)
            )));
        };
        let key = text("metadata", key)?;
        let value = json(&|| format!("{}[{key:?}]", path()), &v, depth + 1)?;
        map.insert(key, value);
    }
    Ok(map)
}

fn json(path: Path<'_>, v: &Bound<'_, PyAny>, depth: usize) -> PyResult<Value> {
    if v.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = v.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if v.is_instance_of::<PyInt>() {
        if let Ok(i) = v.extract::<i64>() {
            return Ok(Value::from(i));
        }
        if let Ok(u) = v.extract::<u64>() {
            return Ok(Value::from(u));
        }
        return Err(invalid(
            "metadata",
            format!("{} is an integer outside the 64-bit range", path()),
        ));
    }
    if let Ok(f) = v.cast::<PyFloat>() {
        return Number::from_f64(f.value())
            .map(Value::Number)
            .ok_or_else(|| {
                errors::to_py(accord::limits::not_json(
                    "metadata",
                    &path(),
                    &f.value().to_string(),
                ))
            });
    }
    if let Ok(s) = v.cast::<PyString>() {
        return match text("metadata", s) {
            Ok(t) => Ok(Value::String(t)),
            // Where in the metadata, as for the other values it cannot hold.
            Err(_) => Err(invalid(
                "metadata",
                format!(
                    "{} holds an unpaired UTF-16 surrogate, which is not Unicode text",
                    path()
                ),
            )),
        };
    }
    if let Ok(d) = v.cast::<PyDict>() {
        return object(path, d, depth).map(Value::Object);
    }
    if v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>() {
        if depth > MAX_DEPTH {
            return Err(too_deep(path));
        }
        let mut items = Vec::new();
        for (i, item) in v.try_iter()?.enumerate() {
            items.push(json(&|| format!("{}[{i}]", path()), &item?, depth + 1)?);
        }
        return Ok(Value::Array(items));
    }
    Err(PyTypeError::new_err(format!(
        "{} is of type {}, which is not JSON (use dict, list, str, int, float, bool or None)",
        path(),
        type_name(v)
    )))
}

/// Metadata as a new dict.
pub fn metadata_to_py<'py>(py: Python<'py>, map: &Metadata) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (k, v) in map {
        dict.set_item(k, value_to_py(py, v)?)?;
    }
    Ok(dict)
}

fn value_to_py<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                i.into_pyobject(py)?.into_any()
            } else if let Some(u) = n.as_u64() {
                u.into_pyobject(py)?.into_any()
            } else {
                n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any()
            }
        }
        Value::String(s) => PyString::new(py, s).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(value_to_py(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(map) => metadata_to_py(py, map)?.into_any(),
    })
}
