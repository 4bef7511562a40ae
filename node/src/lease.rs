//! `Lease`: a held key, with its `lost` Promise, its `status` and `Symbol.asyncDispose`.
//! Whether and how a lease ended is the core's answer (`accord::LeaseStatus`): the wait behind
//! `lost` ends when the core says the lease ended, and resolves only if it ended lost.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use accord::LeaseStatus;
use napi::bindgen_prelude::*;
use napi_derive::napi;

use crate::convert::{millis, opt_metadata, settle_ok};
use crate::error::{Failure, Outcome};
use crate::fenced::{self, sql_call, SqlCall};

fn js_undefined(env: &Env) -> Result<Unknown<'static>> {
    Ok(unsafe {
        Unknown::from_raw_unchecked(env.raw(), ToNapiValue::to_napi_value(env.raw(), ())?)
    })
}

/// A key held by this client, renewed in the background until it is released, done or lost.
///
/// Use it with `await using` (it releases on dispose), or call `release()` / `done()`. Watch
/// `lost`: once it resolves, stop writing with this lease's fence.
///
/// A lease does not keep the Node process alive by itself (a process that ends while holding
/// one leaves it to expire at its ttl). Waiting on `lost` does, until the lease ends: released,
/// done, lost, or collected (which releases it).
#[napi(custom_finalize)]
pub struct Lease {
    /// The only strong handle of the core's lease but for calls in flight: when the object is
    /// collected, the core releases the lease, which ends the wait behind `lost`.
    inner: Arc<accord::Lease>,
    /// The `lost` Promise, made at its first read.
    lost: Option<ObjectRef<false>>,
}

impl Lease {
    /// Wraps a lease the core granted. Runs on the JavaScript thread.
    pub(crate) fn adopt(lease: accord::Lease) -> Lease {
        Lease {
            inner: Arc::new(lease),
            lost: None,
        }
    }
}

/// `lease.status`: the core's name for the status.
pub(crate) fn status_name(status: LeaseStatus) -> Outcome<&'static str> {
    Ok(status.as_str())
}

/// The lost reason: the core's name for it; none unless lost.
pub(crate) fn lost_reason_name(status: LeaseStatus) -> Outcome<Option<&'static str>> {
    Ok(status.lost_reason().map(|why| why.as_str()))
}

/// A Promise that resolves if the lease ends lost. Until the lease ends (as the core says:
/// released, done, lost, or dropped with its last handle), the wait is pending on the bridge,
/// which keeps the event loop alive while someone may be waiting for the loss of a held lease;
/// nothing keeps it alive afterwards, and a lease that ended otherwise leaves it pending.
pub(crate) fn lost_promise<'e>(env: &'e Env, signal: accord::LostSignal) -> Result<Object<'e>> {
    let slot: Rc<RefCell<Option<FunctionRef<(), ()>>>> = Rc::default();
    let filled = slot.clone();
    let executor =
        env.create_function_from_closure::<Function<(), ()>, (), _>("lostExecutor", move |ctx| {
            let resolve: Function<(), ()> = ctx.get(0)?;
            *filled.borrow_mut() = Some(resolve.create_ref()?);
            Ok(())
        })?;
    let promise_class: Function<Function<Function<(), ()>, ()>, Unknown> =
        env.get_global()?.get_named_property_unchecked("Promise")?;
    let promise = promise_class.new_instance(executor)?;
    let resolve = slot
        .borrow_mut()
        .take()
        .ok_or_else(|| Error::from_reason("the Promise executor did not run"))?;
    crate::bridge::later(
        env,
        async move {
            match signal.ended().await {
                LeaseStatus::Lost(_) => Some(()),
                _ => None,
            }
        },
        // Never resolved if it ended otherwise: the reference to `resolve` is simply dropped.
        move |env, fired| {
            if fired.is_some() {
                if let Ok(resolve) = resolve.borrow_back(env) {
                    let _ = resolve.call(());
                }
            }
        },
    )?;
    unsafe { promise.cast::<Object>() }
}

impl ObjectFinalize for Lease {
    fn finalize(mut self, env: Env) -> Result<()> {
        if let Some(lost) = self.lost.take() {
            lost.unref(&env)?;
        }
        // Dropping the last handle of a held lease releases it in the background (core), which
        // ends the wait behind `lost`.
        Ok(())
    }
}

#[napi]
impl Lease {
    /// The key held.
    #[napi(getter)]
    pub fn key(&self) -> String {
        self.inner.key().to_string()
    }

    /// The fencing token of this grant: larger than that of every earlier grant of any key.
    /// Pass it to the resources you write, and have them refuse smaller ones.
    #[napi(getter)]
    pub fn fence(&self) -> BigInt {
        BigInt::from(self.inner.fence())
    }

