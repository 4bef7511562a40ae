//! The cluster's members as this client reaches them: one `etcd-client` client per member
//! (each a channel to that member alone), the one calls go to, and which are down.
//!
//! The crate's own client balances over every member and keeps sending calls to one that
//! died, so the store picks the member itself: calls go to one member (the last that served,
//! so that keep-alive and watch streams stay where the calls are); a member whose connection
//! fails is marked down, the next call goes to the next member up, and a prober reads through
//! the down member until it serves a linearizable read again, then takes it back.
//!
//! Only a call that provably never reached a member (its connection was refused) is sent again,
//! to the next member: a call whose connection broke after sending may have been applied, so it
//! fails as `Connection` and its caller resolves it by reading again.
//!
//! A member that hangs (a stopped process, a partition that drops packets) refuses nothing and
//! breaks nothing: its calls simply go unanswered. So a call unanswered for [`SUSPECT_AFTER`]
//! asks the member whether it runs (a serializable read: answered from the member's own state,
//! with no leader needed, so an election or a slow transaction does not count as a hang); a
//! member that does not answer within [`ALIVE_TIMEOUT`] is taken for down, and the call fails
//! as `Connection` (its outcome unknown, resolved by reading again elsewhere). The streams
//! bound to a member (keep-alive, watch) move when it is taken for down ([`Members::until_down`]).
//! HTTP/2 keep-alive pings are the backstop for a stream nobody calls beside.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, ConnectOptions, GetOptions};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// How often a down member is read through to see whether it is back.
const PROBE_EVERY: Duration = Duration::from_millis(250);
/// How long a probe may take: a member that answers later counts as still down.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long authenticating through a member may take before it counts as down.
const AUTH_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause before sending again when every member refused the call (a member restarting).
const ALL_DOWN_PAUSE: Duration = Duration::from_millis(100);
/// How long a call may go unanswered before its member is asked whether it runs. A healthy
/// member answers a transaction in milliseconds; a slower answer only costs that question.
pub(crate) const SUSPECT_AFTER: Duration = Duration::from_millis(500);
/// How long a running member takes at most to answer that question (a serializable count-only
/// read, served from its own state): one that takes longer hangs, for this client.
pub(crate) const ALIVE_TIMEOUT: Duration = Duration::from_millis(500);
/// HTTP/2 keep-alive of each member's channel: a ping after this long without a frame read,
/// while a call or stream is open (no pings on an idle channel: etcd's server counts those as
/// abuse and closes the connection, `--grpc-keepalive-min-time`, 5 s by default, being the
/// shortest interval it tolerates while streams are open) ...
pub(crate) const PING_AFTER: Duration = Duration::from_secs(5);
/// ... and how long its answer may take before the connection is dropped.
pub(crate) const PING_TIMEOUT: Duration = Duration::from_secs(2);

struct Member {
    client: Client,
    /// Its client for the watch and keep-alive streams: these carry etcd's `hasleader`
    /// metadata (the Go client's `WithRequireLeader`), so that a member that lost its leader
    /// (cut off from its peers, it hears nothing more) ends them rather than keeping them open
    /// and silent. Its own channel: the crate sets the metadata per client, and calls must not
    /// carry it (a serializable read, [`Members::answers`], needs no leader).
    streams: Client,
    /// Its client has a token (auth enabled): etcd's tokens are per member's client, got by
    /// authenticating through it, and renewed by the crate when etcd says one expired.
    authenticated: AtomicBool,
    /// Taken for down (true) until a probe reads through it again; a watch, so that the
    /// streams on it move at once ([`Members::until_down`]).
    down: watch::Sender<bool>,
    /// A prober runs for it (at most one).
    probing: AtomicBool,
}

pub(crate) struct Members {
    members: Vec<Member>,
    /// The member calls go to while it is up.
    current: AtomicUsize,
    /// A key a probe reads (count only), under the store's prefix.
    probe_key: String,
    /// etcd's user and password, when the cluster has auth enabled (never shown).
    user: Option<(String, String)>,
    pub shutdown: CancellationToken,
}

/// gRPC's codes Cancelled (1), Unknown (2) and Unavailable (14).
const CANCELLED: i32 = 1;
const UNKNOWN: i32 = 2;
const UNAVAILABLE: i32 = 14;

/// Whether a call failed before reaching its member (the connection was refused, or never
/// made): safe to send again.
fn unreached(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::TransportError(_) => true,
        etcd_client::Error::GRpcStatus(s) => {
            s.code() as i32 == UNAVAILABLE && s.message().contains("connect")
        }
        _ => false,
    }
}

