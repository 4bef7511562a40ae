//! A session: one connection to a coordinator on behalf of one owner, as etcd's
//! `concurrency.Session` is. It owns the backend, the keepalive that renews every grant it
//! holds, the routing of wake-ups and notifications, and the closed and lost machinery.
//! Handles ([`crate::Client`], [`crate::Lease`], [`crate::Subscription`], and the recipes
//! built on them) hold an `Arc<Session>` and call down into it; nothing here calls up into
//! them. The session closes when [`Session::close`] is called or its last handle is dropped.

mod acquire;
mod batched;
mod dispatch;
mod grant;
mod keepalive;
mod open_clients;
mod pool;
mod publisher;
mod rounds;
mod scope;
mod waiters;

/// The stores that keep their own leases (etcd) grant them so that the core's deadline comes
/// first.
#[cfg_attr(not(feature = "etcd"), allow(unused_imports))]
pub(crate) use grant::safety_margin;

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

pub(crate) use self::dispatch::Dispatch;
pub use self::dispatch::{Event, Message};
pub(crate) use self::grant::Grant;
pub use self::grant::{LeaseStatus, LostReason};
use self::keepalive::Keepalive;
pub use self::open_clients::close_all;
pub(crate) use self::publisher::{trim as trim_stream, Outgoing, Publisher};
pub(crate) use self::scope::Scope;
use crate::backend;
use crate::error::{Error, ErrorKind, Result};
use crate::membership::MAX_SCAN_ROWS;
use crate::options::{ClientOptions, KeyState, LeaseInfo, ListQuery};
use crate::stats::Recorder;

pub(crate) struct Session {
    pub scope: Arc<Scope>,
    /// The ttl of grants that do not name their own.
    pub ttl: Duration,
    /// The process that opened the session (G12).
    pid: u32,
    pub closed: CancellationToken,
    /// Cancelled when `close` has given back what it could: a second `close` (another task's,
    /// or `close_all` beside the application's own) waits for it, so that whichever returns
    /// last, nothing is still being released.
    closing_done: CancellationToken,
    pub keepalive: Arc<Keepalive>,
    pub dispatch: Arc<Dispatch>,
}

/// Passes on the turns that releases gave to places this client had just left (see
/// `Waiters::left`), until the session closes.
async fn pass_turns(
    scope: Arc<Scope>,
    mut turns: tokio::sync::mpsc::UnboundedReceiver<(String, i64)>,
    closed: CancellationToken,
) {
    loop {
        let (key, ticket) = tokio::select! {
            turn = turns.recv() => match turn {
                Some(turn) => turn,
                None => return,
            },
            _ = closed.cancelled() => return,
        };
        if let Err(e) = scope
            .backend
            .leave_queue(&scope.namespace, &key, &scope.owner, ticket, true)
            .await
        {
            tracing::debug!(target: "accord", key, ticket, error = %e, "passing a turn on failed; the next in line retries at its own time");
        }
    }
}

