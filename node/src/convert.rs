//! Reading JavaScript arguments with clear errors, and settling Promises on the JavaScript
//! thread so that rejections carry accord's `code`.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::rc::Rc;
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

/// A required string. A JavaScript string is UTF-16 and may hold an unpaired surrogate, which
/// no Unicode text can (the core's rule: `accord::limits::unpaired_surrogate`); napi's UTF-8
/// conversion would replace it with U+FFFD, making two different strings the same key, so it
/// is refused here, where the UTF-16 is still at hand. Only a string whose conversion holds a
/// U+FFFD is read again as UTF-16 to tell a real one from a replaced surrogate.
pub(crate) fn string(field: &str, value: &Unknown) -> Outcome<String> {
    match kind(value)? {
        ValueType::String => {
            let text = unsafe { value.cast::<String>() }?;
            if had_unpaired_surrogate(value, &text)? {
                return Err(accord::limits::unpaired_surrogate(field).into());
            }
            Ok(text)
        }
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

/// Whether the JavaScript string `value`, converted to `text`, held an unpaired surrogate (which
/// the conversion replaced with U+FFFD).
fn had_unpaired_surrogate(value: &Unknown, text: &str) -> Result<bool> {
    if !text.contains('\u{FFFD}') {
        return Ok(false);
    }
    let utf16 = unsafe { value.cast::<Utf16String>() }?;
    Ok(char::decode_utf16(utf16.iter().copied()).any(|c| c.is_err()))
}

/// An optional boolean.
pub(crate) fn opt_bool(field: &str, value: &Unknown) -> Outcome<Option<bool>> {
    match kind(value)? {
        t if is_nullish(t) => Ok(None),
        ValueType::Boolean => Ok(Some(unsafe { value.cast::<bool>() }?)),
        other => Err(Failure::wrong_type(field, "a boolean", other)),
    }
}

/// An optional number, NaN and ±Infinity included: what each is judged by is the core's.
fn opt_number(field: &str, value: &Unknown) -> Outcome<Option<f64>> {
    match kind(value)? {
        t if is_nullish(t) => Ok(None),
        ValueType::Number => Ok(Some(unsafe { value.cast::<f64>() }?)),
        other => Err(Failure::wrong_type(field, "a number", other)),
    }
}

/// An optional integer: a number that is one exactly, by the core's rule
/// (`accord::limits::integer_number`: not NaN, ±Infinity, a fraction, or beyond 2^53). Ranges
/// are the core's to check (`accord::limits`).
pub(crate) fn opt_integer(field: &str, value: &Unknown) -> Outcome<Option<i64>> {
    match opt_number(field, value)? {
        None => Ok(None),
        Some(n) => Ok(Some(accord::limits::integer_number(field, n)?)),
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
        Some(n) => Ok(Some(accord::limits::duration_number(
            field,
            n,
            accord::limits::TimeUnit::Millis,
        )?)),
    }
}

/// An optional ttl in milliseconds: the core's range, refused in the core's words with the
/// value given.
pub(crate) fn opt_ttl(field: &str, value: &Unknown) -> Outcome<Option<Duration>> {
    match kind(value)? {
        t if is_nullish(t) => Ok(None),
        ValueType::Number => {
            let ms = unsafe { value.cast::<f64>() }?;
            Ok(Some(accord::limits::ttl_number(
                field,
                ms,
                accord::limits::TimeUnit::Millis,
            )?))
        }
        other => Err(Failure::wrong_type(field, "a number", other)),
    }
}

/// An optional options object (`undefined` or `null`: all defaults) whose properties must all
/// be among `known`: a misspelt option (`namepsace`) would otherwise be ignored silently. The
/// properties are the enumerable string keys, as `for…in` gives them (options are read through
/// the prototype chain too).
pub(crate) fn opt_options<'e>(
    field: &str,
    value: Option<Unknown<'e>>,
    known: &[&str],
) -> Outcome<Option<Object<'e>>> {
    let object = opt_object(field, value)?;
    if let Some(o) = &object {
        only_known(field, o, known)?;
    }
    Ok(object)
}

/// Refuses the first property of `object` that is not among `known`, naming it (and the known
/// one it is closest to, when one is close).
pub(crate) fn only_known(field: &str, object: &Object, known: &[&str]) -> Outcome<()> {
    for name in Object::keys(object)? {
        if known.contains(&name.as_str()) {
            continue;
        }
        let closest = known
            .iter()
            .map(|k| (edit_distance(&name.to_lowercase(), &k.to_lowercase()), k))
            .min()
            .filter(|(d, _)| *d <= 2)
            .map(|(_, k)| format!("; did you mean {k:?}?"))
            .unwrap_or_default();
        return Err(Failure::unknown_option(
            field,
            format!(
                "unknown option {name:?}{closest} (known: {})",
                known.join(", ")
            ),
        ));
    }
    Ok(())
}

