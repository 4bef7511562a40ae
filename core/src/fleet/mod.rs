//! Fleets: shards split fairly among the members of a fleet, rebalanced by hand-offs when
//! members come and go. A [`Fleet`] runs in the background of its client:
//!
//! - it is a member of the fleet's membership (an ordinary member lease);
//! - each shard it holds is an ordinary lease (fence, renewal in the client's one keepalive
//!   statement, lost signal), taken from a work pool of the fleet's shards;
//! - once a period it reads the fleet (members and held shards: one statement) and runs the pure
//!   decision of [`balance`]: take free shards up to ceil(shards / members), and below that ask
//!   the most loaded members for a shard each: a request row (`<base>r/<shard>`, held by the
//!   asker while it waits, metadata `{"has": n}`) and an empty notification on the holder's own
//!   channel, which only makes the holder read the requests (any role may send one);
//! - a holder asked for a shard yields `Revoked(shard, Handoff)`, waits for its user to be done
//!   with it (the next call of [`Fleet::next_event`], or the hand-off timeout), and releases it;
//!   the asker, waiting in an acquire of that shard, is woken by the release at once.
//!
//! Key layout (readable with `list`): `accord.fleet/<name>/m/<owner>` for members,
//! `accord.fleet/<name>/s/<shard>` for shards and `accord.fleet/<name>/r/<shard>` for hand-off
//! requests, `<name>` with `%` and `/` percent-encoded, so that one read of
//! `accord.fleet/<name>/` returns them all.

pub(crate) mod balance;
mod task;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::lease::{Lease, LostSignal};
use crate::membership::{self, JoinOptions, Member, MemberInfo};
use crate::metadata::Metadata;
use crate::naming;
use crate::session::{LeaseStatus, Session};
use crate::subscription::Subscription;
use crate::validate::{self, MAX_NAME_BYTES};

pub use crate::validate::{MAX_HANDOFFS_PER_PERIOD, MAX_SHARDS};
/// Shortest period.
pub const MIN_PERIOD: Duration = Duration::from_millis(10);

/// The shards of a fleet: `0`..`n-1`, or named keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Shards {
    /// `n` shards named `"0"` to `"n-1"`.
    Count(usize),
    /// Shards with these names (distinct, non-empty).
    Keys(Vec<String>),
}

/// Options of [`crate::Client::fleet`]. The shards are required.
#[derive(Clone, Debug)]
pub struct FleetOptions {
    pub(crate) shards: Shards,
    pub(crate) ttl: Option<Duration>,
    pub(crate) period: Option<Duration>,
    pub(crate) max_handoffs_per_period: Option<usize>,
    pub(crate) handoff_timeout: Option<Duration>,
    pub(crate) metadata: Option<Metadata>,
}

impl FleetOptions {
    /// `n` shards, named `"0"` to `"n-1"` (1 ..= 10,000).
    pub fn shards(n: usize) -> Self {
        Self::with(Shards::Count(n))
    }

    /// Shards with these names (1 ..= 10,000 distinct, non-empty names).
    pub fn keys<I, S>(keys: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::with(Shards::Keys(keys.into_iter().map(Into::into).collect()))
    }

    fn with(shards: Shards) -> Self {
        FleetOptions {
            shards,
            ttl: None,
            period: None,
            max_handoffs_per_period: None,
            handoff_timeout: None,
            metadata: None,
        }
    }

    /// The ttl of the member and shard leases (default: the client's). A member that dies
    /// loses its shards this long after its last renewal.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// How often the member reads the fleet and rebalances (default: a third of the ttl; at
    /// least 10 ms, at most the ttl).
    pub fn period(mut self, period: Duration) -> Self {
        self.period = Some(period);
        self
    }

    /// The most hand-offs this member asks for in one period, one shard per request
    /// (default: a quarter of the target share, at least 4; 1 ..= 1,000).
    pub fn max_handoffs_per_period(mut self, n: usize) -> Self {
        self.max_handoffs_per_period = Some(n);
        self
    }

    /// How long a holder asked for a shard waits for its user to finish with it before
    /// releasing it anyway; also how long the asker waits for it (default: the ttl).
    pub fn handoff_timeout(mut self, timeout: Duration) -> Self {
        self.handoff_timeout = Some(timeout);
        self
    }

    /// This member's metadata in the fleet's membership.
    pub fn metadata(mut self, metadata: Metadata) -> Self {
        self.metadata = Some(metadata);
        self
    }
}

/// Why a shard was revoked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RevokeReason {
    /// Another member asked for it to balance the fleet; it is released once the user is done.
    Handoff,
    /// Its lease was lost (not renewed in time): someone else may get it after its expiry.
    Lost,
    /// The fleet or its client was closed; it was given back.
    Closed,
}

