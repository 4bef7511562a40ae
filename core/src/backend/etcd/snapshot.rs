//! What `accord top` shows (`Backend::snapshot`), in one transaction of range reads: one
//! revision, so every section is what the cluster held at one instant (PostgreSQL's six
//! statements each see their own snapshot; here nothing changes between sections).
//! The rows the other stores return, from the records `read` and `stream` read: the page and
//! the recipes' rows as `list` makes them, the counts under the page's prefix by
//! `rules::key_state`, the waiters in line by `rules::waits_in_line`, and the streams with
//! their consumers' positions.

use std::collections::{BTreeMap, HashSet};

use etcd_client::{GetOptions, KeyValue, Txn, TxnOp, TxnOpResponse};

use super::keys::range_end;
use super::read::{stored_key, RangeRecords};
use super::records::{Place, Row, LIVE, NOW};
use super::stream::{acked_seq, first_seq, Head};
use super::EtcdBackend;
use crate::backend::{KeyWaiters, SnapshotRows, StreamRow};
use crate::error::Result;
use crate::options::{KeyCounts, KeyState, ListQuery, ListRange};
use crate::rules;

/// The reads [`EtcdBackend::list_ops`] makes for one list.
const LIST_OPS: usize = 4;

fn kvs(response: Option<&TxnOpResponse>) -> Vec<KeyValue> {
    match response {
        Some(TxnOpResponse::Get(g)) => g.kvs().to_vec(),
        _ => Vec::new(),
    }
}

fn every(start: String) -> TxnOp {
    let end = range_end(&start);
    TxnOp::get(start, Some(GetOptions::new().with_range(end)))
}

impl EtcdBackend {
    pub(super) async fn snapshot_rows(
        &self,
        ns: &str,
        page: &ListQuery,
        recipes: &ListQuery,
        streams: usize,
        waiter_keys: usize,
    ) -> Result<SnapshotRows> {
        let range = page.range()?;
        let mut ops = self.list_ops(ns, page)?;
        ops.extend(self.list_ops(ns, recipes)?);
        ops.push(every(self.layout.all_lines(ns)));
        for kind in ['h', 'r', 'f', 'a'] {
            ops.push(every(self.layout.streams(kind, ns)));
        }
        let answer = self.txn("snapshot", Txn::new().and_then(ops)).await?;
        let mut page_reads = answer.op_responses();
        let rest = page_reads.split_off(2 * LIST_OPS);
        let recipe_reads = page_reads.split_off(LIST_OPS);

        let mut counts = self.counts(ns, &range, &page_reads)?;
        let (waiters, waiters_truncated, waiting) =
            self.waiters(ns, &range, &kvs(rest.first()), waiter_keys)?;
        counts.waiting = waiting;
        let (streams, streams_truncated) = self.stream_rows(ns, &rest[1..], streams)?;
        Ok(SnapshotRows {
            page: self.list_from(ns, page, page_reads).await?,
            counts,
            recipes: self.list_from(ns, recipes, recipe_reads).await?,
            streams,
            streams_truncated,
            waiters,
            waiters_truncated,
        })
    }

    /// Every key of the range by state (`rules::key_state`; a key held shared counts once, as
    /// held), and its shared holders, from a list's reads.
    fn counts(&self, ns: &str, range: &ListRange, reads: &[TxnOpResponse]) -> Result<KeyCounts> {
        let (rows, holders, shared) = (kvs(reads.first()), kvs(reads.get(1)), kvs(reads.get(2)));
        let RangeRecords { holders, shared } = self.range_records(ns, range, &holders, &shared)?;
        let shared_keys: HashSet<&str> = shared.iter().map(|(k, _)| k.as_str()).collect();
        let rows_prefix = self.layout.rows(ns);
        let mut counts = KeyCounts {
            shared_holders: shared.len() as u64,
            ..KeyCounts::default()
        };
        let mut with_row = HashSet::new();
        for kv in &rows {
            let key = String::from_utf8_lossy(&kv.key()[rows_prefix.len()..]).into_owned();
            let row = Row::read(kv)?;
            let stored = stored_key(&row, holders.get(&key), shared_keys.contains(key.as_str()));
            if rules::held_by_shared(&stored, NOW) {
                counts.held += 1;
            } else {
                match rules::key_state(&stored, NOW) {
                    KeyState::Free => counts.free += 1,
                    KeyState::Held => counts.held += 1,
                    KeyState::Done => counts.done += 1,
                }
            }
            with_row.insert(key);
        }
        // A shared grant writes no row: a key its shared holders alone keep is held.
        counts.held += shared_keys
            .iter()
            .filter(|k| !with_row.contains(**k))
            .count() as u64;
        Ok(counts)
    }

