//! Opening the embedded store: `sqlite:///path/file.db` (shared by the processes of one host,
//! WAL, busy timeout) or `memory:[name]` (one store per name, shared by the clients of one
//! process; `sqlite::memory:` is `memory:`), the schema, and the in-process nudge that wakes
//! listeners at once.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OpenFlags, OptionalExtension};
use tokio::sync::watch;

use crate::error::{Error, ErrorKind, Result};
use crate::rules::{self, SchemaFit};

/// Writers wait this long for each other (across processes) before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a store lives.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Location {
    File(PathBuf),
    Memory(String),
}

impl Location {
    /// `memory:[name]`; `sqlite:///path/to/file.db`; SQLite's own name for an in-memory
    /// database, `sqlite::memory:` (also `sqlite://:memory:` and `sqlite:///:memory:`), is
    /// `memory:`, the in-process store the clients of this process share. Query parameters are
    /// refused, naming them: none is understood, and one ignored silently (`?mode=ro`) would
    /// promise what the store does not do.
    pub fn parse(url: &str) -> Result<Location> {
        if let Some(rest) = url.strip_prefix("memory:") {
            return Ok(Location::Memory(rest.to_string()));
        }
        let path = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
            .ok_or_else(|| Error::invalid("url", "expected sqlite:///path/to/file.db"))?;
        let (path, query) = match path.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (path, None),
        };
        if let Some(query) = query {
            let names: Vec<&str> = query
                .split('&')
                .filter(|p| !p.is_empty())
                .map(|p| p.split('=').next().unwrap_or(p))
                .collect();
            return Err(Error::invalid(
                "url",
                if names.is_empty() {
                    "sqlite URLs take no query parameters: remove the '?'".to_string()
                } else {
                    format!(
                        "unknown query parameter{} {} (sqlite URLs take none: \
                         sqlite:///path/to/file.db)",
                        if names.len() == 1 { "" } else { "s" },
                        names.join(", ")
                    )
                },
            ));
        }
        if matches!(path, ":memory:" | "/:memory:") {
            return Ok(Location::Memory(String::new()));
        }
        if path.is_empty() || !path.starts_with('/') {
            return Err(Error::invalid(
                "url",
                "sqlite URLs name an absolute path: sqlite:///path/to/file.db",
            ));
        }
        Ok(Location::File(PathBuf::from(path)))
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::File(path) => write!(f, "{}", path.display()),
            Location::Memory(name) => write!(f, "memory:{name}"),
        }
    }
}

/// One store as this process sees it: the command connection and the nudge for its listeners.
pub(crate) struct Store {
    pub location: Location,
    /// FIFO-fair, so a flood of calls cannot starve the keepalive's transaction (G4).
    pub conn: Arc<tokio::sync::Mutex<Connection>>,
    /// Bumped after each commit that added events: wakes this process's listeners of the store
    /// at once (a watch channel, so a listener busy reading does not miss it).
    pub nudge: Arc<watch::Sender<u64>>,
}

fn nudges() -> &'static Mutex<HashMap<Location, Arc<watch::Sender<u64>>>> {
    static NUDGES: OnceLock<Mutex<HashMap<Location, Arc<watch::Sender<u64>>>>> = OnceLock::new();
    NUDGES.get_or_init(Default::default)
}

/// `memory:` stores live as long as the process: clients of one process share them by name.
fn memory_stores() -> &'static Mutex<HashMap<String, Arc<Store>>> {
    static STORES: OnceLock<Mutex<HashMap<String, Arc<Store>>>> = OnceLock::new();
    STORES.get_or_init(Default::default)
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

pub(crate) fn db_error(what: &str, e: rusqlite::Error) -> Error {
    Error::new(
        if is_busy(&e) {
            ErrorKind::Timeout
        } else {
            ErrorKind::Database
        },
        format!("{what}: SQLite error: {e}"),
    )
    .with_source(e)
}

