//! Durable streams on etcd: the same answers as the other stores' `streams.rs`.
//!
//! A stream's head record (`P/s/h/…`: its newest seq and published_at) orders its publishes:
//! a publish compares the head's mod_revision with the one it read and, in the same
//! transaction, bumps the head and puts the events under the seqs that follow. Two publishers
//! that read the same head cannot both commit, so seqs are gapless and follow commit order, and
//! a reader's transaction (the head and a page of events, at one revision) never sees seq 8
//! without seq 7. A publisher that lost the race reads the head from the failed transaction's
//! answer and tries again (etcd's STM recipe); one that remembers the head from its previous
//! publish commits in one round trip. Each publish also puts a record on the stream's channel
//! (the notify path): the subscribers' watch wakes them to read again.
//!
//! A publish whose answer was lost with its member is resolved, not guessed: its first event
//! carries the publish's random id, so once the head moved the publisher reads that event to
//! learn whether its transaction committed (it can never commit after the head moved); while
//! the head has not moved it sends the same transaction again, which commits at most once.
//!
//! Trims delete a prefix of a stream's events and move its first-seq record (`P/s/f/…`), with
//! a compare on that record only: publishers never wait for a trim, nor a trim for them.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{
    Compare, CompareOp, DeleteOptions, GetOptions, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse,
    TxnResponse,
};
use serde_json::{json, Value};

use super::keys::{random_id, range_end};
use super::read::time;
use super::records::client_ms;
use super::{resolving, revision, EtcdBackend, MAX_TXN_OPS, OUTAGE, OUTAGE_PAUSE};
use crate::backend::{
    millis, PublishItem, Published, StoredEvent, StreamPage, StreamState, StreamStore,
};
use crate::error::{Error, ErrorKind, Result};

/// The most payload bytes one publish transaction carries (at least one event always goes):
/// under etcd's default request limit (`--max-request-bytes`, 1.5 MiB).
const MAX_TXN_BYTES: usize = 1024 * 1024;
/// Heads remembered for publishing in one round trip; the map is emptied when full.
const HEADS_REMEMBERED: usize = 1024;
/// gRPC's OutOfRange: an answer larger than the client accepts (4 MiB).
const OUT_OF_RANGE: i32 = 11;

/// A stream's head: its newest seq and when that was published (this client's or another
/// publisher's clock, see docs/semantics.md "On etcd").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Head {
    /// The head record's mod_revision (0: never published).
    pub revision: i64,
    pub last_seq: i64,
    pub published_ms: i64,
}

impl Head {
    pub fn read(kv: Option<&KeyValue>) -> Result<Head> {
        let Some(kv) = kv else {
            return Ok(Head::default());
        };
        let v = json_of(kv)?;
        Ok(Head {
            revision: kv.mod_revision(),
            last_seq: v.get("l").and_then(Value::as_i64).unwrap_or(0),
            published_ms: v.get("t").and_then(Value::as_i64).unwrap_or(0),
        })
    }

    fn value(last_seq: i64, published_ms: i64) -> String {
        json!({"l": last_seq, "t": published_ms}).to_string()
    }
}

/// A stream's retention rule.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Rule {
    pub max_len: Option<i64>,
    pub max_age_ms: Option<i64>,
}

impl Rule {
    pub fn read(kv: Option<&KeyValue>) -> Result<Rule> {
        let Some(kv) = kv else {
            return Ok(Rule::default());
        };
        let v = json_of(kv)?;
        Ok(Rule {
            max_len: v.get("n").and_then(Value::as_i64),
            max_age_ms: v.get("g").and_then(Value::as_i64),
        })
    }

    fn retains(&self) -> bool {
        self.max_len.is_some() || self.max_age_ms.is_some()
    }
}

/// The first stored seq from the first-seq record (none: nothing was ever trimmed, so 1).
/// Trims delete prefixes and publishes append without gaps, so every seq from it to the head's
/// is stored, and it is `last_seq + 1` when none is.
pub(crate) fn first_seq(kv: Option<&KeyValue>) -> i64 {
    kv.and_then(|kv| std::str::from_utf8(kv.value()).ok()?.parse().ok())
        .unwrap_or(1)
}