/// Levenshtein distance, for "did you mean".
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substituted = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substituted.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
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
/// become strings and `toJSON` is honoured, and `undefined` properties are left out), then
/// checked by the core (G11). What JSON cannot hold is refused in the core's words
/// (`accord::limits::not_json`) instead of being changed silently: NaN and ±Infinity (which
/// `JSON.stringify` makes `null`), objects other than plain objects and arrays (a `Map` or a
/// `Set` would become `{}`), functions and symbols (left out), bigints.
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
    let stringify: Stringify = json.get_named_property_unchecked("stringify")?;
    let refused: Rc<RefCell<Option<Failure>>> = Rc::default();
    let replacer = {
        let refused = refused.clone();
        let field = field.to_string();
        let top = Cell::new(true);
        env.create_function_from_closure::<(), Unknown<'static>, _>("accordJson", move |ctx| {
            let key: Unknown<'static> = ctx.get(0)?;
            let value: Unknown<'static> = ctx.get(1)?;
            let key_text = unsafe { key.cast::<String>() }?;
            let text = (value.get_type()? == ValueType::String)
                .then(|| unsafe { value.cast::<String>() })
                .transpose()?;
            if had_unpaired_surrogate(&key, &key_text)?
                || text.is_some_and(|t| had_unpaired_surrogate(&value, &t).unwrap_or(false))
            {
                *refused.borrow_mut() = Some(accord::limits::unpaired_surrogate(&field).into());
                return Err(Error::new(Status::InvalidArg, "unpaired surrogate"));
            }
            let at = if top.replace(false) {
                field.clone()
            } else {
                let holder: Unknown = ctx.this()?;
                if holder.is_array()? {
                    format!("the value at index {key_text} of {field}")
                } else {
                    format!("the value at key {key_text:?} of {field}")
                }
            };
            match not_json(ctx.env, &value)? {
                None => Ok(value),
                Some(what) => {
                    *refused.borrow_mut() =
                        Some(accord::limits::not_json(&field, &at, &what).into());
                    Err(Error::new(Status::InvalidArg, what))
                }
            }
        })?
    };
    let text = match call_method(env, &stringify, json, (*value, replacer).into()) {
        Ok(text) => text,
        Err(e) => {
            return Err(refused.take().unwrap_or_else(|| {
                Failure::invalid(field, format!("cannot be serialized as JSON: {}", e.reason))
            }))
        }
    };
    let text = string(field, &text)?;
    serde_json::from_str::<accord::Metadata>(&text)
        .map(Some)
        .map_err(|e| Failure::invalid(field, format!("is not a JSON object: {e}")))
}

/// `JSON.stringify(value, replacer)`.
type Stringify<'e> =
    Function<'e, FnArgs<(Unknown<'e>, Function<'e, (), Unknown<'e>>)>, Unknown<'e>>;

/// What `value` is when JSON cannot hold it (after `toJSON`, as the replacer sees it): `None`
/// for a value JSON holds as it is.
fn not_json(env: &Env, value: &Unknown) -> Result<Option<String>> {
    Ok(match value.get_type()? {
        ValueType::Number => {
            let n = unsafe { value.cast::<f64>() }?;
            if n.is_finite() {
                None
            } else if n.is_nan() {
                Some("NaN".into())
            } else {
                Some(if n > 0.0 { "Infinity" } else { "-Infinity" }.into())
            }
        }
        ValueType::BigInt => Some("a bigint (convert it, e.g. with String())".into()),
        ValueType::Function => Some("a function".into()),
        ValueType::Symbol => Some("a symbol".into()),
        ValueType::Object if !value.is_array()? => {
            let object = unsafe { value.cast::<Object>() }?;
            let prototype: Unknown = object.get_prototype()?;
            let object_class: Object = env.get_global()?.get_named_property_unchecked("Object")?;
            let plain: Unknown = object_class.get_named_property_unchecked("prototype")?;
            let mut same = false;
            unsafe {
                sys::napi_strict_equals(env.raw(), prototype.raw(), plain.raw(), &mut same);
            }
            if same || prototype.get_type()? == ValueType::Null {
                None
            } else {
                // `Object.prototype.toString` names built-ins (`[object Map]`); otherwise the
                // constructor's name names a class.
                let plain_object: Object = unsafe { plain.cast() }?;
                let to_string: Function<(), String> =
                    plain_object.get_named_property_unchecked("toString")?;
                let tag = call_method(env, &to_string, object, ())?;
                let tag = tag
                    .strip_prefix("[object ")
                    .and_then(|t| t.strip_suffix(']'))
                    .unwrap_or("Object")
                    .to_string();
                if tag != "Object" {
                    let article = if tag.starts_with(['A', 'E', 'I', 'O', 'U']) {
                        "an"
                    } else {
                        "a"
                    };
                    Some(format!("{article} {tag}"))
                } else {
                    let constructor: Unknown =
                        object.get_named_property_unchecked("constructor")?;
                    let name = if constructor.get_type()? == ValueType::Function {
                        let constructor: Object = unsafe { constructor.cast() }?;
                        let name: Unknown = constructor.get_named_property_unchecked("name")?;
                        (name.get_type()? == ValueType::String)
                            .then(|| unsafe { name.cast::<String>() })
                            .transpose()?
                    } else {
                        None
                    };
                    Some(match name {
                        Some(name) if !name.is_empty() => {
                            format!("an instance of {name} (not a plain object)")
                        }
                        _ => "not a plain object".into(),
                    })
                }
            }
        }
        _ => None,
    })
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
