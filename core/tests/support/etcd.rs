//! The throwaway etcd cluster of `scripts/with-etcd.sh`: its URL, clients of one member each,
//! and its members as processes that a test kills (-9) and restarts, for the member-failure
//! scenarios; and a proxy in front of each member for network faults.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use etcd_client::{Client, ConnectOptions, GetOptions};
use tokio::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::{eventually, Proxy};

/// Long enough for any election or catch-up of a healthy loopback cluster: a bound that only
/// catches hangs.
const SETTLE: Duration = Duration::from_secs(60);

/// Member faults in one test binary are one at a time (write): two members down at once leave
/// no quorum, which no scenario means to test by accident. A scenario that kills nothing holds
/// it for reading (`Harness::etcd`), so that no kill breaks its own bounds, which are set for a
/// healthy cluster.
static FAULTS: RwLock<()> = RwLock::const_new(());

/// Held while a scenario runs that kills no member: no member is killed meanwhile.
pub async fn no_faults() -> RwLockReadGuard<'static, ()> {
    FAULTS.read().await
}

pub struct Cluster {
    /// `etcd://host:port,host:port,host:port`, as accord takes it.
    pub url: String,
    pub members: Vec<Member>,
}

pub struct Member {
    pub name: String,
    /// The client address (`host:port`).
    pub client: SocketAddr,
    pub peer: SocketAddr,
    pub pid_file: PathBuf,
    pub data_dir: PathBuf,
    /// Starts the member in the background and writes its pid file (first start and restart).
    start: PathBuf,
}

impl Cluster {
    /// The cluster that `scripts/with-etcd.sh` started (ACCORD_TEST_ETCD_URL and
    /// ACCORD_TEST_ETCD_MEMBERS).
    pub fn from_env() -> Cluster {
        Cluster::from_vars("ACCORD_TEST_ETCD_URL", "ACCORD_TEST_ETCD_MEMBERS")
    }