/// Whether a live member refused a call for want of a leader ("etcdserver: leader changed",
/// "no leader", "request timed out"): an election, which passes.
fn in_election(e: &etcd_client::Error) -> bool {
    const DEADLINE_EXCEEDED: i32 = 4;
    match e {
        etcd_client::Error::GRpcStatus(s) => {
            matches!(s.code() as i32, UNAVAILABLE | DEADLINE_EXCEEDED)
                && s.message().starts_with("etcdserver")
        }
        _ => false,
    }
}

/// Whether the member ended a call or stream because it has no leader: etcd's answer to a
/// request that carried `hasleader` (at once when it has none, or when it loses it while the
/// stream is open, after a few election timeouts).
fn leaderless(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(s)
        if s.code() as i32 == UNAVAILABLE && s.message() == "etcdserver: no leader")
}

/// Whether a call failed on the connection to its member (refused, reset, closed), rather than
/// with the member's answer: that member is taken for down until a probe reads through it.
/// etcd's own refusals ("etcdserver: no leader", "leader changed") come from a live member.
/// A connection that the far end closes as it is made fails a call either as Unknown
/// ("transport error") or, about a third of the time, as Cancelled ("operation was canceled":
/// the connection ended before the call was sent); both are the connection's failure. Neither is
/// taken for a call that never arrived ([`unreached`]): the second may also come from a call
/// already sent.
fn connection_failed(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        etcd_client::Error::GRpcStatus(s) => match s.code() as i32 {
            UNAVAILABLE | UNKNOWN => !s.message().starts_with("etcdserver"),
            CANCELLED => s.message() == "operation was canceled",
            _ => false,
        },
        _ => false,
    }
}

impl Members {
    /// One client per endpoint; none connects before its first call, unless the cluster has
    /// auth enabled (`user`): then each member is authenticated through now, all at once. A
    /// member that cannot be reached is taken for down (its probe authenticates it once it
    /// serves); a refusal (a wrong password) fails the connect.
    pub async fn connect(
        endpoints: &[String],
        options: ConnectOptions,
        probe_key: String,
        user: Option<(String, String)>,
    ) -> Result<Arc<Members>, etcd_client::Error> {
        // The user is not given to the crate's connect, which would authenticate through a
        // member that may be down; each member's client authenticates on its own instead.
        // With it set, a call refused for an expired token (etcd's simple tokens expire
        // after --auth-token-ttl unused) authenticates again and is sent once more.
        let options = options.with_auto_token_refresh(user.is_some());
        let mut members = Vec::with_capacity(endpoints.len());
        for endpoint in endpoints {
            let streams = options.clone().with_require_leader(true);
            members.push(Member {
                client: Client::connect([endpoint], Some(options.clone())).await?,
                streams: Client::connect([endpoint], Some(streams)).await?,
                authenticated: AtomicBool::new(false),
                down: watch::Sender::new(false),
                probing: AtomicBool::new(false),
            });
        }
        let members = Arc::new(Members {
            members,
            current: AtomicUsize::new(0),
            probe_key,
            user,
            shutdown: CancellationToken::new(),
        });
        if members.user.is_some() {
            let tries = (0..members.members.len()).map(|i| members.authenticate(i));
            let outcomes = futures_util::future::join_all(tries).await;
            let mut unreachable = None;
            for (i, outcome) in outcomes.into_iter().enumerate() {
                match outcome {
                    Ok(()) => {}
                    Err(e) if connection_failed(&e) => {
                        members.lost(i, &e);
                        unreachable.get_or_insert(e);
                    }
                    Err(refused) => {
                        members.shutdown.cancel();
                        return Err(refused);
                    }
                }
            }
            if let Some(e) = unreachable {
                if members.members.iter().all(|m| *m.down.borrow()) {
                    members.shutdown.cancel();
                    return Err(e);
                }
            }
        }
        Ok(members)
    }

    /// Whether the cluster is reached as a user (auth enabled).
    pub fn has_user(&self) -> bool {
        self.user.is_some()
    }

