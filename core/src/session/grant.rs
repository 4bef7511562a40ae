//! One grant's life as this process sees it: held, ending (a release or done in flight),
//! released, done, or lost; the local deadline of G4; and the signals that fire when the
//! grant ends. The keepalive, the lease handle and the bindings all read it from here.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use crate::backend::Granted;
use crate::error::{Error, Result};
use crate::metadata::Metadata;
use crate::stats::{Counter, Recorder, Timer};

/// The local deadline stops this much before the coordinator's expiry could come (G4): room for
/// clock-rate differences and for the holder to act on the lost signal.
pub(crate) fn safety_margin(ttl: Duration) -> Duration {
    (ttl / 10).min(Duration::from_secs(2))
}

/// Why a lease was lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LostReason {
    /// No renewal was confirmed before the local deadline (the coordinator was out of reach,
    /// or the process was stopped).
    NotRenewed,
    /// The coordinator no longer records this grant: it expired there and may have been
    /// granted to someone else, or the key was reset.
    NotRecorded,
    /// The client was closed while the lease was held (it was released on the way out).
    ClientClosed,
    /// Asked in a child process after fork(): the lease is the parent's, never the child's.
    Forked,
}

impl LostReason {
    /// The stable name every binding uses: `not_renewed`, `not_recorded`, `client_closed`,
    /// `forked`.
    pub fn as_str(self) -> &'static str {
        match self {
            LostReason::NotRenewed => "not_renewed",
            LostReason::NotRecorded => "not_recorded",
            LostReason::ClientClosed => "client_closed",
            LostReason::Forked => "forked",
        }
    }
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LostReason::NotRenewed => "it was not renewed within its ttl",
            LostReason::NotRecorded => "the coordinator no longer records this grant",
            LostReason::ClientClosed => "its client was closed",
            LostReason::Forked => "it belongs to the parent process (this is a child after fork())",
        })
    }
}

/// Where a lease stands. Every binding reads it from here, so that "has this lease ended?"
/// has one answer in every language.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LeaseStatus {
    /// Held and renewed in the background.
    Held,
    /// A release or done is in flight (or failed on the way and may be retried): no longer
    /// renewed, but its deadline still applies, so it is lost if that passes first.
    Ending,
    /// Released by its holder (or by dropping its handle).
    Released,
    /// Marked done by its holder.
    Done,
    /// Lost: the holder must stop acting on what it protected.
    Lost(LostReason),
}

impl LeaseStatus {
    /// The stable name every binding uses: `held`, `ending`, `released`, `done`, `lost`.
    pub fn as_str(self) -> &'static str {
        match self {
            LeaseStatus::Held => "held",
            LeaseStatus::Ending => "ending",
            LeaseStatus::Released => "released",
            LeaseStatus::Done => "done",
            LeaseStatus::Lost(_) => "lost",
        }
    }

    /// Why the lease was lost, if it was.
    pub fn lost_reason(self) -> Option<LostReason> {
        match self {
            LeaseStatus::Lost(why) => Some(why),
            _ => None,
        }
    }

    /// Held, or ending with a statement in flight: the deadline still applies.
    pub fn is_live(self) -> bool {
        matches!(self, LeaseStatus::Held | LeaseStatus::Ending)
    }

    /// Released, done or lost: nothing about this lease changes any more.
    pub fn is_ended(self) -> bool {
        !self.is_live()
    }
}

pub(crate) struct GrantState {
    pub status: LeaseStatus,
    pub expires_at: DateTime<Utc>,
    pub metadata: Metadata,
    /// Send time of the latest confirmed grant or renewal, on the monotonic clock.
    pub renewed_from: Instant,
    /// When that confirmation arrived: the keepalive renews a lease ahead of time (to carry
    /// it in a statement it sends anyway) only once this is a while ago, never again right
    /// after a slow statement confirmed it (see `keepalive::scan`).
    pub confirmed_at: Instant,
    /// The holder's own transaction may have finished the grant (`Lease::done_in`): the
    /// keepalive looks at once, and again shortly while that transaction holds the row.
    pub look_now: bool,
}

/// A grant this client holds (or held): what the lease handle, the keepalive and the
/// signals share.
pub(crate) struct Grant {
    pub key: String,
    pub fence: i64,
    pub ttl: Duration,
    /// One of the key's shared holders rather than its exclusive holder.
    pub shared: bool,
    pub state: Mutex<GrantState>,
    /// Fires when the lease is lost (G4).
    lost: CancellationToken,
    /// Fires when the lease ends in any way (released, done or lost).
    ended: CancellationToken,
    /// One release or done at a time, so that a second one sees the first one's outcome
    /// instead of racing it.
    pub ending: tokio::sync::Mutex<()>,
    /// When the grant's statement was sent (hold times count from there), and where its end
    /// is counted.
    granted: Instant,
    stats: Arc<Recorder>,
}

impl Grant {
    /// The grant `g` of `key`, whose statement was sent at `sent`.
    pub fn new(
        key: String,
        ttl: Duration,
        g: Granted,
        sent: Instant,
        shared: bool,
        stats: Arc<Recorder>,
    ) -> Self {
        Grant {
            key,
            fence: g.fence,
            ttl,
            shared,
            state: Mutex::new(GrantState {
                status: LeaseStatus::Held,
                expires_at: g.expires_at,
                metadata: g.metadata,
                renewed_from: sent,
                confirmed_at: Instant::now(),
                look_now: false,
            }),
            lost: CancellationToken::new(),
            ended: CancellationToken::new(),
            ending: tokio::sync::Mutex::new(()),
            granted: sent,
            stats,
        }
    }

