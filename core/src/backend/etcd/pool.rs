//! Work pools: offer, claim and counts. A pool's keys are its entries (`Layout::pool`, in offer
//! order) with their rows and holders, all under the pool's prefix: one read-only transaction
//! of range reads sees the whole pool at one revision. A claim commits its keys in one
//! transaction of per-key compares (each row unchanged since read, no shared holder), etcd's
//! STM over many keys; a claim that lost a key to a concurrent claimer gets the pool read again
//! from the failed transaction itself, and spreads its next try over the free keys.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse};
use serde_json::Value;

use super::grant::range_empty;
use super::keys::{fence_of, range_end};
use super::read::expiry_records;
use super::records::{merged, stored, HolderRecord, Row, NOW};
use super::{expires_in, revision, EtcdBackend, MAX_TXN_OPS};
use crate::backend::{ClaimRequest, Claimed, Granted};
use crate::error::{Error, ErrorKind, Result};
use crate::metadata::Metadata;
use crate::options::{KeyState, PoolCounts};
use crate::rules::{self, Grantable};

/// Keys per claim transaction: two compares each (row, shared holders), and two puts each
/// (holder, row) plus the lease's expiry record, within etcd's default `--max-txn-ops` (128).
const CLAIM_KEYS: usize = MAX_TXN_OPS / 2;
/// Keys per offer transaction: a compare, and two puts (row, entry), each.
const OFFER_KEYS: usize = MAX_TXN_OPS / 2;
/// An offer that loses this many transactions in a row to concurrent writers of its keys
/// fails.
const TRIES: usize = 32;
/// How long a claim goes on losing races before it answers empty: each loss is another
/// writer's progress (a key granted, or a row changed), so it ends long before under any
/// real contention; a waiting claimer then looks again after [`RACE_RETRY`].
const RACING: Duration = Duration::from_secs(10);
/// How soon a claimer that gave up after [`RACING`] looks again.
const RACE_RETRY: Duration = Duration::from_millis(20);

/// One key of the pool as read.
struct Entry {
    key: String,
    /// The offer's revision and slot: oldest offer first.
    order: (i64, i64),
    row: Row,
    holder: Option<HolderRecord>,
    shared: bool,
}

/// The pool at one revision.
struct PoolState {
    /// Oldest offer first.
    entries: Vec<Entry>,
    expiries: HashMap<i64, Option<DateTime<Utc>>>,
}

fn gets(responses: Vec<TxnOpResponse>) -> impl Iterator<Item = Vec<etcd_client::KeyValue>> {
    responses.into_iter().map(|r| match r {
        TxnOpResponse::Get(g) => g.kvs().to_vec(),
        _ => Vec::new(),
    })
}

impl EtcdBackend {
    /// The range reads that see the pool: its entries, rows and holders, the namespace's
    /// shared holders (keys only) and the leases' expiry records.
    fn pool_reads(&self, ns: &str, pool: &str) -> Vec<TxnOp> {
        let range = |start: String, keys_only: bool| {
            let options = GetOptions::new().with_range(range_end(&start));
            TxnOp::get(
                start,
                Some(if keys_only {
                    options.with_keys_only()
                } else {
                    options
                }),
            )
        };
        vec![
            range(self.layout.pool(ns, pool), false),
            range(self.layout.row(ns, pool), false),
            range(self.layout.holder(ns, pool), false),
            range(self.layout.all_shared(ns), true),
            range(self.layout.expiries(), false),
        ]
    }

