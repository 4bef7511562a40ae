//! The floor: accord's own statements (`accord::statements`), sent raw on tokio-postgres
//! connections, with nothing of accord's client around them.

use std::sync::atomic::{AtomicI64, Ordering};

use rustls::pki_types::pem::PemObject;
use tokio_postgres::{Client, NoTls, Statement};

use crate::{BenchResult, NAMESPACE, SCHEMA};

const OWNER: &str = "raw-bench";
const TTL_MS: i64 = 30_000;

/// accord's try_acquire + release of a key that must be free: the workload of scenarios 1
/// and 2.
pub async fn accord_pair(client: &accord::Client, key: &str) -> BenchResult<()> {
    let lease = client
        .try_acquire(key, accord::AcquireOptions::new())
        .await?
        .ok_or_else(|| format!("{key} is held"))?;
    lease.release().await?;
    Ok(())
}

/// A connection of its own; its driver task runs on the runtime.
pub async fn connect(url: &str) -> BenchResult<Client> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            eprintln!("raw connection ended: {e}");
        }
    });
    Ok(client)
}

/// A connection over TLS (rustls, the stack accord uses), the server's certificate checked
/// against `root_cert` (PEM): what accord does with sslmode=verify-full.
pub async fn connect_tls(url: &str, root_cert: &str) -> BenchResult<Client> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(root_cert)? {
        roots.add(cert?)?;
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tls = tokio_postgres_rustls::MakeRustlsConnect::new(config);
    let (client, connection) = tokio_postgres::connect(url, tls).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            eprintln!("raw TLS connection ended: {e}");
        }
    });
    Ok(client)
}

/// The acquire and release text accord prepares, and the parameters they take.
#[derive(Clone)]
pub struct AccordSql {
    pub acquire: String,
    pub release: String,
    channel: String,
}

impl AccordSql {
    pub fn new() -> BenchResult<AccordSql> {
        let statements = accord::statements(SCHEMA)?;
        let text = |name: &str| {
            statements
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, sql)| sql.clone())
                .ok_or_else(|| format!("accord::statements has no {name}"))
        };
        Ok(AccordSql {
            acquire: text("acquire")?,
            release: text("release")?,
            channel: accord::wakeup_channel(SCHEMA)?,
        })
    }
}

impl AccordSql {
    /// What bench programs in other languages need to send the same statements.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "namespace": NAMESPACE,
            "acquire": self.acquire,
            "acquire_parameters": "namespace text, key text, owner text, attempt bigint (unique per attempt), ttl_ms bigint, metadata text (JSON object or NULL); row: granted, fence, ...",
            "release": self.release,
            "release_parameters": "namespace text, key text, owner text, fence bigint, wakeup_channel text; row: released count",
            "wakeup_channel": self.channel,
        })
    }
}

/// Each attempt carries a token of its own, as accord's do (a retry re-grants its own grant).
fn next_attempt() -> i64 {
    static NEXT: AtomicI64 = AtomicI64::new(0);
    if NEXT.load(Ordering::Relaxed) == 0 {
        let _ = NEXT.compare_exchange(
            0,
            rand::random_range(1..i64::MAX / 2),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The two statements prepared on one connection.
pub struct Prepared {
    pub acquire: Statement,
    pub release: Statement,
    channel: String,
}

impl Prepared {
    pub async fn on(client: &Client, sql: &AccordSql) -> BenchResult<Prepared> {
        Ok(Prepared {
            acquire: client.prepare(&sql.acquire).await?,
            release: client.prepare(&sql.release).await?,
            channel: sql.channel.clone(),
        })
    }

    /// The fence when granted.
    pub async fn try_acquire(&self, client: &Client, key: &str) -> BenchResult<Option<i64>> {
        let attempt = next_attempt();
        let metadata: Option<&str> = None;
        let rows = client
            .query(
                &self.acquire,
                &[&NAMESPACE, &key, &OWNER, &attempt, &TTL_MS, &metadata],
            )
            .await?;
        Ok(rows
            .first()
            .filter(|row| row.get::<_, bool>(0))
            .map(|row| row.get(1)))
    }

    /// One try_acquire + release of a key that must be free.
    pub async fn pair(&self, client: &Client, key: &str) -> BenchResult<()> {
        let fence = self
            .try_acquire(client, key)
            .await?
            .ok_or_else(|| format!("{key} is held"))?;
        self.release(client, key, fence).await
    }

    pub async fn release(&self, client: &Client, key: &str, fence: i64) -> BenchResult<()> {
        let released: i64 = client
            .query_one(
                &self.release,
                &[&NAMESPACE, &key, &OWNER, &fence, &self.channel],
            )
            .await?
            .get(0);
        if released != 1 {
            return Err(format!("raw release of {key} found no lease").into());
        }
        Ok(())
    }
}

impl Prepared {
    /// The statements on a pooled connection, prepared once per connection (deadpool caches).
    pub async fn cached(
        client: &deadpool_postgres::Client,
        sql: &AccordSql,
    ) -> BenchResult<Prepared> {
        Ok(Prepared {
            acquire: client.prepare_cached(&sql.acquire).await?,
            release: client.prepare_cached(&sql.release).await?,
            channel: sql.channel.clone(),
        })
    }
}
