//! What the conformance scenarios need from their environment: a coordinator URL, fresh
//! namespaces, the coordinator's clock, and real faults (terminated connections, a restarted
//! server, a proxy that cuts or stalls connections, an etcd member killed and restarted).
#![allow(dead_code, unused_imports)]

#[cfg(feature = "etcd")]
pub mod etcd;
pub mod proxy;

use std::process::Command;
use std::sync::Once;
use std::time::Duration;

use accord::{Client, ClientOptions};
use chrono::{DateTime, Utc};

pub use proxy::{Mode, Proxy};

/// What a harness constructor returns: a harness, or (a server that is not configured) none,
/// after saying why; the scenario then skips.
pub trait Available {
    fn available(self) -> Option<Harness>;
}

impl Available for Harness {
    fn available(self) -> Option<Harness> {
        Some(self)
    }
}

impl Available for Option<Harness> {
    fn available(self) -> Option<Harness> {
        self
    }
}

/// The coordinator a scenario runs against.
pub struct Harness {
    pub url: String,
    /// A plain SQL connection (PostgreSQL only).
    admin: Option<tokio_postgres::Client>,
    _driver: Option<tokio::task::JoinHandle<()>>,
    /// Unique per harness: namespaces, channels and application names derive from it.
    pub tag: String,
    /// etcd: no member is killed while this is held (see `etcd::no_faults`).
    quiet: std::sync::Mutex<Option<Box<dyn std::any::Any + Send>>>,
    /// etcd: the proxy in front of each `terminable_client`, by owner, whose reset ends that
    /// client's connections from outside (etcd has no `pg_terminate_backend`).
    terminable:
        std::sync::Mutex<std::collections::HashMap<String, (std::sync::Arc<Proxy>, String)>>,
}

static TRACING: Once = Once::new();

fn init_tracing() {
    TRACING.call_once(|| {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_env("ACCORD_TEST_LOG")
                    .unwrap_or_else(|_| "off".into()),
            )
            .with_test_writer()
            .try_init();
    });
}

