//! A fleet member's background task: once a period, one read of the fleet and the balancing
//! decision; in between, hand-off requests from other members and the answers to its own.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::balance::{self, View};
use super::{
    handoff_channel, validate_name, FleetOptions, RevokeReason, Shards, Shared, MAX_SHARDS,
    MIN_PERIOD,
};
use crate::error::{Error, Result};
use crate::lease::{Lease, LostSignal};
use crate::membership::{JoinOptions, Member};
use crate::metadata::Metadata;
use crate::naming;
use crate::options::{AcquireOptions, ClaimOptions};
use crate::session::{Grant, LeaseStatus, LostReason, Session};
use crate::subscription::Subscription;
use crate::validate::{self, MAX_CLAIM_LIMIT, MAX_TTL};
use crate::wording::Why;

/// A fleet's options, checked.
pub(crate) struct Settings {
    pub shards: Vec<String>,
    pub ttl: Duration,
    pub period: Duration,
    /// `None`: the default, which scales with the fleet (see `balance::handoff_limit`).
    pub max_handoffs: Option<usize>,
    pub handoff_timeout: Duration,
    pub metadata: Option<Metadata>,
}

impl Settings {
    /// Every field checked before anything is sent, naming the one that is wrong.
    pub fn validate(session: &Session, name: &str, options: FleetOptions) -> Result<Settings> {
        let shards = match options.shards {
            Shards::Count(n) => {
                let n = validate::shards(validate::usize_count(n))?;
                (0..n).map(|i| i.to_string()).collect()
            }
            Shards::Keys(keys) => {
                if keys.is_empty() || keys.len() > MAX_SHARDS {
                    return Err(Error::invalid(
                        "keys",
                        format!("{} keys is outside 1..={MAX_SHARDS}", keys.len()),
                    ));
                }
                let mut seen = HashSet::new();
                for key in &keys {
                    validate::name("keys", key)?;
                    if !seen.insert(key.as_str()) {
                        return Err(Error::invalid("keys", format!("{key:?} appears twice")));
                    }
                }
                keys
            }
        };
        validate_name(name, shards.iter().map(String::len).max().unwrap_or(0))?;
        let ttl = options.ttl.unwrap_or(session.ttl);
        validate::ttl("ttl", ttl)?;
        let period = options.period.unwrap_or(ttl / 3);
        if period < MIN_PERIOD || period > ttl {
            return Err(Error::invalid(
                "period",
                Why::new()
                    .duration(period)
                    .text(" is outside ")
                    .duration(MIN_PERIOD)
                    .text("..=")
                    .field("ttl")
                    .text(" (")
                    .duration(ttl)
                    .text(")"),
            ));
        }
        let max_handoffs = options
            .max_handoffs_per_period
            .map(|n| validate::handoffs_per_period(validate::usize_count(n)))
            .transpose()?;
        let handoff_timeout = options.handoff_timeout.unwrap_or(ttl);
        if handoff_timeout.is_zero() || handoff_timeout > MAX_TTL {
            return Err(Error::invalid(
                "handoff_timeout",
                Why::new()
                    .duration(handoff_timeout)
                    .text(" is outside (")
                    .duration(Duration::ZERO)
                    .text(", ")
                    .duration(MAX_TTL)
                    .text("]"),
            ));
        }
        if let Some(metadata) = &options.metadata {
            validate::metadata("metadata", metadata)?;
        }
        Ok(Settings {
            shards,
            ttl,
            period,
            max_handoffs,
            handoff_timeout,
            metadata: options.metadata,
        })
    }
}

/// The metadata field of a hand-off request's row: how many shards the asker holds (or is
/// already asking for) when it asks.
const HAS: &str = "has";

/// A hand-off request, read from its row `<base>r/<shard>` (held by the asker, metadata
/// `{"has": n}`): only roles with accord's grants can write it, so a notification on the
/// holder's channel, which any role may send, only makes the holder read the rows again.
struct Request {
    shard: String,
    asker: String,
    has: usize,
}

impl Request {
    fn metadata(has: usize) -> Metadata {
        let mut metadata = Metadata::new();
        metadata.insert(HAS.to_string(), serde_json::Value::from(has));
        metadata
    }

    /// The request a held row of the requests' prefix stands for (`None`: not one).
    fn from_row(prefix: &str, row: &crate::options::LeaseInfo) -> Option<Request> {
        Some(Request {
            shard: row.key.strip_prefix(prefix)?.to_string(),
            asker: row.owner.clone()?,
            has: usize::try_from(row.metadata.get(HAS)?.as_u64()?).ok()?,
        })
    }
}

type Asked = (String, Result<Option<Arc<Grant>>>);

