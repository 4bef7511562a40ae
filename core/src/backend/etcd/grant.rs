//! The transactions that grant, renew, release, finish and reset a key, and a waiter's place
//! in line. Each reads the key's records at one revision (`EtcdBackend::look`), asks
//! `crate::rules` what may be done, and commits only if what it read is unchanged (compares on
//! the records' revisions), else reads again: etcd's STM, one key at a time.

use std::time::Duration;

use chrono::{DateTime, Utc};
use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse};

use super::batch::{Committed, Part, PlannedGrant};
use super::keys::{fence_of, random_id, range_end, revision_of};
use super::known::Known;
use super::records::{merged, HolderRecord, Look, Place, Row, NOW};
use super::session::ClassLease;
use super::{expires_in, revision, EtcdBackend, MAX_TXN_OPS, TRIES};
use crate::backend::{
    AcquireOutcome, AcquireRequest, BatchItem, Granted, LeaseRef, Renewed, ResetOutcome,
};
use crate::error::Result;
use crate::metadata::Metadata;
use crate::rules::{self, Grantable, Waiting};

/// The most rows one sweep deletes (as the other stores' `LIMIT 1000`).
const SWEEP_LIMIT: usize = 1000;
/// How soon a waiter that lost a race to a concurrent writer tries again.
const RACE_RETRY: Duration = Duration::from_millis(20);

/// The row's revision is still what was read (absent: still absent).
pub(super) fn row_unchanged(record: &str, look: &Look) -> Compare {
    match &look.row {
        Some(row) => Compare::mod_revision(record, CompareOp::Equal, row.mod_revision),
        None => Compare::version(record, CompareOp::Equal, 0),
    }
}

/// Nothing in the range `[start, end(start))`: etcd compares every key of a range, and an
/// empty range compares as one absent key.
pub(super) fn range_empty(start: &str) -> Compare {
    Compare::version(start, CompareOp::Equal, 0).with_range(range_end(start))
}

impl EtcdBackend {
    /// One acquire that waits in line (`AcquireRequest::ticket`, `enqueue`): granted, done,
    /// or queued. Plain acquires (`try_acquire`) go through `batch`.
    pub(super) async fn acquire_in_line(&self, r: &AcquireRequest<'_>) -> Result<AcquireOutcome> {
        let (ns, key) = (r.namespace, r.key);
        let mut look = match self.assumed_free(r) {
            Some(look) => look,
            None => self.look(ns, key).await?,
        };
        for _ in 0..TRIES {
            // The caller's place, if it still has it (a place whose lease expired is gone).
            let mine = r
                .ticket
                .and_then(|t| {
                    look.line
                        .iter()
                        .find(|w| w.ticket() == t && w.owner == r.owner)
                })
                .cloned();
            let ahead: Vec<Waiting> = look
                .line
                .iter()
                .filter(|w| {
                    mine.as_ref()
                        .is_none_or(|m| w.create_revision < m.create_revision)
                })
                .map(Place::waiting)
                .collect();
            let stored = look.stored();
            let verdict =
                rules::grantable_in_turn(stored.as_ref(), r.shared, &ahead, r.attempt, NOW);
            if look.assumed && verdict != Grantable::Yes {
                // Only what was read answers a refusal.
                look = self.look(ns, key).await?;
                continue;
            }
            match verdict {
                Grantable::Done => {
                    if let Some(place) = &mine {
                        self.delete_place(place).await?;
                    }
                    return Ok(AcquireOutcome::Done);
                }
                Grantable::Yes => {
                    // This very acquire call's live grant (a retry whose answer was lost).
                    if let Some(h) = look
                        .holder
                        .as_ref()
                        .filter(|h| !r.shared && h.attempt == r.attempt)
                    {
                        return Ok(AcquireOutcome::Granted(self.own_grant(h, &look).await?));
                    }
                    match self.grant(r, &look, mine.as_ref()).await? {
                        Ok(granted) => {
                            if let Some(place) = &mine {
                                self.watcher.forget(place.ticket());
                            }
                            return Ok(AcquireOutcome::Granted(granted));
                        }
                        // A concurrent writer changed what was read: what the failed
                        // transaction read instead.
                        Err(again) => look = again,
                    }
                }
                Grantable::Held(_) => {
                    let ticket = match &mine {
                        Some(place) => {
                            // Retrying keeps the place: its session's lease is kept alive.
                            self.leases.for_grant(r.ttl).await?;
                            place.ticket()
                        }
                        None if r.enqueue => self.enqueue(r).await?,
                        None => {
                            return Ok(AcquireOutcome::Queued {
                                ticket: None,
                                remaining: Some(r.ttl),
                            })
                        }
                    };
                    let behind = blockers(&look, mine.as_ref(), r.shared);
                    self.watcher.wait_behind(
                        (&self.tag(ns, key), ticket, r.shared),
                        behind,
                        look.revision,
                    );
                    // Woken by the delete of what it waits behind; the core's own retry (a
                    // third of the ttl) renews the place.
                    return Ok(AcquireOutcome::Queued {
                        ticket: Some(ticket),
                        remaining: Some(r.ttl),
                    });
                }
            }
        }
        Ok(AcquireOutcome::Queued {
            ticket: r.ticket,
            remaining: Some(RACE_RETRY),
        })
    }

