//! `Semaphore`: at most `limit` holders of a name at once, each with an ordinary `Lease`.

use napi::bindgen_prelude::*;
use napi_derive::napi;

use crate::client::{common_acquire_options, AbortWatch};
use crate::convert::{opt_millis, opt_options, property, settle, settle_map};
use crate::error::Outcome;
use crate::lease::Lease;

/// A semaphore opened by `client.semaphore(name, limit)`: each holder holds one of `limit`
/// permits as an ordinary `Lease` (its key is the permit, fenced, renewed and lost like any
/// other). Release the lease, or mark it done, to give the permit back.
///
/// A handle opened with a smaller limit than others of the same name never takes a permit at
/// or above its own limit. Holds no resources of its own: nothing to close.
#[napi]
pub struct Semaphore {
    inner: accord::Semaphore,
}

impl Semaphore {
    pub(crate) fn new(inner: accord::Semaphore) -> Self {
        Semaphore { inner }
    }
}

#[napi]
impl Semaphore {
    /// The semaphore's name.
    #[napi(getter)]
    pub fn name(&self) -> String {
        self.inner.name().to_string()
    }

    /// The number of permits this handle takes from.
    #[napi(getter)]
    pub fn limit(&self) -> u32 {
        // At most accord::limits::MAX_PERMITS, checked when it was opened.
        self.inner.limit() as u32
    }

    /// Waits for a permit, then resolves with its lease. Rejects with `ACCORD_TIMEOUT` after
    /// `timeout` ms, `ACCORD_CANCELLED` when `signal` aborts, `ACCORD_CLOSED` when the client
    /// closes; then nothing is left held.
    #[napi(
        ts_args_type = "options?: Omit<AcquireOptions, 'shared'> | null",
        ts_return_type = "Promise<Lease>"
    )]
    pub fn acquire<'e>(
        &self,
        env: &'e Env,
        options: Option<Unknown>,
    ) -> Result<PromiseRaw<'e, Lease>> {
        let mut watch = None;
        let name = self.inner.name().to_string();
        let parsed = (|| -> Outcome<_> {
            let mut parsed = accord::AcquireOptions::new();
            // The client's options but `shared`: a permit is exclusive.
            if let Some(o) = opt_options(
                "options",
                options,
                &["ttl", "timeout", "metadata", "signal"],
            )? {
                parsed = common_acquire_options(env, &o, parsed)?;
                if let Some(t) = opt_millis("options.timeout", &property(&o, "timeout")?, true)? {
                    parsed = parsed.timeout(t);
                }
                if let Some((w, token)) =
                    AbortWatch::from_options(env, &format!("acquire of semaphore {name:?}"), &o)?
                {
                    watch = Some(w);
                    parsed = parsed.cancel(token);
                }
            }
            Ok(parsed)
        })();
        let semaphore = self.inner.clone();
        settle(
            env,
            async move { Ok(semaphore.acquire(parsed?).await?) },
            move |env, outcome| {
                if let Some(watch) = watch {
                    watch.stop(env);
                }
                Ok(Lease::adopt(outcome?))
            },
        )
    }

    /// Tries once: resolves with a permit's lease if one is free, `null` if all are held.
    #[napi(
        ts_args_type = "options?: Omit<TryAcquireOptions, 'shared'> | null",
        ts_return_type = "Promise<Lease | null>"
    )]
    pub fn try_acquire<'e>(
        &self,
        env: &'e Env,
        options: Option<Unknown>,
    ) -> Result<PromiseRaw<'e, Option<Lease>>> {
        let parsed = (|| -> Outcome<_> {
            let mut parsed = accord::AcquireOptions::new();
            if let Some(o) = opt_options("options", options, &["ttl", "metadata"])? {
                parsed = common_acquire_options(env, &o, parsed)?;
            }
            Ok(parsed)
        })();
        let semaphore = self.inner.clone();
        settle_map(
            env,
            async move { Ok(semaphore.try_acquire(parsed?).await?) },
            |_, lease| Ok(lease.map(Lease::adopt)),
        )
    }
}
