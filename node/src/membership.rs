//! `Member` and `MemberWatch`: membership of a group (`client.join`, `client.members`,
//! `client.watch`). The rules are the core's (`accord::Member`, `accord::MemberWatch`); this
//! file converts values and maps the watch onto an async iterator.

use std::sync::Arc;

use napi::bindgen_prelude::*;
use napi_derive::napi;
use tokio_util::sync::CancellationToken;

use crate::convert::{opt_metadata, settle_ok};
use crate::error::{Failure, Outcome};
use crate::lease::{lost_promise, lost_reason_name, status_name};
use crate::read_options::Limit;
use crate::subscription::Step;

/// Options of `client.join()`.
#[napi(object, object_to_js = false, object_from_js = false)]
#[allow(dead_code)] // declares the TypeScript interface; read field by field for clear errors
pub struct JoinOptions {
    /// What other members see of this one (`members()`, watch events); replaced whole by
    /// `member.updateMetadata()`.
    #[napi(ts_type = "Record<string, unknown>")]
    pub metadata: Option<()>,
    /// The member lease's ttl in milliseconds (default: the client's): a member whose process
    /// dies leaves the group this long after its last renewal.
    pub ttl: Option<f64>,
}

/// One member of a group, as `client.members()`, `fleet.members()` and watches report it.
#[napi(object, object_from_js = false, use_nullable = true)]
pub struct MemberInfo {
    /// The member's owner (its client's owner).
    pub owner: String,
    /// The member's metadata, as it last set it.
    #[napi(ts_type = "Record<string, unknown>")]
    pub metadata: accord::serde_json::Value,
    /// When it joined, by the coordinator's clock.
    pub since: chrono::DateTime<chrono::Utc>,
    /// The fence of its member lease: a member that left and joined again has a new one.
    pub fence: BigInt,
    /// When its member lease expires unless renewed (the coordinator's clock).
    pub expires_at: Option<chrono::DateTime<chrono::Utc>>,
}

impl From<accord::MemberInfo> for MemberInfo {
    fn from(info: accord::MemberInfo) -> Self {
        MemberInfo {
            owner: info.owner,
            metadata: accord::serde_json::Value::Object(info.metadata),
            since: info.since,
            fence: BigInt::from(info.fence),
            expires_at: info.expires_at,
        }
    }
}

pub(crate) fn member_infos(members: Vec<accord::MemberInfo>) -> Vec<MemberInfo> {
    members.into_iter().map(MemberInfo::from).collect()
}

/// What a watch yields: `type: 'members'` first (the members when the watch started, oldest
/// first), then `'joined'`, `'left'` (a member left: it called `leave`, its client closed, or
/// its lease expired) and `'updated'` (a member replaced its metadata: the member as it is now;
/// updates between two reads of the watch come as one), in the order the watch found them.
#[napi(
    discriminant = "type",
    discriminant_case = "lowercase",
    object_from_js = false
)]
pub enum MemberEvent {
    Members { members: Vec<MemberInfo> },
    Joined { member: MemberInfo },
    Left { member: MemberInfo },
    Updated { member: MemberInfo },
}

impl MemberEvent {
    fn convert(event: accord::MemberEvent) -> Outcome<Self> {
        Ok(match event {
            accord::MemberEvent::Members(members) => MemberEvent::Members {
                members: member_infos(members),
            },
            accord::MemberEvent::Joined(info) => MemberEvent::Joined {
                member: info.into(),
            },
            accord::MemberEvent::Left(info) => MemberEvent::Left {
                member: info.into(),
            },
            accord::MemberEvent::Updated(info) => MemberEvent::Updated {
                member: info.into(),
            },
            other => {
                return Err(accord::Error::internal(format!(
                    "a member event this binding does not know: {other:?}"
                ))
                .into())
            }
        })
    }
}

/// Membership of a group, opened by `client.join(group)`: a lease on the member key, renewed
/// by the client's keepalive. Watchers of the group see it join and leave.
///
/// Use it with `await using` (it leaves on dispose), or call `leave()`. Watch `lost`: once it
/// resolves, this process is no longer a member. A member does not keep the Node process alive
/// by itself; a member collected without `leave()` leaves in the background.
#[napi(custom_finalize)]
pub struct Member {
    /// `None` once left. The lock lets a leave wait for metadata updates in flight.
    inner: Arc<tokio::sync::RwLock<Option<accord::Member>>>,
    group: String,
    key: String,
    owner: String,
    fence: i64,
    signal: accord::LostSignal,
    lost: Option<ObjectRef<false>>,
}