    /// A cluster named by the two variables given (its URL, its members' file).
    pub fn from_vars(url_var: &str, members_var: &str) -> Cluster {
        super::init_tracing();
        let url = std::env::var(url_var).unwrap_or_else(|_| {
            panic!(
                "{url_var} is not set: run the tests with `make test` \
                 (or scripts/with-etcd.sh cargo test -p accord-coord --features etcd)"
            )
        });
        let file = std::env::var(members_var).unwrap_or_else(|_| {
            panic!(
                "{members_var} is not set: the member-failure tests need the cluster \
                 that scripts/with-etcd.sh starts"
            )
        });
        let text = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("read {members_var} ({file}): {e}"));
        let members = text
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(|line| {
                let f: Vec<&str> = line.split('\t').collect();
                assert_eq!(f.len(), 6, "a member line of {file} has 6 fields: {line:?}");
                Member {
                    name: f[0].to_string(),
                    client: f[1].parse().expect("a member's client address"),
                    peer: f[2].parse().expect("a member's peer address"),
                    pid_file: f[3].into(),
                    data_dir: f[4].into(),
                    start: f[5].into(),
                }
            })
            .collect();
        Cluster { url, members }
    }

    /// Holds off every other member fault, and every scenario that kills nothing, of this test
    /// binary until the guard is dropped.
    pub async fn faults(&self) -> RwLockWriteGuard<'static, ()> {
        FAULTS.write().await
    }

    /// The index of the member that leads, once every running member names the same running
    /// leader (after a kill: once the others elected one).
    pub async fn leader(&self) -> usize {
        let until = tokio::time::Instant::now() + SETTLE;
        loop {
            if let Some(leader) = self.agreed_leader().await {
                return leader;
            }
            if tokio::time::Instant::now() >= until {
                let running: Vec<String> = self
                    .members
                    .iter()
                    .map(|m| format!("{} {}", m.name, m.is_running()))
                    .collect();
                panic!(
                    "the running members agree on no leader within {SETTLE:?} (running: {})",
                    running.join(", ")
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn agreed_leader(&self) -> Option<usize> {
        // (index, own id, the leader it names) of each running member.
        let mut seen = Vec::new();
        for (i, member) in self.members.iter().enumerate() {
            if !member.is_running() {
                continue;
            }
            let mut client = member.try_client().await.ok()?;
            let status = client.status().await.ok()?;
            seen.push((i, status.header()?.member_id(), status.leader()));
        }
        let (_, _, leader) = *seen.first()?;
        if leader == 0 || seen.iter().any(|(_, _, l)| *l != leader) {
            return None;
        }
        seen.iter()
            .find(|(_, id, _)| *id == leader)
            .map(|(i, _, _)| *i)
    }

    /// A proxy in front of each member (in member order), and the cluster URL through them
    /// listing member `first` first (the member a new accord client calls until it fails), with
    /// `query` (e.g. a harness's `prefix=…`): a network fault of one member without touching
    /// its process.
    pub async fn proxied_from(&self, first: usize, query: &str) -> (Vec<Proxy>, String) {
        let (proxies, _) = self.proxied().await;
        let n = proxies.len();
        let hosts: Vec<String> = (0..n)
            .map(|step| format!("127.0.0.1:{}", proxies[(first + step) % n].port()))
            .collect();
        (proxies, format!("etcd://{}?{query}", hosts.join(",")))
    }

    /// A proxy in front of each member (in member order), and the cluster URL through them:
    /// a network fault of one member without touching its process.
    pub async fn proxied(&self) -> (Vec<Proxy>, String) {
        let mut proxies = Vec::new();
        for member in &self.members {
            proxies.push(Proxy::start(member.client).await);
        }
        let hosts: Vec<String> = proxies
            .iter()
            .map(|p| format!("127.0.0.1:{}", p.port()))
            .collect();
        let url = format!("etcd://{}", hosts.join(","));
        (proxies, url)
    }
}

impl Member {
    /// The pid its pid file names (the latest start's).
    pub fn pid(&self) -> i32 {
        let text = std::fs::read_to_string(&self.pid_file).expect("read a member's pid file");
        text.trim().parse().expect("a pid")
    }

    /// Whether its process is alive (a zombie that nobody reaped yet is not).
    pub fn is_running(&self) -> bool {
        match std::fs::read_to_string(format!("/proc/{}/stat", self.pid())) {
            // The state follows the command name in parentheses: "pid (comm) S ...".
            Ok(stat) => stat
                .rsplit_once(')')
                .map(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X']))
                .unwrap_or(false),
            Err(_) => false,
        }
    }

    /// kill -9, then waits until the process is gone. The member comes back when the returned
    /// guard restarts it, or when the guard is dropped (a failed test leaves no member down
    /// for the next one).
    pub async fn kill(&self) -> Down<'_> {
        assert!(self.is_running(), "member {} is not running", self.name);
        // SAFETY: kill(2) with a pid and a signal number has no memory effects.
        let rc = unsafe { libc::kill(self.pid(), libc::SIGKILL) };
        assert_eq!(rc, 0, "kill -9 member {}", self.name);
        let gone = eventually(SETTLE, || async { !self.is_running() }).await;
        assert!(
            gone,
            "member {} still runs {SETTLE:?} after kill -9",
            self.name
        );
        Down {
            member: self,
            restarted: false,
        }
    }

    /// SIGSTOP: the member hangs (its connections stay open, nothing answers) until the
    /// returned guard is dropped or resumes it (SIGCONT).
    pub fn stop(&self) -> Stopped<'_> {
        assert!(self.is_running(), "member {} is not running", self.name);
        // SAFETY: kill(2) with a pid and a signal number has no memory effects.
        let rc = unsafe { libc::kill(self.pid(), libc::SIGSTOP) };
        assert_eq!(rc, 0, "SIGSTOP member {}", self.name);
        Stopped {
            member: self,
            resumed: false,
        }
    }

    /// Runs its start script; false when that failed.
    fn start(&self) -> bool {
        Command::new(&self.start)
            .status()
            .is_ok_and(|status| status.success())
    }

    /// A client of this member alone (the crate's own client, as the etcd store uses it).
    pub async fn client(&self) -> Client {
        self.try_client().await.expect("connect to an etcd member")
    }

    async fn try_client(&self) -> Result<Client, etcd_client::Error> {
        let options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(5))
            .with_timeout(Duration::from_secs(10));
        Client::connect([self.client.to_string()], Some(options)).await
    }

    /// How many watch streams the member serves now (its gauge
    /// `etcd_debugging_mvcc_watch_stream_total`, from `/metrics` on its client port, which a
    /// member without a leader serves too).
    pub async fn watch_streams(&self) -> i64 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        const GAUGE: &str = "etcd_debugging_mvcc_watch_stream_total ";
        let mut socket = tokio::net::TcpStream::connect(self.client)
            .await
            .expect("connect to a member's client port");
        let request = format!("GET /metrics HTTP/1.0\r\nHost: {}\r\n\r\n", self.client);
        socket.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        socket.read_to_string(&mut answer).await.unwrap();
        let value = answer
            .lines()
            .find_map(|line| line.strip_prefix(GAUGE))
            .unwrap_or_else(|| panic!("member {} reports no {GAUGE}", self.name));
        value.trim().parse::<f64>().expect("a gauge's value") as i64
    }

    /// Waits until the member serves a linearizable read: it runs, knows the leader, and has
    /// applied what the cluster committed before the read.
    pub async fn wait_ready(&self) {
        let ready = eventually(SETTLE, || async {
            match self.try_client().await {
                Ok(mut client) => client.get("ready", None::<GetOptions>).await.is_ok(),
                Err(_) => false,
            }
        })
        .await;
        assert!(
            ready,
            "member {} serves no read within {SETTLE:?} (running: {}); the end of its log:\n{}",
            self.name,
            self.is_running(),
            self.log_tail(40)
        );
    }

    /// The last `lines` lines of the member's log (its start script appends to `log` beside
    /// its data folder), for a failure message: why a member did not come back.
    pub fn log_tail(&self, lines: usize) -> String {
        let log = self.data_dir.with_file_name("log");
        match std::fs::read_to_string(&log) {
            Ok(text) => {
                let all: Vec<&str> = text.lines().collect();
                all[all.len().saturating_sub(lines)..].join("\n")
            }
            Err(e) => format!("(cannot read {}: {e})", log.display()),
        }
    }
}