    fn pool_state(&self, ns: &str, pool: &str, responses: Vec<TxnOpResponse>) -> Result<PoolState> {
        let expiries = expiry_records(&responses[4..]);
        let mut gets = gets(responses);
        let mut next = || gets.next().unwrap_or_default();
        let (index, rows, holders, shared) = (next(), next(), next(), next());
        let cut = |kv: &etcd_client::KeyValue, prefix: &str| {
            String::from_utf8_lossy(&kv.key()[prefix.len()..]).into_owned()
        };
        let rows_prefix = self.layout.rows(ns);
        let mut rows: HashMap<String, Row> = rows
            .iter()
            .map(|kv| Ok((cut(kv, &rows_prefix), Row::read(kv)?)))
            .collect::<Result<_>>()?;
        let holders_prefix = self.layout.holders(ns);
        let mut holders: HashMap<String, HolderRecord> = holders
            .iter()
            .map(|kv| Ok((cut(kv, &holders_prefix), HolderRecord::read(kv)?)))
            .collect::<Result<_>>()?;
        let shared: HashSet<String> = shared
            .iter()
            .filter_map(|kv| {
                let record = String::from_utf8_lossy(kv.key()).into_owned();
                self.layout.shared_key(ns, &record).map(str::to_string)
            })
            .collect();
        let index_prefix = self.layout.pool(ns, pool);
        let mut entries = Vec::with_capacity(index.len());
        for kv in &index {
            let key = cut(kv, &index_prefix);
            // An entry's row is in its pool (a reset deletes both in one transaction).
            let Some(row) = rows
                .remove(&key)
                .filter(|r| r.pool.as_deref() == Some(pool))
            else {
                continue;
            };
            let slot = serde_json::from_slice::<Value>(kv.value())
                .ok()
                .and_then(|v| v.get("s").and_then(Value::as_i64))
                .unwrap_or(0);
            entries.push(Entry {
                order: (kv.create_revision(), slot),
                holder: holders.remove(&key),
                shared: shared.contains(&key),
                key,
                row,
            });
        }
        entries.sort_by_key(|e| e.order);
        Ok(PoolState { entries, expiries })
    }

    async fn read_pool(&self, what: &str, ns: &str, pool: &str) -> Result<PoolState> {
        let answer = self
            .txn(what, Txn::new().and_then(self.pool_reads(ns, pool)))
            .await?;
        self.pool_state(ns, pool, answer.op_responses())
    }

    /// Offers `keys` to `pool` (see `Backend::offer`): per transaction of [`OFFER_KEYS`], a
    /// new key's row and entry are put if its row is still absent, a key in no pool joins as
    /// it is if its row is unchanged, a key in a pool is left. The first try assumes every
    /// key new; a failed one answers with the rows, which the next try decides on.
    pub(super) async fn offer_keys(
        &self,
        ns: &str,
        pool: &str,
        keys: &[String],
        metadata: Option<&str>,
    ) -> Result<u64> {
        let metadata = merged(Metadata::new(), metadata)?;
        let mut seen = HashSet::new();
        let keys: Vec<&String> = keys.iter().filter(|k| seen.insert(k.as_str())).collect();
        let mut joined = 0;
        for chunk in keys.chunks(OFFER_KEYS) {
            joined += super::resolving(|| self.offer_chunk(ns, pool, chunk, &metadata)).await?;
        }
        Ok(joined)
    }

    async fn offer_chunk(
        &self,
        ns: &str,
        pool: &str,
        keys: &[&String],
        metadata: &Metadata,
    ) -> Result<u64> {
        // The rows as last read: `None` before any read (assumed absent).
        let mut rows: Option<Vec<Option<Row>>> = None;
        for _ in 0..TRIES {
            let mut when = Vec::new();
            let mut then = Vec::new();
            let mut joining = 0;
            for (i, key) in keys.iter().enumerate() {
                let record = self.layout.row(ns, key);
                let row = rows.as_ref().and_then(|r| r[i].as_ref());
                let value = match row {
                    None => {
                        when.push(Compare::version(record.as_str(), CompareOp::Equal, 0));
                        Row::settled(metadata, None, 0, false, Some(pool))
                    }
                    Some(row) if row.pool.is_some() => continue,
                    Some(row) => {
                        when.push(Compare::mod_revision(
                            record.as_str(),
                            CompareOp::Equal,
                            row.mod_revision,
                        ));
                        // The fence written out: the row's revision changes with this put.
                        Row::settled(
                            &row.metadata,
                            row.owner.as_deref(),
                            row.fence,
                            row.done,
                            Some(pool),
                        )
                    }
                };
                then.push(TxnOp::put(record, value, None));
                then.push(TxnOp::put(
                    self.layout.pool_entry(ns, pool, key),
                    serde_json::json!({ "s": i }).to_string(),
                    None,
                ));
                joining += 1;
            }
            if joining == 0 {
                return Ok(0);
            }
            let reads: Vec<TxnOp> = keys
                .iter()
                .map(|key| TxnOp::get(self.layout.row(ns, key), None))
                .collect();
            let answer = self
                .txn("offer", Txn::new().when(when).and_then(then).or_else(reads))
                .await?;
            if answer.succeeded() {
                return Ok(joining);
            }
            rows = Some(
                gets(answer.op_responses())
                    .map(|kvs| kvs.first().map(Row::read).transpose())
                    .collect::<Result<_>>()?,
            );
        }
        Err(Error::new(
            ErrorKind::Database,
            format!("offer: lost {TRIES} transactions in a row to concurrent writers of the pool's keys"),
        ))
    }