    /// The key as this client last knew it, if that was free: an exclusive acquire that
    /// holds no place in line tries to grant on it at once (its transaction compares all
    /// of it). `None`: read first (the key was taken or waited for when last seen).
    pub(super) fn assumed_free(&self, r: &AcquireRequest<'_>) -> Option<Look> {
        if r.shared || r.ticket.is_some() {
            return None;
        }
        match self.known.get(&self.layout.row(r.namespace, r.key)) {
            Some(known) if known.free => Some(Look::assumed_free(known.row)),
            Some(_) => None,
            // Never seen: most keys a client tries first are new.
            None => Some(Look::assumed_free(None)),
        }
    }

    /// This very acquire call's grant, found live by a retry whose first answer was lost.
    pub(super) async fn own_grant(&self, h: &HolderRecord, look: &Look) -> Result<Granted> {
        let ttl = self.leases.time_to_live(h.lease).await?.unwrap_or(0);
        Ok(Granted {
            fence: h.fence(),
            expires_at: expires_in(ttl),
            metadata: look.metadata(),
        })
    }

    /// Commits a grant if what `look` read (or assumed) is unchanged; the key as read instead
    /// if it changed.
    async fn grant(
        &self,
        r: &AcquireRequest<'_>,
        look: &Look,
        mine: Option<&Place>,
    ) -> Result<std::result::Result<Granted, Look>> {
        let lease = self.leases.for_grant(r.ttl).await?;
        let planned = self.grant_part(r, look, mine, lease.id, 0)?;
        let common = vec![self.expiry_put(&lease)];
        let committed = self.commit("acquire", r.namespace, common, vec![planned.part]);
        match committed.await?.pop() {
            Some(Committed::Yes(revision)) => {
                self.known_grant(r, look, planned.row.as_deref(), revision);
                Ok(Ok(Granted {
                    fence: fence_of(revision, 0),
                    expires_at: super::read::time(lease.expires_ms()),
                    metadata: planned.metadata,
                }))
            }
            Some(Committed::No(look)) => Ok(Err(*look)),
            None => Err(crate::error::Error::internal(
                "acquire: a transaction of one key answered none",
            )),
        }
    }

    /// Remembers a grant this client committed at `revision` (`row`: the row it wrote, none
    /// for a shared grant).
    pub(super) fn known_grant(
        &self,
        r: &AcquireRequest<'_>,
        look: &Look,
        row: Option<&str>,
        revision: i64,
    ) {
        let record = self.layout.row(r.namespace, r.key);
        match row {
            Some(value) => self.known.wrote(&record, value, revision, false),
            None => self.known.set(
                &record,
                Known {
                    row: look.row.clone(),
                    free: false,
                },
            ),
        }
    }

