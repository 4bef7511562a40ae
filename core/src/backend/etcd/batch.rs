//! Plain acquires (`try_acquire`) and endings (release, done) of one or many keys: the
//! client's group commit (`crate::session::rounds`) on etcd.
//!
//! Each key is one part of a transaction: compares on what was read or is known of it
//! (`known`), the writes if they hold, and a read of the key if they do not. One key's part is
//! the transaction itself; the parts of many keys are nested transactions (etcd ≥ 3.3) of one,
//! each succeeding or failing on its own, so that one key taken meanwhile fails only its own
//! part. A failed part's answer is the key as read at that revision: the rules decide again on
//! it, and whatever is still grantable (or still held by the ending's grant) goes in the next
//! transaction, with no read between. The keys one transaction grants share its revision, and
//! their fences differ by their slot in it (`keys::fence_of`).

use etcd_client::{Compare, CompareOp, Txn, TxnOp, TxnOpResponse};

use super::grant::row_unchanged;
use super::keys::{fence_of, revision_of};
use super::records::{merged, HolderRecord, Look, Row, NOW};
use super::{revision, EtcdBackend, MAX_TXN_OPS, TRIES};
use crate::backend::{AcquireItem, AcquireOutcome, AcquireRequest, Granted};
use crate::error::{Error, Result};
use crate::metadata::Metadata;
use crate::rules::{self, Grantable, Waiting};

/// The most operations of one key's part (a grant's four compares, an ending's look of four
/// reads). etcd lets a nested transaction have what its parent leaves of `--max-txn-ops`
/// (the parent's longest list counts), so a parent of [`PARENT_OPS`] operations leaves each part
/// its [`PART_OPS`], within [`MAX_TXN_OPS`] (etcd's default 128 accepts them).
const PART_OPS: usize = 4;
/// The most operations of a transaction of parts: one per part, and one expiry put per session
/// lease the grants go on (one per ttl class among them, usually one).
const PARENT_OPS: usize = MAX_TXN_OPS - PART_OPS;
/// Keys per read of many keys (one flat read-only transaction, `PART_OPS` reads a key).
const LOOK_KEYS: usize = MAX_TXN_OPS / PART_OPS;

/// One key's share of a transaction: what it compares, what it writes if they hold. If they
/// do not, it reads the key ([`EtcdBackend::look_ops`]).
pub(super) struct Part {
    pub key: String,
    pub when: Vec<Compare>,
    pub then: Vec<TxnOp>,
}

/// A grant's part, the row it writes (none for a shared grant), and the metadata granted.
pub(super) struct PlannedGrant {
    pub part: Part,
    pub row: Option<String>,
    pub metadata: Metadata,
}

/// What became of a part.
pub(super) enum Committed {
    /// Its compares held: written at this revision.
    Yes(i64),
    /// They did not: the key as the transaction read it.
    No(Box<Look>),
}

/// An ending: a release, or a done merging some metadata.
#[derive(Clone, Copy)]
pub(super) enum Ending<'a> {
    Release,
    Done(Option<&'a str>),
}

/// One lease ending: its key and fence, and how it ends.
pub(super) struct EndItem<'a> {
    pub key: &'a str,
    pub fence: i64,
    pub ending: Ending<'a>,
}

/// What an ending does with a key as looked.
enum EndStep {
    /// The answer: the metadata it ended with (`None`: the grant is no longer recorded).
    Answer(Option<Metadata>),
    /// An assumed look the rules refuse: read the key.
    Read,
    Commit(Part, String, Metadata),
}

/// What an acquire does with a key as looked.
enum AcquireStep {
    Answer(AcquireOutcome),
    Read,
    Own(HolderRecord),
    Grant,
}

