//! The client's one watch stream: puts on channel keys become notifications, deletes of lock
//! records (a holder released or expired, a waiter that left or died) wake the waiters of this
//! client that registered that record as what they wait behind: the predecessor in line, or
//! the holders when first in line. Nothing else wakes, so a release wakes one waiter (no herd).
//! Work pools: the put of a pool's entry (an offer) wakes every claimer of that pool in this
//! client, and the delete of a holder under a pool's prefix that this client claims from (a
//! release, an expiry, a done) wakes one of them.
//!
//! A broken stream resumes from the last revision seen + 1 (nothing missed); if etcd compacted
//! that history meanwhile, listeners get `Reconnected` and every registered waiter looks again.
//! The revision seen is the last event's or the last progress notification's, whichever is
//! later, so a quiet stream resumes near the cluster's revision. The stream is opened on the
//! member's client for streams, which requires a leader: a member that loses its leader ends it
//! ("no leader"), and it resumes on another member.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{EventType, WatchFilterType, WatchOptions, WatchResponse};
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

use super::etcd_error;
use super::keys::{range_end, Layout};
use super::members::Members;
use crate::backend::{BackendEvent, EventSink};
use crate::error::{Error, ErrorKind, Result};

/// How many recent deletes are kept for waiters that register after their blocker went.
const RECENT_DELETES: usize = 4096;
/// Pause between attempts to reopen a broken watch.
const RETRY_EVERY: Duration = Duration::from_millis(100);
/// How long the stream may stay silent before it is asked for a progress notification (etcd
/// answers one at once on a live stream, with no event and no write) ...
const QUIET_FOR: Duration = Duration::from_secs(10);
/// ... and how long that answer may take: a stream that answers neither is taken for broken and
/// opened again from the revisions seen (nothing is missed). A stream can stall with no error
/// while its member answers every other call (an HTTP/2 stream stuck behind a connection that
/// the network kept half-open); calls go on, and without this the listeners would hear nothing.
const PROGRESS_WITHIN: Duration = Duration::from_secs(5);

/// One waiter of this client: the wake-up to deliver when a record it waits behind goes.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Interest {
    tag: String,
    ticket: i64,
    /// A shared waiter (granted beside shared holders).
    shared: bool,
}

#[derive(Default)]
struct Interests {
    /// Record (etcd key) → the waiters behind it.
    by_record: HashMap<Vec<u8>, HashSet<Interest>>,
    /// Ticket → the records it waits behind (to replace or drop its registration).
    by_ticket: HashMap<i64, Vec<Vec<u8>>>,
    /// The latest lock deletes seen, oldest first: (revision, record).
    recent: VecDeque<(i64, Vec<u8>)>,
    /// The revision of the newest delete dropped from `recent`.
    evicted: i64,
}

impl Interests {
    fn forget(&mut self, ticket: i64) {
        for record in self.by_ticket.remove(&ticket).unwrap_or_default() {
            if let Some(set) = self.by_record.get_mut(&record) {
                set.retain(|i| i.ticket != ticket);
                if set.is_empty() {
                    self.by_record.remove(&record);
                }
            }
        }
    }
}

pub(crate) struct Watcher {
    members: Arc<Members>,
    sink: Arc<dyn EventSink>,
    channels_prefix: String,
    locks_prefix: String,
    holders_prefix: String,
    shared_prefix: String,
    layout: Layout,
    /// Channels listened on, reference-counted.
    pub channels: Mutex<HashMap<String, usize>>,
    interests: Mutex<Interests>,
    /// The pools this client claimed from: the prefix of their keys' holder records → the
    /// pool's wake-up tag.
    pools: Mutex<HashMap<Vec<u8>, String>>,
    started: OnceCell<()>,
    /// The revisions seen by the running stream (channels', locks'), for
    /// [`Watcher::watched_through`].
    seen: Mutex<Option<(i64, i64)>>,
    pub shutdown: CancellationToken,
}

fn wakeup(i: &Interest) -> BackendEvent {
    BackendEvent::Wakeup {
        tag: Some(i.tag.clone()),
        tickets: Some((i.ticket, Some(i.ticket))),
        pool: None,
    }
}