    pub fn lock(&self) -> std::sync::MutexGuard<'_, GrantState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn status(&self) -> LeaseStatus {
        self.lock().status
    }

    /// G4: the send time of the last confirmed renewal + ttl − margin. The coordinator computed
    /// its expiry from a later instant (when it ran the statement), so this comes first.
    pub fn deadline(&self, state: &GrantState) -> Instant {
        state.renewed_from + self.ttl - safety_margin(self.ttl)
    }

    /// When the keepalive wants to renew: a third of the ttl after the last renewal.
    pub fn renew_at(&self, state: &GrantState) -> Instant {
        state.renewed_from + self.ttl / 3
    }

    /// The one place a grant's status changes: a live grant moves to `to`; an ended one
    /// never changes again. Fires the signals that `to` calls for. Returns whether it moved.
    fn settle(&self, state: &mut GrantState, to: LeaseStatus) -> bool {
        if !state.status.is_live() {
            return false;
        }
        state.status = to;
        if let LeaseStatus::Lost(why) = to {
            tracing::warn!(target: "accord", key = %self.key, fence = self.fence, reason = %why, "lease lost");
            self.lost.cancel();
        }
        if to.is_ended() {
            self.ended.cancel();
            let counter = match to {
                LeaseStatus::Released => Some(Counter::Releases),
                LeaseStatus::Done => Some(Counter::Done),
                LeaseStatus::Lost(_) => Some(Counter::Lost),
                _ => None,
            };
            if let Some(counter) = counter {
                self.stats.add(counter, 1);
            }
            self.stats.time(Timer::HoldTime, self.granted.elapsed());
        }
        true
    }

    /// Records a renewal the coordinator confirmed; `sent` is when its statement was sent,
    /// `received` when its answer arrived (now, or the instant a batch's answer came).
    pub fn confirm(
        &self,
        sent: Instant,
        received: Instant,
        expires_at: DateTime<Utc>,
        metadata: Option<Metadata>,
    ) {
        let mut state = self.lock();
        if let Some(metadata) = metadata {
            state.metadata = metadata;
        }
        state.look_now = false;
        if state.status.is_live() && sent > state.renewed_from {
            // A confirmation arriving after the deadline passed cannot revive the lease: the
            // holder may already have acted on lost.
            if received < self.deadline(&state) {
                state.renewed_from = sent;
                state.confirmed_at = received;
                state.expires_at = expires_at;
            }
        }
    }

    /// Fires lost if the deadline has passed, whether or not a call is in flight. Returns
    /// whether the lease is lost.
    pub fn check_deadline(&self, now: Instant) -> bool {
        let mut state = self.lock();
        if state.status.is_live() && now >= self.deadline(&state) {
            self.settle(&mut state, LeaseStatus::Lost(LostReason::NotRenewed));
        }
        matches!(state.status, LeaseStatus::Lost(_))
    }

    /// Ends a held lease that its holder's own transaction finished (done or released in the
    /// application's transaction, which committed). Returns whether it moved.
    pub fn ended_in_transaction(&self, to: LeaseStatus) -> bool {
        let mut state = self.lock();
        state.status == LeaseStatus::Held && self.settle(&mut state, to)
    }

    /// Marks a live lease lost. Returns false if it had already ended.
    pub fn mark_lost(&self, why: LostReason) -> bool {
        self.settle(&mut self.lock(), LeaseStatus::Lost(why))
    }

    /// Ends a live lease as released (by dropping its handle, or a grant nobody will use).
    /// Returns false if it had already ended.
    pub fn mark_released(&self) -> bool {
        self.settle(&mut self.lock(), LeaseStatus::Released)
    }

    /// Takes the lease out of renewal for a release or done. Returns false when there is
    /// nothing to end (already released or done: a release is then harmless).
    pub fn begin_ending(&self, release: bool) -> Result<bool> {
        let mut state = self.lock();
        match state.status {
            LeaseStatus::Held | LeaseStatus::Ending => {
                state.status = LeaseStatus::Ending;
                Ok(true)
            }
            LeaseStatus::Released | LeaseStatus::Done if release => Ok(false),
            _ => Err(self.error_for(state.status)),
        }
    }

    /// Records the coordinator's answer to a release or done: `true` when it still recorded
    /// this grant (the lease ends as `ended`), `false` when it did not (lost).
    pub fn finish_ending(&self, recorded: bool, ended: LeaseStatus) -> Result<()> {
        let mut state = self.lock();
        if recorded {
            if state.status == LeaseStatus::Ending {
                self.settle(&mut state, ended);
            }
            return Ok(());
        }
        self.settle(&mut state, LeaseStatus::Lost(LostReason::NotRecorded));
        Err(self.error_for(state.status))
    }

    /// Checks that the lease may still be renewed or finished.
    pub fn require_held(&self) -> Result<()> {
        self.check_deadline(Instant::now());
        match self.status() {
            LeaseStatus::Held => Ok(()),
            status => Err(self.error_for(status)),
        }
    }

    /// The `LeaseLost` error of a lease that is not held, saying why.
    pub fn error_for(&self, status: LeaseStatus) -> Error {
        let why = match status {
            LeaseStatus::Held => "it is held".to_string(),
            LeaseStatus::Ending => "it is being released or marked done".to_string(),
            LeaseStatus::Released => "it was released".to_string(),
            LeaseStatus::Done => "it is done".to_string(),
            LeaseStatus::Lost(why) => why.to_string(),
        };
        Error::lease_lost(&self.key, self.fence, &why)
    }

    pub fn lost_token(&self) -> &CancellationToken {
        &self.lost
    }

    pub fn ended_token(&self) -> &CancellationToken {
        &self.ended
    }
}