/// A consumer's stored position.
pub(crate) fn acked_seq(kv: &KeyValue) -> Result<i64> {
    Ok(json_of(kv)?.get("s").and_then(Value::as_i64).unwrap_or(0))
}

fn json_of(kv: &KeyValue) -> Result<Value> {
    serde_json::from_slice(kv.value()).map_err(|e| {
        Error::internal(format!(
            "an accord stream record in etcd is not JSON ({}): {e}",
            String::from_utf8_lossy(kv.key())
        ))
    })
}

/// An event's value: a JSON line (published_at; the publish's id on its first event), then the
/// payload's bytes as they are (no escaping: a 64 KiB payload stays 64 KiB).
fn event_value(published_ms: i64, id: Option<&str>, payload: &str) -> Vec<u8> {
    let header = match id {
        Some(id) => json!({"t": published_ms, "b": id}),
        None => json!({"t": published_ms}),
    };
    let mut value = header.to_string().into_bytes();
    value.push(b'\n');
    value.extend_from_slice(payload.as_bytes());
    value
}

/// An event's published_at, publish id and payload.
fn read_event(kv: &KeyValue) -> Result<(i64, Option<String>, &[u8])> {
    let bad = || {
        Error::internal(format!(
            "an accord event in etcd is malformed ({})",
            String::from_utf8_lossy(kv.key())
        ))
    };
    let value = kv.value();
    let newline = value.iter().position(|&b| b == b'\n').ok_or_else(bad)?;
    let header: Value = serde_json::from_slice(&value[..newline]).map_err(|_| bad())?;
    let at = header.get("t").and_then(Value::as_i64).ok_or_else(bad)?;
    let id = header.get("b").and_then(Value::as_str).map(str::to_string);
    Ok((at, id, &value[newline + 1..]))
}

fn gets(answer: &TxnResponse) -> Vec<Vec<KeyValue>> {
    answer
        .op_responses()
        .into_iter()
        .filter_map(|r| match r {
            TxnOpResponse::Get(g) => Some(g.kvs().to_vec()),
            _ => None,
        })
        .collect()
}

/// The heads this client last saw, by head record: a publish compares with them first.
#[derive(Default)]
pub(crate) struct KnownHeads(Mutex<HashMap<String, Head>>);

impl KnownHeads {
    fn get(&self, record: &str) -> Head {
        let heads = self.0.lock().unwrap_or_else(|e| e.into_inner());
        heads.get(record).copied().unwrap_or_default()
    }

    fn set(&self, record: &str, head: Head) {
        let mut heads = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if heads.len() >= HEADS_REMEMBERED && !heads.contains_key(record) {
            heads.clear();
        }
        heads.insert(record.to_string(), head);
    }
}

/// One stream's part of a publish transaction: its events (indexes into the items) and the
/// head they follow.
struct Part<'a> {
    stream: &'a str,
    channel: &'a str,
    head_record: String,
    items: Vec<usize>,
}

/// A stream's records at one revision.
struct Records {
    head: Head,
    rule: Rule,
    first_seq: i64,
    /// The first-seq record's mod_revision (0: never trimmed), which a trim compares.
    first_revision: i64,
}

/// A publish transaction as sent: the heads it compares with and the answers it gives.
#[derive(Clone)]
struct Plan {
    heads: Vec<Head>,
    /// Per part: its first seq and published_at.
    starts: Vec<(i64, i64)>,
}

