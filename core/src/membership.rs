//! Membership as a recipe: a member of a group is an ordinary lease on `<prefix><owner>`, kept
//! by the client's one batched keepalive, with a lost signal. `members` is one read of the
//! group's prefix; a watch re-reads it when the group's channel says something changed, when
//! the listening connection reconnected, and at the soonest expiry of a member it knows (a
//! member whose process died sends nothing): the table is the truth, notifications only wake.
//!
//! Key layout (readable with `list`): a group's members are `accord.group/<group>/<owner>`,
//! where `<group>` has `%` and `/` percent-encoded so that no group's prefix is another's. A
//! member row's metadata is `{"metadata": <the member's metadata>, "since": <RFC 3339>}`.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::error::{Error, Result};
use crate::lease::{Lease, LostSignal};
use crate::metadata::Metadata;
use crate::naming::escape;
use crate::options::AcquireOptions;
use crate::session::Session;
use crate::subscription::{PendingRead, Subscription};
use crate::validate::{self, MAX_NAME_BYTES};

/// The most rows one read of a group or a fleet returns: every member and held shard of a
/// fleet of the largest size, in one statement.
pub(crate) const MAX_SCAN_ROWS: usize = 100_000;

/// Where members of the group `group` live: `accord.group/<escaped group>/`.
pub(crate) fn group_prefix(group: &str) -> String {
    format!("accord.group/{}/", escape(group))
}

/// Options of [`crate::Client::join`].
#[derive(Clone, Debug, Default)]
pub struct JoinOptions {
    pub(crate) metadata: Option<Metadata>,
    pub(crate) ttl: Option<Duration>,
}

impl JoinOptions {
    /// No metadata, the client's ttl.
    pub fn new() -> Self {
        Self::default()
    }
    /// What other members see of this one (tooz's capabilities); a JSON object.
    pub fn metadata(mut self, metadata: Metadata) -> Self {
        self.metadata = Some(metadata);
        self
    }
    /// The member lease's ttl: a member whose process dies leaves the group this long after
    /// its last renewal.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }
}

/// One member of a group, as [`crate::Client::members`] and [`MemberWatch`] report it.
#[derive(Clone, Debug, PartialEq)]
pub struct MemberInfo {
    /// The member's owner (its client's owner).
    pub owner: String,
    /// The member's metadata, as it last set it.
    pub metadata: Metadata,
    /// When it joined, by the coordinator's clock.
    pub since: DateTime<Utc>,
    /// The fence of its member lease: a member that left and joined again has a new one.
    pub fence: i64,
    /// When its member lease expires unless renewed (the coordinator's clock).
    pub expires_at: Option<DateTime<Utc>>,
}

/// What a [`MemberWatch`] yields: the members once, then every change, in order.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum MemberEvent {
    /// The members when the watch started (first event only).
    Members(Vec<MemberInfo>),
    /// A member joined.
    Joined(MemberInfo),
    /// A member left: it called leave, its client closed, or its lease expired.
    Left(MemberInfo),
    /// A member replaced its metadata ([`Member::update_metadata`]): the member as it is now.
    /// Updates made between two reads of the watch come as one, with the latest metadata.
    Updated(MemberInfo),
}

/// Membership of a group: a lease on the member key, kept by the client's keepalive. Dropping
/// it leaves the group in the background; [`Member::leave`] leaves and reports the outcome.
pub struct Member {
    session: Arc<Session>,
    lease: Option<Lease>,
    channel: String,
    group: String,
}

impl fmt::Debug for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Member")
            .field("group", &self.group)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

/// The member metadata a row stores: the user's object under `metadata` (so that an update
/// replaces it whole), next to `since`.
fn wrap(metadata: Metadata) -> Metadata {
    let mut row = Metadata::new();
    row.insert("metadata".into(), serde_json::Value::Object(metadata));
    row
}