    /// Authenticates member `i`'s client (once; the crate renews its token after that).
    async fn authenticate(&self, i: usize) -> Result<(), etcd_client::Error> {
        let member = &self.members[i];
        let Some(user) = &self.user else {
            return Ok(());
        };
        if member.authenticated.load(Ordering::Relaxed) {
            return Ok(());
        }
        // Authenticate is a write through etcd's consensus: a member cut off from its
        // leader would hold the connect forever without a bound. In an election (a member
        // killed a moment ago) a live member answers "leader changed" or "no leader": asked
        // again within the bound, not taken for a refusal.
        let until = tokio::time::Instant::now() + AUTH_TIMEOUT;
        for client in [&member.client, &member.streams] {
            Self::authenticate_client(client.clone(), user, until, i).await?;
        }
        member.authenticated.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Authenticates one client of member `i` (see [`Members::authenticate`]) by `until`.
    async fn authenticate_client(
        mut client: Client,
        user: &(String, String),
        until: tokio::time::Instant,
        i: usize,
    ) -> Result<(), etcd_client::Error> {
        loop {
            let answer =
                tokio::time::timeout_at(until, client.update_user(Some(user.clone()))).await;
            match answer {
                Err(_) => {
                    return Err(etcd_client::Error::IoError(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("authenticating through member {i} took over {AUTH_TIMEOUT:?}"),
                    )))
                }
                Ok(Err(e)) if in_election(&e) => {
                    tokio::time::sleep(ALL_DOWN_PAUSE).await;
                }
                Ok(answer) => return answer,
            }
        }
    }

    /// The member to send to, and its client: the current one if up, else the next one up
    /// (which becomes current), else the current one all the same.
    pub fn pick(&self) -> (usize, Client) {
        let n = self.members.len();
        let current = self.current.load(Ordering::Relaxed);
        let chosen = (0..n)
            .map(|step| (current + step) % n)
            .find(|&i| !*self.members[i].down.borrow())
            .unwrap_or(current);
        if chosen != current {
            self.current.store(chosen, Ordering::Relaxed);
        }
        (chosen, self.members[chosen].client.clone())
    }

    /// [`Members::pick`], with the member's client for watch and keep-alive streams.
    pub fn pick_for_streams(&self) -> (usize, Client) {
        let (i, _) = self.pick();
        (i, self.members[i].streams.clone())
    }

    /// A call through member `i` failed with `e`: if on its connection, or because the member
    /// has no leader (a stream that required one, ended by the member), the member is down
    /// until a probe reads through it again (a linearizable read: it needs a leader too).
    pub fn failed(self: &Arc<Self>, i: usize, e: &etcd_client::Error) {
        if connection_failed(e) || leaderless(e) {
            self.lost(i, e);
        }
    }