    /// The owner recorded for this lease (the client's owner).
    #[napi(getter)]
    pub fn owner(&self) -> String {
        self.inner.owner().to_string()
    }

    /// True for one of the key's shared holders (`acquire(key, { shared: true })`): it renews
    /// and releases as any lease, but `renew(metadata)` and `done()` reject with
    /// `ACCORD_INVALID_ARGUMENT`.
    #[napi(getter)]
    pub fn shared(&self) -> bool {
        self.inner.is_shared()
    }

    /// The namespace of the key.
    #[napi(getter)]
    pub fn namespace(&self) -> String {
        self.inner.namespace().to_string()
    }

    /// The ttl the lease is renewed with, in milliseconds.
    #[napi(getter)]
    pub fn ttl(&self) -> f64 {
        millis(self.inner.ttl())
    }

    /// The expiry the coordinator last confirmed (by its clock).
    #[napi(getter)]
    pub fn expires_at(&self) -> chrono::DateTime<chrono::Utc> {
        self.inner.expires_at()
    }

    /// The key's metadata as of the latest grant, renew or done of this lease (a copy).
    #[napi(getter, ts_return_type = "Record<string, unknown>")]
    pub fn metadata(&self) -> accord::Metadata {
        self.inner.metadata()
    }

    /// True once the lease is lost (checked against its deadline at each read).
    #[napi(getter)]
    pub fn is_lost(&self) -> bool {
        self.inner.is_lost()
    }