impl RevokeReason {
    /// The stable name every binding uses: `handoff`, `lost`, `closed`.
    pub fn as_str(self) -> &'static str {
        match self {
            RevokeReason::Handoff => "handoff",
            RevokeReason::Lost => "lost",
            RevokeReason::Closed => "closed",
        }
    }
}

impl fmt::Display for RevokeReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A shard's lease as the fleet's user sees it: its fence (pass it to the resources you
/// write) and its signals. The fleet holds, renews and releases the lease itself.
#[derive(Clone, Debug)]
pub struct ShardLease {
    shard: String,
    key: String,
    fence: i64,
    signal: LostSignal,
}

impl ShardLease {
    /// The shard.
    pub fn shard(&self) -> &str {
        &self.shard
    }
    /// The key of its lease (`accord.fleet/<name>/s/<shard>`).
    pub fn key(&self) -> &str {
        &self.key
    }
    /// The fence of this grant of the shard: larger than every earlier grant's.
    pub fn fence(&self) -> i64 {
        self.fence
    }
    /// The lease's status now.
    pub fn status(&self) -> LeaseStatus {
        self.signal.status()
    }
    /// True once the lease was lost.
    pub fn is_lost(&self) -> bool {
        self.signal.fired()
    }
    /// The lease's lost and ended signals.
    pub fn lost_signal(&self) -> LostSignal {
        self.signal.clone()
    }
}

/// What a [`Fleet`] yields, in order per shard: `Assigned`, then `Revoked`, then perhaps
/// `Assigned` again.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum FleetEvent {
    /// This member now holds `shard`.
    Assigned {
        /// The shard.
        shard: String,
        /// Its lease (fence, signals).
        lease: ShardLease,
    },
    /// This member no longer holds `shard` (for `Handoff`: will not once the user asks for the
    /// next event or the hand-off timeout passes).
    Revoked {
        /// The shard.
        shard: String,
        /// Why.
        reason: RevokeReason,
        /// The fence of the grant revoked.
        fence: i64,
    },
}

/// An event with, for a hand-off, the acknowledgement that lets the holder release.
pub(crate) type Queued = (FleetEvent, Option<oneshot::Sender<()>>);

/// A held shard.
pub(crate) struct Held {
    pub lease: Lease,
}

/// What the fleet handle and its task share.
pub(crate) struct Shared {
    pub name: String,
    /// The shards held now, by name. An entry leaves exactly once, with its `Revoked`.
    pub held: Mutex<BTreeMap<String, Held>>,
    pub events: mpsc::UnboundedSender<Queued>,
    /// Set (under `held`) when the fleet stops: nothing is adopted afterwards.
    pub stopping: Mutex<bool>,
}

impl Shared {
    pub fn held(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Held>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a grant and yields `Assigned`; false (the caller gives it back) when stopping.
    pub fn adopt(&self, shard: String, lease: Lease) -> std::result::Result<(), Lease> {
        let mut held = self.held();
        if *self.stopping.lock().unwrap_or_else(|e| e.into_inner()) {
            return Err(lease);
        }
        let view = ShardLease {
            shard: shard.clone(),
            key: lease.key().to_string(),
            fence: lease.fence(),
            signal: lease.lost_signal(),
        };
        let _ = self.events.send((
            FleetEvent::Assigned {
                shard: shard.clone(),
                lease: view,
            },
            None,
        ));
        held.insert(shard, Held { lease });
        Ok(())
    }

    /// Removes `shard` if its grant is `fence` (any grant for `None`), yielding `Revoked`;
    /// returns its lease.
    pub fn revoke(
        &self,
        shard: &str,
        fence: Option<i64>,
        reason: RevokeReason,
        ack: Option<oneshot::Sender<()>>,
    ) -> Option<Lease> {
        let mut held = self.held();
        match held.get(shard) {
            Some(h) if fence.is_none_or(|f| f == h.lease.fence()) => {}
            _ => return None,
        }
        let Held { lease } = held.remove(shard)?;
        let _ = self.events.send((
            FleetEvent::Revoked {
                shard: shard.to_string(),
                reason,
                fence: lease.fence(),
            },
            ack,
        ));
        Some(lease)
    }
}

/// A member of a fleet, balancing its shards in the background. Open it with
/// [`crate::Client::fleet`]; read what happens with [`Fleet::next_event`]; [`Fleet::close`]
/// hands every shard back. Dropping it closes it in the background.
pub struct Fleet {
    shared: Arc<Shared>,
    session: Arc<Session>,
    members_prefix: String,
    receiver: tokio::sync::Mutex<mpsc::UnboundedReceiver<Queued>>,
    /// The acknowledgement of the hand-off delivered last: sent by the next call.
    delivered: Mutex<Option<oneshot::Sender<()>>>,
    stop: CancellationToken,
    /// Fires once the background task gave everything back.
    finished: CancellationToken,
}

impl fmt::Debug for Fleet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fleet")
            .field("name", &self.shared.name)
            .field("shards", &self.shards())
            .finish_non_exhaustive()
    }
}