impl EtcdBackend {
    /// Commits parts of keys of `ns`: one alone as a transaction of its own (`common` among
    /// its writes), several as nested transactions of one (`common` written whatever they
    /// find). At most [`PARENT_OPS`] parts and common operations together.
    pub(super) async fn commit(
        &self,
        what: &str,
        ns: &str,
        common: Vec<TxnOp>,
        parts: Vec<Part>,
    ) -> Result<Vec<Committed>> {
        if let [part] = &parts[..] {
            let mut then = common;
            then.extend(part.then.iter().cloned());
            let txn = Txn::new()
                .when(part.when.clone())
                .and_then(then)
                .or_else(self.look_ops(ns, &part.key));
            let answer = self.txn(what, txn).await?;
            let at = revision(&answer);
            return Ok(vec![if answer.succeeded() {
                Committed::Yes(at)
            } else {
                self.failed(ns, &part.key, at, answer.op_responses())?
            }]);
        }
        let skip = common.len();
        let mut then = common;
        then.extend(parts.iter().map(|part| {
            TxnOp::txn(
                Txn::new()
                    .when(part.when.clone())
                    .and_then(part.then.clone())
                    .or_else(self.look_ops(ns, &part.key)),
            )
        }));
        let answer = self.txn(what, Txn::new().and_then(then)).await?;
        let at = revision(&answer);
        let answers = answer.op_responses().into_iter().skip(skip);
        let mut committed = Vec::with_capacity(parts.len());
        for (part, answer) in parts.iter().zip(answers) {
            let TxnOpResponse::Txn(nested) = answer else {
                return Err(Error::internal(format!(
                    "{what}: etcd answered a nested transaction with another operation"
                )));
            };
            committed.push(if nested.succeeded() {
                Committed::Yes(at)
            } else {
                self.failed(ns, &part.key, at, nested.op_responses())?
            });
        }
        if committed.len() != parts.len() {
            return Err(Error::internal(format!(
                "{what}: etcd answered {} of {} nested transactions",
                committed.len(),
                parts.len()
            )));
        }
        Ok(committed)
    }

    /// A failed part's read of its key, remembered.
    fn failed(
        &self,
        ns: &str,
        key: &str,
        at: i64,
        answers: Vec<TxnOpResponse>,
    ) -> Result<Committed> {
        let look = Look::read(at, answers)?;
        self.known.saw(&self.layout.row(ns, key), &look);
        Ok(Committed::No(Box::new(look)))
    }