    /// Free, held and done keys of the pool, from one read of it (`rules::key_state`).
    pub(super) async fn pool_counts(&self, ns: &str, pool: &str) -> Result<PoolCounts> {
        let state = self.read_pool("counts", ns, pool).await?;
        let mut counts = PoolCounts::default();
        for e in &state.entries {
            let Some(key) = stored(Some(&e.row), e.holder.as_ref(), false) else {
                continue;
            };
            match rules::key_state(&key, NOW) {
                KeyState::Free => counts.free += 1,
                KeyState::Held => counts.held += 1,
                KeyState::Done => counts.done += 1,
            }
        }
        Ok(counts)
    }

    /// Grants up to `limit` free keys of the pool (see `Backend::claim`).
    ///
    /// The first try takes the oldest free keys, as the other stores do. A try that fails (a
    /// key it compared was granted or changed meanwhile) reads the pool again in its failure
    /// branch and takes a window of the free keys chosen at random: claimers that collided on
    /// the head spread over the pool, so each round of N claimers grants many, not one.
    pub(super) async fn claim_keys(&self, r: &ClaimRequest<'_>) -> Result<Claimed> {
        let (ns, pool) = (r.namespace, r.pool);
        // A freed key of this pool wakes one of this client's claimers from now on.
        self.watcher
            .claims_from(self.layout.holder(ns, pool), self.tag(ns, pool));
        let mut state = super::resolving(|| self.read_pool("claim", ns, pool)).await?;
        let mut granted: Vec<(String, Granted)> = Vec::new();
        let mut spread = false;
        let racing_until = std::time::Instant::now() + RACING;
        loop {
            let mine: HashSet<String> = granted.iter().map(|(k, _)| k.clone()).collect();
            let mut free = Vec::new();
            let mut next_expiry: Option<Duration> = None;
            for e in &state.entries {
                if mine.contains(&e.key) || r.below.is_some_and(|b| e.key.as_str() >= b) {
                    continue;
                }
                let Some(key) = stored(Some(&e.row), e.holder.as_ref(), e.shared) else {
                    continue;
                };
                match rules::grantable(Some(&key), r.attempt, NOW) {
                    // This very claim's grant (a retry whose answer was lost): granted again.
                    Grantable::Yes if e.holder.is_some() => {
                        if granted.len() < r.limit {
                            if let Some(again) = self.granted_before(e).await? {
                                granted.push((e.key.clone(), again));
                            }
                        }
                    }
                    Grantable::Yes => free.push(e),
                    Grantable::Held(_) => {
                        let left = e
                            .holder
                            .as_ref()
                            .and_then(|h| state.expiries.get(&h.lease).copied().flatten())
                            .map(|at| (at - Utc::now()).to_std().unwrap_or_default());
                        if let Some(left) = left {
                            next_expiry = Some(next_expiry.map_or(left, |n| n.min(left)));
                        }
                    }
                    Grantable::Done => {}
                }
            }
            let wanted = r.limit.saturating_sub(granted.len()).min(CLAIM_KEYS);
            if wanted == 0 || free.is_empty() {
                let next_expiry = if granted.is_empty() {
                    next_expiry
                } else {
                    None
                };
                return Ok(Claimed {
                    granted,
                    next_expiry,
                });
            }
            let picked = pick(free, wanted, spread);
            match super::resolving(|| self.claim_txn(r, &picked)).await? {
                Ok(keys) => granted.extend(keys),
                Err(fresh) => {
                    if std::time::Instant::now() >= racing_until {
                        return Ok(Claimed {
                            next_expiry: granted.is_empty().then_some(RACE_RETRY),
                            granted,
                        });
                    }
                    state = fresh;
                    spread = true;
                }
            }
        }
    }