/// Where the fleet `name` keeps its rows.
fn fleet_prefix(name: &str) -> String {
    format!("accord.fleet/{}/", naming::escape(name))
}

/// The channel on which members of fleet `base` ask `owner` for shards.
pub(crate) fn handoff_channel(namespace: &str, base: &str, owner: &str) -> String {
    naming::channel_for("accord_fleet", namespace, &[base, owner])
}

impl Fleet {
    pub(crate) async fn open(
        session: &Arc<Session>,
        name: &str,
        options: FleetOptions,
    ) -> Result<Fleet> {
        session.check_usable()?;
        let settings = task::Settings::validate(session, name, options)?;
        let base = fleet_prefix(name);
        let pool = format!("{base}s/");
        let members_prefix = format!("{base}m/");
        let keys: Vec<String> = settings
            .shards
            .iter()
            .map(|s| format!("{pool}{s}"))
            .collect();
        for batch in keys.chunks(validate::MAX_OFFER_KEYS) {
            session.offer(&pool, batch, None).await?;
        }
        // Listen for requests before joining: once members see this one, they may ask it.
        // The membership's channel too: a member that joins, leaves or gives its shards back
        // says so there, and the others rebalance at once instead of at their next period.
        let owner = session.scope.owner.clone();
        let members_channel =
            naming::channel_for("accord_group", &session.scope.namespace, &[&members_prefix]);
        let requests = Subscription::open(
            session,
            vec![handoff_channel(&session.scope.namespace, &base, &owner)],
        )
        .await?;
        let members = Subscription::open(session, vec![members_channel.clone()]).await?;
        let join = JoinOptions {
            metadata: settings.metadata.clone(),
            ttl: Some(settings.ttl),
        };
        let member = Member::join_at(session, name, &members_prefix, members_channel, join).await?;
        let (sender, receiver) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            name: name.to_string(),
            held: Mutex::new(BTreeMap::new()),
            events: sender,
            stopping: Mutex::new(false),
        });
        let stop = CancellationToken::new();
        let finished = CancellationToken::new();
        tokio::spawn(
            task::Task {
                session: session.clone(),
                shared: shared.clone(),
                settings,
                requests_prefix: format!("{base}r/"),
                base,
                pool,
                members_prefix: members_prefix.clone(),
                member: Some(member),
                requests,
                members,
                asking: Default::default(),
                stop: stop.clone(),
                finished: finished.clone(),
                handed_off: Default::default(),
            }
            .run(),
        );
        Ok(Fleet {
            shared,
            session: session.clone(),
            members_prefix,
            receiver: tokio::sync::Mutex::new(receiver),
            delivered: Mutex::new(None),
            stop,
            finished,
        })
    }

    /// The fleet's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The shards this member holds now, in name order.
    pub fn shards(&self) -> Vec<String> {
        self.shared.held().keys().cloned().collect()
    }

    /// The fleet's live members (one read).
    pub async fn members(&self) -> Result<Vec<MemberInfo>> {
        membership::read_members(&self.session, &self.members_prefix).await
    }

    /// The next event; `None` once the fleet is closed and every event was read. Asking for
    /// the next event tells the fleet that the previous one was handled: a shard revoked for a
    /// hand-off is released then (or after the hand-off timeout, whichever comes first), so do
    /// the hand-off's work (a checkpoint) before asking again. Cancel-safe.
    pub async fn next_event(&self) -> Option<FleetEvent> {
        let mut receiver = self.receiver.lock().await;
        if let Some(ack) = self
            .delivered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            let _ = ack.send(());
        }
        let (event, ack) = tokio::select! {
            biased;
            queued = receiver.recv() => queued?,
            _ = self.finished.cancelled() => receiver.try_recv().ok()?,
        };
        *self.delivered.lock().unwrap_or_else(|e| e.into_inner()) = ack;
        Some(event)
    }

    /// Hands every shard back (each yields `Revoked(Closed)`, then is released, waking the
    /// members waiting for it), leaves the membership and stops. Idempotent.
    pub async fn close(&self) {
        self.stop.cancel();
        self.finished.cancelled().await;
    }

    /// True once the fleet stopped (closed, or its client closed).
    pub fn is_closed(&self) -> bool {
        self.finished.is_cancelled()
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Checks a fleet name: non-empty, no NUL, room for the longest shard key.
pub(crate) fn validate_name(name: &str, longest_shard: usize) -> Result<()> {
    validate::name("name", name)?;
    let key = fleet_prefix(name).len() + 2 + longest_shard;
    if key > MAX_NAME_BYTES {
        return Err(Error::invalid(
            "name",
            format!(
                "is too long: its shard keys would be {key} bytes, the limit is {MAX_NAME_BYTES}"
            ),
        ));
    }
    Ok(())
}