impl Member {
    pub(crate) fn adopt(member: accord::Member) -> Member {
        let lease = member.lease();
        Member {
            group: member.group().to_string(),
            key: lease.key().to_string(),
            owner: lease.owner().to_string(),
            fence: lease.fence(),
            signal: member.lost_signal(),
            inner: Arc::new(tokio::sync::RwLock::new(Some(member))),
            lost: None,
        }
    }
}

impl ObjectFinalize for Member {
    fn finalize(mut self, env: Env) -> Result<()> {
        if let Some(lost) = self.lost.take() {
            lost.unref(&env)?;
        }
        // Dropping the core's member (with the last handle) leaves in the background.
        Ok(())
    }
}

#[napi]
impl Member {
    /// The group joined.
    #[napi(getter)]
    pub fn group(&self) -> String {
        self.group.clone()
    }

    /// The member's owner (the client's owner).
    #[napi(getter)]
    pub fn owner(&self) -> String {
        self.owner.clone()
    }

    /// The key of the member lease (`accord.group/<group>/<owner>`, readable with `list`).
    #[napi(getter)]
    pub fn key(&self) -> String {
        self.key.clone()
    }

    /// The fence of the member lease.
    #[napi(getter)]
    pub fn fence(&self) -> BigInt {
        BigInt::from(self.fence)
    }

    /// The member lease's status, as `lease.status` reads: `'held'` while a member, then
    /// `'released'` after `leave()`, or `'lost'`.
    #[napi(
        getter,
        ts_return_type = "'held' | 'ending' | 'released' | 'done' | 'lost'"
    )]
    pub fn status(&self, env: &Env) -> Result<&'static str> {
        status_name(self.signal.status()).map_err(|f| f.into_napi(env))
    }

    /// True once the membership is lost.
    #[napi(getter)]
    pub fn is_lost(&self) -> bool {
        self.signal.fired()
    }

    /// Why the membership was lost, as `lease.lostReason`; `null` unless lost.
    #[napi(
        getter,
        ts_return_type = "'not_renewed' | 'not_recorded' | 'client_closed' | 'forked' | null"
    )]
    pub fn lost_reason(&self, env: &Env) -> Result<Option<&'static str>> {
        lost_reason_name(self.signal.status()).map_err(|f| f.into_napi(env))
    }

    /// Resolves when the membership is lost (not renewed in time, or the client closed);
    /// never if it ends by `leave()`. Waiting on it keeps the event loop alive until the
    /// membership ends.
    #[napi(getter, ts_return_type = "Promise<void>")]
    pub fn lost<'e>(&mut self, env: &'e Env) -> Result<Object<'e>> {
        if let Some(lost) = &self.lost {
            return lost.get_value(env);
        }
        let promise = lost_promise(env, self.signal.clone())?;
        self.lost = Some(promise.create_ref()?);
        Ok(promise)
    }

    /// Replaces the member's metadata (what `members()` and watchers see), renewing the
    /// member lease. Rejects with `ACCORD_LEASE_LOST` once the membership is lost or left.
    #[napi(
        ts_args_type = "metadata: Record<string, unknown>",
        ts_return_type = "Promise<void>"
    )]
    pub fn update_metadata<'e>(
        &self,
        env: &'e Env,
        metadata: Unknown,
    ) -> Result<PromiseRaw<'e, ()>> {
        let metadata = opt_metadata(env, "metadata", &metadata).and_then(|m| {
            m.ok_or_else(|| Failure::wrong_type("metadata", "an object", ValueType::Undefined))
        });
        let inner = self.inner.clone();
        let group = self.group.clone();
        settle_ok(env, async move {
            let metadata = metadata?;
            let member = inner.read().await;
            match member.as_ref() {
                Some(member) => Ok(member.update_metadata(metadata).await?),
                None => Err(left(&group).into()),
            }
        })
    }

    /// Leaves the group now; watchers see `'left'`. Leaving again is harmless; rejects with
    /// `ACCORD_LEASE_LOST` if the membership was already lost.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn leave<'e>(&self, env: &'e Env) -> Result<PromiseRaw<'e, ()>> {
        let inner = self.inner.clone();
        settle_ok(env, async move {
            let member = inner.write().await.take();
            match member {
                Some(member) => Ok(member.leave().await?),
                None => Ok(()),
            }
        })
    }

    /// `await using member = await client.join(group)` leaves at the end of the block.
    #[napi(well_known_symbol = "asyncDispose", ts_return_type = "Promise<void>")]
    pub fn dispose<'e>(&self, env: &'e Env) -> Result<PromiseRaw<'e, ()>> {
        self.leave(env)
    }
}

