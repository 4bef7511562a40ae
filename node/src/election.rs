//! `Election`, `Leadership` and `Observer`: leader election (`client.election`). The rules are
//! the core's (`accord::Election`: campaigners wait in the key's line, the value lives in the
//! key's metadata, observers re-read on announcements); this file converts values, keeps the
//! leadership's facts readable after it ended, and maps the observer onto an async iterator.

use std::sync::{Arc, Mutex, PoisonError};

use napi::bindgen_prelude::*;
use napi_derive::napi;
use tokio_util::sync::CancellationToken;

use crate::client::AbortWatch;
use crate::convert::{
    opt_millis, opt_options, opt_ttl, property, settle, settle_map, settle_ok, string,
};
use crate::error::{Failure, Outcome};
use crate::lease::{lost_promise, lost_reason_name, status_name};
use crate::read_options::Limit;
use crate::subscription::Step;

/// The properties of `CampaignOptions`: any other is refused, naming it.
const CAMPAIGN_OPTIONS: &[&str] = &["ttl", "timeout", "signal"];

/// Options of `election.campaign()`. Durations are in milliseconds.
#[napi(object, object_to_js = false, object_from_js = false)]
#[allow(dead_code)] // declares the TypeScript interface; read field by field for clear errors
pub struct CampaignOptions {
    /// The leadership lease's ttl (default: the client's): a leader whose process dies is
    /// replaced this long after its last renewal.
    pub ttl: Option<f64>,
    /// Give up waiting to lead after this long with `ACCORD_TIMEOUT` (default: wait until
    /// leading).
    pub timeout: Option<f64>,
    /// Aborting it ends a waiting campaign with `ACCORD_CANCELLED`, giving up its place in
    /// line.
    #[napi(ts_type = "AbortSignal")]
    pub signal: Option<()>,
}

/// The leader of an election as the coordinator records it (`election.leader()`, observers).
#[napi(object, object_from_js = false)]
pub struct Leader {
    /// The leading client's owner.
    pub owner: String,
    /// The value it campaigned with or last proclaimed.
    pub value: String,
    /// The leadership's fence: larger for every new leader, the same after a proclaim.
    pub fence: BigInt,
    /// When this leadership began, by the coordinator's clock.
    pub since: chrono::DateTime<chrono::Utc>,
    /// When the leadership expires unless renewed (the coordinator's clock).
    pub expires_at: chrono::DateTime<chrono::Utc>,
}

impl From<accord::Leader> for Leader {
    fn from(leader: accord::Leader) -> Self {
        Leader {
            owner: leader.owner,
            value: leader.value,
            fence: BigInt::from(leader.fence),
            since: leader.since,
            expires_at: leader.expires_at,
        }
    }
}

/// An election, opened by `client.election(name)`: `campaign()` to lead it, `leader()` to read
/// its leader, `observe()` to follow its leaders. Holds no resources of its own: nothing to
/// close.
#[napi]
pub struct Election {
    inner: accord::Election,
}

impl Election {
    pub(crate) fn new(inner: accord::Election) -> Election {
        Election { inner }
    }
}

#[napi]
impl Election {
    /// The election's name.
    #[napi(getter)]
    pub fn name(&self) -> String {
        self.inner.name().to_string()
    }