impl Watcher {
    pub fn new(members: Arc<Members>, sink: Arc<dyn EventSink>, layout: Layout) -> Arc<Watcher> {
        let locks_prefix = layout.locks();
        Arc::new(Watcher {
            members,
            sink,
            holders_prefix: format!("{locks_prefix}h/"),
            shared_prefix: format!("{locks_prefix}s/"),
            channels_prefix: layout.channels(),
            locks_prefix,
            layout,
            channels: Mutex::new(HashMap::new()),
            interests: Mutex::new(Interests::default()),
            pools: Mutex::new(HashMap::new()),
            started: OnceCell::new(),
            seen: Mutex::new(None),
            shutdown: CancellationToken::new(),
        })
    }

    /// Waiter `ticket` (tagged `tag`) waits behind `records`, as read at `revision`: it is
    /// woken when one of them is deleted, at once if one already was after that revision.
    pub fn wait_behind(
        &self,
        (tag, ticket, shared): (&str, i64, bool),
        records: Vec<String>,
        revision: i64,
    ) {
        let mut interests = self.interests.lock().unwrap_or_else(|e| e.into_inner());
        interests.forget(ticket);
        let interest = Interest {
            tag: tag.to_string(),
            ticket,
            shared,
        };
        let records: Vec<Vec<u8>> = records.into_iter().map(String::into_bytes).collect();
        // The deletes since `revision` are known if none of them left the ring; those not
        // handled yet will find this registration.
        let known = interests.evicted <= revision;
        let gone = interests
            .recent
            .iter()
            .any(|(rev, record)| *rev > revision && records.contains(record));
        if gone || !known || records.is_empty() {
            drop(interests);
            self.sink.deliver(wakeup(&interest));
            return;
        }
        for record in &records {
            interests
                .by_record
                .entry(record.clone())
                .or_default()
                .insert(interest.clone());
        }
        interests.by_ticket.insert(ticket, records);
    }

    /// This client claims from the pool whose keys' holder records start with `holders`
    /// (tagged `tag`): a delete of one of them wakes one of its claimers.
    pub fn claims_from(&self, holders: String, tag: String) {
        self.pools
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(holders.into_bytes())
            .or_insert(tag);
    }

    /// The waiter no longer waits (granted, or left the line).
    pub fn forget(&self, ticket: i64) {
        self.interests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .forget(ticket);
    }

    /// The revision through which the stream has seen every event of both its watches (`None`
    /// before it started).
    pub fn watched_through(&self) -> Option<i64> {
        let seen = *self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.map(|(channels, locks)| channels.min(locks))
    }