/// Milliseconds since the Unix epoch: on one host every process reads the same clock.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl Store {
    /// The command connection of a new client (a shared one for `memory:`).
    pub fn open(location: &Location) -> Result<Arc<Store>> {
        match location {
            Location::Memory(name) => {
                let mut stores = memory_stores().lock().unwrap();
                if let Some(store) = stores.get(name) {
                    return Ok(store.clone());
                }
                let conn = Connection::open_in_memory().map_err(|e| db_error("memory store", e))?;
                let store = Arc::new(Store::new(location.clone(), conn)?);
                stores.insert(name.clone(), store.clone());
                Ok(store)
            }
            Location::File(_) => Ok(Arc::new(Store::new(
                location.clone(),
                Store::connect(location)?,
            )?)),
        }
    }

    /// Another connection to a file store (listeners read on their own).
    pub fn connect(location: &Location) -> Result<Connection> {
        let Location::File(path) = location else {
            return Err(Error::internal("memory stores have one connection"));
        };
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| {
            Error::new(
                ErrorKind::Connection,
                format!("could not open the SQLite store {}: {e}", path.display()),
            )
        })?;
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(|e| db_error("busy timeout", e))?;
        // WAL: readers never block the writer; NORMAL sync is durable enough for leases,
        // which expire anyway. Switching needs a moment without other writers, and SQLite does
        // not wait for it with the busy handler: retry briefly. Once a file is in WAL (the first
        // client did it), nothing is left to switch.
        let mut tries = 0;
        loop {
            let mode: String = conn
                .query_row("PRAGMA journal_mode", [], |r| r.get(0))
                .map_err(|e| db_error("WAL", e))?;
            if mode.eq_ignore_ascii_case("wal") {
                break;
            }
            match conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0)) {
                Ok(_) => break,
                Err(e) if tries < 100 && is_busy(&e) => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(db_error("WAL", e)),
            }
        }
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(|e| db_error("synchronous", e))?;
        Ok(conn)
    }

    fn new(location: Location, mut conn: Connection) -> Result<Store> {
        migrate(&mut conn, &location.to_string())?;
        let nudge = nudges()
            .lock()
            .unwrap()
            .entry(location.clone())
            .or_insert_with(|| Arc::new(watch::channel(0).0))
            .clone();
        Ok(Store {
            location,
            conn: Arc::new(tokio::sync::Mutex::new(conn)),
            nudge,
        })
    }

    /// Runs `f` with the command connection on a blocking thread (SQLite calls block). The
    /// connection is taken in turn, before a blocking thread is.
    pub async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let mut conn = self.conn.clone().lock_owned().await;
        tokio::task::spawn_blocking(move || f(&mut conn))
            .await
            .map_err(|e| Error::internal(format!("SQLite task failed: {e}")))?
    }
}

