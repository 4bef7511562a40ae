//! Leader election as a recipe: the leader of election `name` is the exclusive holder of the key
//! `accord.election/<name>` (percent-encoded like a group), so a leadership is an ordinary lease:
//! fenced, renewed by the client's one keepalive, with a lost signal. Campaigners wait in the
//! key's line (fair waiting: the longest waiting campaigner is next, and a resignation wakes only
//! it). The leader's value lives in the key's metadata (`{"value": …}`); proclaim changes it in
//! place, without a new election.
//!
//! Observers listen on the election's channel, which campaign, proclaim and resign announce on,
//! and re-read the key when it speaks, when the listening connection reconnected (announcements
//! may have been missed), and at the leader's expiry (a leader that dies announces nothing): the
//! table is the truth, an announcement only says "read again". An observer reports each leader,
//! each proclaimed value and each vacancy once, in order of fence (a stale read never goes back).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use crate::backend::Holder;
use crate::error::{Error, Result};
use crate::lease::{Lease, LostSignal};
use crate::metadata::Metadata;
use crate::naming::{channel_for, escape};
use crate::options::AcquireOptions;
use crate::session::Session;
use crate::subscription::{PendingRead, Subscription};
use crate::validate::{self, MAX_NAME_BYTES};

/// The longest an observer goes without re-reading.
const MAX_OBSERVE_SLICE: Duration = Duration::from_secs(30);
/// Read again this long after the leader's expiry, so that the read sees it expired.
const EXPIRY_SLACK: Duration = Duration::from_millis(20);

/// Options of [`Election::campaign`].
#[derive(Clone, Debug, Default)]
pub struct CampaignOptions {
    pub(crate) ttl: Option<Duration>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) cancel: Option<CancellationToken>,
}

impl CampaignOptions {
    /// The client's ttl, waiting without a time limit.
    pub fn new() -> Self {
        Self::default()
    }
    /// The leadership lease's ttl: a leader whose process dies is replaced this long after its
    /// last renewal.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }
    /// Give up waiting to lead after this long, with `Timeout`.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
    /// Cancelling this token ends a waiting campaign with `Cancelled` (its place in line is
    /// given up).
    pub fn cancel(mut self, token: CancellationToken) -> Self {
        self.cancel = Some(token);
        self
    }
}

/// The leader of an election as the coordinator records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leader {
    /// The leading client's owner.
    pub owner: String,
    /// The value it campaigned with or last proclaimed.
    pub value: String,
    /// The leadership's fence: larger for every new leader.
    pub fence: i64,
    /// When this leadership began (the coordinator's clock).
    pub since: DateTime<Utc>,
    /// When the leadership expires unless renewed.
    pub expires_at: DateTime<Utc>,
}

/// An election: `campaign` to lead, `leader` to read, `observe` to follow.
#[derive(Clone)]
pub struct Election {
    session: Arc<Session>,
    name: String,
    key: String,
    channel: String,
}