pub(crate) struct Task {
    pub session: Arc<Session>,
    pub shared: Arc<Shared>,
    pub settings: Settings,
    /// `accord.fleet/<name>/`: members and shards come back in one read of it.
    pub base: String,
    /// `<base>s/`: the work pool of the shards.
    pub pool: String,
    /// `<base>m/`: the fleet's membership.
    pub members_prefix: String,
    /// `<base>r/`: hand-off requests, `<base>r/<shard>` held by the member asking for it.
    pub requests_prefix: String,
    pub member: Option<Member>,
    /// This member's hand-off channel: a notification there says "read the requests again".
    pub requests: Subscription,
    /// The membership's channel: members announce joins, leaves and shards given back there.
    pub members: Subscription,
    /// The request rows this member holds, by shard, while it waits for the shard.
    pub asking: HashMap<String, Arc<Grant>>,
    pub stop: CancellationToken,
    pub finished: CancellationToken,
    /// Shards this member handed off, until when it leaves them to their askers: its own period
    /// must not take back a shard it just released for someone else (its read may even still
    /// show it as its own), whatever the store's wake-up latency.
    pub handed_off: HashMap<String, tokio::time::Instant>,
}

impl Task {
    pub async fn run(mut self) {
        let mut asks: JoinSet<Asked> = JoinSet::new();
        let mut in_flight: BTreeSet<String> = BTreeSet::new();
        let mine: HashSet<String> = self.settings.shards.iter().cloned().collect();
        // Some shards in the pool are not this handle's (another handle opened the fleet with
        // other shards): then take by name, never by claim.
        let mut outsiders = false;
        let mut last_holders: HashMap<String, String> = HashMap::new();
        // The first decision waits one period, so that members started together see each
        // other and split the shards instead of the first one taking them all.
        let period = self.settings.period;
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_period = tokio::time::Instant::now();
        let mut first_decision_made = false;
        loop {
            tokio::select! {
                _ = self.stop.cancelled() => break,
                _ = self.session.closed.cancelled() => break,
                _ = ticker.tick() => {
                    last_period = tokio::time::Instant::now();
                    first_decision_made = true;
                    if let Err(e) = self.period(&mut asks, &mut in_flight, &mine, &mut outsiders, &mut last_holders).await {
                        if e.kind() == crate::ErrorKind::Closed {
                            break;
                        }
                        tracing::warn!(target: "accord", fleet = %self.shared.name, error = %e, "fleet period failed; retrying next period");
                    }
                }
                event = self.members.recv() => match event {
                    Ok(Some(_)) => {
                        // Rebalance now, but at most five times a period, however many
                        // members speak at once; never before the first decision, which
                        // waits for members started together to see each other.
                        if first_decision_made {
                            let soonest = last_period + period / 5;
                            ticker.reset_at(soonest.max(tokio::time::Instant::now()));
                        }
                    }
                    Ok(None) | Err(_) => break,
                },
                // Whatever it says (any role may send one, and a reconnect may have lost
                // some): read the requests from their rows. Those queued meanwhile are
                // answered by this read too, so a flood of notifications costs one read each
                // time this member gets to it, never a decision.
                event = self.requests.recv() => match event {
                    Ok(Some(_)) => {
                        self.requests.discard_pending();
                        if let Err(e) = self.read_requests().await {
                            if e.kind() == crate::ErrorKind::Closed {
                                break;
                            }
                            tracing::debug!(target: "accord", fleet = %self.shared.name, error = %e, "reading hand-off requests failed; the next period reads them");
                        }
                    }
                    Ok(None) | Err(_) => break,
                },
                Some(answer) = asks.join_next() => {
                    if let Ok((shard, result)) = answer {
                        in_flight.remove(&shard);
                        // The request is answered (or given up): its row goes.
                        if let Some(request) = self.asking.remove(&shard) {
                            self.session.give_back_unused(&request).await;
                        }
                        match result {
                            Ok(Some(grant)) => self.adopt(shard, grant),
                            Ok(None) => {}
                            // Timeout: the holder did not hand it off; it is left alone.
                            Err(e) => tracing::debug!(target: "accord", fleet = %self.shared.name, shard, error = %e, "hand-off not received"),
                        }
                    }
                }
            }
        }
        self.shutdown(asks).await;
    }

    fn key(&self, shard: &str) -> String {
        format!("{}{shard}", self.pool)
    }

    fn request_key(&self, shard: &str) -> String {
        format!("{}{shard}", self.requests_prefix)
    }

    /// One read of the hand-off requests (held rows of `<base>r/`), each answered by
    /// [`Task::on_request`].
    async fn read_requests(&mut self) -> Result<()> {
        self.session.check_usable()?;
        let rows = self.session.held_under(&self.requests_prefix).await?;
        for row in &rows {
            if let Some(request) = Request::from_row(&self.requests_prefix, row) {
                self.on_request(request);
            }
        }
        Ok(())
    }