    /// Waits in line to lead (campaigners are granted in arrival order), then leads with
    /// `value`, which observers see. Rejects with `ACCORD_TIMEOUT` after `timeout` ms,
    /// `ACCORD_CANCELLED` when `signal` aborts, `ACCORD_CLOSED` when the client closes; then
    /// nothing is held and the place in line is given up.
    #[napi(
        ts_args_type = "value: string, options?: CampaignOptions | null",
        ts_return_type = "Promise<Leadership>"
    )]
    pub fn campaign<'e>(
        &self,
        env: &'e Env,
        value: Unknown,
        options: Option<Unknown>,
    ) -> Result<PromiseRaw<'e, Leadership>> {
        let mut watch = None;
        let name = self.inner.name().to_string();
        let parsed = (|| -> Outcome<_> {
            let value = string("value", &value)?;
            let mut parsed = accord::CampaignOptions::new();
            if let Some(o) = opt_options("options", options, CAMPAIGN_OPTIONS)? {
                if let Some(ttl) = opt_ttl("options.ttl", &property(&o, "ttl")?)? {
                    parsed = parsed.ttl(ttl);
                }
                if let Some(t) = opt_millis("options.timeout", &property(&o, "timeout")?, true)? {
                    parsed = parsed.timeout(t);
                }
                if let Some((w, token)) =
                    AbortWatch::from_options(env, &format!("campaign in election {name:?}"), &o)?
                {
                    watch = Some(w);
                    parsed = parsed.cancel(token);
                }
            }
            Ok((value, parsed))
        })();
        let election = self.inner.clone();
        settle(
            env,
            async move {
                let (value, options) = parsed?;
                Ok(election.campaign(&value, options).await?)
            },
            move |env, outcome| {
                if let Some(watch) = watch {
                    watch.stop(env);
                }
                Ok(Leadership::adopt(outcome?))
            },
        )
    }

    /// The current leader, or `null` when nobody leads (one read).
    #[napi(ts_return_type = "Promise<Leader | null>")]
    pub fn leader<'e>(&self, env: &'e Env) -> Result<PromiseRaw<'e, Option<Leader>>> {
        let election = self.inner.clone();
        settle_ok(env, async move {
            Ok(election.leader().await?.map(Leader::from))
        })
    }

    /// Follows the election: iterate the observer with `for await` for the current leader
    /// (`null` when nobody leads), then every new leader, every proclaimed value and every
    /// vacancy (`null`), each once, in order. Resolves once listening, so no change made after
    /// it resolves is missed.
    #[napi(ts_return_type = "Promise<Observer>")]
    pub fn observe<'e>(&self, env: &'e Env) -> Result<PromiseRaw<'e, Observer>> {
        let election = self.inner.clone();
        settle_map(
            env,
            async move { Ok(election.observe().await?) },
            |_, observer| Ok(Observer::adopt(observer)),
        )
    }
}

/// This client leads an election, won by `election.campaign(value)`: a lease on the election's
/// key (`accord.election/<name>`), renewed by the client's keepalive. Pass `fence` to what the
/// leader writes, so that a deposed leader's late writes are refused.
///
/// Use it with `await using` (it resigns on dispose), or call `resign()`. Watch `lost`: once it
/// resolves, this process no longer leads. A leadership does not keep the Node process alive by
/// itself; one collected without `resign()` resigns in the background.
#[napi(custom_finalize)]
pub struct Leadership {
    /// `None` once resigned. The lock lets a resign wait for proclaims in flight.
    inner: Arc<tokio::sync::RwLock<Option<accord::Leadership>>>,
    election: String,
    key: String,
    owner: String,
    fence: i64,
    /// The value as last confirmed, readable without the lock (and after the resign).
    value: Arc<Mutex<String>>,
    signal: accord::LostSignal,
    lost: Option<ObjectRef<false>>,
}

impl Leadership {
    fn adopt(leadership: accord::Leadership) -> Leadership {
        let lease = leadership.lease();
        Leadership {
            election: leadership.election().name().to_string(),
            key: lease.key().to_string(),
            owner: lease.owner().to_string(),
            fence: leadership.fence(),
            value: Arc::new(Mutex::new(leadership.value())),
            signal: leadership.lost_signal(),
            inner: Arc::new(tokio::sync::RwLock::new(Some(leadership))),
            lost: None,
        }
    }
}

impl ObjectFinalize for Leadership {
    fn finalize(mut self, env: Env) -> Result<()> {
        if let Some(lost) = self.lost.take() {
            lost.unref(&env)?;
        }
        // Dropping the core's leadership (with the last handle) resigns in the background.
        Ok(())
    }
}

#[napi]
impl Leadership {
    /// The election led.
    #[napi(getter)]
    pub fn election(&self) -> String {
        self.election.clone()
    }

    /// The key of the leadership lease (`accord.election/<name>`, readable with `list`).
    #[napi(getter)]
    pub fn key(&self) -> String {
        self.key.clone()
    }

    /// The leader's owner (the client's owner).
    #[napi(getter)]
    pub fn owner(&self) -> String {
        self.owner.clone()
    }