    fn record(&self, seen: (i64, i64)) {
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) = Some(seen);
    }

    /// Starts the stream (once); returns when events committed from now on will be seen.
    pub async fn start(self: &Arc<Self>) -> Result<()> {
        self.started
            .get_or_try_init(|| async {
                let opened = self.open_as_user((0, 0)).await?;
                let me = self.clone();
                tokio::spawn(async move { me.run(opened).await });
                Ok::<(), Error>(())
            })
            .await?;
        Ok(())
    }

    /// [`Watcher::open`], once more after authenticating again when etcd refused the watch:
    /// a watch stream carries the token it was opened with, and etcd checks it when a watch
    /// is created on the stream, answering an expired one with a cancel ("permission
    /// denied"), not with the error the crate re-authenticates on.
    async fn open_as_user(&self, from: (i64, i64)) -> Result<Opened> {
        match self.open(from).await {
            Err(Refused(Some(client), e)) => {
                if !self.members.has_user() {
                    return Err(e);
                }
                client
                    .refresh_token()
                    .await
                    .map_err(|e| etcd_error("watch", e))?;
                self.open(from).await.map_err(|Refused(_, e)| e)
            }
            answer => answer.map_err(|Refused(_, e)| e),
        }
    }

    /// Opens both watches on one stream, the channels' and the locks' from the revisions
    /// given (0: from now), on the member calls go to; returns the stream, the revision each
    /// watch's events start after, and the member. A member that hangs fails it
    /// (`Members::answered`). A refusal comes with the member's client (`Refused.0`, `Some`
    /// when etcd cancelled a watch for another reason than compaction).
    async fn open(&self, from: (i64, i64)) -> std::result::Result<Opened, Refused> {
        let (member, client) = self.members.pick_for_streams();
        let opening = self.open_on(client, from);
        match self.members.answered(member, opening).await {
            Ok(Ok((stream, seen, early))) => Ok(Opened {
                stream,
                seen,
                early,
                member,
            }),
            Ok(Err(refused)) => Err(refused),
            Err(e) => {
                self.members.failed(member, &e);
                Err(Refused(None, etcd_error("watch", e)))
            }
        }
    }

    /// [`Watcher::open`] on one member's client: the member's failures as its own errors, the
    /// rest (compacted, refused, the stream ended) as accord's.
    async fn open_on(
        &self,
        client: etcd_client::Client,
        from: (i64, i64),
    ) -> std::result::Result<
        std::result::Result<(etcd_client::WatchStream, (i64, i64), Vec<WatchResponse>), Refused>,
        etcd_client::Error,
    > {
        let refusing = client.clone();
        let channels = WatchOptions::new()
            .with_range(range_end(&self.channels_prefix))
            .with_filters([WatchFilterType::NoDelete])
            .with_start_revision(from.0);
        // Puts too: a waiter's delete that comes with a holder's put is a grant (see `handle`).
        let locks = WatchOptions::new()
            .with_range(range_end(&self.locks_prefix))
            .with_start_revision(from.1);
        let mut stream = client
            .watch_client()
            .watch(self.channels_prefix.as_bytes(), Some(channels))
            .await?;
        stream
            .watch(self.locks_prefix.as_bytes(), Some(locks))
            .await?;
        // Creations are answered in the order asked: the channels' first. Events of the first
        // watch may come before the second is created (it catches up from `from.0`): kept.
        let mut seen = [from.0 - 1, from.1 - 1];
        let mut created = 0;
        let mut early = Vec::new();
        while created < 2 {
            let Some(response) = stream.message().await? else {
                return Ok(Err(Refused(
                    None,
                    Error::new(ErrorKind::Connection, "watch: the stream ended"),
                )));
            };
            if response.canceled() && response.compact_revision() > 0 {
                return Ok(Err(Refused(None, compacted(&response))));
            }
            if response.canceled() {
                return Ok(Err(Refused(
                    Some(refusing),
                    Error::new(
                        ErrorKind::Database,
                        format!("watch: etcd refused it: {}", response.cancel_reason()),
                    ),
                )));
            }
            if response.created() {
                if seen[created] < 0 {
                    seen[created] = response.header().map_or(0, |h| h.revision());
                }
                created += 1;
            } else {
                early.push(response);
            }
        }
        Ok(Ok((stream, (seen[0], seen[1]), early)))
    }

    async fn run(self: Arc<Self>, opened: Opened) {
        let Opened {
            mut stream,
            mut seen,
            early,
            mut member,
        } = opened;
        let mut early = VecDeque::from(early);
        let mut down_at_open = self.members.is_down(member);
        self.record(seen);
        // When the stream must have said something (an event, or the answer to a progress
        // request), and whether that request went out.
        let mut quiet_until = tokio::time::Instant::now() + QUIET_FOR;
        let mut progress_asked = false;
        loop {
            if let Some(response) = early.pop_front() {
                self.absorb(&response, &mut seen);
                continue;
            }
            // A member taken for down (a call to it went unanswered: it may hang, and its
            // stream with it) is left at once, as a broken stream is; unless the stream was
            // opened on it while down (every member was), which would only open it again.
            let leave = async {
                if down_at_open {
                    std::future::pending::<()>().await;
                }
                self.members.until_down(member).await;
            };
            let next = tokio::select! {
                _ = self.shutdown.cancelled() => return,
                m = stream.message() => Some(m),
                _ = leave => Some(Err(etcd_client::Error::IoError(
                    std::io::Error::new(std::io::ErrorKind::TimedOut, "the member hangs"),
                ))),
                _ = tokio::time::sleep_until(quiet_until) => progress_asked.then(|| {
                    Err(etcd_client::Error::IoError(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!(
                            "the watch stream answered no progress request within {PROGRESS_WITHIN:?}"
                        ),
                    )))
                }),
            };
            let Some(next) = next else {
                // Quiet for QUIET_FOR: ask. The request only waits for room in the stream's
                // send queue; a stream that broke says so through `message` instead.
                let _ = tokio::time::timeout(PROGRESS_WITHIN, stream.request_progress()).await;
                progress_asked = true;
                quiet_until = tokio::time::Instant::now() + PROGRESS_WITHIN;
                continue;
            };
            quiet_until = tokio::time::Instant::now() + QUIET_FOR;
            progress_asked = false;
            match next {
                Ok(Some(response)) if !response.canceled() => self.absorb(&response, &mut seen),
                other => {
                    // A stream that broke or ended with its member: reopened on another.
                    match &other {
                        Err(e) => self.members.failed(member, e),
                        Ok(None) => self.members.lost(member, &"the watch stream ended"),
                        Ok(Some(_)) => {}
                    }
                    let compacted = matches!(&other, Ok(Some(r)) if r.compact_revision() > 0);
                    tracing::warn!(target: "accord", ?seen, "etcd watch broke; resuming after the revisions seen");
                    let fresh = loop {
                        if self.shutdown.is_cancelled() {
                            return;
                        }
                        let from = if compacted {
                            (0, 0)
                        } else {
                            (seen.0 + 1, seen.1 + 1)
                        };
                        match self.open_as_user(from).await {
                            Ok(opened) => break opened,
                            Err(e) if is_compaction(&e) => {
                                // Compacted while away: what was missed is gone.
                                if let Ok(opened) = self.open_as_user((0, 0)).await {
                                    self.missed();
                                    break opened;
                                }
                            }
                            Err(_) => {}
                        }
                        tokio::time::sleep(RETRY_EVERY).await;
                    };
                    if compacted {
                        self.missed();
                    }
                    stream = fresh.stream;
                    member = fresh.member;
                    down_at_open = self.members.is_down(member);
                    seen = (seen.0.max(fresh.seen.0), seen.1.max(fresh.seen.1));
                    self.record(seen);
                    early = fresh.early.into();
                }
            }
        }
    }

    /// A response of the stream (not a cancel): its events handled, the revisions seen moved.
    fn absorb(&self, response: &WatchResponse, seen: &mut (i64, i64)) {
        if let Some(revision) = progress(response) {
            // Both watches sent everything through this revision: a quiet watch resumes from
            // here, not from the last event it heard, which etcd may have compacted since.
            *seen = (seen.0.max(revision), seen.1.max(revision));
        }
        for kv in response.events().iter().filter_map(|e| e.kv()) {
            if kv.key().starts_with(self.channels_prefix.as_bytes()) {
                seen.0 = seen.0.max(kv.mod_revision());
            } else {
                seen.1 = seen.1.max(kv.mod_revision());
            }
        }
        self.record(*seen);
        self.handle(response);
    }

    /// Events may have been missed (history compacted): listeners hear `Reconnected`, and
    /// every waiter looks again.
    fn missed(&self) {
        self.sink.deliver(BackendEvent::Reconnected);
        let waiters: Vec<Interest> = {
            let mut interests = self.interests.lock().unwrap_or_else(|e| e.into_inner());
            let all = interests.by_record.drain().flat_map(|(_, s)| s).collect();
            interests.by_ticket.clear();
            all
        };
        for w in waiters {
            self.sink.deliver(wakeup(&w));
        }
    }

    fn handle(&self, response: &WatchResponse) {
        let events = response.events();
        let mut offered = HashSet::new();
        for event in events {
            let Some(kv) = event.kv() else { continue };
            let is_lock = kv.key().starts_with(self.locks_prefix.as_bytes());
            match event.event_type() {
                EventType::Put if !is_lock => self.notification(kv),
                EventType::Put => {
                    if let Some((ns, pool)) = self.layout.pool_of(kv.key()) {
                        offered.insert(crate::rules::wake_tag(super::WAKE_SECRET, ns, pool));
                    }
                }
                EventType::Delete => {
                    if kv.key().starts_with(self.holders_prefix.as_bytes()) {
                        self.freed(kv.key());
                    }
                    // A place in line deleted by its grant: the holder's record is put in the
                    // same transaction (same revision, same response).
                    let granted = events.iter().filter_map(|e| e.kv()).find(|g| {
                        g.mod_revision() == kv.mod_revision()
                            && g.create_revision() == kv.mod_revision()
                            && g.key() != kv.key()
                            && (g.key().starts_with(self.holders_prefix.as_bytes())
                                || g.key().starts_with(self.shared_prefix.as_bytes()))
                    });
                    let handover = granted.map(|g| {
                        (
                            g.key().to_vec(),
                            g.key().starts_with(self.shared_prefix.as_bytes()),
                        )
                    });
                    self.deleted(kv.mod_revision(), kv.key(), handover);
                }
            }
        }
        // An offer: every claimer of the pool looks (once per response, however many keys).
        for tag in offered {
            self.sink.deliver(BackendEvent::Wakeup {
                tag: Some(tag),
                tickets: None,
                pool: None,
            });
        }
    }

    /// A holder's record went: if its key is in a pool this client claims from, one claimer
    /// of that pool looks. The wake-up's own tag is empty, no key's (tags are hex digests), so
    /// no acquire waiter wakes for it: those wait on their own records.
    fn freed(&self, record: &[u8]) {
        let tags: Vec<String> = self
            .pools
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(prefix, _)| record.starts_with(prefix))
            .map(|(_, tag)| tag.clone())
            .collect();
        for tag in tags {
            self.sink.deliver(BackendEvent::Wakeup {
                tag: Some(String::new()),
                tickets: None,
                pool: Some(tag),
            });
        }
    }

    fn notification(&self, kv: &etcd_client::KeyValue) {
        let Some(channel) = self.layout.channel_of(kv.key()) else {
            return;
        };
        let listened = self
            .channels
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(channel);
        if listened {
            self.sink.deliver(BackendEvent::Notification {
                channel: channel.to_string(),
                payload: String::from_utf8_lossy(kv.value()).into_owned(),
            });
        }
    }

    /// A lock record went at `revision`: the waiters behind it wake, except, when it was a
    /// place granted (`handover`: the new holder's record, and whether it is shared), those
    /// the new holder still blocks, which now wait behind it instead (one wake-up per release).
    fn deleted(&self, revision: i64, record: &[u8], handover: Option<(Vec<u8>, bool)>) {
        let woken: Vec<Interest> = {
            let mut interests = self.interests.lock().unwrap_or_else(|e| e.into_inner());
            interests.recent.push_back((revision, record.to_vec()));
            if interests.recent.len() > RECENT_DELETES {
                if let Some((rev, _)) = interests.recent.pop_front() {
                    interests.evicted = rev;
                }
            }
            let behind: Vec<Interest> = interests
                .by_record
                .remove(record)
                .map(|s| s.into_iter().collect())
                .unwrap_or_default();
            let mut woken = Vec::new();
            for w in behind {
                interests.forget(w.ticket);
                match &handover {
                    Some((holder, shared)) if !(w.shared && *shared) => {
                        interests
                            .by_record
                            .entry(holder.clone())
                            .or_default()
                            .insert(w.clone());
                        interests.by_ticket.insert(w.ticket, vec![holder.clone()]);
                    }
                    _ => woken.push(w),
                }
            }
            woken
        };
        for w in &woken {
            self.sink.deliver(wakeup(w));
        }
    }
}