    /// What shows a lease's expiry to readers of its keys (a list, an observer): one put per
    /// lease in each granting transaction.
    pub(super) fn expiry_put(&self, lease: &ClassLease) -> TxnOp {
        TxnOp::put(
            self.layout.expiry(lease.id),
            lease.expires_ms().to_string(),
            Some(PutOptions::new().with_lease(lease.id)),
        )
    }

    /// One key's share of a granting transaction, as the `slot`-th key granted in it: compares
    /// on everything `look` found (the row's revision, no holder, no shared holder for an
    /// exclusive grant, an empty line when it found one, the caller's place), and the puts of
    /// the grant on `lease`.
    pub(super) fn grant_part(
        &self,
        r: &AcquireRequest<'_>,
        look: &Look,
        mine: Option<&Place>,
        lease: i64,
        slot: i64,
    ) -> Result<PlannedGrant> {
        let (ns, key) = (r.namespace, r.key);
        let row = self.layout.row(ns, key);
        let holder = self.layout.holder(ns, key);
        let shared = self.layout.shared(ns, key);
        let base = if r.shared {
            Metadata::new()
        } else {
            look.metadata()
        };
        let metadata = merged(base, r.metadata)?;
        let mut when = vec![
            row_unchanged(&row, look),
            Compare::version(holder.as_str(), CompareOp::Equal, 0),
        ];
        if look.line.is_empty() {
            // Nobody came to wait meanwhile: a plain acquire never jumps the line.
            when.push(range_empty(&self.layout.line(ns, key)));
        }
        let mut then = Vec::new();
        if let Some(place) = mine {
            when.push(Compare::create_revision(
                place.record.as_str(),
                CompareOp::Equal,
                place.create_revision,
            ));
            then.push(TxnOp::delete(place.record.as_str(), None));
        }
        let on_lease = || Some(PutOptions::new().with_lease(lease));
        let mut row_value = None;
        if r.shared {
            then.push(TxnOp::put(
                format!("{shared}{}", random_id()),
                Place::holder(r.owner, &metadata),
                on_lease(),
            ));
        } else {
            when.push(range_empty(&shared));
            then.push(TxnOp::put(
                holder,
                HolderRecord::value(r.owner, r.attempt, slot),
                on_lease(),
            ));
            let value = Row::granted(&metadata, r.owner, slot, look.pool());
            then.push(TxnOp::put(row, value.as_str(), None));
            row_value = Some(value);
        }
        Ok(PlannedGrant {
            part: Part {
                key: key.to_string(),
                when,
                then,
            },
            row: row_value,
            metadata,
        })
    }

    /// Takes a place at the end of the key's line: its ticket. The place is named by the
    /// acquire call's attempt and put only if absent, so that a call sent again after its
    /// answer was lost (a member failed) finds the place it took instead of taking a second.
    async fn enqueue(&self, r: &AcquireRequest<'_>) -> Result<i64> {
        let lease = self.leases.for_grant(r.ttl).await?;
        let record = format!(
            "{}{:016x}",
            self.layout.line(r.namespace, r.key),
            r.attempt as u64
        );
        let answer = self
            .txn(
                "wait in line",
                Txn::new()
                    .when([Compare::create_revision(
                        record.as_str(),
                        CompareOp::Equal,
                        0,
                    )])
                    .and_then([TxnOp::put(
                        record.as_str(),
                        Place::waiter(r.owner, r.shared),
                        Some(PutOptions::new().with_lease(lease.id)),
                    )])
                    .or_else([TxnOp::get(record.as_str(), None)]),
            )
            .await?;
        if answer.succeeded() {
            return Ok(fence_of(revision(&answer), 0));
        }
        let taken = answer.op_responses().into_iter().find_map(|r| match r {
            TxnOpResponse::Get(g) => g.kvs().first().map(|kv| kv.create_revision()),
            _ => None,
        });
        // The compare and the read are one transaction: the place the compare saw is read.
        let taken = taken.ok_or_else(|| {
            crate::error::Error::new(
                crate::error::ErrorKind::Database,
                "wait in line: etcd answered a failed compare without the record it compared",
            )
        })?;
        Ok(fence_of(taken, 0))
    }