/// The versioned schema, applied in one IMMEDIATE transaction: concurrent processes starting
/// at once serialize on SQLite's write lock, and the version is re-read under it.
pub(super) fn migrate(conn: &mut Connection, store: &str) -> Result<()> {
    let steps: [&str; MIGRATIONS] = [
        "CREATE TABLE leases (
             namespace     TEXT NOT NULL,
             key           TEXT NOT NULL,
             owner         TEXT,
             fence         INTEGER NOT NULL,
             attempt       INTEGER,
             expires_at_ms INTEGER,
             done          INTEGER NOT NULL DEFAULT 0,
             metadata      TEXT NOT NULL DEFAULT '{}',
             updated_at_ms INTEGER NOT NULL,
             PRIMARY KEY (namespace, key)
         );
         CREATE INDEX leases_newest_first ON leases (namespace, fence DESC);
         CREATE TABLE fence_seq (id INTEGER PRIMARY KEY CHECK (id = 1), value INTEGER NOT NULL);
         INSERT INTO fence_seq VALUES (1, 0);
         CREATE TABLE events (
             id            INTEGER PRIMARY KEY AUTOINCREMENT,
             channel       TEXT NOT NULL,
             payload       TEXT NOT NULL,
             created_at_ms INTEGER NOT NULL
         );",
        // Version 2: work pools (as on PostgreSQL: the prefix a key was offered under, and the
        // offer order that claims follow).
        "ALTER TABLE leases ADD COLUMN pool TEXT;
         ALTER TABLE leases ADD COLUMN offered INTEGER;
         CREATE INDEX leases_pool ON leases (namespace, pool, done, offered)
          WHERE pool IS NOT NULL;",
        // Version 3: fair waiting and shared locks, as on PostgreSQL: waiting acquires hold
        // tickets (their place in line), shared holders are granted tickets, and the key's row
        // counts its shared holders and carries their latest expiry.
        "ALTER TABLE leases ADD COLUMN granted_at_ms INTEGER;
         ALTER TABLE leases ADD COLUMN shared_holders INTEGER NOT NULL DEFAULT 0;
         ALTER TABLE leases ADD COLUMN shared_until_ms INTEGER;
         CREATE TABLE tickets (
             namespace     TEXT NOT NULL,
             key           TEXT NOT NULL,
             ticket        INTEGER NOT NULL,
             owner         TEXT NOT NULL,
             shared        INTEGER NOT NULL,
             attempt       INTEGER NOT NULL,
             granted       INTEGER NOT NULL DEFAULT 0,
             fence         INTEGER,
             expires_at_ms INTEGER NOT NULL,
             metadata      TEXT NOT NULL DEFAULT '{}',
             updated_at_ms INTEGER NOT NULL,
             granted_at_ms INTEGER,
             PRIMARY KEY (namespace, key, ticket)
         );",
        // Version 4: durable streams, as on PostgreSQL. Seqs need no lock of their own here:
        // one writer at a time (the IMMEDIATE transaction) already orders publishes.
        "CREATE TABLE streams (
             namespace       TEXT NOT NULL,
             stream          TEXT NOT NULL,
             last_seq        INTEGER NOT NULL,
             published_at_ms INTEGER,
             max_len         INTEGER,
             max_age_ms      INTEGER,
             PRIMARY KEY (namespace, stream)
         );
         CREATE TABLE stream_events (
             namespace       TEXT NOT NULL,
             stream          TEXT NOT NULL,
             seq             INTEGER NOT NULL,
             payload         BLOB NOT NULL,
             published_at_ms INTEGER NOT NULL,
             PRIMARY KEY (namespace, stream, seq)
         );
         CREATE TABLE stream_acks (
             namespace     TEXT NOT NULL,
             stream        TEXT NOT NULL,
             consumer      TEXT NOT NULL,
             seq           INTEGER NOT NULL,
             updated_at_ms INTEGER NOT NULL,
             PRIMARY KEY (namespace, stream, consumer)
         );",
        // Version 5: list pages in key order, as on PostgreSQL; the index on fence goes.
        "DROP INDEX IF EXISTS leases_newest_first;",
        // Version 6: the keys not done, for pages of free or held keys, as on PostgreSQL.
        "CREATE INDEX leases_undone ON leases (namespace, key) WHERE NOT done;",
        // Version 7: PostgreSQL's fill factor for in-place renewals; SQLite has no such
        // setting (a row is rewritten where it lies): nothing to do, the version counts alike.
        "",
        // Version 8: the keys that name an owner and are not done, for pages of held keys, as
        // on PostgreSQL. 1,000,000 free keys, none held: a page of held keys took 1 s, 0.05 ms
        // through it. A renewal does not touch it (the owner stays); a grant and a release do.
        "CREATE INDEX leases_owned ON leases (namespace, key) WHERE owner IS NOT NULL AND NOT done;",
        // Version 9: the compatibility record and the view `holders`, as on PostgreSQL (see
        // there): row for row what `list` with the state held returns, times as ISO 8601 text
        // (UTC) beside the stored milliseconds, and `now` as the store's clock in milliseconds.
        "ALTER TABLE schema_migrations ADD COLUMN compatible_from INTEGER;
         CREATE VIEW holders AS
         SELECT namespace, key, 0 AS shared, owner, fence,
                strftime('%Y-%m-%dT%H:%M:%fZ', granted_at_ms / 1000.0, 'unixepoch') AS granted_at,
                strftime('%Y-%m-%dT%H:%M:%fZ', expires_at_ms / 1000.0, 'unixepoch') AS expires_at,
                metadata,
                strftime('%Y-%m-%dT%H:%M:%fZ', updated_at_ms / 1000.0, 'unixepoch') AS updated_at,
                expires_at_ms
           FROM leases
          WHERE NOT done
            AND expires_at_ms > CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)
         UNION ALL
         SELECT namespace, key, 1, owner, fence,
                strftime('%Y-%m-%dT%H:%M:%fZ', granted_at_ms / 1000.0, 'unixepoch'),
                strftime('%Y-%m-%dT%H:%M:%fZ', expires_at_ms / 1000.0, 'unixepoch'),
                metadata,
                strftime('%Y-%m-%dT%H:%M:%fZ', updated_at_ms / 1000.0, 'unixepoch'),
                expires_at_ms
           FROM tickets
          WHERE granted
            AND expires_at_ms > CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER);",
        // Version 10: nothing. PostgreSQL's version 10 adds functions for the application's
        // own transaction (fenced writes); no transaction of the application reaches this
        // file, so the embedded store answers those helpers `Unsupported`. The number is
        // taken so that both stores' versions mean the same client generation.
        "",
        // Version 11: nothing either (PostgreSQL's makes `check_fence` faster).
        "",
    ];
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(|e| db_error("migration", e))?;
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
             version INTEGER PRIMARY KEY, applied_at_ms INTEGER NOT NULL)",
    )
    .map_err(|e| db_error("migration", e))?;
    let (current, keeps) = installed_version(&tx).map_err(|e| db_error("migration", e))?;
    let mine = MIGRATIONS as i32;
    match rules::schema_fit(mine, current, keeps) {
        SchemaFit::Behind => {}
        SchemaFit::Current | SchemaFit::NewerCompatible => return Ok(()),
        SchemaFit::TooNew { compatible_from } => {
            return Err(rules::too_new_error(
                &format!("the SQLite store {store}"),
                current,
                compatible_from,
                mine,
            ))
        }
    }
    for (i, step) in steps.iter().enumerate() {
        let version = i as i32 + 1;
        if version <= current {
            continue;
        }
        tx.execute_batch(step)
            .map_err(|e| db_error(&format!("migration to version {version}"), e))?;
        // From version 9 on, with the oldest client version it keeps working.
        let keeps = (version >= rules::COMPATIBILITY_RECORDED_FROM)
            .then(|| rules::compatible_from(version));
        let record = if keeps.is_some() {
            tx.execute(
                "INSERT INTO schema_migrations (version, applied_at_ms, compatible_from)
                 VALUES (?1, ?2, ?3)",
                rusqlite::params![version, now_ms(), keeps],
            )
        } else {
            tx.execute(
                "INSERT INTO schema_migrations (version, applied_at_ms) VALUES (?1, ?2)",
                rusqlite::params![version, now_ms()],
            )
        };
        record.map_err(|e| db_error("migration", e))?;
    }
    tx.commit().map_err(|e| db_error("migration", e))
}

