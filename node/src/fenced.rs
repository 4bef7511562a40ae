//! Fenced writes on the application's own node-postgres connection (`pg`'s `Client` or
//! `PoolClient` inside `BEGIN`): `lease.fenced(client)` and `lease.doneIn(client, metadata)` run
//! the statements the core makes (`Lease::fenced_call`, `Lease::done_in_call`) through
//! `client.query`, and a refusal's SQLSTATE becomes accord's error by the core's mapping
//! (`accord::fenced_refusal`: `AC001` is `ACCORD_LEASE_LOST`).

use std::sync::Arc;

use napi::bindgen_prelude::*;
use napi_derive::napi;

use crate::convert::{call_method, settle_ok};
use crate::error::{Failure, Outcome};

/// A statement for the application's transaction, with any driver: `text` takes `params` as
/// `$1`, `$2`, … (strings, or null for NULL; the statement casts each to its type).
#[napi(object)]
pub struct SqlCall {
    pub text: String,
    #[napi(ts_type = "Array<string | null>")]
    pub params: Vec<Option<String>>,
}

pub(crate) fn sql_call(call: accord::SqlCall) -> SqlCall {
    SqlCall {
        params: call.params.iter().map(accord::SqlParam::to_text).collect(),
        text: call.text,
    }
}

/// A JavaScript value of anything napi converts.
fn js<'e>(env: &'e Env, value: impl ToNapiValue) -> Result<Unknown<'e>> {
    Ok(unsafe {
        Unknown::from_raw_unchecked(env.raw(), ToNapiValue::to_napi_value(env.raw(), value)?)
    })
}

/// A Promise rejected with `failure` (a refusal before anything was sent).
fn rejected<'e>(env: &'e Env, failure: Failure) -> Result<Unknown<'e>> {
    js(env, settle_ok::<(), _>(env, async move { Err(failure) })?)
}

/// accord's error for what `client.query` rejected with: a server's refusal (pg's
/// `DatabaseError`, whose `code` is the SQLSTATE) by the core's mapping; anything else (a
/// broken connection) as it is.
fn refusal(env: &Env, what: &str, error: Unknown) -> Error {
    let coded = (|| -> Result<Option<(String, String)>> {
        if error.get_type()? != ValueType::Object {
            return Ok(None);
        }
        let object: Object = unsafe { error.cast() }?;
        let code: Unknown = object.get_named_property_unchecked("code")?;
        let message: Unknown = object.get_named_property_unchecked("message")?;
        if code.get_type()? != ValueType::String || message.get_type()? != ValueType::String {
            return Ok(None);
        }
        Ok(Some((unsafe { code.cast() }?, unsafe { message.cast() }?)))
    })();
    match coded {
        Ok(Some((code, message))) => {
            Failure::from(accord::fenced_refusal(what, &code, &message)).into_napi(env)
        }
        _ => Error::from(error),
    }
}

/// Runs `call` on `client` (`client.query({ text, values, rowMode: 'array' })`) and answers
/// the Promise of `client.query(...).then(answer, refusal)`.
pub(crate) fn run<'e>(
    env: &'e Env,
    client: Unknown<'e>,
    what: &'static str,
    call: Outcome<accord::SqlCall>,
    answer: impl Fn(&Env, Object) -> Result<Unknown<'static>> + 'static,
    after: Option<Arc<accord::Lease>>,
) -> Result<Unknown<'e>> {
    let call = match call {
        Ok(call) => sql_call(call),
        Err(failure) => return rejected(env, failure),
    };
    if client.get_type()? != ValueType::Object {
        return rejected(
            env,
            Failure::invalid("client", "expected a pg Client or PoolClient"),
        );
    }
    let target: Object = unsafe { client.cast() }?;
    let query: Unknown = target.get_named_property_unchecked("query")?;
    if query.get_type()? != ValueType::Function {
        return rejected(
            env,
            Failure::invalid(
                "client",
                "expected a pg Client or PoolClient (it has no query method)",
            ),
        );
    }
    let query: Function<Object, Object> = unsafe { query.cast() }?;
    let mut config = Object::new(env)?;
    config.set_named_property("text", call.text)?;
    config.set_named_property("values", call.params)?;
    config.set_named_property("rowMode", "array")?;
    let sent = call_method(env, &query, target, config);
    // Sent (or failed on the way): whichever way the transaction ends, the lease looks at once.
    if let Some(lease) = &after {
        lease.done_in_sent();
    }
    let promise = sent?;
    type Then<'f> = Function<
        'f,
        FnArgs<(
            Function<'f, Object<'f>, Unknown<'f>>,
            Function<'f, Unknown<'f>, Unknown<'f>>,
        )>,
        Unknown<'f>,
    >;
    let then: Then = promise.get_named_property_unchecked("then")?;
    let on_answer = env.create_function_from_closure::<Object, Unknown<'static>, _>(
        "accordFencedAnswer",
        move |ctx| {
            let result: Object<'static> = ctx.get(0)?;
            answer(ctx.env, result)
        },
    )?;
    let on_refusal = env.create_function_from_closure::<Unknown, Unknown<'static>, _>(
        "accordFencedRefusal",
        move |ctx| {
            let error: Unknown<'static> = ctx.get(0)?;
            Err(refusal(ctx.env, what, error))
        },
    )?;
    // Two arguments: napi passes a bare tuple as one (an array).
    let chained: Unknown = call_method(env, &then, promise, FnArgs::from((on_answer, on_refusal)))?;
    Ok(chained)
}

/// `doneIn`'s answer: the key's metadata, the statement's one value (JSON text).
pub(crate) fn merged_metadata(env: &Env, result: Object) -> Result<Unknown<'static>> {
    let rows: Object = result.get_named_property_unchecked("rows")?;
    let row: Object = rows.get_named_property_unchecked("0")?;
    let text: String = row.get_named_property_unchecked("0")?;
    let metadata: accord::Metadata = serde_json::from_str(&text).map_err(|e| {
        Failure::from(accord::Error::internal(format!(
            "stored metadata is not a JSON object: {e}"
        )))
        .into_napi(env)
    })?;
    Ok(unsafe {
        Unknown::from_raw_unchecked(env.raw(), ToNapiValue::to_napi_value(env.raw(), metadata)?)
    })
}
