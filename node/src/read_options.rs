//! The options of an observer's or a member watch's `next({ timeout, signal })`: a bound on one
//! read. The core keeps a read that a bound ended half-way (`accord::Observer::next` and
//! `accord::MemberWatch::next` are cancel-safe), so the next call goes on with it and no change
//! is lost; `Promise.race` against a timer would lose it instead (the abandoned promise still
//! receives the change).

use std::future::Future;
use std::time::Duration;

use napi::bindgen_prelude::*;
use napi_derive::napi;
use tokio_util::sync::CancellationToken;

use crate::client::AbortWatch;
use crate::convert::{opt_millis, opt_options, property};
use crate::error::{Failure, Outcome};

/// The properties of `NextOptions`: any other is refused, naming it.
const NEXT_OPTIONS: &[&str] = &["timeout", "signal"];

/// Options of `next()` on an observer or a member watch. Durations are in milliseconds.
#[napi(object, object_to_js = false, object_from_js = false)]
#[allow(dead_code)] // declares the TypeScript interface; read field by field for clear errors
pub struct NextOptions {
    /// Reject with `ACCORD_TIMEOUT` when nothing changed within this long (default: wait).
    /// The read under way is kept: the next call goes on with it, and no change is lost.
    pub timeout: Option<f64>,
    /// Aborting it rejects the pending `next()` with `ACCORD_CANCELLED`; as with `timeout`,
    /// no change is lost.
    #[napi(ts_type = "AbortSignal")]
    pub signal: Option<()>,
}

/// What bounds one read (its timeout, the abort signal's token), inside its future.
pub(crate) struct Limit {
    timeout: Option<Duration>,
    cancel: Option<CancellationToken>,
}

impl Limit {
    /// Reads `options` (`undefined` / `null`: no bound; what `for await` passes) into the
    /// bound the read's future takes and the abort signal's watch, which stays with the caller
    /// to stop once the read settled. Bad options give the error in place of the bound, and
    /// no watch.
    pub(crate) fn parse(
        env: &Env,
        what: &str,
        options: Option<Unknown>,
    ) -> (Outcome<Limit>, Option<AbortWatch>) {
        type Parts = (Option<Duration>, Option<(AbortWatch, CancellationToken)>);
        let parsed = (|| -> Outcome<Parts> {
            let Some(o) = opt_options("options", options, NEXT_OPTIONS)? else {
                return Ok((None, None));
            };
            let timeout = opt_millis("options.timeout", &property(&o, "timeout")?, true)?;
            Ok((timeout, AbortWatch::from_options(env, what, &o)?))
        })();
        match parsed {
            Ok((timeout, abort)) => {
                let (watch, cancel) = abort.unzip();
                (Ok(Limit { timeout, cancel }), watch)
            }
            Err(e) => (Err(e), None),
        }
    }

    /// Runs `read` within the bound: `ACCORD_TIMEOUT` or `ACCORD_CANCELLED` naming `what`
    /// (say, `a leader change`) when the bound ends it first.
    pub(crate) async fn run<T>(
        self,
        what: &str,
        read: impl Future<Output = Outcome<T>>,
    ) -> Outcome<T> {
        let cancelled = async {
            match &self.cancel {
                Some(token) => token.cancelled().await,
                None => std::future::pending().await,
            }
        };
        let expired = async {
            match self.timeout {
                Some(t) => tokio::time::sleep(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            outcome = read => outcome,
            _ = cancelled => Err(accord::Error::cancelled(&format!("the wait for {what}")).into()),
            _ = expired => Err(Failure::from(accord::Error::new(
                accord::ErrorKind::Timeout,
                format!(
                    "no {what} within {} ms",
                    self.timeout.unwrap_or_default().as_millis()
                ),
            ))),
        }
    }
}
