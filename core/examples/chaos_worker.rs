//! The chaos run's Rust worker (`chaos/run.py` starts it; see `chaos/workers/worker.py` for the
//! loop and `docs/reliability.md`). Configured by the environment: CHAOS_URL, CHAOS_WRITER_URL,
//! CHAOS_NAMESPACE, CHAOS_NAME, CHAOS_KEYS (comma-separated), CHAOS_TTL_MS. Loops until killed:
//! acquire a key, a little work, a fenced write to `chaos_resource` through a tokio-postgres
//! connection of its own (`Lease::fenced` and the UPDATE in one transaction; on etcd, whose
//! leases are not in the database, the UPDATE alone), a little more work, release; a JSON line
//! per step on stdout. With CHAOS_POOL set (chaos/etcd_run.py), every third round claims two
//! keys of that work pool instead, and for each makes the fenced write (the caller gave each
//! pool key a row) and marks it done: a pool key granted, written or done twice is then in the
//! run's record.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use accord::{AcquireOptions, ClaimOptions, Client, ClientOptions, ErrorKind, Lease};
use serde_json::{json, Value};

const WRITE: &str =
    "UPDATE chaos_resource SET fence = $1, writer = $2 WHERE key = $3 AND fence < $1";

fn say(mut event: Value) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    event["t"] = json!(now.as_secs_f64());
    println!("{event}");
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"))
}

/// The worker's own connection to the resource, made again after an error.
struct Writer {
    url: String,
    db: Option<tokio_postgres::Client>,
}

impl Writer {
    async fn write(
        &mut self,
        lease: &accord::Lease,
        key: &str,
        name: &str,
    ) -> Result<bool, String> {
        if self.db.as_ref().is_none_or(|db| db.is_closed()) {
            let mut config: tokio_postgres::Config =
                self.url.parse().map_err(|e| format!("{e}"))?;
            config
                .application_name("chaos-writer")
                .connect_timeout(Duration::from_secs(3));
            let (db, connection) = config
                .connect(tokio_postgres::NoTls)
                .await
                .map_err(|e| format!("connect: {e}"))?;
            tokio::spawn(connection);
            self.db = Some(db);
        }
        let db = self.db.as_mut().expect("connected");
        let outcome = Self::fenced_write(db, lease, key, name).await;
        if outcome.is_err() {
            self.db = None;
        }
        outcome
    }

    /// accord's check (`Lease::fenced`) and the UPDATE in one transaction: false when the
    /// check refused the lease (rolled back, nothing written) or the row's fence was not
    /// smaller.
    async fn fenced_write(
        db: &mut tokio_postgres::Client,
        lease: &accord::Lease,
        key: &str,
        name: &str,
    ) -> Result<bool, String> {
        let tx = db.transaction().await.map_err(|e| format!("{e}"))?;
        match lease.fenced(&tx).await {
            Ok(()) => {}
            // The etcd run's leases live outside this database (chaos/etcd_run.py): no
            // transaction here can check them, and the fence in the UPDATE alone guards.
            Err(e) if e.kind() == ErrorKind::Unsupported => {}
            Err(e) if e.kind() == ErrorKind::LeaseLost => {
                tx.rollback().await.map_err(|e| format!("{e}"))?;
                return Ok(false);
            }
            Err(e) => return Err(format!("{e}")),
        }
        let fence = lease.fence();
        let rows = tx
            .execute(WRITE, &[&fence, &name, &key])
            .await
            .map_err(|e| format!("{e}"))?;
        tx.commit().await.map_err(|e| format!("{e}"))?;
        Ok(rows == 1)
    }
}