fn default_owner() -> String {
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    format!(
        "{host}-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )
}

impl Session {
    /// Connects to the coordinator named by `url` and starts the keepalive.
    pub async fn open(url: &str, options: &ClientOptions) -> Result<Arc<Session>> {
        options.validate()?;
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            Error::new(
                ErrorKind::Unsupported,
                "accord's Rust API must be called from within a tokio runtime",
            )
        })?;
        let stats = Arc::new(Recorder::new(options.record_stats));
        let dispatch = Arc::new(Dispatch::new(stats.clone()));
        let backend = backend::open(url, options, dispatch.clone(), stats.clone()).await?;
        dispatch
            .waiters
            .set_tags(&options.namespace, backend.wake_secret());
        let session = Arc::new(Session {
            scope: Arc::new(Scope {
                backend,
                namespace: options.namespace.clone(),
                owner: options.owner.clone().unwrap_or_else(default_owner),
                runtime,
                batched: Default::default(),
                shared_fences: Default::default(),
                publisher: Default::default(),
                stats,
                granting: Default::default(),
            }),
            ttl: options.ttl,
            pid: std::process::id(),
            closed: CancellationToken::new(),
            closing_done: CancellationToken::new(),
            keepalive: Arc::new(Keepalive::default()),
            dispatch,
        });
        if options.close_on_sigterm {
            open_clients::register(&session);
        }
        tokio::spawn(keepalive::run(
            session.scope.clone(),
            session.keepalive.clone(),
            session.closed.clone(),
        ));
        if let Some(turns) = session.dispatch.turns_to_pass.lock().unwrap().take() {
            tokio::spawn(pass_turns(
                session.scope.clone(),
                turns,
                session.closed.clone(),
            ));
        }
        Ok(session)
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// G12: a session inherited through fork() shares sockets with its parent; using it would
    /// corrupt both, so it refuses clearly instead.
    pub fn check_fork(&self) -> Result<()> {
        let pid = std::process::id();
        if pid != self.pid {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "this accord client was created in process {} and cannot be used after fork() \
                     (in process {pid}); create a new client in the child process",
                    self.pid
                ),
            ));
        }
        Ok(())
    }

    /// True in a child process created by fork() after this session was opened.
    pub fn is_forked(&self) -> bool {
        std::process::id() != self.pid
    }

    pub fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    /// The held rows under `prefix` (up to `MAX_SCAN_ROWS`), in one read: a group's members, a
    /// fleet's members, shards and hand-off requests.
    pub async fn held_under(&self, prefix: &str) -> Result<Vec<LeaseInfo>> {
        self.check_usable()?;
        let query = ListQuery::new()
            .prefix(prefix)
            .state(KeyState::Held)
            .limit(MAX_SCAN_ROWS);
        let page = self
            .scope
            .backend
            .list(&self.scope.namespace, &query)
            .await?;
        Ok(page.items)
    }

    /// Not forked, not closed: every call checks this first.
    pub fn check_usable(&self) -> Result<()> {
        self.check_fork()?;
        if self.is_closed() {
            return Err(Error::closed());
        }
        Ok(())
    }

    /// Ends a grant nobody will use any more (its handle was dropped, or its acquire was
    /// cancelled after the grant): out of the keepalive, given back in the background.
    pub fn abandon(&self, grant: &Grant) {
        if !grant.mark_released() {
            return;
        }
        self.keepalive.remove(grant.fence);
        if self.check_usable().is_ok() {
            self.scope.give_back_later(grant.key.clone(), grant.fence);
        }
    }

    /// [`Session::abandon`], waiting for the give-back: for a grant that a cancelled wait
    /// received, so that the caller's error means nothing is left held.
    pub async fn give_back_unused(&self, grant: &Grant) {
        if grant.mark_released() {
            self.keepalive.remove(grant.fence);
            self.scope.give_back(&grant.key, grant.fence).await;
        }
    }

    /// Ends everything now: waiters and subscriptions see `Closed`, the keepalive stops, and
    /// every grant still held is lost for the reason that the client closed. Returns those
    /// grants, for [`Session::close`] to release.
    fn shut(&self) -> Vec<Arc<Grant>> {
        self.closed.cancel();
        self.dispatch.close();
        let held = self.keepalive.take_all();
        held.into_iter()
            .filter(|g| g.mark_lost(LostReason::ClientClosed))
            .collect()
    }

    /// Closes the session: held grants are released (their lost signals fire), waits and
    /// subscriptions end with `Closed`, connections close. Idempotent; a close called while
    /// another is under way returns when that one is done.
    pub async fn close(&self) {
        if self.is_closed() {
            self.closing_done.cancelled().await;
            return;
        }
        let _done = self.closing_done.clone().drop_guard();
        if self.is_forked() {
            // The connections and leases are the parent's: leave them alone, end this copy.
            self.closed.cancel();
            return;
        }
        let held = self.shut();
        let releases = held
            .iter()
            .map(|grant| self.scope.give_back(&grant.key, grant.fence));
        // Then the grants still on their way (a statement sent before the close, answered
        // after it: adopted too late, it is given back), before the connections close.
        self.scope.granting.close();
        let _ = tokio::time::timeout(Duration::from_secs(5), async {
            futures_util::future::join_all(releases).await;
            self.scope.granting.wait().await;
        })
        .await;
        self.scope.backend.close();
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // The last handle went without close(): nothing can use the grants any more.
        if !self.is_closed() && !self.is_forked() {
            self.shut();
            self.scope.backend.close();
        }
    }
}