impl Harness {
    /// The PostgreSQL named by `ACCORD_TEST_DATABASE_URL` (set by `scripts/with-postgres.sh`).
    pub async fn postgres(test: &str) -> Harness {
        init_tracing();
        let url = std::env::var("ACCORD_TEST_DATABASE_URL").expect(
            "ACCORD_TEST_DATABASE_URL is not set: run the tests with `make test` \
             (or scripts/with-postgres.sh cargo test)",
        );
        let (admin, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .expect("connect to the test database");
        let driver = tokio::spawn(async move {
            let _ = connection.await;
        });
        Harness {
            url,
            admin: Some(admin),
            _driver: Some(driver),
            tag: format!("{test}_{:08x}", rand::random::<u32>()),
            quiet: Default::default(),
            terminable: Default::default(),
        }
    }

    /// The etcd cluster named by `ACCORD_TEST_ETCD_URL` (`etcd://host:port,…`); `None`, after
    /// saying so, when it is not set. Each harness writes under its own key prefix.
    pub async fn etcd(test: &str) -> Option<Harness> {
        init_tracing();
        let Ok(url) = std::env::var("ACCORD_TEST_ETCD_URL") else {
            eprintln!("{test}: skipped, ACCORD_TEST_ETCD_URL is not set (an etcd:// URL)");
            return None;
        };
        let tag = format!("{test}_{:08x}", rand::random::<u32>());
        let separator = if url.contains('?') { '&' } else { '?' };
        // Until the scenario says it kills members, none is killed under it.
        #[cfg(feature = "etcd")]
        let quiet: Option<Box<dyn std::any::Any + Send>> = Some(Box::new(etcd::no_faults().await));
        #[cfg(not(feature = "etcd"))]
        let quiet = None;
        Some(Harness {
            url: format!("{url}{separator}prefix=/accord-test/{tag}"),
            admin: None,
            _driver: None,
            tag,
            quiet: std::sync::Mutex::new(quiet),
            terminable: Default::default(),
        })
    }

    /// A SQLite file of its own, in the system's temporary folder.
    pub async fn sqlite(test: &str) -> Harness {
        init_tracing();
        let tag = format!("{test}_{:08x}", rand::random::<u32>());
        let dir = std::env::temp_dir().join("accord-tests");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{tag}.db"));
        Harness {
            url: format!("sqlite://{}", path.display()),
            admin: None,
            _driver: None,
            tag,
            quiet: Default::default(),
            terminable: Default::default(),
        }
    }

    /// An in-process store of its own.
    pub async fn memory(test: &str) -> Harness {
        init_tracing();
        let tag = format!("{test}_{:08x}", rand::random::<u32>());
        Harness {
            url: format!("memory:{tag}"),
            admin: None,
            _driver: None,
            tag,
            quiet: Default::default(),
            terminable: Default::default(),
        }
    }

    /// Options for a client of this scenario: its own namespace, the given owner, and an
    /// application name that fault injection can find.
    pub fn options(&self, owner: &str) -> ClientOptions {
        ClientOptions::new()
            .namespace(self.tag.clone())
            .owner(owner)
            .application_name(self.app_name(owner))
    }

    pub fn app_name(&self, owner: &str) -> String {
        format!("{}:{owner}", self.tag)
    }

    pub async fn client(&self, owner: &str) -> Client {
        self.client_with(owner, self.options(owner)).await
    }

    pub async fn client_with(&self, _owner: &str, options: ClientOptions) -> Client {
        Client::connect(&self.url, options)
            .await
            .expect("connect an accord client")
    }

    /// A client whose connections `terminate_connections` can end and `connection_count`
    /// counts: on PostgreSQL any client (the server ends them, `pg_terminate_backend`); on etcd
    /// one that reaches the cluster through a proxy of its own (one port per member), which
    /// `Mode::Reset` closes as a server or a load balancer would.
    pub async fn terminable_client(&self, owner: &str) -> Client {
        if !self.url.starts_with("etcd://") {
            return self.client(owner).await;
        }
        let known = self
            .terminable
            .lock()
            .unwrap()
            .get(owner)
            .map(|(_, url)| url.clone());
        let url = match known {
            Some(url) => url,
            None => {
                let (proxy, url) = self.proxy().await;
                self.terminable
                    .lock()
                    .unwrap()
                    .insert(owner.to_string(), (std::sync::Arc::new(proxy), url.clone()));
                url
            }
        };
        Client::connect(&url, self.options(owner))
            .await
            .expect("connect an accord client through its proxy")
    }

    /// The proxy of `owner`'s `terminable_client` (etcd).
    fn terminable_proxy(&self, owner: &str) -> std::sync::Arc<Proxy> {
        self.terminable
            .lock()
            .unwrap()
            .get(owner)
            .map(|(proxy, _)| proxy.clone())
            .unwrap_or_else(|| panic!("connect {owner} with Harness::terminable_client first"))
    }

    /// Whether a client that reconnects may have missed notifications sent while it was
    /// disconnected, and says so with `Reconnected`: PostgreSQL's LISTEN hears nothing while
    /// its connection is gone; etcd's watch resumes from the last revision it saw + 1 and
    /// misses nothing (`Reconnected` only when etcd compacted that history meanwhile).
    pub fn reconnect_loses_notifications(&self) -> bool {
        self.is_postgres()
    }

    /// Whether a client listens on a connection of its own, beside its command connections
    /// (PostgreSQL's LISTEN); on etcd one connection to a member carries calls and streams.
    pub fn listens_on_its_own_connection(&self) -> bool {
        self.is_postgres()
    }

    /// A channel name unique to this scenario.
    pub fn channel(&self, name: &str) -> String {
        let tag = &self.tag[self.tag.len().saturating_sub(8)..];
        format!("{name}_{tag}")
    }

    /// The coordinator's clock (the host's, for the embedded store and etcd, which has none).
    pub async fn now(&self) -> DateTime<Utc> {
        match &self.admin {
            Some(admin) => admin
                .query_one("SELECT clock_timestamp()", &[])
                .await
                .unwrap()
                .get(0),
            None => Utc::now(),
        }
    }

    /// This scenario kills members: it no longer holds them off (it takes the faults' lock).
    pub fn allow_member_faults(&self) {
        self.quiet.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    /// True when plain SQL (and PostgreSQL's faults) are available.
    pub fn is_postgres(&self) -> bool {
        self.admin.is_some()
    }

    pub fn admin(&self) -> &tokio_postgres::Client {
        self.admin.as_ref().expect("this scenario needs PostgreSQL")
    }

    /// Terminates every server connection of the client whose owner is given (etcd: of its
    /// `terminable_client`, through its proxy); returns how many.
    pub async fn terminate_connections(&self, owner: &str) -> i64 {
        if !self.is_postgres() {
            return self.terminable_proxy(owner).reset() as i64;
        }
        let row = self
            .admin()
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                  WHERE application_name = $1",
                &[&self.app_name(owner)],
            )
            .await
            .unwrap();
        row.get(0)
    }

    /// Whether a statement of `owner`'s client waits for a lock on the server (a row lock held
    /// by another transaction).
    pub async fn waits_for_a_lock(&self, owner: &str) -> bool {
        self.admin()
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                  WHERE application_name = $1 AND wait_event_type = 'Lock'",
                &[&self.app_name(owner)],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
            > 0
    }

    /// Number of server connections of a client (etcd: of its `terminable_client`).
    pub async fn connection_count(&self, owner: &str) -> i64 {
        if !self.is_postgres() {
            return self.terminable_proxy(owner).open_connections() as i64;
        }
        self.admin()
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
                &[&self.app_name(owner)],
            )
            .await
            .unwrap()
            .get(0)
    }