/// A killed member, restarted by `restart` or when dropped.
pub struct Down<'a> {
    member: &'a Member,
    restarted: bool,
}

impl Down<'_> {
    /// Starts the member again from its data folder (it rejoins with what it stored) and waits
    /// until it serves linearizable reads.
    pub async fn restart(mut self) {
        self.restarted = true;
        assert!(
            self.member.start(),
            "start member {} again",
            self.member.name
        );
        self.member.wait_ready().await;
    }
}

impl Drop for Down<'_> {
    fn drop(&mut self) {
        // Never a panic here: a test that failed with a member down is unwinding already.
        if !self.restarted {
            self.member.start();
        }
    }
}

/// A member stopped with SIGSTOP, continued by `resume` or when dropped.
pub struct Stopped<'a> {
    member: &'a Member,
    resumed: bool,
}

impl Stopped<'_> {
    fn cont(&self) -> bool {
        // SAFETY: as in `Member::stop`.
        unsafe { libc::kill(self.member.pid(), libc::SIGCONT) == 0 }
    }

    /// SIGCONT, then waits until the member serves linearizable reads again (it caught up).
    pub async fn resume(mut self) {
        self.resumed = true;
        assert!(self.cont(), "SIGCONT member {}", self.member.name);
        self.member.wait_ready().await;
    }
}

impl Drop for Stopped<'_> {
    fn drop(&mut self) {
        // Never a panic here: a failed test must not leave the member stopped for the next.
        if !self.resumed {
            self.cont();
        }
    }
}

/// A client of one member of the cluster an `etcd://user:password@host,…` URL names,
/// authenticated as that user, whose token is never renewed (a witness of token expiry).
pub async fn authenticated(url: &str) -> Client {
    let rest = url.strip_prefix("etcd://").expect("an etcd:// URL");
    let (user, hosts) = rest.split_once('@').expect("a user in the URL");
    let (name, password) = user.split_once(':').expect("user:password");
    let host = hosts.split([',', '?']).next().expect("a host");
    Client::connect(
        [host],
        Some(ConnectOptions::new().with_user(name, password)),
    )
    .await
    .expect("authenticate a witness client")
}

/// The witness's token expired: etcd refuses its next call as an invalid token.
pub async fn assert_token_expired(mut witness: Client) {
    let err = witness
        .get(
            "/accord-test/witness",
            Some(GetOptions::new().with_count_only()),
        )
        .await
        .expect_err("the witness's token should have expired by now");
    assert!(
        err.to_string().contains("invalid auth token"),
        "the witness failed otherwise: {err}"
    );
}