impl fmt::Debug for Election {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// The key that election `name`'s leader holds.
pub(crate) fn election_key(name: &str) -> String {
    format!("accord.election/{}", escape(name))
}

impl Election {
    pub(crate) fn open(session: &Arc<Session>, name: &str) -> Result<Election> {
        session.check_usable()?;
        validate::name("election", name)?;
        let key = election_key(name);
        if key.len() > MAX_NAME_BYTES {
            return Err(Error::invalid(
                "election",
                format!(
                    "the election's key would be {} bytes, the limit is {MAX_NAME_BYTES}",
                    key.len()
                ),
            ));
        }
        let channel = channel_for("accord_election", &session.scope.namespace, &[&key]);
        Ok(Election {
            session: session.clone(),
            name: name.to_string(),
            key,
            channel,
        })
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Waits in line to lead, then leads with `value` (observers see it). Campaigners are
    /// granted in arrival order. Fails with `Timeout`, `Cancelled` or `Closed`, leaving
    /// nothing held and no place in line.
    pub async fn campaign(&self, value: &str, options: CampaignOptions) -> Result<Leadership> {
        let metadata = value_metadata(value)?;
        let mut acquire = AcquireOptions::new().metadata(metadata);
        if let Some(ttl) = options.ttl {
            acquire = acquire.ttl(ttl);
        }
        if let Some(timeout) = options.timeout {
            acquire = acquire.timeout(timeout);
        }
        if let Some(cancel) = options.cancel {
            acquire = acquire.cancel(cancel);
        }
        let grant = self
            .session
            .acquire(&self.key, acquire, true)
            .await?
            .ok_or_else(|| Error::internal("a waiting acquire returned without a lease"))?;
        let leadership = Leadership {
            lease: Some(Lease::new(self.session.clone(), grant)),
            election: self.clone(),
        };
        self.announce().await;
        Ok(leadership)
    }

    /// The current leader, or `None` when nobody leads (one read by primary key).
    pub async fn leader(&self) -> Result<Option<Leader>> {
        self.session.check_usable()?;
        let holder = self
            .session
            .scope
            .backend
            .holder(&self.session.scope.namespace, &self.key)
            .await?;
        Ok(holder.map(leader_of))
    }

    /// Follows the election: the current state first (the leader, or `None` when nobody
    /// leads), then every new leader, every proclaimed value and every vacancy, each once, in
    /// order (see [`Observer::next`]). Listens before its first read, so that no change after
    /// this returns is missed.
    pub async fn observe(&self) -> Result<Observer> {
        self.session.check_usable()?;
        let subscription = Subscription::open(&self.session, vec![self.channel.clone()]).await?;
        Ok(Observer {
            election: self.clone(),
            subscription,
            last: None,
            vacant: false,
            expires_at: None,
            read: None,
        }
        .first_read())
    }

    async fn announce(&self) {
        if let Err(e) = self.session.scope.backend.notify(&self.channel, "").await {
            tracing::debug!(target: "accord", election = %self.name, error = %e, "election announcement not sent; observers re-read at the leader's expiry");
        }
    }
}

fn value_metadata(value: &str) -> Result<Metadata> {
    let mut metadata = Metadata::new();
    metadata.insert("value".into(), value.into());
    validate::metadata("value", &metadata)?;
    Ok(metadata)
}

fn leader_of(h: Holder) -> Leader {
    Leader {
        owner: h.owner,
        value: value_of(&h.metadata),
        fence: h.fence,
        since: h.granted_at,
        expires_at: h.expires_at,
    }
}

fn value_of(metadata: &Metadata) -> String {
    match metadata.get("value") {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

/// This client leads an election: an ordinary lease on the election's key (fence, keepalive,
/// lost signal). Dropping it resigns in the background.
pub struct Leadership {
    lease: Option<Lease>,
    election: Election,
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("election", &self.election.name)
            .field("lease", &self.lease)
            .finish()
    }
}

impl Leadership {
    /// The leadership lease.
    pub fn lease(&self) -> &Lease {
        self.lease
            .as_ref()
            .expect("a leadership holds its lease until resign")
    }

    /// The leadership's fence: pass it to what the leader writes, so that a deposed leader's
    /// late writes are refused.
    pub fn fence(&self) -> i64 {
        self.lease().fence()
    }

    /// The value observers see.
    pub fn value(&self) -> String {
        value_of(&self.lease().metadata())
    }

    /// The election this leads.
    pub fn election(&self) -> &Election {
        &self.election
    }

    /// Fires when the leadership is lost (expired, taken over after a stall).
    pub fn lost_signal(&self) -> LostSignal {
        self.lease().lost_signal()
    }

    /// Whether the leadership was lost.
    pub fn is_lost(&self) -> bool {
        self.lease().is_lost()
    }

    /// Changes the value observers see, without a new election (the fence stays).
    pub async fn proclaim(&self, value: &str) -> Result<()> {
        self.lease()
            .renew_with_metadata(value_metadata(value)?)
            .await?;
        self.election.announce().await;
        Ok(())
    }

    /// Stops leading: the next campaigner in line is woken and leads.
    pub async fn resign(mut self) -> Result<()> {
        let lease = self
            .lease
            .take()
            .expect("a leadership holds its lease until resign");
        let released = lease.release().await;
        self.election.announce().await;
        released
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        let Some(lease) = self.lease.take() else {
            return;
        };
        if self.election.session.check_usable().is_err() {
            return; // dropping the lease ends it as the closed or forked client allows
        }
        let election = self.election.clone();
        self.election.session.scope.runtime.spawn(async move {
            let _ = lease.release().await;
            election.announce().await;
        });
    }
}

/// Follows an election's leaders: see [`Election::observe`].
pub struct Observer {
    election: Election,
    subscription: Subscription,
    /// The last leader reported: (fence, value). Kept after a vacancy, so that a leader is
    /// never reported twice.
    last: Option<(i64, String)>,
    /// The last thing reported was a vacancy.
    vacant: bool,
    /// The current leader's expiry, when one leads: re-read then.
    expires_at: Option<DateTime<Utc>>,
    /// The read under way: the first, or one a change (an announcement, a reconnect, the
    /// leader's expiry) called for. Kept here, not in `next`'s future, so that a `next` dropped
    /// half-way (a timeout, a cancellation) loses nothing, and the next call goes on with the
    /// same read: calls with timeouts shorter than a read still get through.
    read: Option<PendingRead<Option<Leader>>>,
}

impl fmt::Debug for Observer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observer")
            .field("election", &self.election.name)
            .field("last", &self.last)
            .field("vacant", &self.vacant)
            .finish_non_exhaustive()
    }
}

impl Observer {
    /// The next change of leadership: the current state first (`Some(leader)`, or `None` when
    /// nobody leads), then every new leader, every proclaimed value and every vacancy (the
    /// leader resigned, released or expired and nobody leads yet), each once, in order.
    /// `Closed` once the client closes. Cancel-safe: a `next` dropped half-way leaves its read
    /// with the observer, and the next call finishes it.
    pub async fn next(&mut self) -> Result<Option<Leader>> {
        loop {
            if self.read.is_none() {
                let wait = self.until_expiry();
                self.subscription.changed_or_after(wait).await?;
                self.read = Some(self.start_read());
            }
            let read = self.read.as_mut().expect("a read was just started").get();
            let leader = read.await;
            // A failed read is owed again: the next call retries it without waiting.
            self.read = leader.is_err().then(|| self.start_read());
            let leader = leader?;
            self.expires_at = leader.as_ref().map(|l| l.expires_at);
            if self.is_new(leader.as_ref()) {
                self.vacant = leader.is_none();
                if let Some(l) = &leader {
                    self.last = Some((l.fence, l.value.clone()));
                }
                return Ok(leader);
            }
        }
    }

