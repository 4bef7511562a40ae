//! The Node.js binding of accord (napi-rs): `connect`, `Client`, `Lease`, `Semaphore`,
//! `Member`, `MemberWatch`, `Fleet`, `ShardLease`, `Election`, `Leadership`, `Observer`,
//! `Subscription`, `StreamSubscription`.
//!
//! A thin layer: every rule lives in the core crate. This crate converts arguments (with
//! clear `ACCORD_INVALID_ARGUMENT` errors), runs the core's futures on napi's tokio runtime,
//! and settles Promises on the JavaScript thread so that rejections carry the core's error
//! `code`. It also decides what keeps the Node event loop alive: pending calls, open
//! subscriptions, and the `lost` Promise of a held lease once read; nothing else.

mod bridge;
mod client;
mod convert;
mod election;
mod error;
mod fenced;
mod fleet;
mod lease;
mod membership;
mod read_options;
mod semaphore;
mod stats;
mod stream;
mod subscription;

use napi::bindgen_prelude::*;
use napi_derive::napi;

pub use client::{connect, Client};
pub use election::{Election, Leadership, Observer};
pub use error::{ReadonlyArray, ERROR_CODES};
pub use fleet::{Fleet, ShardLease};
pub use lease::Lease;
pub use membership::{Member, MemberWatch};
pub use semaphore::Semaphore;
pub use stream::StreamSubscription;
pub use subscription::Subscription;

/// Closes every open client of this process (those connected with `closeOnSigterm: false`
/// aside) as `client.close()` does, and resolves to how many: what the SIGTERM listener runs,
/// for programs that handle the signal themselves.
#[napi(ts_return_type = "Promise<number>")]
pub fn close_all(env: &Env) -> Result<PromiseRaw<'_, u32>> {
    convert::settle_ok(env, async {
        let closed = accord::close_all().await;
        Ok(u32::try_from(closed).unwrap_or(u32::MAX))
    })
}

/// The SQL that creates or upgrades accord's schema (default `"accord"`), for DBAs who apply
/// it by hand; connect clients with `migrate: false` afterwards.
#[napi(ts_args_type = "schema?: string")]
pub fn migration_sql(env: Env, schema: Option<Unknown>) -> Result<String> {
    let sql = (|| -> error::Outcome<String> {
        let schema = match schema {
            Some(s) => convert::opt_string("schema", &s)?,
            None => None,
        };
        Ok(accord::migration_sql(
            schema.as_deref().unwrap_or("accord"),
        )?)
    })();
    sql.map_err(|f| f.into_napi(&env))
}

/// napi declares a method's arguments by number; `client.listen(...channels)` takes any
/// number, so the class's `listen` is replaced by one that reads them all.
#[napi(module_exports)]
pub fn init(exports: Object, env: Env) -> Result<()> {
    let class: Object = exports.get_named_property_unchecked("Client")?;
    let mut prototype: Object = class.get_named_property_unchecked("prototype")?;
    let listen = env.create_function_from_closure::<(), Unknown<'static>, _>("listen", |ctx| {
        let this: ClassInstance<Client> = ctx.this()?;
        let channels = ctx.arguments::<Unknown>()?;
        let promise = this.listen_all(ctx.env, channels)?;
        // The Promise lives in the callback's handle scope, which outlasts this closure.
        Ok(unsafe {
            Unknown::from_raw_unchecked(
                ctx.env.raw(),
                ToNapiValue::to_napi_value(ctx.env.raw(), promise)?,
            )
        })
    })?;
    prototype.set_named_property("listen", listen)?;
    Ok(())
}