    /// Each key of the range with waiters in line, exclusive and shared, in key order, up to
    /// `limit` keys; whether more follow; and every waiter of the range.
    fn waiters(
        &self,
        ns: &str,
        range: &ListRange,
        records: &[KeyValue],
        limit: usize,
    ) -> Result<(Vec<KeyWaiters>, bool, u64)> {
        let mut places: Vec<(String, Place)> = Vec::new();
        for kv in records {
            let place = Place::read(kv)?;
            let Some(key) = self.layout.line_key(ns, &place.record) else {
                continue;
            };
            // A record in line is a place not granted yet (a grant deletes it), live while
            // its session's lease is.
            if range.contains(key) && rules::waits_in_line(false, LIVE, NOW) {
                places.push((key.to_string(), place));
            }
        }
        places.sort_by(|a, b| (a.0.as_str(), a.1.ticket()).cmp(&(b.0.as_str(), b.1.ticket())));
        let waiting = places.len() as u64;
        let (mut out, mut truncated) = (Vec::<KeyWaiters>::new(), false);
        for (key, place) in places {
            if out.last().is_none_or(|w| w.key != key) {
                if out.len() == limit {
                    truncated = true;
                    break;
                }
                out.push(KeyWaiters {
                    key,
                    exclusive: 0,
                    shared: 0,
                });
            }
            if let Some(w) = out.last_mut() {
                if place.shared {
                    w.shared += 1;
                } else {
                    w.exclusive += 1;
                }
            }
        }
        Ok((out, truncated, waiting))
    }

    /// Each stream of the namespace (published to, or given a rule) with its bounds, once per
    /// named consumer (none: once alone), in (stream, consumer) order; up to `limit` rows, and
    /// whether more follow. `reads`: the heads, rules, first seqs and acks of the namespace.
    fn stream_rows(
        &self,
        ns: &str,
        reads: &[TxnOpResponse],
        limit: usize,
    ) -> Result<(Vec<StreamRow>, bool)> {
        let name = |kind: char, kv: &KeyValue| {
            let prefix = self.layout.streams(kind, ns);
            String::from_utf8_lossy(&kv.key()[prefix.len()..]).into_owned()
        };
        // Stream → (newest seq, first seq, consumers' positions).
        let mut found: BTreeMap<String, (i64, i64, BTreeMap<String, i64>)> = BTreeMap::new();
        for kv in kvs(reads.first()) {
            let head = Head::read(Some(&kv))?;
            found
                .entry(name('h', &kv))
                .or_insert((0, 1, BTreeMap::new()))
                .0 = head.last_seq;
        }
        for kv in kvs(reads.get(1)) {
            // A stream given a rule and never published is a stream (its row on the others).
            found
                .entry(name('r', &kv))
                .or_insert((0, 1, BTreeMap::new()));
        }
        for kv in kvs(reads.get(2)) {
            if let Some(stream) = found.get_mut(&name('f', &kv)) {
                stream.1 = first_seq(Some(&kv));
            }
        }
        for kv in kvs(reads.get(3)) {
            let record = String::from_utf8_lossy(kv.key()).into_owned();
            if let Some((stream, consumer)) = self.layout.ack_of(ns, &record) {
                if let Some(s) = found.get_mut(stream) {
                    s.2.insert(consumer.to_string(), acked_seq(&kv)?);
                }
            }
        }
        let mut rows = Vec::new();
        for (stream, (last_seq, first, consumers)) in found {
            let first_seq = first.min(last_seq + 1);
            let row = |consumer| StreamRow {
                stream: stream.clone(),
                first_seq,
                last_seq,
                consumer,
            };
            if consumers.is_empty() {
                rows.push(row(None));
            }
            rows.extend(consumers.into_iter().map(|c| row(Some(c))));
            if rows.len() > limit {
                break;
            }
        }
        let truncated = rows.len() > limit;
        rows.truncate(limit);
        Ok((rows, truncated))
    }
}