    async fn delete_place(&self, place: &Place) -> Result<()> {
        self.watcher.forget(place.ticket());
        self.txn(
            "leave the line",
            Txn::new()
                .when([Compare::create_revision(
                    place.record.as_str(),
                    CompareOp::Equal,
                    place.create_revision,
                )])
                .and_then([TxnOp::delete(place.record.as_str(), None)]),
        )
        .await?;
        Ok(())
    }

    pub(super) async fn leave(&self, ns: &str, key: &str, owner: &str, ticket: i64) -> Result<()> {
        self.watcher.forget(ticket);
        let look = self.look(ns, key).await?;
        if let Some(place) = look
            .line
            .iter()
            .find(|w| w.ticket() == ticket && w.owner == owner)
        {
            self.delete_place(place).await?;
        }
        Ok(())
    }

    pub(super) async fn release_shared_one(&self, l: LeaseRef<'_>) -> Result<bool> {
        let look = self.look(l.namespace, l.key).await?;
        let Some(place) = look
            .shared
            .iter()
            .find(|s| s.ticket() == l.fence && s.owner == l.owner)
        else {
            return Ok(false);
        };
        let answer = self
            .txn(
                "release",
                Txn::new()
                    .when([Compare::create_revision(
                        place.record.as_str(),
                        CompareOp::Equal,
                        place.create_revision,
                    )])
                    .and_then([TxnOp::delete(place.record.as_str(), None)]),
            )
            .await?;
        Ok(answer.succeeded())
    }

    pub(super) async fn renew_one(
        &self,
        l: LeaseRef<'_>,
        _ttl: Duration,
        patch: Option<&str>,
    ) -> Result<Option<Renewed>> {
        for _ in 0..TRIES {
            let look = self.look(l.namespace, l.key).await?;
            let holds = look
                .stored()
                .is_some_and(|k| rules::holds(&k, l.owner, l.fence, NOW));
            let Some(holder) = look.holder.as_ref().filter(|_| holds) else {
                return Ok(None);
            };
            let Some(lease) = self.leases.by_id(holder.lease) else {
                return Ok(None);
            };
            if self.leases.keep_alive(&lease).await?.is_none() {
                return Ok(None);
            }
            self.publish_expiries(std::slice::from_ref(&lease));
            let metadata = merged(look.metadata(), patch)?;
            if patch.is_some() {
                let row = self.layout.row(l.namespace, l.key);
                let value = Row::settled(&metadata, Some(l.owner), l.fence, false, look.pool());
                let answer = self
                    .txn(
                        "renew",
                        Txn::new()
                            .when([
                                row_unchanged(&row, &look),
                                Compare::create_revision(
                                    self.layout.holder(l.namespace, l.key),
                                    CompareOp::Equal,
                                    revision_of(l.fence),
                                ),
                            ])
                            .and_then([TxnOp::put(row.as_str(), value.as_str(), None)]),
                    )
                    .await?;
                if !answer.succeeded() {
                    continue;
                }
                self.known.wrote(&row, &value, revision(&answer), false);
            }
            return Ok(Some(Renewed {
                expires_at: super::read::time(lease.expires_ms()),
                metadata,
            }));
        }
        Ok(None)
    }