impl Member {
    /// Joins the group whose members live under `prefix` (validated by the caller), sending
    /// a wake-up on `channel`. Waits up to the ttl for a member key this owner held before
    /// (a restarted process with a fixed owner), then `Timeout`.
    pub(crate) async fn join_at(
        session: &Arc<Session>,
        group: &str,
        prefix: &str,
        channel: String,
        options: JoinOptions,
    ) -> Result<Member> {
        session.check_usable()?;
        let ttl = options.ttl.unwrap_or(session.ttl);
        validate::ttl("ttl", ttl)?;
        let metadata = options.metadata.unwrap_or_default();
        validate::metadata("metadata", &metadata)?;
        let key = format!("{prefix}{}", session.scope.owner);
        if key.len() > MAX_NAME_BYTES {
            return Err(Error::invalid(
                "group",
                format!(
                    "with this client's owner the member key would be {} bytes, the limit is \
                     {MAX_NAME_BYTES}",
                    key.len()
                ),
            ));
        }
        // Processes that joined once and are gone (a fleet gets new pod names every deploy)
        // leave a row each; a join deletes those nobody holds, so the group's rows stay about
        // as many as its members. Best effort: the join does not depend on it.
        let scope = &session.scope;
        match scope.backend.sweep(&scope.namespace, prefix).await {
            Ok((members, tickets)) if members + tickets > 0 => {
                tracing::debug!(target: "accord", group, members, tickets, "swept rows nobody holds");
            }
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(target: "accord", group, error = %e, "sweep before join failed");
            }
        }
        let acquire = AcquireOptions::new()
            .ttl(ttl)
            .metadata(wrap(metadata))
            .timeout(ttl + Duration::from_secs(1));
        let grant = session
            .acquire(&key, acquire, true)
            .await?
            .ok_or_else(|| Error::internal("a waiting acquire returned without a lease"))?;
        let lease = Lease::new(session.clone(), grant);
        let since = lease.expires_at() - chrono::Duration::from_std(ttl).unwrap_or_default();
        let mut stamp = Metadata::new();
        stamp.insert("since".into(), since.to_rfc3339().into());
        lease.renew_with_metadata(stamp).await?;
        let member = Member {
            session: session.clone(),
            lease: Some(lease),
            channel,
            group: group.to_string(),
        };
        member.wake().await;
        Ok(member)
    }

    /// Tells watchers to re-read (best effort: they also re-read at expiries and reconnects).
    async fn wake(&self) {
        if let Err(e) = self.session.scope.backend.notify(&self.channel, "").await {
            tracing::debug!(target: "accord", group = %self.group, error = %e, "member wake-up not sent");
        }
    }

    /// The group joined.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// The member's lease (key `accord.group/<group>/<owner>`, fence, status, lost signal).
    pub fn lease(&self) -> &Lease {
        self.lease
            .as_ref()
            .expect("a member holds its lease until leave")
    }

    /// Resolves when the membership is lost (not renewed in time, or the client closed).
    pub fn lost_signal(&self) -> LostSignal {
        self.lease().lost_signal()
    }

    /// True once the membership is lost.
    pub fn is_lost(&self) -> bool {
        self.lease().is_lost()
    }

    /// Replaces the member's metadata (what [`crate::Client::members`] shows), renewing it;
    /// watchers see `Updated`.
    pub async fn update_metadata(&self, metadata: Metadata) -> Result<()> {
        self.lease().renew_with_metadata(wrap(metadata)).await?;
        self.wake().await;
        Ok(())
    }

    /// Leaves the group now; watchers see `Left`. Fails with `LeaseLost` if the membership was
    /// already lost.
    pub async fn leave(mut self) -> Result<()> {
        let lease = self
            .lease
            .take()
            .expect("a member holds its lease until leave");
        let released = lease.release().await;
        self.wake().await;
        released
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let Some(lease) = self.lease.take() else {
            return;
        };
        if self.session.check_usable().is_err() {
            return; // dropping the lease ends it as the closed or forked client allows
        }
        let session = self.session.clone();
        let channel = std::mem::take(&mut self.channel);
        self.session.scope.runtime.spawn(async move {
            let _ = lease.release().await;
            let _ = session.scope.backend.notify(&channel, "").await;
        });
    }
}

/// Every live member under `prefix`, in one read, oldest first.
pub(crate) async fn read_members(session: &Session, prefix: &str) -> Result<Vec<MemberInfo>> {
    let mut members: Vec<MemberInfo> = session
        .held_under(prefix)
        .await?
        .into_iter()
        .filter_map(|row| {
            let owner = row.key.strip_prefix(prefix)?.to_string();
            Some(member_info(
                owner,
                row.fence,
                row.expires_at,
                row.updated_at,
                &row.metadata,
            ))
        })
        .collect();
    members.sort_by_key(|m| (m.since, m.fence));
    Ok(members)
}

pub(crate) fn member_info(
    owner: String,
    fence: i64,
    expires_at: Option<DateTime<Utc>>,
    updated_at: DateTime<Utc>,
    row: &Metadata,
) -> MemberInfo {
    let metadata = match row.get("metadata") {
        Some(serde_json::Value::Object(m)) => m.clone(),
        _ => Metadata::new(),
    };
    // Between a join's grant and its stamp, the row's last change is the grant.
    let since = row
        .get("since")
        .and_then(|s| s.as_str())
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or(updated_at);
    MemberInfo {
        owner,
        metadata,
        since,
        fence,
        expires_at,
    }
}