    /// The leadership's fence: larger than every earlier leader's; a proclaim keeps it.
    #[napi(getter)]
    pub fn fence(&self) -> BigInt {
        BigInt::from(self.fence)
    }

    /// The value observers see: the campaign's, or the last one proclaimed.
    #[napi(getter)]
    pub fn value(&self) -> String {
        self.value
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The leadership lease's status, as `lease.status` reads: `'held'` while leading, then
    /// `'released'` after `resign()`, or `'lost'`.
    #[napi(
        getter,
        ts_return_type = "'held' | 'ending' | 'released' | 'done' | 'lost'"
    )]
    pub fn status(&self, env: &Env) -> Result<&'static str> {
        status_name(self.signal.status()).map_err(|f| f.into_napi(env))
    }

    /// True once the leadership is lost.
    #[napi(getter)]
    pub fn is_lost(&self) -> bool {
        self.signal.fired()
    }

    /// Why the leadership was lost, as `lease.lostReason`; `null` unless lost.
    #[napi(
        getter,
        ts_return_type = "'not_renewed' | 'not_recorded' | 'client_closed' | 'forked' | null"
    )]
    pub fn lost_reason(&self, env: &Env) -> Result<Option<&'static str>> {
        lost_reason_name(self.signal.status()).map_err(|f| f.into_napi(env))
    }

    /// Resolves when the leadership is lost (not renewed in time, or the client closed);
    /// never if it ends by `resign()`. Waiting on it keeps the event loop alive until the
    /// leadership ends.
    #[napi(getter, ts_return_type = "Promise<void>")]
    pub fn lost<'e>(&mut self, env: &'e Env) -> Result<Object<'e>> {
        if let Some(lost) = &self.lost {
            return lost.get_value(env);
        }
        let promise = lost_promise(env, self.signal.clone())?;
        self.lost = Some(promise.create_ref()?);
        Ok(promise)
    }

    /// Changes the value observers see, without a new election (the fence stays). Rejects
    /// with `ACCORD_LEASE_LOST` once the leadership is lost or resigned.
    #[napi(ts_args_type = "value: string", ts_return_type = "Promise<void>")]
    pub fn proclaim<'e>(&self, env: &'e Env, value: Unknown) -> Result<PromiseRaw<'e, ()>> {
        let value = string("value", &value);
        let inner = self.inner.clone();
        let shown = self.value.clone();
        let election = self.election.clone();
        settle_ok(env, async move {
            let value = value?;
            let leadership = inner.read().await;
            match leadership.as_ref() {
                Some(leadership) => {
                    leadership.proclaim(&value).await?;
                    *shown.lock().unwrap_or_else(PoisonError::into_inner) = leadership.value();
                    Ok(())
                }
                None => Err(resigned(&election).into()),
            }
        })
    }

    /// Stops leading: the next campaigner in line leads, and observers see it. Resigning again
    /// is harmless; rejects with `ACCORD_LEASE_LOST` if the leadership was already lost.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn resign<'e>(&self, env: &'e Env) -> Result<PromiseRaw<'e, ()>> {
        let inner = self.inner.clone();
        settle_ok(env, async move {
            let leadership = inner.write().await.take();
            match leadership {
                Some(leadership) => Ok(leadership.resign().await?),
                None => Ok(()),
            }
        })
    }

    /// `await using leadership = await election.campaign(value)` resigns at the end of the
    /// block.
    #[napi(well_known_symbol = "asyncDispose", ts_return_type = "Promise<void>")]
    pub fn dispose<'e>(&self, env: &'e Env) -> Result<PromiseRaw<'e, ()>> {
        self.resign(env)
    }
}

/// What a call on a leadership that resigned says (the core's leadership is gone with it).
fn resigned(election: &str) -> accord::Error {
    accord::Error::new(
        accord::ErrorKind::LeaseLost,
        format!("the leadership of election {election:?} ended: it resigned"),
    )
}