/// What a call on a member that left says (the core's member is gone with its leave).
fn left(group: &str) -> accord::Error {
    accord::Error::new(
        accord::ErrorKind::LeaseLost,
        format!("the membership of group {group:?} ended: it left"),
    )
}

/// The members of a group, then every change: `for await (const event of watch)` yields a
/// `'members'` event first, then `'joined'`, `'left'` and `'updated'`. Opened by
/// `client.watch(group)`.
///
/// The watch reads the group when it is asked for its next event (woken by the group's
/// notifications, reconnections and members' expiries), so it keeps the Node process alive only
/// while a `next()` is pending. `close()` it (or leave the `for await` loop) when done.
#[napi]
pub struct MemberWatch {
    inner: Arc<tokio::sync::Mutex<accord::MemberWatch>>,
    /// Cancelled by `close()`: ends a pending `next()` with `done: true`.
    closed: CancellationToken,
}

impl MemberWatch {
    pub(crate) fn adopt(watch: accord::MemberWatch) -> MemberWatch {
        MemberWatch {
            inner: Arc::new(tokio::sync::Mutex::new(watch)),
            closed: CancellationToken::new(),
        }
    }

    fn stop<'e>(&self, env: &'e Env) -> Result<PromiseRaw<'e, Step<MemberEvent>>> {
        self.closed.cancel();
        let inner = self.inner.clone();
        settle_ok(env, async move {
            // A pending next() lets go of the watch once `closed` is cancelled.
            inner.lock().await.close().await;
            Ok(Step::end())
        })
    }
}

#[napi]
impl MemberWatch {
    /// True once `close()` was called.
    #[napi(getter)]
    pub fn closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    /// The next event: `{ done: false, value }`, or `{ done: true }` once the watch is closed.
    /// Rejects with `ACCORD_CLOSED` once the client is closed, `ACCORD_TIMEOUT` after
    /// `options.timeout` ms and `ACCORD_CANCELLED` when `options.signal` aborts; after those
    /// two the next call goes on with the read under way, so no change is lost.
    #[napi(
        ts_args_type = "options?: NextOptions | null",
        ts_return_type = "Promise<IteratorResult<MemberEvent, undefined>>"
    )]
    pub fn next<'e>(
        &self,
        env: &'e Env,
        options: Option<Unknown>,
    ) -> Result<PromiseRaw<'e, Step<MemberEvent>>> {
        let inner = self.inner.clone();
        let closed = self.closed.clone();
        let (limit, abort) = Limit::parse(env, "the member watch's next()", options);
        crate::convert::settle(
            env,
            async move {
                let read = async {
                    if closed.is_cancelled() {
                        return Ok(None);
                    }
                    let mut watch = inner.lock().await;
                    tokio::select! {
                        biased;
                        _ = closed.cancelled() => Ok(None),
                        event = watch.next() => match event {
                            Ok(event) => Ok(Some(event)),
                            // Closed by the user while the read was on its way: the end.
                            Err(_) if closed.is_cancelled() => Ok(None),
                            Err(e) => Err(Failure::from(e)),
                        },
                    }
                };
                limit?.run("membership change", read).await
            },
            move |env, outcome| {
                if let Some(abort) = abort {
                    abort.stop(env);
                }
                match outcome? {
                    Some(event) => Ok(Step::of(MemberEvent::convert(event)?)),
                    None => Ok(Step::end()),
                }
            },
        )
    }

    /// Closes the watch (what leaving a `for await` loop calls).
    #[napi(
        js_name = "return",
        ts_return_type = "Promise<IteratorReturnResult<undefined>>"
    )]
    pub fn return_<'e>(&self, env: &'e Env) -> Result<PromiseRaw<'e, Step<MemberEvent>>> {
        self.stop(env)
    }

    /// Stops the watch: a pending `next()` resolves with `done: true`. Idempotent.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn close<'e>(&self, env: &'e Env) -> Result<PromiseRaw<'e, ()>> {
        self.closed.cancel();
        let inner = self.inner.clone();
        settle_ok(env, async move {
            inner.lock().await.close().await;
            Ok(())
        })
    }

    #[napi(well_known_symbol = "asyncIterator", ts_return_type = "this")]
    pub fn iterator<'e>(&self, this: This<'e>) -> This<'e> {
        this
    }

    /// `await using watch = await client.watch(group)` closes it at the end of the block.
    #[napi(well_known_symbol = "asyncDispose", ts_return_type = "Promise<void>")]
    pub fn dispose<'e>(&self, env: &'e Env) -> Result<PromiseRaw<'e, ()>> {
        self.close(env)
    }
}