    /// The keepalive's tick: one read of every record named, then one keep-alive per lease
    /// (per ttl class) they are on.
    pub(super) async fn renew_many(
        &self,
        ns: &str,
        owner: &str,
        items: &[BatchItem<'_>],
    ) -> Result<Vec<(i64, DateTime<Utc>)>> {
        let mut found: Vec<(i64, i64)> = Vec::new(); // (fence, lease)
        for chunk in items.chunks(MAX_TXN_OPS) {
            let gets = chunk.iter().map(|item| {
                if item.shared {
                    let start = self.layout.shared(ns, item.key);
                    let end = range_end(&start);
                    TxnOp::get(start, Some(GetOptions::new().with_range(end)))
                } else {
                    TxnOp::get(self.layout.holder(ns, item.key), None)
                }
            });
            let answer = self
                .txn("keepalive", Txn::new().and_then(gets.collect::<Vec<_>>()))
                .await?;
            for (item, response) in chunk.iter().zip(answer.op_responses()) {
                let TxnOpResponse::Get(got) = response else {
                    continue;
                };
                for kv in got.kvs() {
                    let (fence, who) = if item.shared {
                        let place = Place::read(kv)?;
                        (place.ticket(), place.owner)
                    } else {
                        let holder = HolderRecord::read(kv)?;
                        (holder.fence(), holder.owner)
                    };
                    if fence == item.fence && who == owner {
                        found.push((fence, kv.lease()));
                    }
                }
            }
        }
        let mut leases: Vec<i64> = found.iter().map(|(_, lease)| *lease).collect();
        leases.sort_unstable();
        leases.dedup();
        let mut alive = std::collections::HashMap::new();
        let mut kept = Vec::new();
        for id in leases {
            if let Some(lease) = self.leases.by_id(id) {
                if self.leases.keep_alive(&lease).await?.is_some() {
                    alive.insert(id, super::read::time(lease.expires_ms()));
                    kept.push(lease);
                }
            }
        }
        self.publish_expiries(&kept);
        Ok(found
            .into_iter()
            .filter_map(|(fence, lease)| alive.get(&lease).map(|at| (fence, *at)))
            .collect())
    }

    /// Writes the leases' new expiries for readers, in the background: display only, so the
    /// keepalive never waits for it, and a lease that died meanwhile fails it harmlessly.
    fn publish_expiries(&self, leases: &[std::sync::Arc<super::session::ClassLease>]) {
        if leases.is_empty() {
            return;
        }
        let puts: Vec<TxnOp> = leases
            .iter()
            .map(|l| {
                TxnOp::put(
                    self.layout.expiry(l.id),
                    l.expires_ms().to_string(),
                    Some(PutOptions::new().with_lease(l.id)),
                )
            })
            .collect();
        let (members, stats) = (self.members.clone(), self.stats.clone());
        tokio::spawn(async move {
            let (i, mut client) = members.pick();
            let answer = super::counted(&stats, client.txn(Txn::new().and_then(puts))).await;
            if let Err(e) = answer {
                members.failed(i, &e);
            }
        });
    }

    /// Deletes up to `SWEEP_LIMIT` rows under `prefix` that nobody holds
    /// (`rules::member_row_is_sweepable`: a pool's keys stay), each only if unchanged
    /// since read and still without a holder.
    pub(super) async fn sweep_rows(&self, ns: &str, prefix: &str) -> Result<u64> {
        let rows = self.layout.row(ns, prefix);
        let holders = self.layout.holder(ns, prefix);
        let shared = self.layout.all_shared(ns);
        let range = |start: &str| Some(GetOptions::new().with_range(range_end(start)));
        let answer = self
            .txn(
                "sweep",
                Txn::new().and_then([
                    TxnOp::get(rows.as_str(), range(&rows)),
                    TxnOp::get(
                        holders.as_str(),
                        range(&holders).map(GetOptions::with_keys_only),
                    ),
                    TxnOp::get(
                        shared.as_str(),
                        range(&shared).map(GetOptions::with_keys_only),
                    ),
                ]),
            )
            .await?;
        let mut gets = answer.op_responses().into_iter().map(|r| match r {
            TxnOpResponse::Get(g) => g.kvs().to_vec(),
            _ => Vec::new(),
        });
        let mut next = || gets.next().unwrap_or_default();
        let (found, held, shared_records) = (next(), next(), next());
        let rows_prefix = self.layout.rows(ns);
        let holders_prefix = self.layout.holders(ns);
        let held: std::collections::HashSet<&[u8]> = held
            .iter()
            .map(|kv| &kv.key()[holders_prefix.len()..])
            .collect();
        let shared_keys: std::collections::HashSet<String> = shared_records
            .iter()
            .filter_map(|kv| {
                let record = String::from_utf8_lossy(kv.key()).into_owned();
                self.layout.shared_key(ns, &record).map(str::to_string)
            })
            .collect();
        let mut sweepable = Vec::new();
        for kv in &found {
            let key = &kv.key()[rows_prefix.len()..];
            let row = Row::read(kv)?;
            let stored = rules::StoredKey {
                owner: row.owner.as_deref(),
                fence: row.fence,
                expires_at_ms: if held.contains(key) {
                    Some(super::records::LIVE)
                } else {
                    None
                },
                done: row.done,
                attempt: None,
                shared_until_ms: shared_keys
                    .contains(String::from_utf8_lossy(key).as_ref())
                    .then_some(super::records::LIVE),
            };
            let pooled = row.pool.is_some();
            if rules::member_row_is_sweepable(&stored, pooled, NOW) && sweepable.len() < SWEEP_LIMIT
            {
                sweepable.push((kv.key().to_vec(), kv.mod_revision(), key.to_vec()));
            }
        }
        let mut swept = 0;
        // Two compares and a delete per row, within etcd's operations per transaction.
        for chunk in sweepable.chunks(MAX_TXN_OPS / 2) {
            let mut when = Vec::new();
            let mut then = Vec::new();
            for (record, revision, key) in chunk {
                let holder = [holders_prefix.as_bytes(), key].concat();
                when.push(Compare::mod_revision(
                    record.clone(),
                    CompareOp::Equal,
                    *revision,
                ));
                when.push(Compare::version(holder, CompareOp::Equal, 0));
                then.push(TxnOp::delete(record.clone(), None));
            }
            if self
                .txn("sweep", Txn::new().when(when).and_then(then))
                .await?
                .succeeded()
            {
                swept += chunk.len() as u64;
            }
        }
        Ok(swept)
    }

    pub(super) async fn reset_one(&self, ns: &str, key: &str) -> Result<ResetOutcome> {
        for _ in 0..TRIES {
            let look = self.look(ns, key).await?;
            if look.holder.is_some() || !look.shared.is_empty() {
                return Ok(ResetOutcome::Held);
            }
            if look.row.is_none() {
                return Ok(ResetOutcome::NotFound);
            }
            let row = self.layout.row(ns, key);
            // A reset key leaves its pool (as its row goes on the other stores).
            let mut then = vec![TxnOp::delete(row.as_str(), None)];
            if let Some(pool) = look.pool() {
                then.push(TxnOp::delete(self.layout.pool_entry(ns, pool, key), None));
            }
            let answer = self
                .txn(
                    "reset",
                    Txn::new()
                        .when([
                            row_unchanged(&row, &look),
                            Compare::version(self.layout.holder(ns, key), CompareOp::Equal, 0),
                        ])
                        .and_then(then),
                )
                .await?;
            if answer.succeeded() {
                return Ok(ResetOutcome::Reset);
            }
        }
        Ok(ResetOutcome::Held)
    }
}

/// The records a waiter that is not granted waits behind: the nearest place ahead that
/// blocks it (any, for an exclusive waiter; an exclusive one, for a shared waiter), or, first
/// in line, the key's holders. Only their deletes wake it.
fn blockers(look: &Look, mine: Option<&Place>, shared: bool) -> Vec<String> {
    let mut ahead = look
        .line
        .iter()
        .filter(|w| mine.is_none_or(|m| w.create_revision < m.create_revision))
        .filter(|w| !(shared && w.shared));
    if let Some(last) = ahead.next_back() {
        return vec![last.record.clone()];
    }
    let mut records: Vec<String> = look.holder.iter().map(|h| h.key.clone()).collect();
    if !shared {
        records.extend(look.shared.iter().map(|s| s.record.clone()));
    }
    records
}