#[tokio::main]
async fn main() {
    let name = env("CHAOS_NAME");
    let keys: Vec<String> = env("CHAOS_KEYS").split(',').map(str::to_owned).collect();
    let ttl = Duration::from_millis(env("CHAOS_TTL_MS").parse().expect("CHAOS_TTL_MS"));
    let mut writer = Writer {
        url: env("CHAOS_WRITER_URL"),
        db: None,
    };
    // The server may be restarting or failing over when a worker starts.
    let client = loop {
        let options = ClientOptions::new()
            .namespace(env("CHAOS_NAMESPACE"))
            .owner(&name)
            .ttl(ttl);
        match Client::connect(&env("CHAOS_URL"), options).await {
            Ok(client) => break client,
            Err(e) => {
                say(json!({"ev": "error", "op": "connect", "err": e.to_string()}));
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    };
    say(json!({"ev": "start", "w": name}));
    let pool = std::env::var("CHAOS_POOL").ok();
    for round in 1u64.. {
        if let Some(pool) = pool.as_deref().filter(|_| round % 3 == 0) {
            let options = ClaimOptions::new()
                .limit(2)
                .ttl(ttl)
                .timeout(Duration::from_millis(500));
            match client.claim(pool, options).await {
                Ok(leases) => {
                    for lease in leases {
                        claimed(lease, &mut writer, &name).await;
                    }
                }
                Err(e) => {
                    say(json!({"ev": "error", "op": "claim", "err": e.to_string()}));
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
            continue;
        }
        let key = keys[rand::random_range(0..keys.len())].clone();
        let (pause, rest) = (rand::random_range(20..150), rand::random_range(10..50));
        let options = AcquireOptions::new()
            .ttl(ttl)
            .timeout(Duration::from_secs(3));
        let lease = match client.acquire(&key, options).await {
            Ok(lease) => lease,
            Err(e) if e.kind() == ErrorKind::Timeout => continue,
            Err(e) => {
                say(json!({"ev": "error", "op": "acquire", "err": e.to_string()}));
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let fence = lease.fence();
        say(json!({"ev": "granted", "key": key, "fence": fence}));
        let signal = lease.lost_signal();
        let watched = key.clone();
        tokio::spawn(async move {
            if matches!(signal.ended().await, accord::LeaseStatus::Lost(_)) {
                say(json!({"ev": "lost", "key": watched, "fence": fence, "how": "signal"}));
            }
        });
        tokio::time::sleep(Duration::from_millis(pause)).await;
        match writer.write(&lease, &key, &name).await {
            Ok(accepted) => {
                say(json!({"ev": "write", "key": key, "fence": fence, "accepted": accepted}))
            }
            Err(e) => say(json!({"ev": "write_error", "key": key, "fence": fence, "err": e})),
        }
        tokio::time::sleep(Duration::from_millis(rest)).await;
        match lease.release().await {
            Ok(()) => say(json!({"ev": "released", "key": key, "fence": fence})),
            Err(e) if e.kind() == ErrorKind::LeaseLost => {
                say(json!({"ev": "lost", "key": key, "fence": fence, "how": "release"}))
            }
            Err(e) => say(json!({"ev": "error", "op": "release", "err": e.to_string()})),
        }
    }
}

/// A claimed pool key: a little work, the fenced write, done (with the fence in its metadata).
async fn claimed(lease: Lease, writer: &mut Writer, name: &str) {
    let (key, fence) = (lease.key().to_owned(), lease.fence());
    say(json!({"ev": "claimed", "key": key, "fence": fence}));
    tokio::time::sleep(Duration::from_millis(rand::random_range(10..50))).await;
    match writer.write(&lease, &key, name).await {
        Ok(accepted) => {
            say(json!({"ev": "write", "key": key, "fence": fence, "accepted": accepted}))
        }
        Err(e) => say(json!({"ev": "write_error", "key": key, "fence": fence, "err": e})),
    }
    let metadata = json!({"fence": fence}).as_object().cloned();
    match lease.done(metadata).await {
        Ok(()) => say(json!({"ev": "done", "key": key, "fence": fence})),
        Err(e) if e.kind() == ErrorKind::LeaseLost => {
            say(json!({"ev": "lost", "key": key, "fence": fence, "how": "done"}))
        }
        Err(e) => say(json!({"ev": "error", "op": "done", "err": e.to_string()})),
    }
}
