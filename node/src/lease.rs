//! `Lease`: a held key, with its `lost` Promise and `Symbol.asyncDispose`.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use napi::bindgen_prelude::*;
use napi_derive::napi;
use tokio_util::sync::CancellationToken;

use crate::convert::{millis, opt_metadata, settle_ok};

/// A key held by this client, renewed in the background until it is released, done or lost.
///
/// Use it with `await using` (it releases on dispose), or call `release()` / `done()`. Watch
/// `lost`: once it resolves, stop writing with this lease's fence.
///
/// A lease does not keep the Node process alive by itself (a process that ends while holding
/// one leaves it to expire at its ttl). Waiting on `lost` does, until the lease is released,
/// done or lost.
#[napi(custom_finalize)]
pub struct Lease {
    inner: Arc<accord::Lease>,
    /// Cancelled once the lease is no longer held by choice (released, done, collected): ends
    /// the task that waits for the lost signal, which holds the reference on the event loop.
    finished: CancellationToken,
    /// The `lost` Promise, made at its first read.
    lost: Option<ObjectRef<false>>,
}

impl Lease {
    /// Wraps a lease the core granted. Runs on the JavaScript thread.
    pub(crate) fn adopt(lease: accord::Lease) -> Lease {
        Lease {
            inner: Arc::new(lease),
            finished: CancellationToken::new(),
            lost: None,
        }
    }
}

/// A Promise that resolves when `signal` fires. Until then, or until `finished`, the wait is
/// pending on the bridge, which keeps the event loop alive while someone may be waiting for the
/// loss of a held lease; nothing keeps it alive afterwards.
fn lost_promise<'e>(
    env: &'e Env,
    signal: accord::LostSignal,
    finished: CancellationToken,
) -> Result<Object<'e>> {
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
            tokio::select! {
                biased;
                _ = signal.wait() => Some(()),
                _ = finished.cancelled() => None,
            }
        },
        // Never resolved once finished: the reference to `resolve` is simply dropped.
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
        self.finished.cancel();
        if let Some(lost) = self.lost.take() {
            lost.unref(&env)?;
        }
        // Dropping the last handle of a held lease releases it in the background (core).
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

    /// Resolves when the lease is lost: not renewed in time, taken over, or its client closed
    /// while holding it. Never resolves for a lease released or done normally.
    #[napi(getter, ts_return_type = "Promise<void>")]
    pub fn lost<'e>(&mut self, env: &'e Env) -> Result<Object<'e>> {
        if let Some(lost) = &self.lost {
            return lost.get_value(env);
        }
        let promise = lost_promise(env, self.inner.lost_signal(), self.finished.clone())?;
        self.lost = Some(promise.create_ref()?);
        Ok(promise)
    }

    /// Extends the lease by its ttl now (the keepalive does this on its own), merging
    /// `metadata` into the key's metadata. Fails with `ACCORD_LEASE_LOST` once lost.
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
    /// after the lease was lost this fails with `ACCORD_LEASE_LOST`.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn release<'e>(&self, env: &'e Env) -> Result<PromiseRaw<'e, ()>> {
        let lease = self.inner.clone();
        let finished = self.finished.clone();
        settle_ok(env, async move {
            let released = lease.release().await;
            // Released or not, the core no longer renews it.
            finished.cancel();
            Ok(released?)
        })
    }

    /// Marks the key done (never granted again until `client.reset(key)`), merging `metadata`
    /// into its metadata, and releases it. Done twice, or after losing the lease, fails with
    /// `ACCORD_LEASE_LOST`.
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
        let finished = self.finished.clone();
        settle_ok(env, async move {
            lease.done(metadata?).await?;
            finished.cancel();
            Ok(())
        })
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