    /// Holds a granted shard: `Assigned`, and a watcher that yields `Revoked(Lost)` the moment
    /// its lost signal fires (the local deadline, before the coordinator's expiry).
    fn adopt(&self, shard: String, grant: Arc<Grant>) {
        let lease = Lease::new(self.session.clone(), grant);
        let signal = lease.lost_signal();
        let fence = lease.fence();
        if self.shared.adopt(shard.clone(), lease).is_ok() {
            tokio::spawn(watch_lost(self.shared.clone(), shard, fence, signal));
        }
    }

    async fn period(
        &mut self,
        asks: &mut JoinSet<Asked>,
        in_flight: &mut BTreeSet<String>,
        mine: &HashSet<String>,
        outsiders: &mut bool,
        last_holders: &mut HashMap<String, String>,
    ) -> Result<()> {
        self.session.check_usable()?;
        if self.member.as_ref().is_none_or(|m| m.is_lost()) {
            self.rejoin().await?;
        }
        let me = self.session.scope.owner.clone();
        let rows = self.session.held_under(&self.base).await?;
        let mut members = Vec::new();
        let mut holders = HashMap::new();
        let mut requests = Vec::new();
        for row in rows {
            if let Some(request) = Request::from_row(&self.requests_prefix, &row) {
                requests.push(request);
            } else if let Some(owner) = row.key.strip_prefix(&self.members_prefix) {
                members.push(owner.to_string());
            } else if let (Some(shard), Some(owner)) = (row.key.strip_prefix(&self.pool), row.owner)
            {
                if mine.contains(shard) {
                    holders.insert(shard.to_string(), owner);
                } else {
                    *outsiders = true;
                }
            }
        }
        // Requests whose notification was missed are answered here, before the plan: a shard
        // handed off now is settling for it.
        for request in requests {
            self.on_request(request);
        }
        // Free now, held at the last read by a member still live: a hand-off in transit.
        let live: HashSet<&String> = members.iter().collect();
        let now = tokio::time::Instant::now();
        self.handed_off.retain(|_, until| *until > now);
        let mut settling: BTreeSet<String> = last_holders
            .iter()
            .filter(|(shard, owner)| {
                **owner != me && live.contains(owner) && !holders.contains_key(*shard)
            })
            .map(|(shard, _)| shard.clone())
            .collect();
        settling.extend(self.handed_off.keys().cloned());
        *last_holders = holders.clone();
        // This member's own shards: what it holds, not what the read saw.
        holders.retain(|_, owner| *owner != me);
        for shard in self.shared.held().keys() {
            holders.insert(shard.clone(), me.clone());
        }
        let plan = balance::plan(&View {
            me: &me,
            members: &members,
            shards: &self.settings.shards,
            holders: &holders,
            in_flight,
            settling: &settling,
            max_handoffs: self.settings.max_handoffs,
        });
        if !plan.take.is_empty() {
            if in_flight.is_empty() && !*outsiders {
                self.claim(plan.take.len(), mine, outsiders).await?;
            } else {
                for shard in &plan.take {
                    let options = AcquireOptions::new().ttl(self.settings.ttl);
                    if let Some(grant) = self
                        .session
                        .acquire(&self.key(shard), options, false)
                        .await?
                    {
                        self.adopt(shard.clone(), grant);
                    }
                }
            }
        }
        let mut has = self.shared.held().len() + in_flight.len();
        for (holder, shard) in plan.ask {
            if self.shared.held().contains_key(&shard) {
                continue;
            }
            // The request is a row, written with accord's grants and gone with its lease (when
            // the ask ends, or after its ttl if this member dies); the holder decides from it.
            let row = AcquireOptions::new()
                .ttl(self.settings.ttl)
                .metadata(Request::metadata(has));
            let Some(request) = self
                .session
                .acquire(&self.request_key(&shard), row, false)
                .await?
            else {
                // Another member is asking for this shard.
                continue;
            };
            self.asking.insert(shard.clone(), request);
            in_flight.insert(shard.clone());
            let session = self.session.clone();
            let key = self.key(&shard);
            let wait = AcquireOptions::new()
                .ttl(self.settings.ttl)
                .timeout(self.settings.handoff_timeout + self.settings.period);
            let asked = shard.clone();
            // Waiting first: the holder's release wakes this acquire at once.
            asks.spawn(async move { (asked, session.acquire(&key, wait, true).await) });
            // Empty: it only tells the holder to read the requests.
            let channel = handoff_channel(&self.session.scope.namespace, &self.base, &holder);
            self.session.scope.backend.notify(&channel, "").await?;
            has += 1;
        }
        Ok(())
    }