    /// A proxy in front of the coordinator, and the URL that goes through it. For an etcd
    /// cluster, one port in front of each member, all switched together: the client's whole
    /// network, as on the other stores.
    pub async fn proxy(&self) -> (Proxy, String) {
        if let Some(rest) = self.url.strip_prefix("etcd://") {
            let (hosts, query) = rest.split_once('?').unwrap_or((rest, ""));
            let upstreams: Vec<std::net::SocketAddr> = hosts
                .split(',')
                .map(|h| h.parse().expect("a test cluster member's ip:port"))
                .collect();
            let proxy = Proxy::start_all(&upstreams).await;
            let through: Vec<String> = proxy
                .ports()
                .iter()
                .map(|p| format!("127.0.0.1:{p}"))
                .collect();
            let url = format!("etcd://{}?{query}", through.join(","));
            return (proxy, url);
        }
        let upstream = upstream_addr(&self.url);
        let proxy = Proxy::start(upstream).await;
        let url = self.url.replace(
            &format!(":{}/", upstream.port()),
            &format!(":{}/", proxy.port()),
        );
        (proxy, url)
    }
}

fn upstream_addr(url: &str) -> std::net::SocketAddr {
    let config: tokio_postgres::Config = url.parse().unwrap();
    let host = match &config.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(h) => h.clone(),
        _ => panic!("fault tests need a TCP URL"),
    };
    let port = config.get_ports()[0];
    format!("{host}:{port}").parse().unwrap()
}

/// Restarts the throwaway server (fast shutdown: connections are terminated). Returns false
/// when the tests run against a server they did not start.
pub fn restart_server() -> bool {
    let (Ok(data), Ok(bindir)) = (
        std::env::var("ACCORD_TEST_PGDATA"),
        std::env::var("ACCORD_TEST_PG_BINDIR"),
    ) else {
        return false;
    };
    let pg_ctl = format!("{bindir}/pg_ctl");
    let mut cmd = if unsafe { libc::geteuid() } == 0 {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--", &pg_ctl]);
        c
    } else {
        Command::new(&pg_ctl)
    };
    let status = cmd
        .args(["-D", &data, "-m", "fast", "-w", "-t", "60", "restart"])
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run pg_ctl");
    assert!(status.success(), "pg_ctl restart failed");
    true
}

/// Polls `check` until it holds or `limit` passes (for effects that land in the background).
pub async fn eventually<F, Fut>(limit: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let until = tokio::time::Instant::now() + limit;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= until {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Metadata from a JSON literal.
pub fn meta(value: serde_json::Value) -> accord::Metadata {
    match value {
        serde_json::Value::Object(m) => m,
        other => panic!("metadata must be an object, got {other}"),
    }
}