/// The schema version this accord's store is written for.
const MIGRATIONS: usize = 11;

/// The newest applied version (0: none) and the oldest client version it keeps working
/// (`None` before version 9, whose table has no such column).
fn installed_version(conn: &Connection) -> rusqlite::Result<(i32, Option<i32>)> {
    let mut newest =
        conn.prepare("SELECT * FROM schema_migrations ORDER BY version DESC LIMIT 1")?;
    let keeps_column = newest.column_index("compatible_from").ok();
    let row = newest
        .query_row([], |r| {
            let keeps = match keeps_column {
                Some(i) => r.get::<_, Option<i32>>(i)?,
                None => None,
            };
            Ok((r.get::<_, i32>("version")?, keeps))
        })
        .optional()?;
    Ok(row.unwrap_or((0, None)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_stores_number_their_schema_alike() {
        assert_eq!(
            MIGRATIONS as i32,
            crate::backend::postgres::sql::current_version()
        );
    }

    #[test]
    fn urls() {
        assert_eq!(
            Location::parse("sqlite:///tmp/a.db").unwrap(),
            Location::File("/tmp/a.db".into())
        );
        assert_eq!(
            Location::parse("sqlite:/tmp/a.db").unwrap(),
            Location::File("/tmp/a.db".into())
        );
        assert_eq!(
            Location::parse("memory:x").unwrap(),
            Location::Memory("x".into())
        );
        for memory in [
            "memory:",
            "sqlite::memory:",
            "sqlite://:memory:",
            "sqlite:///:memory:",
        ] {
            assert_eq!(
                Location::parse(memory).unwrap(),
                Location::Memory(String::new()),
                "{memory}"
            );
        }
        let err = Location::parse("sqlite:///tmp/a.db?mode=ro").unwrap_err();
        assert_eq!(
            err.message(),
            "invalid url: unknown query parameter mode (sqlite URLs take none: \
             sqlite:///path/to/file.db)"
        );
        let err = Location::parse("sqlite::memory:?cache=shared&mode=memory").unwrap_err();
        assert!(err.message().contains("parameters cache, mode"), "{err}");
        assert!(Location::parse("sqlite:///tmp/a.db?").is_err());
        assert!(Location::parse("sqlite://relative.db").is_err());
    }
}