    /// Takes up to `n` free shards in claim statements (oldest offer first).
    async fn claim(&self, n: usize, mine: &HashSet<String>, outsiders: &mut bool) -> Result<()> {
        let mut left = n;
        while left > 0 {
            let limit = left.min(MAX_CLAIM_LIMIT);
            let options = ClaimOptions::new().limit(limit).ttl(self.settings.ttl);
            let grants = self.session.claim(&self.pool, options, None).await?;
            let got = grants.len();
            for grant in grants {
                let shard = grant
                    .key
                    .strip_prefix(&self.pool)
                    .unwrap_or_default()
                    .to_string();
                if mine.contains(&shard) {
                    self.adopt(shard, grant);
                } else {
                    *outsiders = true;
                    self.session.give_back_unused(&grant).await;
                }
            }
            if got < limit {
                break;
            }
            left -= got;
        }
        Ok(())
    }

    /// The member lease was lost (the process was stopped, the network cut): join again.
    async fn rejoin(&mut self) -> Result<()> {
        drop(self.member.take());
        let join = JoinOptions {
            metadata: self.settings.metadata.clone(),
            ttl: Some(self.settings.ttl),
        };
        let channel = naming::channel_for(
            "accord_group",
            &self.session.scope.namespace,
            &[&self.members_prefix],
        );
        self.member = Some(
            Member::join_at(
                &self.session,
                &self.shared.name,
                &self.members_prefix,
                channel,
                join,
            )
            .await?,
        );
        Ok(())
    }

    /// Another member asks for a shard: hand it off if this member holds it and would still
    /// hold two more than the asker. `Revoked(Handoff)` goes out now; the release follows the
    /// user's next `next_event` call, or the hand-off timeout.
    fn on_request(&mut self, request: Request) {
        if request.asker == self.session.scope.owner {
            return;
        }
        let held = self.shared.held().len();
        if !balance::should_hand_off(held, request.has) {
            return;
        }
        let (ack, acked) = oneshot::channel();
        let Some(lease) =
            self.shared
                .revoke(&request.shard, None, RevokeReason::Handoff, Some(ack))
        else {
            return;
        };
        let timeout = self.settings.handoff_timeout;
        // The asker waits up to the hand-off timeout plus a period; after that, the shard is
        // anyone's again, this member's included.
        self.handed_off.insert(
            request.shard.clone(),
            tokio::time::Instant::now() + timeout + 2 * self.settings.period,
        );
        tokio::spawn(async move {
            let _ = tokio::time::timeout(timeout, acked).await;
            if let Err(e) = lease.release().await {
                tracing::debug!(target: "accord", key = lease.key(), error = %e, "hand-off release failed");
            }
        });
    }

    /// Everything back: `Revoked(Closed)` for each shard, released together, the membership
    /// left, then the handle's `next_event` ends.
    async fn shutdown(mut self, mut asks: JoinSet<Asked>) {
        // A dropped acquire gives back a grant it received.
        asks.abort_all();
        while asks.join_next().await.is_some() {}
        for (_, request) in self.asking.drain() {
            self.session.give_back_unused(&request).await;
        }
        let shards: Vec<String> = {
            let held = self.shared.held();
            *self
                .shared
                .stopping
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = true;
            held.keys().cloned().collect()
        };
        let leases: Vec<Lease> = shards
            .iter()
            .filter_map(|s| self.shared.revoke(s, None, RevokeReason::Closed, None))
            .collect();
        // Leave first: members that then find the shards free take them at once (a shard
        // freed by a member still live is a hand-off in transit, which they leave alone).
        if let Some(member) = self.member.take() {
            let _ = member.leave().await;
        }
        futures_util::future::join_all(leases.iter().map(|l| l.release())).await;
        if !leases.is_empty() {
            // The shards are free: the members left take them now, not at their next period.
            let channel = self.members.channels()[0].clone();
            let _ = self.session.scope.backend.notify(&channel, "").await;
        }
        self.requests.close().await;
        self.members.close().await;
        self.finished.cancel();
    }
}

/// Yields `Revoked` when a held shard's lease is lost: `Lost`, or `Closed` when its client
/// closed.
async fn watch_lost(shared: Arc<Shared>, shard: String, fence: i64, signal: LostSignal) {
    if let LeaseStatus::Lost(why) = signal.ended().await {
        let reason = if why == LostReason::ClientClosed {
            RevokeReason::Closed
        } else {
            RevokeReason::Lost
        };
        drop(shared.revoke(&shard, Some(fence), reason, None));
    }
}