    /// The observer with its first read owed: the current state comes first.
    fn first_read(mut self) -> Self {
        self.read = Some(self.start_read());
        self
    }

    fn start_read(&self) -> PendingRead<Option<Leader>> {
        let election = self.election.clone();
        PendingRead::new(async move { election.leader().await })
    }

    /// A state not reported yet: a vacancy after a leader (or first), a larger fence, or the
    /// same leader with a new value. A read of a leader already followed by a vacancy is stale.
    fn is_new(&self, leader: Option<&Leader>) -> bool {
        match (leader, &self.last) {
            (None, _) => !self.vacant,
            (Some(_), None) => true,
            (Some(leader), Some((fence, value))) => {
                leader.fence > *fence
                    || (!self.vacant && leader.fence == *fence && leader.value != *value)
            }
        }
    }

    fn until_expiry(&self) -> Duration {
        let now = Utc::now();
        self.expires_at
            .map(|at| (at - now).to_std().unwrap_or_default() + EXPIRY_SLACK)
            .unwrap_or(MAX_OBSERVE_SLICE)
            .clamp(EXPIRY_SLACK, MAX_OBSERVE_SLICE)
    }

    /// Stops listening.
    pub async fn close(&self) {
        self.subscription.close().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn election_keys_are_one_segment() {
        assert_eq!(election_key("a"), "accord.election/a");
        assert_eq!(election_key("a/b"), "accord.election/a%2Fb");
    }

    #[test]
    fn values_that_are_not_text_read_as_json() {
        let mut m = Metadata::new();
        assert_eq!(value_of(&m), "");
        m.insert("value".into(), 3.into());
        assert_eq!(value_of(&m), "3");
        m.insert("value".into(), "x".into());
        assert_eq!(value_of(&m), "x");
    }
}