impl EtcdBackend {
    /// One transaction's worth of items (`chunk`, indexes into `items`), published: seqs and
    /// times per item, in the order of `chunk`.
    async fn publish_chunk(
        &self,
        ns: &str,
        items: &[PublishItem<'_>],
        chunk: &[usize],
    ) -> Result<Vec<Published>> {
        let mut parts: Vec<Part<'_>> = Vec::new();
        for &i in chunk {
            let item = &items[i];
            match parts.iter_mut().find(|p| p.stream == item.stream) {
                Some(part) => part.items.push(i),
                None => parts.push(Part {
                    stream: item.stream,
                    channel: item.channel,
                    head_record: self.layout.stream('h', ns, item.stream),
                    items: vec![i],
                }),
            }
        }
        let id = random_id();
        let lease = resolving(|| self.leases.retention()).await?;
        let mut heads: Vec<Head> = parts
            .iter()
            .map(|p| self.known_heads.get(&p.head_record))
            .collect();
        // A transaction sent whose outcome is unknown (its answer was lost with its member).
        let mut unsure: Option<Plan> = None;
        let until = std::time::Instant::now() + OUTAGE;
        loop {
            if let Some(sent) = &unsure {
                if sent.heads != heads {
                    // A head moved: the transaction sent committed, or never will.
                    if let Some(answers) = self.landed(ns, &parts, chunk, sent, &id).await? {
                        return Ok(answers);
                    }
                    unsure = None;
                }
            }
            let plan = match &unsure {
                Some(sent) => sent.clone(),
                None => {
                    let now = client_ms();
                    Plan {
                        starts: heads
                            .iter()
                            .map(|h| (h.last_seq + 1, h.published_ms.max(now)))
                            .collect(),
                        heads: heads.clone(),
                    }
                }
            };
            let txn = self.publish_txn(ns, &parts, items, &plan, &id, lease);
            match self.txn("publish", txn).await {
                Ok(answer) if answer.succeeded() => {
                    let rev = revision(&answer);
                    let rules = gets(&answer);
                    let mut answers = Vec::new();
                    for (k, part) in parts.iter().enumerate() {
                        let (first, at) = plan.starts[k];
                        let last = first + part.items.len() as i64 - 1;
                        self.known_heads.set(
                            &part.head_record,
                            Head {
                                revision: rev,
                                last_seq: last,
                                published_ms: at,
                            },
                        );
                        let retained = Rule::read(rules.get(k).and_then(|r| r.first()))?.retains();
                        answers.push((first, at, retained));
                    }
                    return Ok(in_order(&parts, chunk, &answers));
                }
                Ok(answer) => {
                    // Another publisher moved a head: the failed branch read them all.
                    for ((k, part), kvs) in parts.iter().enumerate().zip(gets(&answer)) {
                        heads[k] = Head::read(kvs.first())?;
                        self.known_heads.set(&part.head_record, heads[k]);
                    }
                }
                Err(e)
                    if e.kind() == ErrorKind::Connection && std::time::Instant::now() < until =>
                {
                    tracing::debug!(target: "accord", error = %e, "publish failed with its member; reading its heads");
                    unsure = Some(plan);
                    tokio::time::sleep(OUTAGE_PAUSE).await;
                    heads = resolving(|| self.read_heads(&parts)).await?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn publish_txn(
        &self,
        ns: &str,
        parts: &[Part<'_>],
        items: &[PublishItem<'_>],
        plan: &Plan,
        id: &str,
        lease: i64,
    ) -> Txn {
        let mut compares = Vec::new();
        let mut then = Vec::new();
        let mut otherwise = Vec::new();
        for (k, part) in parts.iter().enumerate() {
            let (first, at) = plan.starts[k];
            // Absent compares as mod_revision 0.
            compares.push(Compare::mod_revision(
                part.head_record.as_str(),
                CompareOp::Equal,
                plan.heads[k].revision,
            ));
            otherwise.push(TxnOp::get(part.head_record.as_str(), None));
            for (n, &i) in part.items.iter().enumerate() {
                let seq = first + n as i64;
                let mark = (n == 0).then_some(id);
                then.push(TxnOp::put(
                    self.layout.event(ns, part.stream, seq),
                    event_value(at, mark, items[i].payload),
                    None,
                ));
            }
            let last = first + part.items.len() as i64 - 1;
            then.push(TxnOp::put(
                part.head_record.as_str(),
                Head::value(last, at),
                None,
            ));
            // Empty: it only says "read again" (`stream::stream_channel`).
            then.push(TxnOp::put(
                self.layout.notification(part.channel, &format!("{id}.{k}")),
                "",
                Some(PutOptions::new().with_lease(lease)),
            ));
        }
        // The rules last, so that the gets of the answer are the parts' rules in order.
        for part in parts {
            then.push(TxnOp::get(self.layout.stream('r', ns, part.stream), None));
        }
        Txn::new().when(compares).and_then(then).or_else(otherwise)
    }

    async fn read_heads(&self, parts: &[Part<'_>]) -> Result<Vec<Head>> {
        let ops: Vec<TxnOp> = parts
            .iter()
            .map(|p| TxnOp::get(p.head_record.as_str(), None))
            .collect();
        let answer = self
            .txn("read stream heads", Txn::new().and_then(ops))
            .await?;
        let heads = gets(&answer)
            .iter()
            .map(|kvs| Head::read(kvs.first()))
            .collect::<Result<Vec<_>>>()?;
        for (part, head) in parts.iter().zip(&heads) {
            self.known_heads.set(&part.head_record, *head);
        }
        Ok(heads)
    }

    /// Whether the publish `sent` (with `id`) committed, once a head moved past what it
    /// compared with: its first event, at the seq it would have taken, carries its id. `None`:
    /// it did not (another publisher took that seq). A first event trimmed since leaves no way
    /// to tell: the caller gets `Connection`, the events may or may not be stored, as on the
    /// other stores.
    async fn landed(
        &self,
        ns: &str,
        parts: &[Part<'_>],
        chunk: &[usize],
        sent: &Plan,
        id: &str,
    ) -> Result<Option<Vec<Published>>> {
        let (first, _) = sent.starts[0];
        let mut ops = vec![TxnOp::get(
            self.layout.event(ns, parts[0].stream, first),
            None,
        )];
        ops.extend(
            parts
                .iter()
                .map(|p| TxnOp::get(self.layout.stream('r', ns, p.stream), None)),
        );
        let read = Txn::new().and_then(ops);
        let answer = resolving(|| self.txn("read a publish's outcome", read.clone())).await?;
        let found = gets(&answer);
        let Some(event) = found.first().and_then(|kvs| kvs.first()) else {
            return Err(Error::new(
                ErrorKind::Connection,
                "publish: the connection to etcd failed and the events' outcome is unknown \
                 (they may or may not be stored)",
            ));
        };
        if read_event(event)?.1.as_deref() != Some(id) {
            return Ok(None);
        }
        let answers = sent
            .starts
            .iter()
            .enumerate()
            .map(|(k, &(first, at))| {
                let rule = Rule::read(found.get(k + 1).and_then(|r| r.first()))?;
                Ok((first, at, rule.retains()))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(in_order(parts, chunk, &answers)))
    }

    async fn read_page(
        &self,
        ns: &str,
        stream: &str,
        after: i64,
        limit: i64,
    ) -> Result<StreamPage> {
        let events = self.layout.events(ns, stream);
        let from = self.layout.event(ns, stream, after.saturating_add(1));
        let txn = Txn::new().and_then([
            TxnOp::get(self.layout.stream('h', ns, stream), None),
            TxnOp::get(
                from,
                Some(
                    GetOptions::new()
                        .with_range(range_end(&events))
                        .with_limit(limit),
                ),
            ),
        ]);
        let answer = self.txn("read stream", txn).await?;
        let found = gets(&answer);
        let head = Head::read(found.first().and_then(|kvs| kvs.first()))?;
        let mut page = StreamPage {
            last_seq: head.last_seq,
            events: Vec::new(),
        };
        for kv in found.get(1).map(Vec::as_slice).unwrap_or_default() {
            let seq: i64 = std::str::from_utf8(&kv.key()[events.len()..])
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| Error::internal("an accord event's key in etcd has no seq"))?;
            let (at, _, payload) = read_event(kv)?;
            let payload = String::from_utf8(payload.to_vec())
                .map_err(|_| Error::internal(format!("stored event {seq} is not UTF-8")))?;
            page.events.push(StoredEvent {
                seq,
                payload,
                published_at: time(at),
            });
        }
        Ok(page)
    }

    /// The stream's head, rule and first-seq record at one revision.
    async fn stream_records(&self, ns: &str, stream: &str) -> Result<Records> {
        let txn = Txn::new().and_then([
            TxnOp::get(self.layout.stream('h', ns, stream), None),
            TxnOp::get(self.layout.stream('r', ns, stream), None),
            TxnOp::get(self.layout.stream('f', ns, stream), None),
        ]);
        let found = gets(&self.txn("stream state", txn).await?);
        let one = |i: usize| found.get(i).and_then(|kvs| kvs.first());
        Ok(Records {
            head: Head::read(one(0))?,
            rule: Rule::read(one(1))?,
            first_seq: first_seq(one(2)).min(Head::read(one(0))?.last_seq + 1),
            first_revision: one(2).map_or(0, KeyValue::mod_revision),
        })
    }

    /// The published_at of the stream's event `seq` (`None`: trimmed meanwhile).
    async fn published_ms(&self, ns: &str, stream: &str, seq: i64) -> Result<Option<i64>> {
        let txn = Txn::new().and_then([TxnOp::get(self.layout.event(ns, stream, seq), None)]);
        let found = gets(&self.txn("trim stream", txn).await?);
        found
            .first()
            .and_then(|kvs| kvs.first())
            .map(|kv| read_event(kv).map(|(at, _, _)| at))
            .transpose()
    }

    /// One trim: deletes the events the rule no longer keeps, at most `limit` of them, and
    /// moves the first-seq record, if nobody trimmed meanwhile.
    async fn trim_once(&self, ns: &str, stream: &str, limit: i64) -> Result<Option<u64>> {
        let floor_record = self.layout.stream('f', ns, stream);
        let Records {
            head,
            rule,
            first_seq: first,
            first_revision,
        } = self.stream_records(ns, stream).await?;
        // At most `limit` events per transaction: the oldest ones.
        let cap = head.last_seq.min(first.saturating_add(limit - 1));
        let by_len = rule.max_len.map(|n| head.last_seq - n);
        let by_age = match rule.max_age_ms {
            Some(age) if cap >= first => {
                self.older_than(ns, stream, first, cap, client_ms() - age)
                    .await?
            }
            _ => None,
        };
        let Some(upto) = by_len.max(by_age).map(|u| u.min(cap)) else {
            return Ok(Some(0));
        };
        if upto < first {
            return Ok(Some(0));
        }
        let events = self.layout.events(ns, stream);
        let txn = Txn::new()
            .when([Compare::mod_revision(
                floor_record.as_str(),
                CompareOp::Equal,
                first_revision,
            )])
            .and_then([
                TxnOp::delete(
                    events.as_str(),
                    Some(DeleteOptions::new().with_range(self.layout.event(ns, stream, upto + 1))),
                ),
                TxnOp::put(floor_record.as_str(), (upto + 1).to_string(), None),
            ]);
        let answer = self.txn("trim stream", txn).await?;
        if !answer.succeeded() {
            return Ok(None);
        }
        let gone = answer.op_responses().into_iter().find_map(|r| match r {
            TxnOpResponse::Delete(d) => Some(d.deleted()),
            _ => None,
        });
        Ok(Some(gone.unwrap_or(0).max(0) as u64))
    }

    /// The newest seq in `first..=last` published before `cutoff_ms` (`None`: not even
    /// `first`). published_at never goes back within a stream, so those seqs are a prefix:
    /// a binary search reads a few events rather than every one.
    async fn older_than(
        &self,
        ns: &str,
        stream: &str,
        first: i64,
        last: i64,
        cutoff_ms: i64,
    ) -> Result<Option<i64>> {
        // A missing event was trimmed by another client: older than anything stored.
        let old = |at: Option<i64>| at.is_none_or(|at| at < cutoff_ms);
        if !old(self.published_ms(ns, stream, first).await?) {
            return Ok(None);
        }
        let (mut lo, mut hi) = (first, last);
        while lo < hi {
            let mid = lo + (hi - lo + 1) / 2;
            if old(self.published_ms(ns, stream, mid).await?) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        Ok(Some(lo))
    }

    async fn ack_once(&self, ns: &str, stream: &str, consumer: &str, seq: i64) -> Result<()> {
        let record = self.layout.ack(ns, stream, consumer);
        for _ in 0..super::TRIES {
            let read = Txn::new().and_then([TxnOp::get(record.as_str(), None)]);
            let found = gets(&self.txn("ack", read).await?);
            let stored = found.first().and_then(|kvs| kvs.first());
            let (revision, acked) = match stored {
                Some(kv) => (kv.mod_revision(), acked_seq(kv)?),
                None => (0, 0),
            };
            if stored.is_some() && acked >= seq {
                return Ok(());
            }
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    record.as_str(),
                    CompareOp::Equal,
                    revision,
                )])
                .and_then([TxnOp::put(
                    record.as_str(),
                    json!({"s": seq, "u": client_ms()}).to_string(),
                    None,
                )]);
            if self.txn("ack", txn).await?.succeeded() {
                return Ok(());
            }
        }
        Err(Error::new(
            ErrorKind::Database,
            "ack: the consumer's position kept changing under this ack; try again",
        ))
    }
}

/// The answers of a publish transaction (`(first seq, published_at, retained)` per part) per
/// item of `chunk`, in its order.
fn in_order(parts: &[Part<'_>], chunk: &[usize], answers: &[(i64, i64, bool)]) -> Vec<Published> {
    let mut by_item: HashMap<usize, Published> = HashMap::new();
    for (part, &(first, at, retained)) in parts.iter().zip(answers) {
        for (n, &i) in part.items.iter().enumerate() {
            by_item.insert(
                i,
                Published {
                    seq: first + n as i64,
                    published_at: time(at),
                    retained,
                },
            );
        }
    }
    chunk.iter().filter_map(|i| by_item.remove(i)).collect()
}

/// Splits the items into transactions: each within [`MAX_TXN_OPS`] (an event's put, and per
/// stream its head's put, its channel's put and its rule's get) and [`MAX_TXN_BYTES`].
fn chunks(items: &[PublishItem<'_>]) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = Vec::new();
    let (mut ops, mut bytes) = (0, 0);
    let mut streams: Vec<&str> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let new_stream = !streams.contains(&item.stream);
        let cost = 1 + if new_stream { 3 } else { 0 };
        let size = item.payload.len();
        let full = ops + cost > MAX_TXN_OPS || bytes + size > MAX_TXN_BYTES;
        if out.is_empty() || (full && ops > 0) {
            out.push(Vec::new());
            streams.clear();
            ops = 0;
            bytes = 0;
        }
        if !streams.contains(&item.stream) {
            streams.push(item.stream);
            ops += 3;
        }
        ops += 1;
        bytes += size;
        if let Some(last) = out.last_mut() {
            last.push(i);
        }
    }
    out
}

#[async_trait]
impl StreamStore for EtcdBackend {
    async fn publish(&self, namespace: &str, items: &[PublishItem<'_>]) -> Result<Vec<Published>> {
        let mut answers = Vec::with_capacity(items.len());
        for chunk in chunks(items) {
            answers.extend(self.publish_chunk(namespace, items, &chunk).await?);
        }
        Ok(answers)
    }

    async fn read_stream(
        &self,
        namespace: &str,
        stream: &str,
        after: i64,
        limit: usize,
    ) -> Result<StreamPage> {
        let mut limit = i64::try_from(limit).unwrap_or(i64::MAX).max(1);
        loop {
            match resolving(|| self.read_page(namespace, stream, after, limit)).await {
                // Large payloads: a page the client cannot take in one answer is read in
                // halves (a page may hold fewer events than asked; the reader reads on).
                Err(e) if limit > 1 && too_large(&e) => limit /= 2,
                answer => return answer,
            }
        }
    }

    async fn stream_state(&self, namespace: &str, stream: &str) -> Result<StreamState> {
        let Records {
            head,
            rule,
            first_seq,
            ..
        } = resolving(|| self.stream_records(namespace, stream)).await?;
        Ok(StreamState {
            first_seq,
            last_seq: head.last_seq,
            max_len: rule.max_len,
            max_age: rule
                .max_age_ms
                .map(|ms| Duration::from_millis(ms.max(0) as u64)),
        })
    }

    async fn set_retention(
        &self,
        namespace: &str,
        stream: &str,
        max_len: Option<i64>,
        max_age: Option<Duration>,
    ) -> Result<()> {
        let record = self.layout.stream('r', namespace, stream);
        let value = json!({"n": max_len, "g": max_age.map(millis)}).to_string();
        let txn = Txn::new().and_then([TxnOp::put(record, value, None)]);
        resolving(|| self.txn("set retention", txn.clone())).await?;
        Ok(())
    }

    async fn trim_stream(&self, namespace: &str, stream: &str, limit: usize) -> Result<u64> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX).max(1);
        for _ in 0..super::TRIES {
            if let Some(gone) = resolving(|| self.trim_once(namespace, stream, limit)).await? {
                return Ok(gone);
            }
        }
        // Other clients trimmed meanwhile: what this one would have deleted is gone.
        Ok(0)
    }

    async fn ack(&self, namespace: &str, stream: &str, consumer: &str, seq: i64) -> Result<()> {
        resolving(|| self.ack_once(namespace, stream, consumer, seq)).await
    }

    async fn acked(&self, namespace: &str, stream: &str, consumer: &str) -> Result<Option<i64>> {
        let record = self.layout.ack(namespace, stream, consumer);
        let read = Txn::new().and_then([TxnOp::get(record, None)]);
        let answer = resolving(|| self.txn("read ack", read.clone())).await?;
        gets(&answer)
            .first()
            .and_then(|kvs| kvs.first())
            .map(acked_seq)
            .transpose()
    }
}

/// Whether the call failed because its answer exceeded what the client takes in one message.
fn too_large(e: &Error) -> bool {
    let source = std::error::Error::source(e);
    matches!(
        source.and_then(|s| s.downcast_ref::<etcd_client::Error>()),
        Some(etcd_client::Error::GRpcStatus(s)) if s.code() as i32 == OUT_OF_RANGE
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item<'a>(stream: &'a str, payload: &'a str) -> PublishItem<'a> {
        PublishItem {
            stream,
            payload,
            channel: "c",
        }
    }

    #[test]
    fn publishes_split_within_the_transaction_limits() {
        // 1,000 events of one stream: 97 per transaction (a head, a channel, a rule each).
        let many: Vec<PublishItem<'_>> = (0..1000).map(|_| item("s", "x")).collect();
        let split = chunks(&many);
        assert!(split.iter().all(|c| c.len() + 3 <= MAX_TXN_OPS));
        assert_eq!(split.iter().map(Vec::len).sum::<usize>(), 1000);
        assert_eq!(split[0].len(), MAX_TXN_OPS - 3);
        let flat: Vec<usize> = split.concat();
        assert_eq!(flat, (0..1000).collect::<Vec<_>>());
        // Large payloads: by bytes; a payload over the limit still goes, alone.
        let big = "x".repeat(400 * 1024);
        let huge = "x".repeat(MAX_TXN_BYTES + 1);
        let large = vec![
            item("s", &big),
            item("s", &big),
            item("t", &big),
            item("s", &huge),
        ];
        let split = chunks(&large);
        assert_eq!(split, vec![vec![0, 1], vec![2], vec![3]]);
        // Two streams interleaved: each stream's cost counted once per transaction.
        let mixed: Vec<PublishItem<'_>> = (0..10)
            .map(|i| item(if i % 2 == 0 { "a" } else { "b" }, "x"))
            .collect();
        assert_eq!(chunks(&mixed), vec![(0..10).collect::<Vec<_>>()]);
    }

    #[test]
    fn events_keep_their_payload_bytes() {
        let payload = "a\nb \0 \"é\"";
        let value = event_value(7, Some("id"), payload);
        assert!(value.starts_with(br#"{"#) && value.ends_with(payload.as_bytes()));
        assert_eq!(value.len(), payload.len() + r#"{"b":"id","t":7}"#.len() + 1);
    }
}