    /// A key this claim call granted in an earlier try (whose answer was lost), as granted.
    async fn granted_before(&self, e: &Entry) -> Result<Option<Granted>> {
        let Some(h) = &e.holder else {
            return Ok(None);
        };
        Ok(self.leases.time_to_live(h.lease).await?.map(|ttl| Granted {
            fence: h.fence(),
            expires_at: expires_in(ttl),
            metadata: e.row.metadata.clone(),
        }))
    }

    /// One claim transaction: grants every key in `picked` if each row is unchanged since read
    /// and no shared holder came; else the pool as the failed transaction read it.
    async fn claim_txn(
        &self,
        r: &ClaimRequest<'_>,
        picked: &[Picked],
    ) -> Result<std::result::Result<Vec<(String, Granted)>, PoolState>> {
        let (ns, pool) = (r.namespace, r.pool);
        let lease = self.leases.for_grant(r.ttl).await?;
        let on_lease = || Some(PutOptions::new().with_lease(lease.id));
        let mut when = Vec::with_capacity(picked.len() * 2);
        let mut then = Vec::with_capacity(picked.len() * 2 + 1);
        // What `expires_at` shows to readers of these keys.
        then.push(TxnOp::put(
            self.layout.expiry(lease.id),
            lease.expires_ms().to_string(),
            on_lease(),
        ));
        let mut metadata = Vec::with_capacity(picked.len());
        let mut rows = Vec::with_capacity(picked.len());
        for (slot, p) in picked.iter().enumerate() {
            let slot = slot as i64;
            let row = self.layout.row(ns, &p.key);
            // A holder is only ever put with its row: an unchanged row has none yet.
            when.push(Compare::mod_revision(
                row.as_str(),
                CompareOp::Equal,
                p.mod_revision,
            ));
            when.push(range_empty(&self.layout.shared(ns, &p.key)));
            let merged = merged(p.metadata.clone(), r.metadata)?;
            then.push(TxnOp::put(
                self.layout.holder(ns, &p.key),
                HolderRecord::value(r.owner, r.attempt, slot),
                on_lease(),
            ));
            let value = Row::granted(&merged, r.owner, slot, Some(pool));
            then.push(TxnOp::put(row.clone(), value.clone(), None));
            rows.push((row, value));
            metadata.push(merged);
        }
        let answer = self
            .txn(
                "claim",
                Txn::new()
                    .when(when)
                    .and_then(then)
                    .or_else(self.pool_reads(ns, pool)),
            )
            .await?;
        if !answer.succeeded() {
            return Ok(Err(self.pool_state(ns, pool, answer.op_responses())?));
        }
        let at = revision(&answer);
        // Remembered as a plain grant's row is: the key's done or release then compares
        // with it instead of reading the key first.
        for (row, value) in &rows {
            self.known.wrote(row, value, at, false);
        }
        let expires_at = super::read::time(lease.expires_ms());
        Ok(Ok(picked
            .iter()
            .zip(metadata)
            .zip(0..)
            .map(|((p, metadata), slot)| {
                (
                    p.key.clone(),
                    Granted {
                        fence: fence_of(at, slot),
                        expires_at,
                        metadata,
                    },
                )
            })
            .collect()))
    }
}

/// A free key chosen for a claim transaction.
#[derive(Clone)]
struct Picked {
    key: String,
    mod_revision: i64,
    metadata: Metadata,
}

/// `wanted` of the free keys (oldest offer first): the oldest, or (`spread`, after a lost
/// race) one of the free list's consecutive windows of `wanted` keys, at random. Windows, not
/// random keys: two claimers that pick different windows share no key, so N claimers of large
/// batches collide only when they pick the same window, where random samples of a pool barely
/// larger than their demand would almost always share a key.
fn pick(free: Vec<&Entry>, wanted: usize, spread: bool) -> Vec<Picked> {
    let windows = free.len().div_ceil(wanted.max(1));
    let window = if spread && windows > 1 {
        rand::random_range(0..windows)
    } else {
        0
    };
    let chosen: Vec<&Entry> = free
        .into_iter()
        .skip(window * wanted)
        .take(wanted)
        .collect();
    chosen
        .into_iter()
        .map(|e| Picked {
            key: e.key.clone(),
            mod_revision: e.row.mod_revision,
            metadata: e.row.metadata.clone(),
        })
        .collect()
}