/// The members of a group, then every change: opened with [`crate::Client::watch`].
pub struct MemberWatch {
    session: Arc<Session>,
    prefix: String,
    subscription: Subscription,
    /// The members as of the last read, by owner.
    known: BTreeMap<String, MemberInfo>,
    pending: VecDeque<MemberEvent>,
    started: bool,
    /// The read under way: the first, or one a change (an announcement, a reconnect, an
    /// expiry) called for. Kept here, not in `next`'s future, so that a `next` dropped half-way
    /// (a timeout, a cancellation) loses nothing, and the next call goes on with the same read:
    /// calls with timeouts shorter than a read still get through.
    read: Option<PendingRead<Vec<MemberInfo>>>,
}

impl fmt::Debug for MemberWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemberWatch")
            .field("prefix", &self.prefix)
            .field("known", &self.known.len())
            .finish_non_exhaustive()
    }
}

fn by_owner(members: &[MemberInfo]) -> BTreeMap<String, MemberInfo> {
    members
        .iter()
        .map(|m| (m.owner.clone(), m.clone()))
        .collect()
}

/// The longest a watch goes without re-reading (a clock far off the coordinator's, say).
const MAX_WATCH_SLICE: Duration = Duration::from_secs(30);
/// Read again this long after a member's expiry, so that the read sees it expired.
const EXPIRY_SLACK: Duration = Duration::from_millis(50);

impl MemberWatch {
    /// Listens on the group's channel first, so that no change after this returns is missed.
    pub(crate) async fn open(
        session: &Arc<Session>,
        prefix: String,
        channel: String,
    ) -> Result<MemberWatch> {
        let subscription = Subscription::open(session, vec![channel]).await?;
        Ok(MemberWatch {
            session: session.clone(),
            prefix,
            subscription,
            known: BTreeMap::new(),
            pending: VecDeque::new(),
            started: false,
            read: None,
        })
    }

    /// The next event: [`MemberEvent::Members`] first, then `Joined`, `Left` and `Updated` in the
    /// order the reads found them. `Closed` once the client closes. Cancel-safe: a `next` dropped half-way
    /// leaves its read with the watch, and the next call finishes it.
    pub async fn next(&mut self) -> Result<MemberEvent> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Ok(event);
            }
            if self.read.is_none() {
                if self.started {
                    let wait = self.until_soonest_expiry();
                    self.subscription.changed_or_after(wait).await?;
                }
                self.read = Some(self.start_read());
            }
            let read = self.read.as_mut().expect("a read was just started").get();
            let members = read.await;
            // A failed read is owed again: the next call retries it without waiting.
            self.read = members.is_err().then(|| self.start_read());
            let members = members?;
            if !self.started {
                self.started = true;
                self.known = by_owner(&members);
                return Ok(MemberEvent::Members(members));
            }
            self.compare(members);
        }
    }

    fn start_read(&self) -> PendingRead<Vec<MemberInfo>> {
        let (session, prefix) = (self.session.clone(), self.prefix.clone());
        PendingRead::new(async move { read_members(&session, &prefix).await })
    }

    fn until_soonest_expiry(&self) -> Duration {
        let now = Utc::now();
        self.known
            .values()
            .filter_map(|m| m.expires_at)
            .min()
            .map(|at| (at - now).to_std().unwrap_or_default() + EXPIRY_SLACK)
            .unwrap_or(MAX_WATCH_SLICE)
            .clamp(EXPIRY_SLACK, MAX_WATCH_SLICE)
    }

    /// Queues `Left` for each known member the read lacks (or has with another fence), then
    /// `Joined` for each it has that was not known and `Updated` for each known one whose
    /// metadata changed.
    fn compare(&mut self, members: Vec<MemberInfo>) {
        let now = by_owner(&members);
        for (owner, old) in &self.known {
            match now.get(owner) {
                Some(new) if new.fence == old.fence => {}
                _ => self.pending.push_back(MemberEvent::Left(old.clone())),
            }
        }
        for new in &members {
            match self.known.get(&new.owner) {
                Some(old) if old.fence == new.fence && old.metadata == new.metadata => {}
                Some(old) if old.fence == new.fence => {
                    self.pending.push_back(MemberEvent::Updated(new.clone()))
                }
                _ => self.pending.push_back(MemberEvent::Joined(new.clone())),
            }
        }
        self.known = now;
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
    fn group_prefixes_never_nest() {
        assert_eq!(group_prefix("a"), "accord.group/a/");
        assert_eq!(group_prefix("a/b"), "accord.group/a%2Fb/");
        assert_eq!(group_prefix("a%2Fb"), "accord.group/a%252Fb/");
        assert!(!group_prefix("a/b").starts_with(&group_prefix("a")));
    }
}