    /// Reads, in one go, the keys still `open` (unanswered) whose row is not known
    /// (`looks[i]` is None); `key(i)` names the i-th key.
    async fn look_unknown<'k>(
        &self,
        ns: &str,
        looks: &mut [Option<Look>],
        open: &[bool],
        key: impl Fn(usize) -> &'k str,
    ) -> Result<()> {
        let unread: Vec<usize> = (0..looks.len())
            .filter(|&i| open[i] && looks[i].is_none())
            .collect();
        if unread.is_empty() {
            return Ok(());
        }
        let keys: Vec<&str> = unread.iter().map(|&i| key(i)).collect();
        for (i, look) in unread.into_iter().zip(self.look_many(ns, &keys).await?) {
            looks[i] = Some(look);
        }
        Ok(())
    }

    /// Reads many keys of `ns` (each as [`EtcdBackend::look`]), [`LOOK_KEYS`] a transaction.
    async fn look_many(&self, ns: &str, keys: &[&str]) -> Result<Vec<Look>> {
        if let [key] = keys {
            return Ok(vec![self.look(ns, key).await?]);
        }
        let reads = keys.chunks(LOOK_KEYS).map(|chunk| async move {
            let gets: Vec<TxnOp> = chunk.iter().flat_map(|k| self.look_ops(ns, k)).collect();
            let answer = self.txn("read keys", Txn::new().and_then(gets)).await?;
            let at = revision(&answer);
            let mut answers = answer.op_responses().into_iter();
            chunk
                .iter()
                .map(|key| {
                    let look = Look::read(at, answers.by_ref().take(PART_OPS).collect())?;
                    self.known.saw(&self.layout.row(ns, key), &look);
                    Ok(look)
                })
                .collect::<Result<Vec<_>>>()
        });
        let read = futures_util::future::try_join_all(reads).await?;
        Ok(read.into_iter().flatten().collect())
    }

    /// Plain exclusive acquires of distinct keys of one owner: granted, done or held, each.
    /// Keys known free go straight into a granting transaction; the others are read first
    /// (together). A key whose part failed is decided again on what the failure read.
    pub(super) async fn acquire_many(
        &self,
        ns: &str,
        owner: &str,
        items: &[AcquireItem],
    ) -> Result<Vec<AcquireOutcome>> {
        let requests: Vec<AcquireRequest<'_>> =
            items.iter().map(|item| item.request(ns, owner)).collect();
        let mut looks: Vec<Option<Look>> = requests.iter().map(|r| self.assumed_free(r)).collect();
        let mut answers: Vec<Option<AcquireOutcome>> = requests.iter().map(|_| None).collect();
        for _ in 0..TRIES {
            let open: Vec<bool> = answers.iter().map(Option::is_none).collect();
            self.look_unknown(ns, &mut looks, &open, |i| requests[i].key)
                .await?;
            let mut grants = Vec::new();
            for (i, r) in requests.iter().enumerate() {
                let Some(look) = looks[i].as_ref().filter(|_| answers[i].is_none()) else {
                    continue;
                };
                match acquire_step(r, look) {
                    AcquireStep::Answer(outcome) => answers[i] = Some(outcome),
                    AcquireStep::Read => looks[i] = None,
                    AcquireStep::Own(holder) => {
                        let granted = self.own_grant(&holder, look).await?;
                        answers[i] = Some(AcquireOutcome::Granted(granted));
                    }
                    AcquireStep::Grant => grants.push(i),
                }
            }
            let classes = grants
                .into_iter()
                .map(|i| (i, super::session::class_of(requests[i].ttl)));
            let chunks = grant_chunks(classes);
            let sent = chunks
                .iter()
                .map(|chunk| self.grant_chunk(&requests, &looks, chunk));
            for outcome in futures_util::future::try_join_all(sent).await? {
                for (i, step) in outcome {
                    match step {
                        Ok(granted) => answers[i] = Some(AcquireOutcome::Granted(granted)),
                        Err(look) => looks[i] = Some(look),
                    }
                }
            }
            if answers.iter().all(Option::is_some) {
                break;
            }
        }
        // Keys still lost to concurrent writers after every try are held, for this call.
        Ok(answers
            .into_iter()
            .map(|a| a.unwrap_or(AcquireOutcome::Held))
            .collect())
    }

    /// Grants the keys `chunk` indexes (a [`grant_chunks`] chunk) in one transaction: each
    /// granted, or the key as read instead.
    async fn grant_chunk(
        &self,
        requests: &[AcquireRequest<'_>],
        looks: &[Option<Look>],
        chunk: &[usize],
    ) -> Result<Vec<(usize, std::result::Result<Granted, Look>)>> {
        let mut leases: Vec<std::sync::Arc<super::session::ClassLease>> = Vec::new();
        let mut planned = Vec::with_capacity(chunk.len());
        for (slot, &i) in chunk.iter().enumerate() {
            let r = &requests[i];
            let look = looks[i].as_ref().expect("a key granted was looked at");
            let lease = self.leases.for_grant(r.ttl).await?;
            let plan = self.grant_part(r, look, None, lease.id, slot as i64)?;
            if !leases.iter().any(|l| l.id == lease.id) {
                leases.push(lease.clone());
            }
            planned.push((i, slot as i64, lease, plan));
        }
        let common = leases.iter().map(|l| self.expiry_put(l)).collect();
        let parts = planned
            .iter_mut()
            .map(|(_, _, _, plan)| Part {
                key: std::mem::take(&mut plan.part.key),
                when: std::mem::take(&mut plan.part.when),
                then: std::mem::take(&mut plan.part.then),
            })
            .collect();
        let ns = requests[chunk[0]].namespace;
        let committed = self.commit("acquire", ns, common, parts).await?;
        Ok(planned
            .into_iter()
            .zip(committed)
            .map(|((i, slot, lease, plan), committed)| {
                let step = match committed {
                    Committed::Yes(at) => {
                        let look = looks[i].as_ref().expect("a key granted was looked at");
                        self.known_grant(&requests[i], look, plan.row.as_deref(), at);
                        Ok(Granted {
                            fence: fence_of(at, slot),
                            expires_at: super::read::time(lease.expires_ms()),
                            metadata: plan.metadata,
                        })
                    }
                    Committed::No(look) => Err(*look),
                };
                (i, step)
            })
            .collect())
    }

    /// Releases and dones of distinct keys of one owner: the metadata each ended with, `None`
    /// when the coordinator no longer records its grant (ended by this very grant before
    /// counts as ended). A key whose row this client wrote last is ended at once; the others
    /// are read first (together).
    pub(super) async fn end_many(
        &self,
        ns: &str,
        owner: &str,
        items: &[EndItem<'_>],
    ) -> Result<Vec<Option<Metadata>>> {
        let mut looks: Vec<Option<Look>> = items
            .iter()
            .map(|item| self.assumed_held(ns, owner, item))
            .collect();
        let mut answers: Vec<Option<Option<Metadata>>> = items.iter().map(|_| None).collect();
        for _ in 0..TRIES {
            let open: Vec<bool> = answers.iter().map(Option::is_none).collect();
            self.look_unknown(ns, &mut looks, &open, |i| items[i].key)
                .await?;
            let mut commits = Vec::new();
            // Two grants of one key (a lost one and its successor) never end in one
            // transaction: etcd refuses a key written twice in one. The second waits a turn.
            let mut keys = std::collections::HashSet::new();
            for (i, item) in items.iter().enumerate() {
                let Some(look) = looks[i].as_ref().filter(|_| answers[i].is_none()) else {
                    continue;
                };
                if !keys.insert(item.key) {
                    continue;
                }
                match self.end_step(ns, owner, item, look)? {
                    EndStep::Answer(answer) => answers[i] = Some(answer),
                    EndStep::Read => looks[i] = None,
                    EndStep::Commit(part, row, metadata) => commits.push((i, part, row, metadata)),
                }
            }
            let mut chunks = Vec::new();
            while !commits.is_empty() {
                let rest = commits.split_off(commits.len().min(PARENT_OPS));
                chunks.push(std::mem::replace(&mut commits, rest));
            }
            let sent = chunks.into_iter().map(|chunk| async move {
                let (meta, parts): (Vec<_>, Vec<_>) = chunk
                    .into_iter()
                    .map(|(i, part, row, metadata)| ((i, row, metadata), part))
                    .unzip();
                let committed = self.commit("end a lease", ns, Vec::new(), parts).await?;
                Ok::<_, Error>(meta.into_iter().zip(committed).collect::<Vec<_>>())
            });
            for chunk in futures_util::future::try_join_all(sent).await? {
                for ((i, row, metadata), committed) in chunk {
                    match committed {
                        Committed::Yes(at) => {
                            let record = self.layout.row(ns, items[i].key);
                            self.known.wrote(&record, &row, at, true);
                            answers[i] = Some(Some(metadata));
                        }
                        Committed::No(look) => looks[i] = Some(*look),
                    }
                }
            }
            if answers.iter().all(Option::is_some) {
                break;
            }
        }
        // A key still lost to concurrent writers after every try: the grant ended otherwise.
        Ok(answers.into_iter().map(Option::flatten).collect())
    }

    /// The key as this client last wrote it while this grant held it: the row it wrote (the
    /// grant's, or a renewal's metadata), and the grant's holder record. `None`: read first.
    fn assumed_held(&self, ns: &str, owner: &str, item: &EndItem<'_>) -> Option<Look> {
        let known = self.known.get(&self.layout.row(ns, item.key))?;
        let row = known.row.filter(|row| {
            row.fence == item.fence && row.owner.as_deref() == Some(owner) && !row.done
        })?;
        let mut look = Look::assumed_free(Some(row));
        look.holder = Some(HolderRecord::assumed(
            self.layout.holder(ns, item.key),
            owner,
            item.fence,
        ));
        Some(look)
    }

    /// What an ending does with the key as `look` found it: `rules::holds` decides.
    fn end_step(&self, ns: &str, owner: &str, item: &EndItem<'_>, look: &Look) -> Result<EndStep> {
        let stored = look.stored();
        let holds = stored
            .as_ref()
            .is_some_and(|k| rules::holds(k, owner, item.fence, NOW));
        if !holds {
            if look.assumed {
                return Ok(EndStep::Read);
            }
            // A retry that finds the key ended by this very grant succeeds.
            let ended = stored.as_ref().is_some_and(|k| match item.ending {
                Ending::Release => rules::released_by(k, item.fence),
                Ending::Done(_) => rules::done_by(k, owner, item.fence),
            });
            return Ok(EndStep::Answer(ended.then(|| look.metadata())));
        }
        let (metadata, value) = match item.ending {
            Ending::Release => {
                let metadata = look.metadata();
                let value = Row::settled(&metadata, None, item.fence, false, look.pool());
                (metadata, value)
            }
            Ending::Done(patch) => {
                let metadata = merged(look.metadata(), patch)?;
                let value = Row::settled(&metadata, Some(owner), item.fence, true, look.pool());
                (metadata, value)
            }
        };
        let row = self.layout.row(ns, item.key);
        let holder = self.layout.holder(ns, item.key);
        // Deletes the grant's holder record and writes the row, if both are as looked.
        let part = Part {
            key: item.key.to_string(),
            when: vec![
                row_unchanged(&row, look),
                Compare::create_revision(
                    holder.as_str(),
                    CompareOp::Equal,
                    revision_of(item.fence),
                ),
            ],
            then: vec![
                TxnOp::delete(holder, None),
                TxnOp::put(row, value.as_str(), None),
            ],
        };
        Ok(EndStep::Commit(part, value, metadata))
    }
}

/// What a plain acquire does with a key as `look` found it: `rules::grantable_in_turn`
/// decides (a plain acquire never jumps the line: everyone in it is ahead).
/// Grants (each an index and its ttl class) split into transactions: each carries a part per
/// key and an expiry put per ttl class among its keys (their session leases), within
/// [`PARENT_OPS`]. One class (the usual case) puts 95 keys in a transaction.
fn grant_chunks(grants: impl IntoIterator<Item = (usize, i64)>) -> Vec<Vec<usize>> {
    let mut chunks: Vec<Vec<usize>> = Vec::new();
    let mut classes: Vec<i64> = Vec::new();
    for (i, class) in grants {
        let new_class = !classes.contains(&class);
        let fits = chunks.last().is_some_and(|chunk| {
            chunk.len() + classes.len() + 1 + usize::from(new_class) <= PARENT_OPS
        });
        if !fits {
            chunks.push(Vec::new());
            classes.clear();
        }
        if !classes.contains(&class) {
            classes.push(class);
        }
        chunks.last_mut().expect("a chunk was opened").push(i);
    }
    chunks
}

fn acquire_step(r: &AcquireRequest<'_>, look: &Look) -> AcquireStep {
    let ahead: Vec<Waiting> = look
        .line
        .iter()
        .map(super::records::Place::waiting)
        .collect();
    let stored = look.stored();
    match rules::grantable_in_turn(stored.as_ref(), false, &ahead, r.attempt, NOW) {
        Grantable::Yes => match look.holder.as_ref().filter(|h| h.attempt == r.attempt) {
            // This very acquire call's live grant (a retry whose answer was lost).
            Some(holder) => AcquireStep::Own(holder.clone()),
            None => AcquireStep::Grant,
        },
        _ if look.assumed => AcquireStep::Read,
        Grantable::Done => AcquireStep::Answer(AcquireOutcome::Done),
        Grantable::Held(_) => AcquireStep::Answer(AcquireOutcome::Held),
    }
}

#[cfg(test)]
mod tests {
    use super::{grant_chunks, PARENT_OPS};

    /// A transaction of grants holds as many keys as its operations allow: a part per key and
    /// an expiry put per ttl class, never more than the parent's share of `--max-txn-ops`.
    #[test]
    fn grants_fill_transactions_by_their_lease_count() {
        let one_class = grant_chunks((0..200).map(|i| (i, 6)));
        let sizes: Vec<usize> = one_class.iter().map(Vec::len).collect();
        assert_eq!(
            sizes,
            [PARENT_OPS - 1, PARENT_OPS - 1, 200 - 2 * (PARENT_OPS - 1)]
        );
        let flat: Vec<usize> = one_class.concat();
        assert_eq!(
            flat,
            (0..200).collect::<Vec<_>>(),
            "every grant once, in order"
        );
        // Three classes in turn: three expiry puts a transaction.
        let mixed = grant_chunks((0..200).map(|i| (i, 1 + (i % 3) as i64)));
        for chunk in &mixed {
            let mut classes: Vec<usize> = chunk.iter().map(|i| i % 3).collect();
            classes.sort_unstable();
            classes.dedup();
            assert!(chunk.len() + classes.len() <= PARENT_OPS, "{}", chunk.len());
        }
        assert_eq!(mixed[0].len(), PARENT_OPS - 3);
        assert_eq!(mixed.concat().len(), 200);
        assert!(grant_chunks(std::iter::empty()).is_empty());
    }
}