/// Why a watch did not open, and, when etcd refused it, the client of the member that did.
struct Refused(Option<etcd_client::Client>, Error);

/// A watch stream opened on a member.
struct Opened {
    stream: etcd_client::WatchStream,
    /// The revision each watch's events start after (channels', locks').
    seen: (i64, i64),
    /// Responses with events that came while the watches were being created, in order.
    early: Vec<WatchResponse>,
    member: usize,
}

/// The revision a progress notification vouches for: etcd sent every event of the stream's
/// watches up to it (an answer to `request_progress`: no event, no creation, cancel or
/// compaction; etcd's own test, clientv3's `IsProgressNotify`).
fn progress(response: &WatchResponse) -> Option<i64> {
    let quiet = response.events().is_empty()
        && !response.created()
        && !response.canceled()
        && response.compact_revision() == 0;
    quiet
        .then(|| response.header().map(|h| h.revision()))
        .flatten()
        .filter(|&revision| revision > 0)
}

/// Whether a watch failed to open because etcd compacted the revision it was to start from.
fn is_compaction(e: &Error) -> bool {
    e.kind() == ErrorKind::Database && e.message().starts_with(COMPACTED)
}

const COMPACTED: &str = "watch: etcd compacted the history";

fn compacted(response: &WatchResponse) -> Error {
    Error::new(
        ErrorKind::Database,
        format!(
            "{COMPACTED} (to revision {}): {}",
            response.compact_revision(),
            response.cancel_reason()
        ),
    )
}