/// An election's leaders: `for await (const leader of observer)` yields the current leader
/// (`null` when nobody leads), then every new leader, every proclaimed value and every vacancy
/// (`null`: the leader resigned or expired and nobody leads yet), each once, fences never
/// decreasing. Opened by `election.observe()`.
///
/// The observer reads the election when it is asked for its next leader (woken by the
/// election's announcements, reconnections and the leader's expiry), so it keeps the Node
/// process alive only while a `next()` is pending. `close()` it (or leave the `for await`
/// loop) when done.
#[napi]
pub struct Observer {
    inner: Arc<tokio::sync::Mutex<accord::Observer>>,
    /// Cancelled by `close()`: ends a pending `next()` with `done: true`.
    closed: CancellationToken,
}

impl Observer {
    fn adopt(observer: accord::Observer) -> Observer {
        Observer {
            inner: Arc::new(tokio::sync::Mutex::new(observer)),
            closed: CancellationToken::new(),
        }
    }

    /// Closes the core's observer; a pending `next()` lets go of it once `closed` is
    /// cancelled.
    async fn shut(inner: Arc<tokio::sync::Mutex<accord::Observer>>) {
        inner.lock().await.close().await;
    }
}

#[napi]
impl Observer {
    /// True once `close()` was called.
    #[napi(getter)]
    pub fn closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    /// The next change of leadership: `{ done: false, value }` with the leader, or with `null`
    /// when nobody leads (a vacancy); `{ done: true }` once the observer is closed. Rejects
    /// with `ACCORD_CLOSED` once the client is closed, `ACCORD_TIMEOUT` after
    /// `options.timeout` ms and `ACCORD_CANCELLED` when `options.signal` aborts; after those
    /// two the next call goes on with the read under way, so no change is lost.
    #[napi(
        ts_args_type = "options?: NextOptions | null",
        ts_return_type = "Promise<IteratorResult<Leader | null, undefined>>"
    )]
    pub fn next<'e>(
        &self,
        env: &'e Env,
        options: Option<Unknown>,
    ) -> Result<PromiseRaw<'e, Step<Option<Leader>>>> {
        let inner = self.inner.clone();
        let closed = self.closed.clone();
        let (limit, watch) = Limit::parse(env, "the observer's next()", options);
        settle(
            env,
            async move {
                let read = async {
                    if closed.is_cancelled() {
                        return Ok(None);
                    }
                    let mut observer = inner.lock().await;
                    tokio::select! {
                        biased;
                        _ = closed.cancelled() => Ok(None),
                        leader = observer.next() => match leader {
                            Ok(leader) => Ok(Some(leader)),
                            // Closed by the user while the read was on its way: the end.
                            Err(_) if closed.is_cancelled() => Ok(None),
                            Err(e) => Err(Failure::from(e)),
                        },
                    }
                };
                limit?.run("leader change", read).await
            },
            move |env, outcome| {
                if let Some(watch) = watch {
                    watch.stop(env);
                }
                match outcome? {
                    Some(leader) => Ok(Step::of(leader.map(Leader::from))),
                    None => Ok(Step::end()),
                }
            },
        )
    }

    /// Closes the observer (what leaving a `for await` loop calls).
    #[napi(
        js_name = "return",
        ts_return_type = "Promise<IteratorReturnResult<undefined>>"
    )]
    pub fn return_<'e>(&self, env: &'e Env) -> Result<PromiseRaw<'e, Step<Option<Leader>>>> {
        self.closed.cancel();
        let inner = self.inner.clone();
        settle_ok(env, async move {
            Observer::shut(inner).await;
            Ok(Step::end())
        })
    }

    /// Stops following: a pending `next()` resolves with `done: true`. Idempotent.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn close<'e>(&self, env: &'e Env) -> Result<PromiseRaw<'e, ()>> {
        self.closed.cancel();
        let inner = self.inner.clone();
        settle_ok(env, async move {
            Observer::shut(inner).await;
            Ok(())
        })
    }

    #[napi(well_known_symbol = "asyncIterator", ts_return_type = "this")]
    pub fn iterator<'e>(&self, this: This<'e>) -> This<'e> {
        this
    }

    /// `await using observer = await election.observe()` closes it at the end of the block.
    #[napi(well_known_symbol = "asyncDispose", ts_return_type = "Promise<void>")]
    pub fn dispose<'e>(&self, env: &'e Env) -> Result<PromiseRaw<'e, ()>> {
        self.close(env)
    }
}