    /// Member `i` is down (a call's connection failed, or a stream it served ended): calls go
    /// to another until a probe reads through it again.
    pub fn lost(self: &Arc<Self>, i: usize, e: &dyn std::fmt::Display) {
        let member = &self.members[i];
        if member.down.send_replace(true) {
            return;
        }
        tracing::warn!(target: "accord", member = i, error = %e, "etcd member unreachable; using another until it serves again");
        if member.probing.swap(true, Ordering::Relaxed) {
            return;
        }
        let members = Arc::downgrade(self);
        let shutdown = self.shutdown.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(PROBE_EVERY) => {}
                }
                let Some(members) = members.upgrade() else {
                    return;
                };
                if members.probe(i).await {
                    let member = &members.members[i];
                    member.probing.store(false, Ordering::Relaxed);
                    member.down.send_replace(false);
                    tracing::info!(target: "accord", member = i, "etcd member serves again");
                    return;
                }
            }
        });
    }

    /// Whether member `i` serves a linearizable read (it runs, has a leader and caught up).
    async fn probe(&self, i: usize) -> bool {
        let authenticated = tokio::time::timeout(PROBE_TIMEOUT, self.authenticate(i));
        if !matches!(authenticated.await, Ok(Ok(()))) {
            return false;
        }
        let mut client = self.members[i].client.clone();
        let read = client.get(
            self.probe_key.as_str(),
            Some(GetOptions::new().with_count_only()),
        );
        matches!(tokio::time::timeout(PROBE_TIMEOUT, read).await, Ok(Ok(_)))
    }

    /// Whether member `i` is taken for down.
    pub fn is_down(&self, i: usize) -> bool {
        *self.members[i].down.borrow()
    }

    /// Returns once member `i` is taken for down (at once if it is): a stream on it moves.
    pub async fn until_down(&self, i: usize) {
        let mut down = self.members[i].down.subscribe();
        // The sender lives as long as `self`: the wait ends only with a down.
        let _ = down.wait_for(|down| *down).await;
    }

    /// Whether member `i` runs and answers this client: a serializable count-only read (no
    /// leader needed, nothing to catch up) within [`ALIVE_TIMEOUT`].
    async fn answers(&self, i: usize) -> bool {
        let mut client = self.members[i].client.clone();
        let read = client.get(
            self.probe_key.as_str(),
            Some(GetOptions::new().with_count_only().with_serializable()),
        );
        matches!(tokio::time::timeout(ALIVE_TIMEOUT, read).await, Ok(Ok(_)))
    }

    /// `call`'s answer from member `i`, unless the member hangs: every [`SUSPECT_AFTER`]
    /// without an answer it is asked whether it runs, and if it does not answer that either
    /// it is taken for down and the call fails (an `IoError`, timed out: `Connection`, its
    /// outcome unknown). A member that answers the question may take its time with the call
    /// (a large transaction, an election that etcd ends with an error of its own).
    pub async fn answered<T>(
        self: &Arc<Self>,
        i: usize,
        call: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, etcd_client::Error> {
        tokio::pin!(call);
        loop {
            tokio::select! {
                answer = &mut call => return answer,
                _ = tokio::time::sleep(SUSPECT_AFTER) => {}
            }
            let answers = self.answers(i);
            tokio::pin!(answers);
            let runs = tokio::select! {
                answer = &mut call => return answer,
                runs = &mut answers => runs,
            };
            if !runs {
                let e = etcd_client::Error::IoError(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "etcd member {i} hangs: no answer within {SUSPECT_AFTER:?}, nor to a \
                         serializable read within {ALIVE_TIMEOUT:?}"
                    ),
                ));
                self.lost(i, &e);
                return Err(e);
            }
        }
    }

    /// Runs `call` on a member up, moving on to the next one (at most twice round the
    /// cluster) only when the call never reached the one it was sent to.
    pub async fn call<T, F, Fut>(self: &Arc<Self>, call: F) -> Result<T, etcd_client::Error>
    where
        F: FnMut(Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
    {
        self.call_at(call).await.map(|(_, answer)| answer)
    }

    /// [`Members::call`], saying which member answered (where a stream it opened goes).
    pub async fn call_at<T, F, Fut>(
        self: &Arc<Self>,
        call: F,
    ) -> Result<(usize, T), etcd_client::Error>
    where
        F: FnMut(Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
    {
        self.call_through(Self::pick, call).await
    }

    /// [`Members::call_at`] for a call that opens a stream: on the member's client for
    /// streams ([`Members::pick_for_streams`]).
    pub async fn stream_at<T, F, Fut>(
        self: &Arc<Self>,
        open: F,
    ) -> Result<(usize, T), etcd_client::Error>
    where
        F: FnMut(Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
    {
        self.call_through(Self::pick_for_streams, open).await
    }

    async fn call_through<T, F, Fut>(
        self: &Arc<Self>,
        pick: fn(&Self) -> (usize, Client),
        mut call: F,
    ) -> Result<(usize, T), etcd_client::Error>
    where
        F: FnMut(Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
    {
        let tries = 2 * self.members.len();
        let mut tried = 0;
        loop {
            let (i, client) = pick(self);
            let e = match self.answered(i, call(client)).await {
                Ok(answer) => return Ok((i, answer)),
                Err(e) => e,
            };
            self.failed(i, &e);
            tried += 1;
            if !unreached(&e) || tried >= tries {
                return Err(e);
            }
            if tried % self.members.len() == 0 {
                tokio::time::sleep(ALL_DOWN_PAUSE).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A member whose connections are closed as they are made (a cut network, a member that
    /// exits): every call fails, and each failure is one of the connection's, so the member is
    /// taken for down. The failures vary with the moment the close lands (Unknown "transport
    /// error", Cancelled "operation was canceled"): many calls, so that each kind shows up.
    #[tokio::test]
    async fn a_connection_closed_as_it_is_made_is_a_connection_failure() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                drop(socket);
            }
        });
        let mut client = Client::connect([format!("127.0.0.1:{port}")], None)
            .await
            .unwrap();
        let mut kinds = std::collections::BTreeSet::new();
        for _ in 0..100 {
            let read = client.get("k", None);
            let e = match tokio::time::timeout(Duration::from_secs(30), read).await {
                Ok(Err(e)) => e,
                other => panic!("a call through a closed connection answered {other:?}"),
            };
            assert!(
                connection_failed(&e),
                "not taken for the connection's failure: {e:?}"
            );
            kinds.insert(match &e {
                etcd_client::Error::GRpcStatus(s) => format!("{:?}", s.code()),
                other => format!("{other}"),
            });
        }
        eprintln!("failures seen: {kinds:?}");
    }
}