    /// Where the lease stands: `'held'`; `'ending'` (a release or done is in flight, or failed
    /// on the way: no longer renewed, lost at its deadline unless a retry succeeds);
    /// `'released'`; `'done'`; or `'lost'`. Checked against its deadline at each read.
    #[napi(
        getter,
        ts_return_type = "'held' | 'ending' | 'released' | 'done' | 'lost'"
    )]
    pub fn status(&self, env: &Env) -> Result<&'static str> {
        status_name(self.inner.status()).map_err(|f| f.into_napi(env))
    }

    /// Why the lease was lost: `'not_renewed'` (no renewal confirmed before its deadline),
    /// `'not_recorded'` (the coordinator no longer records this grant), `'client_closed'` (its
    /// client was closed while holding it) or `'forked'`; `null` unless lost.
    #[napi(
        getter,
        ts_return_type = "'not_renewed' | 'not_recorded' | 'client_closed' | 'forked' | null"
    )]
    pub fn lost_reason(&self, env: &Env) -> Result<Option<&'static str>> {
        lost_reason_name(self.inner.status()).map_err(|f| f.into_napi(env))
    }

    /// Resolves when the lease is lost: not renewed in time, taken over, or its client closed
    /// while holding it. Never resolves for a lease that ends otherwise (released, done, or
    /// collected); a release or done that failed on the way leaves the lease watched, so it
    /// resolves at the lease's deadline unless a retry succeeds first.
    #[napi(getter, ts_return_type = "Promise<void>")]
    pub fn lost<'e>(&mut self, env: &'e Env) -> Result<Object<'e>> {
        if let Some(lost) = &self.lost {
            return lost.get_value(env);
        }
        let promise = lost_promise(env, self.inner.lost_signal())?;
        self.lost = Some(promise.create_ref()?);
        Ok(promise)
    }

    /// Extends the lease by its ttl now (the keepalive does this on its own), merging
    /// `metadata` into the key's metadata. Fails with `ACCORD_LEASE_LOST` once lost; a shared
    /// lease rejects `metadata` with `ACCORD_INVALID_ARGUMENT`.
    #[napi(
        ts_args_type = "metadata?: Record<string, unknown> | null",
        ts_return_type = "Promise<void>"
    )]
    pub fn renew<'e>(&self, env: &'e Env, metadata: Option<Unknown>) -> Result<PromiseRaw<'e, ()>> {
        let metadata = match metadata {
            Some(m) => opt_metadata(env, "metadata", &m),
            None => Ok(None),
        };
        let lease = self.inner.clone();
        settle_ok(env, async move {
            match metadata? {
                Some(m) => lease.renew_with_metadata(m).await?,
                None => lease.renew().await?,
            }
            Ok(())
        })
    }

    /// Releases the key and wakes its waiters. Releasing again, or after `done`, is harmless;
    /// after the lease was lost this fails with `ACCORD_LEASE_LOST`. A release that fails on
    /// the way (`ACCORD_CONNECTION`) leaves the lease `'ending'`: retry it, or `lost` resolves
    /// at the lease's deadline.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn release<'e>(&self, env: &'e Env) -> Result<PromiseRaw<'e, ()>> {
        let lease = self.inner.clone();
        settle_ok(env, async move { Ok(lease.release().await?) })
    }

    /// Marks the key done (never granted again until `client.reset(key)`), merging `metadata`
    /// into its metadata, and releases it. Done twice, or after losing the lease, fails with
    /// `ACCORD_LEASE_LOST`; a shared lease cannot, `ACCORD_INVALID_ARGUMENT`.
    #[napi(
        ts_args_type = "metadata?: Record<string, unknown> | null",
        ts_return_type = "Promise<void>"
    )]
    pub fn done<'e>(&self, env: &'e Env, metadata: Option<Unknown>) -> Result<PromiseRaw<'e, ()>> {
        let metadata = match metadata {
            Some(m) => opt_metadata(env, "metadata", &m),
            None => Ok(None),
        };
        let lease = self.inner.clone();
        settle_ok(env, async move { Ok(lease.done(metadata?).await?) })
    }

    /// The statement `fenced` runs (`accord.check_fence`), for a driver of your own: its text
    /// (`$1`, `$2`, …) and parameters as strings. `ACCORD_LEASE_LOST` when the lease is already
    /// not held here; `ACCORD_UNSUPPORTED` on the embedded store.
    #[napi]
    pub fn fence_check_sql(&self, env: &Env) -> Result<SqlCall> {
        self.inner
            .fenced_call()
            .map(sql_call)
            .map_err(|e| Failure::from(e).into_napi(env))
    }

    /// The statement `doneIn` runs (`accord.done`, merging `metadata`; it answers the key's
    /// metadata as JSON text), for a driver of your own; then call `doneSent()`.
    #[napi(ts_args_type = "metadata?: Record<string, unknown> | null")]
    pub fn done_sql(&self, env: &Env, metadata: Option<Unknown>) -> Result<SqlCall> {
        let call = (|| -> Outcome<accord::SqlCall> {
            let metadata = match metadata {
                Some(m) => opt_metadata(env, "metadata", &m)?,
                None => None,
            };
            Ok(self.inner.done_in_call(metadata.as_ref())?)
        })();
        call.map(sql_call).map_err(|f| f.into_napi(env))
    }

    /// Says that `doneSql()`'s statement ran in the application's transaction: the lease
    /// settles as done at once after the commit, and is renewed as before after a rollback.
    #[napi]
    pub fn done_sent(&self) {
        self.inner.done_in_sent();
    }

    /// Checks this lease in the application's transaction, before its writes: `client` is
    /// node-postgres's `Client` or `PoolClient` inside `BEGIN`. Once it resolves, every write of
    /// that transaction commits before any later grant of the key, even if the lease expires
    /// before the commit. Rejects with `ACCORD_LEASE_LOST` when the lease is not the key's live
    /// grant (or already lost here): roll back. The key's row is held until the transaction
    /// ends (the lease's own renewal waits for it): keep such transactions well inside the ttl.
    #[napi(
        ts_args_type = "client: { query(config: { text: string; values: Array<string | null>; rowMode: 'array' }): Promise<unknown> }",
        ts_return_type = "Promise<void>"
    )]
    pub fn fenced<'e>(&self, env: &'e Env, client: Unknown<'e>) -> Result<Unknown<'e>> {
        let call = self.inner.fenced_call().map_err(Failure::from);
        fenced::run(
            env,
            client,
            "check_fence",
            call,
            |env, _| js_undefined(env),
            None,
        )
    }

    /// Marks the key done in the application's transaction (`client` as `fenced`'s), merging
    /// `metadata`; resolves to the key's metadata. The done commits with the transaction's
    /// writes or not at all: after `COMMIT` the lease ends as `'done'` (not lost), after
    /// `ROLLBACK` it is still held and renewed.
    #[napi(
        ts_args_type = "client: { query(config: { text: string; values: Array<string | null>; rowMode: 'array' }): Promise<unknown> }, metadata?: Record<string, unknown> | null",
        ts_return_type = "Promise<Record<string, unknown>>"
    )]
    pub fn done_in<'e>(
        &self,
        env: &'e Env,
        client: Unknown<'e>,
        metadata: Option<Unknown>,
    ) -> Result<Unknown<'e>> {
        let call = (|| -> Outcome<accord::SqlCall> {
            let metadata = match metadata {
                Some(m) => opt_metadata(env, "metadata", &m)?,
                None => None,
            };
            Ok(self.inner.done_in_call(metadata.as_ref())?)
        })();
        let lease = call.is_ok().then(|| self.inner.clone());
        fenced::run(env, client, "done", call, fenced::merged_metadata, lease)
    }

    /// `await using lease = await client.acquire(key)` releases the lease at the end of the
    /// block (the same as `release()`).
    #[napi(well_known_symbol = "asyncDispose", ts_return_type = "Promise<void>")]
    pub fn dispose<'e>(&self, env: &'e Env) -> Result<PromiseRaw<'e, ()>> {
        self.release(env)
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}
