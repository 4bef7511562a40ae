//! The conformance suite on PostgreSQL, plus what only PostgreSQL has: migrations (G10),
//! connection errors, and statements per operation.

mod conformance;
mod support;

use std::time::Duration;

use accord::{AcquireOptions, Client, ClientOptions, ErrorKind};
use support::Harness;

// PostgreSQL has every capability: it runs every scenario.
conformance_suite!(
    Harness::postgres,
    has [network_faults, connection_termination, pools, streams, snapshot]
);

/// G10: many workers starting at once on a fresh schema all succeed; the migration ran once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g10_concurrent_migrations() {
    let h = Harness::postgres("g10").await;
    let schema = format!("accord_{}", h.tag);
    let connects = (0..12)
        .map(|i| Client::connect(&h.url, h.options(&format!("w{i}")).schema(schema.clone())));
    let clients: Vec<Client> = futures_util::future::join_all(connects)
        .await
        .into_iter()
        .map(|r| r.expect("every concurrent connect succeeds"))
        .collect();
    let versions: i64 = h
        .admin()
        .query_one(
            &format!("SELECT count(*) FROM \"{schema}\".schema_migrations"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    // One row per migration: each ran once, whichever client got there first.
    let migrations = accord::migration_sql("accord")
        .unwrap()
        .matches("-- version ")
        .count() as i64;
    assert_eq!(versions, migrations, "every migration ran, once each");
    let lease = clients[0]
        .try_acquire("a", AcquireOptions::new())
        .await
        .unwrap();
    assert!(lease.is_some());
}

/// G10: the printed SQL is what a DBA applies by hand; afterwards a client with DML rights only
/// (and migrations off) works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g10_printed_sql_and_dml_only_clients() {
    let h = Harness::postgres("g10sql").await;
    let schema = format!("accord_{}", h.tag);
    let role = format!("dml_{}", h.tag);

    let refused = Client::connect(
        &h.url,
        h.options("o1").schema(schema.clone()).migrate(false),
    )
    .await
    .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Database);
    assert!(refused.message().contains("migrate"), "{refused}");

    let script = accord::migration_sql(&schema).unwrap();
    h.admin().batch_execute(&script).await.unwrap();
    h.admin()
        .batch_execute(&script)
        .await
        .expect("the script is idempotent");
    let url = dml_role(&h, &schema, &role, "").await;
    for migrate in [false, true] {
        // With migrations on, an up-to-date schema needs no DDL rights either.
        let client = Client::connect(
            &url,
            h.options("o1").schema(schema.clone()).migrate(migrate),
        )
        .await
        .unwrap();
        let lease = client
            .acquire("a", AcquireOptions::new().timeout(Duration::from_secs(5)))
            .await
            .unwrap();
        lease.done(None).await.unwrap();
        client.reset("a").await.unwrap();
        client.close().await;
    }
}

/// Creates `role` with DML rights on `schema` (and `settings`, e.g. `ALTER ROLE` clauses run
/// after), and returns a URL that logs in as it.
async fn dml_role(h: &Harness, schema: &str, role: &str, settings: &str) -> String {
    h.admin()
        .batch_execute(&format!(
            "CREATE ROLE \"{role}\" LOGIN PASSWORD 'dml';
             GRANT USAGE ON SCHEMA \"{schema}\" TO \"{role}\";
             GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA \"{schema}\" TO \"{role}\";
             GRANT USAGE ON ALL SEQUENCES IN SCHEMA \"{schema}\" TO \"{role}\";
             {settings}"
        ))
        .await
        .unwrap();
    let config: tokio_postgres::Config = h.url.parse().unwrap();
    let tokio_postgres::config::Host::Tcp(host) = &config.get_hosts()[0] else {
        panic!("TCP URL expected")
    };
    format!(
        "postgres://{role}:dml@{host}:{}/{}",
        config.get_ports()[0],
        config.get_dbname().unwrap_or("postgres")
    )
}

/// G10: a role with DML rights only, connecting with migrations on (the default) to a schema
/// one version behind, is told what the path with migrations off says (the versions, the
/// script to apply) and why it cannot migrate, not PostgreSQL's bare "permission denied".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_that_may_not_migrate_is_told_what_to_apply() {
    let h = Harness::postgres("behind").await;
    let schema = format!("accord_{}", h.tag);
    let role = format!("dml_{}", h.tag);
    h.admin()
        .batch_execute(&accord::migration_sql(&schema).unwrap())
        .await
        .unwrap();
    let url = dml_role(&h, &schema, &role, "").await;
    let latest: i32 = h
        .admin()
        .query_one(
            &format!("DELETE FROM \"{schema}\".schema_migrations WHERE version = (SELECT max(version) FROM \"{schema}\".schema_migrations) RETURNING version"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let err = Client::connect(&url, h.options("o1").schema(schema.clone()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Database, "{err}");
    let text = err.message();
    for expected in [
        format!("is at version {}", latest - 1),
        format!("needs version {latest}"),
        "may not migrate".to_string(),
        "accord migrate --print-sql".to_string(),
    ] {
        assert!(text.contains(&expected), "{expected:?} missing from: {err}");
    }
    // PostgreSQL's refusal, quoted: a version that creates objects is refused the schema
    // ("permission denied for schema"), one that replaces a function's body the function
    // ("must be owner of function").
    assert!(
        text.contains("permission denied") || text.contains("must be owner of function"),
        "PostgreSQL's refusal missing from: {err}"
    );
    h.admin()
        .execute(
            &format!("INSERT INTO \"{schema}\".schema_migrations (version) VALUES ($1)"),
            &[&latest],
        )
        .await
        .unwrap();
    Client::connect(&url, h.options("o1").schema(schema.clone()))
        .await
        .expect("an up-to-date schema needs no DDL rights")
        .close()
        .await;
}

/// G10, rolling deploys: a schema newer than this accord runs it only when its record keeps
/// this accord's version (`schema_migrations.compatible_from`), with migrations on or off;
/// otherwise the connect is refused, saying to upgrade this client. The newer version is
/// recorded as a newer accord would record it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_schema_runs_this_accord_only_when_its_record_keeps_it() {
    let h = Harness::postgres("newer").await;
    let schema = format!("accord_{}", h.tag);
    h.admin()
        .batch_execute(&accord::migration_sql(&schema).unwrap())
        .await
        .unwrap();
    let table = format!("\"{schema}\".schema_migrations");
    let mine: i32 = h
        .admin()
        .query_one(&format!("SELECT max(version) FROM {table}"), &[])
        .await
        .unwrap()
        .get(0);
    let newer = mine + 1;
    let connect = |migrate: bool| {
        Client::connect(
            &h.url,
            h.options("o1").schema(schema.clone()).migrate(migrate),
        )
    };
    // A newer version that records nothing keeps its own clients only; one that keeps clients
    // from its own version on likewise.
    h.admin()
        .execute(
            &format!("INSERT INTO {table} (version) VALUES ($1)"),
            &[&newer],
        )
        .await
        .unwrap();
    for keeps in [None, Some(newer)] {
        if let Some(keeps) = keeps {
            h.admin()
                .execute(
                    &format!("UPDATE {table} SET compatible_from = $1 WHERE version = $2"),
                    &[&keeps, &newer],
                )
                .await
                .unwrap();
        }
        for migrate in [true, false] {
            let err = connect(migrate).await.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Database, "{err}");
            for expected in [
                format!("schema \"{schema}\" is at version {newer}"),
                format!("this accord (schema {mine}) cannot run on it"),
                format!("keeps clients from schema {newer} on"),
                "upgrade this client".to_string(),
            ] {
                assert!(
                    err.message().contains(&expected),
                    "{expected:?} missing from: {err}"
                );
            }
        }
    }
    // Keeping this accord's version: it runs, with migrations on or off, and writes no record.
    h.admin()
        .execute(
            &format!("UPDATE {table} SET compatible_from = $1 WHERE version = $2"),
            &[&mine, &newer],
        )
        .await
        .unwrap();
    for migrate in [true, false] {
        let client = connect(migrate)
            .await
            .expect("a schema that keeps this accord");
        let lease = client
            .acquire("a", AcquireOptions::new().timeout(Duration::from_secs(5)))
            .await
            .unwrap();
        lease.release().await.unwrap();
        client.close().await;
    }
    let rows: i64 = h
        .admin()
        .query_one(
            &format!("SELECT count(*) FROM {table} WHERE version > $1"),
            &[&newer],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 0);
    // This accord's own migration says which clients it keeps (the oldest a deploy may mix).
    let kept: Option<i32> = h
        .admin()
        .query_one(
            &format!("SELECT compatible_from FROM {table} WHERE version = $1"),
            &[&mine],
        )
        .await
        .unwrap()
        .get(0);
    assert!(kept.is_some_and(|k| k <= mine), "{kept:?}");
}

/// A server whose sessions cannot write is refused at connect, saying why, instead of failing
/// at the first grant with "cannot execute … in a read-only transaction". Here a role whose
/// sessions are read-only by default; a standby is refused the same way (`core/tests/failover.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_sessions_are_refused_at_connect() {
    let h = Harness::postgres("ro").await;
    let schema = format!("accord_{}", h.tag);
    let role = format!("ro_{}", h.tag);
    h.admin()
        .batch_execute(&accord::migration_sql(&schema).unwrap())
        .await
        .unwrap();
    let url = dml_role(
        &h,
        &schema,
        &role,
        &format!("ALTER ROLE \"{role}\" SET default_transaction_read_only = on;"),
    )
    .await;
    let err = Client::connect(&url, h.options("o1").schema(schema.clone()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
    assert!(
        err.message().contains("default_transaction_read_only"),
        "{err}"
    );
}

/// Errors name the server, never the password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_errors_hide_the_password() {
    let h = Harness::postgres("pw").await;
    let config: tokio_postgres::Config = h.url.parse().unwrap();
    let tokio_postgres::config::Host::Tcp(host) = &config.get_hosts()[0] else {
        panic!("TCP URL expected")
    };
    let port = config.get_ports()[0];
    let wrong = format!("postgres://postgres:Wr0ngSecret@{host}:{port}/postgres");
    let err = Client::connect(&wrong, ClientOptions::new())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connection);
    assert!(!format!("{err} {err:?}").contains("Wr0ngSecret"), "{err:?}");
    assert!(err.message().contains(&format!("{host}:{port}")), "{err}");

    // Nothing listens on port 1.
    let err = Client::connect(
        "postgres://postgres:Wr0ngSecret@127.0.0.1:1/postgres",
        ClientOptions::new().connect_timeout(Duration::from_secs(2)),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connection);
    assert!(!format!("{err} {err:?}").contains("Wr0ngSecret"));
}

/// G9: a client uses `pool_size` command connections plus one listening connection, however
/// many leases it holds or waits for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g9_few_connections() {
    let h = Harness::postgres("g9").await;
    let owner = "o1";
    let client = h.client_with(owner, h.options(owner).pool_size(3)).await;
    let other = h.client("o2").await;
    assert_eq!(h.connection_count(owner).await, 3);
    let mut leases = Vec::new();
    for i in 0..200 {
        leases.push(
            client
                .try_acquire(&format!("k{i}"), AcquireOptions::new())
                .await
                .unwrap()
                .unwrap(),
        );
    }
    let held = other
        .acquire("contended", AcquireOptions::new())
        .await
        .unwrap();
    // 20 s: the waiters outlast the checks below, and then take the key in turn.
    let waiters: Vec<_> = (0..50)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                let lease = client
                    .acquire(
                        "contended",
                        AcquireOptions::new().timeout(Duration::from_secs(20)),
                    )
                    .await?;
                let fence = lease.fence();
                lease.release().await?;
                Ok::<_, accord::Error>(fence)
            })
        })
        .collect();
    // The waits open the listening connection, and nothing else: 3 + 1, never more.
    let most = std::cell::Cell::new(0);
    let four = support::eventually(Duration::from_secs(10), || async {
        let count = h.connection_count(owner).await;
        most.set(most.get().max(count));
        count == 4
    })
    .await;
    assert!(
        most.get() <= 4,
        "{} connections while 50 acquires wait",
        most.get()
    );
    assert!(four, "the listening connection never opened");
    // Release: each waiter gets the key in turn (and releases it for the next).
    held.release().await.unwrap();
    let mut fences = Vec::new();
    for w in waiters {
        fences.push(w.await.unwrap().expect("every waiter gets the key"));
        let count = h.connection_count(owner).await;
        assert!(
            count <= 4,
            "{count} connections while the waiters take turns"
        );
    }
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), 50, "each waiter had a grant of its own");
}

/// `sslmode` as libpq reads it, against a server with a certificate from a throwaway CA.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_sslmodes_are_honoured() {
    let h = Harness::postgres("tls").await;
    let root = std::env::var("ACCORD_TEST_SSL_ROOT_CERT").unwrap_or_default();
    if root.is_empty() {
        eprintln!(
            "tls_sslmodes_are_honoured: skipped, the test server has no TLS (openssl missing?)"
        );
        return;
    }
    let encoded_root = root.replace('/', "%2F");
    let cases = [
        ("disable", String::new(), false),
        ("prefer", String::new(), true),
        ("require", String::new(), true),
        ("verify-ca", format!("&sslrootcert={encoded_root}"), true),
        ("verify-full", format!("&sslrootcert={encoded_root}"), true),
    ];
    for (mode, extra, encrypted) in cases {
        let owner = format!("tls-{mode}");
        let url = format!("{}?sslmode={mode}{extra}", h.url);
        let client = Client::connect(&url, h.options(&owner))
            .await
            .unwrap_or_else(|e| panic!("sslmode={mode}: {e}"));
        let lease = client
            .try_acquire(&owner, AcquireOptions::new())
            .await
            .unwrap();
        assert!(lease.is_some());
        let ssl: Vec<bool> = h
            .admin()
            .query(
                "SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)
                  WHERE a.application_name = $1",
                &[&h.app_name(&owner)],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert!(!ssl.is_empty());
        assert!(
            ssl.iter().all(|s| *s == encrypted),
            "sslmode={mode}: encrypted {ssl:?}"
        );
        client.close().await;
    }
    // verify-full checks the host name, verify-ca does not: reach 127.0.0.1 under a name the
    // certificate does not carry.
    let misnamed = h
        .url
        .replacen("@127.0.0.1:", "@not-in-the-certificate.test:", 1);
    let with = |mode: &str| {
        format!("{misnamed}?hostaddr=127.0.0.1&sslmode={mode}&sslrootcert={encoded_root}")
    };
    let err = Client::connect(&with("verify-full"), h.options("tls-name"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
    assert!(err.to_string().contains("certificate"), "{err}");
    Client::connect(&with("verify-ca"), h.options("tls-name"))
        .await
        .expect("verify-ca accepts a certificate for another name")
        .close()
        .await;
    let err = Client::connect(&format!("{}?sslmode=bogus", h.url), h.options("tls-bad"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.message().contains("sslmode"));
}

/// The password of the harness URL, which no error may repeat.
fn url_password(url: &str) -> String {
    let config: tokio_postgres::Config = url.parse().unwrap();
    String::from_utf8(config.get_password().expect("a password").to_vec()).unwrap()
}

/// A refused connection: a `Connection` error whose message holds every one of `needles`,
/// neither the password nor tokio-postgres' bare wording.
async fn refused(url: &str, options: ClientOptions, needles: &[&str], password: &str) -> String {
    let err = match Client::connect(url, options).await {
        Err(e) => e,
        Ok(_) => panic!("{needles:?}: the connection must be refused"),
    };
    let text = format!("{err} {err:?}");
    assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
    for needle in needles {
        assert!(err.message().contains(needle), "{needle:?} not in: {err}");
    }
    assert!(!text.contains(password), "the password shows in: {text}");
    for bare in [
        "error performing TLS handshake",
        "error connecting to server",
    ] {
        assert!(!err.message().contains(bare), "bare {bare:?}: {err}");
    }
    err.to_string()
}

/// A throwaway CA that did not sign the test server's certificate: its folder and its PEM file
/// (URL-encoded), or None when openssl is missing.
fn unrelated_ca(tag: &str) -> Option<(std::path::PathBuf, String)> {
    let dir = std::env::temp_dir().join(format!("accord-tls-{tag}"));
    std::fs::create_dir_all(&dir).unwrap();
    let made = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .args([
            "-subj",
            "/CN=accord unrelated CA",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
        ])
        .current_dir(&dir)
        .output();
    match made {
        Ok(out) if out.status.success() => {
            let file = dir.join("ca.crt").display().to_string().replace('/', "%2F");
            Some((dir, file))
        }
        Ok(out) => panic!("openssl failed: {}", String::from_utf8_lossy(&out.stderr)),
        Err(e) => {
            eprintln!("skipped: openssl cannot be run ({e})");
            None
        }
    }
}

/// libpq's rule for `sslrootcert`: `require` verifies the chain like `verify-ca` when a root
/// file is given; `verify-ca` and `verify-full` refuse a CA that did not sign the certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_root_certificates_are_checked_as_libpq_does() {
    let h = Harness::postgres("tlsroot").await;
    let root = std::env::var("ACCORD_TEST_SSL_ROOT_CERT").unwrap_or_default();
    if root.is_empty() {
        eprintln!("tls_root_certificates_are_checked_as_libpq_does: skipped, no TLS server");
        return;
    }
    let Some((ca_dir, unrelated)) = unrelated_ca(&h.tag) else {
        return;
    };
    let root = root.replace('/', "%2F");
    let password = url_password(&h.url);
    for mode in ["require", "verify-ca", "verify-full"] {
        let url = format!("{}?sslmode={mode}&sslrootcert={unrelated}", h.url);
        refused(
            &url,
            h.options("tls-unrelated"),
            &["certificate verify failed", "unknown issuer"],
            &password,
        )
        .await;
    }
    // require with the right root verifies the chain, not the host name (as verify-ca).
    let misnamed = h
        .url
        .replacen("@127.0.0.1:", "@not-in-the-certificate.test:", 1);
    for mode in ["require", "verify-ca"] {
        let url = format!("{misnamed}?hostaddr=127.0.0.1&sslmode={mode}&sslrootcert={root}");
        Client::connect(&url, h.options("tls-root"))
            .await
            .unwrap_or_else(|e| panic!("sslmode={mode} with the right root: {e}"))
            .close()
            .await;
    }
    let url = format!("{misnamed}?hostaddr=127.0.0.1&sslmode=verify-full&sslrootcert={root}");
    refused(
        &url,
        h.options("tls-name"),
        &["not-in-the-certificate.test", "does not match"],
        &password,
    )
    .await;
    // Without a root file, require encrypts and trusts; verify-* have nothing to verify with.
    let home_root = std::env::var("HOME")
        .map(|home| std::path::Path::new(&home).join(".postgresql/root.crt"))
        .ok()
        .filter(|p| p.exists());
    if home_root.is_none() {
        Client::connect(&format!("{}?sslmode=require", h.url), h.options("tls-req"))
            .await
            .expect("require without a root file trusts the certificate")
            .close()
            .await;
        for mode in ["verify-ca", "verify-full"] {
            let err = Client::connect(&format!("{}?sslmode={mode}", h.url), h.options("tls-x"))
                .await
                .err()
                .unwrap_or_else(|| panic!("sslmode={mode} without a root file must fail"));
            assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
            assert!(err.message().contains("root.crt"), "{err}");
            assert!(err.message().contains("sslrootcert=system"), "{err}");
        }
    }
    std::fs::remove_dir_all(ca_dir).unwrap();
}

/// `sslrootcert=system`: the system's trusted roots, and verify-full only (libpq 16).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_sslrootcert_system_means_verify_full() {
    let h = Harness::postgres("tlssystem").await;
    if std::env::var("ACCORD_TEST_SSL_ROOT_CERT")
        .unwrap_or_default()
        .is_empty()
    {
        eprintln!("tls_sslrootcert_system_means_verify_full: skipped, no TLS server");
        return;
    }
    let password = url_password(&h.url);
    // The test server's CA is nobody's trusted root.
    for extra in ["", "&sslmode=verify-full"] {
        refused(
            &format!("{}?sslrootcert=system{extra}", h.url),
            h.options("tls-system"),
            &["certificate verify failed", "unknown issuer", "system"],
            &password,
        )
        .await;
    }
    for mode in ["disable", "allow", "prefer", "require", "verify-ca"] {
        let url = format!("{}?sslrootcert=system&sslmode={mode}", h.url);
        let err = Client::connect(&url, h.options("tls-weak"))
            .await
            .err()
            .unwrap_or_else(|| panic!("sslmode={mode} with sslrootcert=system must be refused"));
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{mode}: {err}");
        assert!(err.message().contains("verify-full"), "{err}");
        assert!(!format!("{err:?}").contains(&password));
    }
}

/// A refused connection and an unknown host name say so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_connect_failures_name_their_cause() {
    let h = Harness::postgres("cause").await;
    let password = url_password(&h.url);
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let at_closed = h.url.replacen(
        &format!(":{}/", tokio_postgres_port(&h.url)),
        &format!(":{port}/"),
        1,
    );
    refused(
        &at_closed,
        h.options("closed"),
        &["connection refused", &format!("127.0.0.1:{port}")],
        &password,
    )
    .await;
    let unknown = h.url.replacen("@127.0.0.1:", "@nonexistent.invalid:", 1);
    refused(
        &unknown,
        h.options("unknown"),
        &["could not resolve host name", "nonexistent.invalid"],
        &password,
    )
    .await;
}

fn tokio_postgres_port(url: &str) -> u16 {
    let config: tokio_postgres::Config = url.parse().unwrap();
    config.get_ports()[0]
}

/// A release or done retried after its first try committed (its answer lost with the
/// connection: the pool retries such statements) succeeds again instead of reporting the lease
/// lost: the statements themselves, sent twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_and_done_retried_after_commit_succeed() {
    let h = Harness::postgres("retry").await;
    let client = h.client("o1").await;
    let statements: std::collections::HashMap<_, _> =
        accord::statements("accord").unwrap().into_iter().collect();
    let channel = accord::wakeup_channel("accord").unwrap();
    let (ns, owner) = (h.tag.as_str(), "o1");

    let lease = client
        .try_acquire("r", AcquireOptions::new())
        .await
        .unwrap()
        .unwrap();
    let release = h.admin().prepare(&statements["release"]).await.unwrap();
    for attempt in ["first", "retry"] {
        let row = h
            .admin()
            .query_one(&release, &[&ns, &"r", &owner, &lease.fence(), &channel])
            .await
            .unwrap();
        assert_eq!(row.get::<_, i64>(0), 1, "the {attempt} release");
    }
    // Another grant's fence never matches: a stale release is still refused.
    let stale: i64 = lease.fence() - 1;
    let row = h
        .admin()
        .query_one(&release, &[&ns, &"r", &owner, &stale, &channel])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 0);

    let lease = client
        .try_acquire("d", AcquireOptions::new())
        .await
        .unwrap()
        .unwrap();
    let done = h.admin().prepare(&statements["done"]).await.unwrap();
    let patch: Option<&str> = Some(r#"{"k": 1}"#);
    for attempt in ["first", "retry"] {
        let rows = h
            .admin()
            .query(
                &done,
                &[&ns, &"d", &owner, &lease.fence(), &patch, &channel],
            )
            .await
            .unwrap();
        assert_eq!(rows.len(), 1, "the {attempt} done");
        assert_eq!(rows[0].get::<_, &str>(0), r#"{"k": 1}"#);
    }
    client.close().await;
}

/// An exclusive acquire retried with its first try's attempt token (the answer was lost with
/// the connection) after that grant expired and a shared holder took the key is refused: the
/// retry meets every condition of a grant, and the server never records an exclusive holder
/// beside a live shared one. Each statement that grants exclusively (plain, batched, queued,
/// and a claim of the key as a pool's), sent again with the first try's token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_exclusive_acquire_waits_for_shared_holders() {
    let h = Harness::postgres("retry_shared").await;
    let reader = h.client("reader").await;
    let statements: std::collections::HashMap<_, _> =
        accord::statements("accord").unwrap().into_iter().collect();
    let (ns, owner, attempt, ttl_ms) = (h.tag.as_str(), "writer", 42_i64, 200_i64);
    let no_metadata: Option<&str> = None;
    let acquire = h.admin().prepare(&statements["acquire"]).await.unwrap();
    let row = h
        .admin()
        .query_one(
            &acquire,
            &[&ns, &"p/k", &owner, &attempt, &ttl_ms, &no_metadata],
        )
        .await
        .unwrap();
    assert!(row.get::<_, bool>(0), "the first try is granted");
    let first: i64 = row.get(1);
    // The key is a pool's too, for the claim's retry.
    let offer = h.admin().prepare(&statements["offer"]).await.unwrap();
    let channel = accord::wakeup_channel("accord").unwrap();
    h.admin()
        .query_one(&offer, &[&ns, &"p/", &vec!["p/k"], &no_metadata, &channel])
        .await
        .unwrap();

    // Once the first grant expired, a shared holder takes the key.
    let shared = AcquireOptions::new()
        .shared(true)
        .ttl(Duration::from_secs(60));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let holder = loop {
        if let Some(lease) = reader.try_acquire("p/k", shared.clone()).await.unwrap() {
            break lease;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the first grant never expired"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };

    let row = h
        .admin()
        .query_one(
            &acquire,
            &[&ns, &"p/k", &owner, &attempt, &ttl_ms, &no_metadata],
        )
        .await
        .unwrap();
    assert!(
        !row.get::<_, bool>(0),
        "acquire granted the retry beside a shared holder"
    );
    let batch = h
        .admin()
        .prepare(&statements["acquire_batch"])
        .await
        .unwrap();
    let row = h
        .admin()
        .query_one(
            &batch,
            &[
                &ns,
                &owner,
                &vec!["p/k"],
                &vec![attempt],
                &vec![ttl_ms],
                &vec![no_metadata],
            ],
        )
        .await
        .unwrap();
    assert_eq!(
        row.get::<_, Option<i64>>(1),
        None,
        "acquire_batch granted the retry beside a shared holder"
    );
    let queued = h
        .admin()
        .prepare(&statements["acquire_queued"])
        .await
        .unwrap();
    let no_ticket: Option<i64> = None;
    let rows = h
        .admin()
        .query(
            &queued,
            &[
                &ns,
                &"p/k",
                &owner,
                &attempt,
                &ttl_ms,
                &no_metadata,
                &false,
                &no_ticket,
                &false,
            ],
        )
        .await
        .unwrap();
    assert!(
        !rows[0].get::<_, bool>(0),
        "acquire_queued granted the retry beside a shared holder"
    );
    let claim = h.admin().prepare(&statements["claim"]).await.unwrap();
    let (no_below, end) = (None::<&str>, "p0");
    let rows = h
        .admin()
        .query(
            &claim,
            &[
                &ns,
                &"p/",
                &1_i64,
                &attempt,
                &owner,
                &ttl_ms,
                &no_metadata,
                &no_below,
                &end,
            ],
        )
        .await
        .unwrap();
    assert!(
        rows.iter().all(|r| r.get::<_, Option<String>>(0).is_none()),
        "claim granted the retry beside a shared holder"
    );

    // The row still records the first grant, expired: no exclusive holder beside the reader.
    let row = h
        .admin()
        .query_one(
            "SELECT fence, expires_at > clock_timestamp() FROM accord.leases
              WHERE namespace = $1 AND key = 'p/k'",
            &[&ns],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), first);
    assert!(!row.get::<_, bool>(1));
    assert!(!holder.is_lost());
    reader.close().await;
}

/// Processes cut off mid-membership and mid-wait (a killed pod: its connections gone, nothing
/// released or given up) leave no rows behind for long: a waiting acquire or a reset deletes
/// the key's dead tickets, and a join deletes the group's rows nobody holds and the namespace's
/// dead tickets. After 100 such pods the tables hold the live ones and a small constant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_members_and_waiters_leave_no_rows() {
    let h = Harness::postgres("sweep").await;
    let long = Duration::from_secs(60);
    let holder = h.client("holder").await;
    let mut busy = Vec::new();
    for key in ["busy", "busy2"] {
        busy.push(
            holder
                .acquire(key, AcquireOptions::new().ttl(long))
                .await
                .unwrap(),
        );
    }
    let _stable = holder
        .join("g", accord::JoinOptions::new().ttl(long))
        .await
        .unwrap();
    let ttl = Duration::from_millis(300);
    for i in 0..100 {
        let (proxy, url) = h.proxy().await;
        let pod = Client::connect(&url, h.options(&format!("pod-{i}")).ttl(ttl))
            .await
            .unwrap();
        let member = pod.join("g", accord::JoinOptions::new()).await.unwrap();
        // Half the pods wait for "busy", half for "busy2".
        let key = ["busy", "busy2"][i % 2];
        let waiter = tokio::spawn({
            let pod = pod.clone();
            async move { pod.acquire(key, AcquireOptions::new().timeout(long)).await }
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while pod.queued_count() == 0 {
            assert!(std::time::Instant::now() < deadline, "pod-{i} never queued");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        proxy.set(support::Mode::Cut);
        waiter.abort();
        drop((member, pod, proxy));
    }
    let count = |sql: &'static str| {
        let h = &h;
        async move {
            h.admin()
                .query_one(sql, &[&h.tag])
                .await
                .unwrap()
                .get::<_, i64>(0)
        }
    };
    let members = "SELECT count(*) FROM accord.leases
                    WHERE namespace = $1 AND key LIKE 'accord.group/g/%'";
    let tickets = "SELECT count(*) FROM accord.tickets WHERE namespace = $1";
    let tickets_of_busy2 = "SELECT count(*) FROM accord.tickets
                             WHERE namespace = $1 AND key = 'busy2'";
    let live_tickets = "SELECT count(*) FROM accord.tickets
                         WHERE namespace = $1 AND expires_at > clock_timestamp()";
    // Once every pod's place has expired, a waiting acquire of the key deletes them.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while count(live_tickets).await > 0 {
        assert!(std::time::Instant::now() < deadline, "places never expired");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A reset of a key deletes its dead tickets (refused here: the key is held).
    assert!(count(tickets_of_busy2).await > 0);
    let other = h.client("other").await;
    let refused = other.reset("busy2").await.unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Held);
    assert_eq!(
        count(tickets_of_busy2).await,
        0,
        "dead tickets left after a reset"
    );
    let waited = other
        .acquire(
            "busy",
            AcquireOptions::new().timeout(Duration::from_millis(200)),
        )
        .await
        .unwrap_err();
    assert_eq!(waited.kind(), ErrorKind::Timeout);
    assert_eq!(count(tickets).await, 0, "dead tickets left after a wait");
    // Once every pod's membership has expired, a join deletes their rows.
    while holder.members("g").await.unwrap().len() > 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "memberships never expired"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        count(members).await > 1,
        "the dead members' rows are there before a join"
    );
    let _newcomer = other
        .join("g", accord::JoinOptions::new().ttl(long))
        .await
        .unwrap();
    assert_eq!(count(members).await, 2, "the two live members' rows only");
    assert_eq!(count(tickets).await, 0);
}

/// Fair waiting: a release that names a waiter while it is leaving the line (the release's
/// snapshot still shows its place) wakes nobody by itself; the leaver's client hears the
/// wake-up and passes the turn on, so the next in line is granted on the release, not when its
/// own timer fires. The race is made certain by holding the leaver's ticket row locked from
/// another connection while the release runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_named_while_leaving_is_passed_on() {
    let h = Harness::postgres("pass_turn").await;
    let long = || AcquireOptions::new().ttl(Duration::from_secs(60));
    let holder = h.client("holder").await;
    let leaver = h.client("leaver").await;
    let next = h.client("next").await;
    let lease = holder.acquire("k", long()).await.unwrap();
    let cancel = accord::CancellationToken::new();
    let leaving = {
        let (leaver, cancel) = (leaver.clone(), cancel.clone());
        tokio::spawn(async move { leaver.acquire("k", long().cancel(cancel)).await })
    };
    while leaver.queued_count() < 1 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let waiting = {
        let next = next.clone();
        tokio::spawn(async move {
            next.acquire("k", long().timeout(Duration::from_secs(20)))
                .await
        })
    };
    while next.queued_count() < 1 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The leaver's ticket row, locked: its leave (a DELETE) waits until this transaction ends.
    let (locker, connection) = tokio_postgres::connect(&h.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    locker
        .batch_execute(&format!(
            "BEGIN; SELECT 1 FROM accord.tickets WHERE namespace = '{}' AND owner = 'leaver' \
             FOR UPDATE",
            h.tag
        ))
        .await
        .unwrap();
    cancel.cancel();
    // The leaver's leave is in flight, waiting for the row lock.
    until_waiting_for_a_lock(&h, "leaver").await;
    // Released while the leaver's place still stands: the release names the leaver.
    lease.release().await.unwrap();
    locker.batch_execute("COMMIT").await.unwrap();
    assert_eq!(
        leaving.await.unwrap().unwrap_err().kind(),
        ErrorKind::Cancelled
    );
    // Granted within 20 s: only a passed-on turn does that (`next` renews its place, and
    // looks again unprompted, only every 20 s).
    let granted = waiting.await.unwrap().unwrap();
    assert!(next.waiter_wakeups() >= 1);
    granted.release().await.unwrap();
}

/// G3 at scale: the keepalive's renewal statement looks each lease up by its key whatever the
/// table's statistics say. They are stale in the usual way here: ANALYZE ran while the table
/// held another owner's leases, so they say this client (an owner id new since) holds nothing.
/// Written as a plain join, the statement then scanned the table and compared every row with
/// every lease of the batch (10,000 leases took 75 s, far longer than their ttl). The plans must
/// look each lease up by its key, and the statement renews every lease.
#[tokio::test]
async fn renewals_follow_the_key_index_whatever_the_statistics() {
    let h = Harness::postgres("renew_plan").await;
    // The client creates the schema; the rows are then written directly (fast).
    let (schema, client, statements) = plan_fixture(&h, "rp").await;
    let (ns, owner) = (h.tag.as_str(), "fresh-owner");
    let db = h.admin();
    db.execute(
        &format!(
            "INSERT INTO \"{schema}\".leases (namespace, key, owner, fence, expires_at, updated_at)
             SELECT $1, 'old/' || i, 'gone', i, now() - interval '1 hour', now()
               FROM generate_series(1, 90000) AS i"
        ),
        &[&ns],
    )
    .await
    .unwrap();
    db.batch_execute(&format!("ANALYZE \"{schema}\".leases"))
        .await
        .unwrap();
    const LEASES: i64 = 10_000;
    db.execute(
        &format!(
            "INSERT INTO \"{schema}\".leases (namespace, key, owner, fence, expires_at, updated_at)
             SELECT $1, 'live/' || i, $2, 100000 + i, now() + interval '1 hour', now()
               FROM generate_series(1, $3::bigint) AS i"
        ),
        &[&ns, &owner, &LEASES],
    )
    .await
    .unwrap();
    let keys: Vec<String> = (1..=LEASES).map(|i| format!("live/{i}")).collect();
    let fences: Vec<i64> = (1..=LEASES).map(|i| 100_000 + i).collect();
    let ttls: Vec<i64> = vec![60_000; keys.len()];
    let none: (Vec<String>, Vec<i64>) = (Vec::new(), Vec::new());
    let channel = accord::wakeup_channel(&schema).unwrap();
    let renew = &statements["renew_batch"];
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 8] = [
        &ns, &owner, &keys, &fences, &ttls, &none.0, &none.1, &none.1,
    ];
    // The plan a first execution gets (a custom plan, planned with these very values) must
    // look each lease up by its key, never loop over the table: so must the other statements
    // that take or end many leases of one owner (a round of at most 1,000).
    let round = 1000;
    let metadata: Vec<Option<String>> = vec![None; round];
    let (round_keys, round_fences) = (&keys[..round].to_vec(), &fences[..round].to_vec());
    let round_ttls = ttls[..round].to_vec();
    let checks: [(&str, Vec<&(dyn tokio_postgres::types::ToSql + Sync)>); 4] = [
        ("renew_batch", params.to_vec()),
        (
            "acquire_batch",
            vec![
                &ns,
                &owner,
                round_keys,
                round_fences,
                &round_ttls,
                &metadata,
            ],
        ),
        (
            "release_batch",
            vec![&ns, &owner, round_keys, round_fences, &channel],
        ),
        (
            "done_batch",
            vec![&ns, &owner, round_keys, round_fences, &metadata, &channel],
        ),
    ];
    for (name, params) in &checks {
        let plan = custom_plan(db, &statements[name], params).await;
        // The shape that compares the batch with every row: a nested loop over a scan of the
        // table (a hash join reading it once is fine: it is only chosen when it is small).
        let mut scans = 0;
        walk_plan(&plan, &mut |node| {
            if node["Node Type"] == "Nested Loop" {
                for child in node["Plans"].as_array().into_iter().flatten() {
                    if child["Node Type"] == "Seq Scan" && child["Relation Name"] == "leases" {
                        scans += 1;
                    }
                }
            }
        });
        assert_eq!(scans, 0, "{name} loops over a scan of the table: {plan:#}");
    }
    // One row: the fences renewed, and their expiries.
    let renewed = db.query_one(renew.as_str(), &params).await.unwrap();
    let (fences_renewed, expiries): (Vec<i64>, Vec<chrono::DateTime<chrono::Utc>>) =
        (renewed.get(0), renewed.get(1));
    assert_eq!(fences_renewed.len() as i64, LEASES);
    assert_eq!(expiries.len() as i64, LEASES);
    client.close().await;
}

/// Work pools at scale: `offer` and `claim` find their rows by key (or by the pool's index)
/// whatever the statistics say. They mislead in the usual way here: ANALYZE ran while the table
/// held another namespace's rows only, so they say this namespace is empty. Joined to the table
/// by key, the statements then read the whole namespace: an offer of 1,000 keys read it twice
/// (0.8 s at 500,000 rows), and a claim of 1,000 keys read it once per key (6 minutes at
/// 600,000). No plan may scan the namespace, and both statements do their work.
#[tokio::test]
async fn pools_follow_the_key_index_whatever_the_statistics() {
    let h = Harness::postgres("pool_plan").await;
    let (schema, client, statements) = plan_fixture(&h, "pp").await;
    let ns = h.tag.as_str();
    let db = h.admin();
    db.execute(
        &format!(
            "INSERT INTO \"{schema}\".leases (namespace, key, fence, done, updated_at, pool, offered)
             SELECT 'elsewhere', 'jobs/' || i, i, i % 2 = 0, now(), 'jobs/', i
               FROM generate_series(1, 20000) AS i"
        ),
        &[],
    )
    .await
    .unwrap();
    db.batch_execute(&format!("ANALYZE \"{schema}\".leases"))
        .await
        .unwrap();
    // After ANALYZE: this namespace's pool (free keys) and 500 keys in no pool (to adopt).
    db.execute(
        &format!(
            "INSERT INTO \"{schema}\".leases (namespace, key, fence, done, updated_at, pool, offered)
             SELECT $1, 'jobs/' || lpad(i::text, 6, '0'), 20000 + i, false, now(),
                    CASE WHEN i > 500 THEN 'jobs/' END, CASE WHEN i > 500 THEN i END
               FROM generate_series(1, 100000) AS i"
        ),
        &[&ns],
    )
    .await
    .unwrap();
    let channel = accord::wakeup_channel(&schema).unwrap();
    // 500 keys in no pool and 500 new ones.
    let offered: Vec<String> = (1..=500)
        .map(|i| format!("jobs/{i:06}"))
        .chain((1..=500).map(|i| format!("jobs/new-{i}")))
        .collect();
    let (pool, none, limit, attempt, ttl) = ("jobs/", None::<String>, 1000i64, 7i64, 60_000i64);
    let checks: [(&str, Vec<&(dyn tokio_postgres::types::ToSql + Sync)>); 2] = [
        ("offer", vec![&ns, &pool, &offered, &none, &channel]),
        (
            "claim",
            vec![
                &ns, &pool, &limit, &attempt, &"o1", &ttl, &none, &none, &"jobs0",
            ],
        ),
    ];
    for (name, params) in &checks {
        let plan = custom_plan(db, &statements[name], params).await;
        // A scan of the namespace: the table read whole, or an index of keys read with no
        // key to look up and no range of keys (a pool's own index, by namespace and pool, is
        // the claim's way in; its range of the key order, the empty claim's).
        let mut scans = Vec::new();
        walk_plan(&plan, &mut |node| {
            let cond = node["Index Cond"].as_str().unwrap_or("");
            let keyed = cond.contains("key =")
                || (cond.contains("key >=") && cond.contains("key <"))
                || node["Index Name"] == "leases_pool";
            match node["Node Type"].as_str().unwrap_or("") {
                "Seq Scan" if node["Relation Name"] == "leases" => scans.push(node.clone()),
                "Index Scan" | "Index Only Scan" | "Bitmap Index Scan"
                    if node["Index Name"]
                        .as_str()
                        .is_some_and(|i| i.starts_with("leases"))
                        && !keyed =>
                {
                    scans.push(node.clone())
                }
                _ => {}
            }
        });
        assert!(scans.is_empty(), "{name} scans the namespace: {plan:#}");
    }
    // And they do their work: every offered key joins, a claim takes a full batch.
    assert_eq!(client.offer(pool, offered, None).await.unwrap(), 1000);
    let claimed = client
        .claim(pool, accord::ClaimOptions::new().limit(1000))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1000);
    client.close().await;
}

/// A page deep in the key order is an index range scan whatever the plan was built from. With
/// the page's rows under a subquery sorted above it, the subquery was planned for reading the
/// whole range, and the index scan survived only while the statistics said it was cheaper
/// than a bitmap scan and a sort of the whole range. A generic plan (`plan_cache_mode`, or a
/// statement prepared by name) has only the statistics: with another namespace in the table
/// it sorted every key after the cursor (a million keys and 100,000 leases of another client:
/// 448 ms a page instead of 0.4). Both plans, generic and custom, must read the range in index
/// order without a sort; and the page is the right one.
#[tokio::test]
async fn deep_pages_follow_the_key_index_whatever_the_statistics() {
    let h = Harness::postgres("page_plan").await;
    let (schema, client, statements) = plan_fixture(&h, "lp").await;
    let ns = h.tag.as_str();
    let db = h.admin();
    // 100,000 keys of this namespace and 10,000 held leases of another, analyzed.
    db.execute(
        &format!(
            "INSERT INTO \"{schema}\".leases (namespace, key, owner, fence, expires_at, updated_at)
             SELECT CASE WHEN i <= 100000 THEN $1 ELSE 'others' END, 'k/' || lpad(i::text, 7, '0'),
                    'w', i, CASE WHEN i > 100000 THEN now() + interval '1 hour' END, now()
               FROM generate_series(1, 110000) AS i"
        ),
        &[&ns],
    )
    .await
    .unwrap();
    db.batch_execute(&format!("ANALYZE \"{schema}\".leases"))
        .await
        .unwrap();
    // The page after the cursor half way: (key, fence) ('k/0050000', 50000), 100 keys.
    db.batch_execute(&format!(
        "PREPARE deep_page(text, text, text, text, text, text, bigint, bigint, boolean, boolean) \
         AS {}",
        statements["list_keys"]
    ))
    .await
    .unwrap();
    for mode in ["force_generic_plan", "force_custom_plan"] {
        let rows = db
            .simple_query(&format!(
                "SET plan_cache_mode = {mode};
                 EXPLAIN (FORMAT JSON) EXECUTE deep_page('{ns}', 'k/0050000', NULL, NULL, NULL,
                                                        'k/0050000', 50000, 101, false, false)"
            ))
            .await
            .unwrap();
        let text = rows
            .iter()
            .find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_string),
                _ => None,
            })
            .unwrap();
        let plan: serde_json::Value = serde_json::from_str(&text).unwrap();
        let (mut ranges, mut others) = (0, Vec::new());
        walk_plan(&plan, &mut |node| match node["Node Type"].as_str() {
            Some("Index Scan") if node["Index Name"] == "leases_pkey" => ranges += 1,
            Some("Sort" | "Incremental Sort" | "Seq Scan" | "Bitmap Heap Scan") => {
                others.push(node["Node Type"].clone())
            }
            _ => {}
        });
        assert!(
            ranges == 1 && others.is_empty(),
            "{mode}: the deep page is not one index range scan: {plan:#}"
        );
    }
    db.batch_execute("RESET plan_cache_mode; DEALLOCATE deep_page")
        .await
        .unwrap();
    let page = client
        .list(accord::ListQuery::new().cursor(r#"["k/0050000", 50000]"#))
        .await
        .unwrap();
    let keys: Vec<&str> = page.items.iter().map(|i| i.key.as_str()).collect();
    assert_eq!(keys.len(), 100);
    assert_eq!((keys[0], keys[99]), ("k/0050001", "k/0050100"));
    client.close().await;
}

/// A page of held keys reads only the keys that name an owner (`leases_owned`, schema version
/// 8), whatever the statistics say: with 100,000 free keys and two held, analyzed, the page's
/// plan (custom, as `list` sends it by its text) is one scan of that index, and it reads a few
/// buffers, not the 100,000 keys. On the old schema (no such index) it scans every undone key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_pages_follow_the_owned_index_whatever_the_statistics() {
    let h = Harness::postgres("held_plan").await;
    let (schema, client, statements) = plan_fixture(&h, "hp").await;
    let ns = h.tag.as_str();
    let db = h.admin();
    db.execute(
        &format!(
            "INSERT INTO \"{schema}\".leases (namespace, key, owner, fence, expires_at, updated_at)
             SELECT $1, 'k/' || lpad(i::text, 7, '0'),
                    CASE WHEN i % 40000 = 0 THEN 'w' END, i,
                    CASE WHEN i % 40000 = 0 THEN now() + interval '1 hour' END, now()
               FROM generate_series(1, 100000) AS i"
        ),
        &[&ns],
    )
    .await
    .unwrap();
    db.batch_execute(&format!("ANALYZE \"{schema}\".leases"))
        .await
        .unwrap();
    let (from, held, limit, yes): (&str, Option<&str>, i64, bool) = ("k/", Some("held"), 101, true);
    let (none, no_fence): (Option<&str>, Option<i64>) = (None, None);
    let below = Some("k0");
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 10] = [
        &ns, &from, &held, &none, &below, &none, &no_fence, &limit, &yes, &yes,
    ];
    let plan = custom_plan(db, &statements["list_keys"], &params).await;
    let mut scans = Vec::new();
    walk_plan(&plan, &mut |node| {
        if let Some(kind @ ("Index Scan" | "Index Only Scan" | "Seq Scan" | "Bitmap Heap Scan")) =
            node["Node Type"].as_str()
        {
            scans.push((kind.to_string(), node["Index Name"].clone()));
        }
    });
    assert_eq!(
        scans,
        [("Index Scan".to_string(), serde_json::json!("leases_owned"))],
        "a page of held keys does not scan the keys that name an owner: {plan:#}"
    );
    let page = client
        .list(accord::ListQuery::new().state(accord::KeyState::Held))
        .await
        .unwrap();
    let keys: Vec<&str> = page.items.iter().map(|i| i.key.as_str()).collect();
    assert_eq!(keys, ["k/0040000", "k/0080000"]);
    client.close().await;
}

/// The plan tests' start: a schema of their own (`<prefix>_<tag>`, created by a client's
/// migration, so that rows can then be written directly), that client, and the schema's
/// statements by name.
async fn plan_fixture(
    h: &Harness,
    prefix: &str,
) -> (
    String,
    Client,
    std::collections::HashMap<&'static str, String>,
) {
    let schema = format!("{prefix}_{}", h.tag);
    let client = h
        .client_with("o1", h.options("o1").schema(schema.clone()))
        .await;
    let statements = accord::statements(&schema).unwrap().into_iter().collect();
    (schema, client, statements)
}

/// The plan `sql` gets on its first execution with `params` (a custom plan, planned with these
/// very values), as EXPLAIN (FORMAT JSON) shows it.
async fn custom_plan(
    db: &tokio_postgres::Client,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> serde_json::Value {
    let explain = db
        .prepare(&format!("EXPLAIN (FORMAT JSON) {sql}"))
        .await
        .unwrap();
    db.query_one(&explain, params).await.unwrap().get(0)
}

/// Calls `visit` on every node of an EXPLAIN (FORMAT JSON) plan.
fn walk_plan(value: &serde_json::Value, visit: &mut dyn FnMut(&serde_json::Value)) {
    match value {
        serde_json::Value::Array(items) => items.iter().for_each(|v| walk_plan(v, visit)),
        serde_json::Value::Object(fields) => {
            if fields.contains_key("Node Type") {
                visit(value);
            }
            fields.values().for_each(|v| walk_plan(v, visit));
        }
        _ => {}
    }
}

/// The snapshot lists at most `MAX_SNAPSHOT_WAITER_KEYS` keys with waiters (the first ones in
/// key order) and says it is truncated, while `counts.waiting` counts every waiter: 1,001 keys
/// with one live waiting ticket each (written directly: 1,001 waiting acquires would test
/// nothing more), exclusive on odd keys, shared on even ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_bounds_the_waiters_and_counts_them_all() {
    let h = Harness::postgres("waiters").await;
    let client = h.client("a").await;
    let n = accord::MAX_SNAPSHOT_WAITER_KEYS as i64 + 1;
    h.admin()
        .execute(
            "INSERT INTO accord.tickets
                    (namespace, key, ticket, owner, shared, attempt, granted, expires_at,
                     updated_at)
             SELECT $1, 'w/' || lpad(i::text, 5, '0'), i, 'o', i % 2 = 0, 0, false,
                    clock_timestamp() + interval '1 hour', clock_timestamp()
               FROM generate_series(1, $2::bigint) i",
            &[&h.tag, &n],
        )
        .await
        .unwrap();
    let snap = client
        .snapshot(accord::ListQuery::new().prefix("w/"))
        .await
        .unwrap();
    assert_eq!(snap.waiters.len(), accord::MAX_SNAPSHOT_WAITER_KEYS);
    assert!(snap.truncated);
    // Only the waiters were cut.
    assert_eq!(
        snap.cut,
        accord::SnapshotCut {
            waiters: true,
            ..Default::default()
        }
    );
    assert_eq!(snap.counts.waiting, n as u64);
    let first: Vec<(&str, u64, u64)> = snap.waiters[..2]
        .iter()
        .map(|w| (w.key.as_str(), w.exclusive, w.shared))
        .collect();
    assert_eq!(first, [("w/00001", 1, 0), ("w/00002", 0, 1)]);
    assert_eq!(snap.waiters.last().unwrap().key, "w/01000");
    assert!(snap.waiters_on("w/00500").is_some());
    assert!(snap.waiters_on("w/01001").is_none());
    client.close().await;
}

/// Renewals are written in place (HOT): each lease's new version lands on its row's page, so
/// no index gets an entry and the WAL carries one record per renewal. With pages filled to
/// the brim (the table's default) a tick found no room and moved every row it renewed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_stay_on_their_page() {
    let h = Harness::postgres("renew_hot").await;
    let schema = format!("hot_{}", h.tag);
    let client = h
        .client_with(
            "o1",
            h.options("o1")
                .schema(schema.clone())
                .ttl(Duration::from_secs(3)),
        )
        .await;
    let keys: Vec<String> = (0..500).map(|i| format!("hot/{i:03}")).collect();
    let leases: Vec<_> = futures_util::future::join_all(
        keys.iter()
            .map(|k| client.try_acquire(k, AcquireOptions::new())),
    )
    .await
    .into_iter()
    .map(|r| r.unwrap().expect("a free key"))
    .collect();
    let db = h.admin();
    // Each key's page: the block number of its row's ctid.
    let pages = || async {
        let rows = db
            .query(
                &format!(
                    "SELECT key, (ctid::text::point)[0]::bigint FROM \"{schema}\".leases
                      WHERE namespace = $1 ORDER BY key"
                ),
                &[&h.tag],
            )
            .await
            .unwrap();
        rows.iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1)))
            .collect::<Vec<_>>()
    };
    let before = pages().await;
    assert_eq!(before.len(), 500);
    // One renewal of every lease by the keepalive (the bound only catches a hang).
    let seen: Vec<_> = leases.iter().map(|l| l.expires_at()).collect();
    assert!(
        support::eventually(Duration::from_secs(30), || async {
            leases.iter().zip(&seen).all(|(l, s)| l.expires_at() > *s)
        })
        .await,
        "the keepalive did not renew every lease"
    );
    let after = pages().await;
    let moved: Vec<_> = before
        .iter()
        .zip(&after)
        .filter(|(b, a)| b != a)
        .map(|(b, _)| b.0.as_str())
        .collect();
    assert!(
        moved.is_empty(),
        "{} of 500 renewed rows left their page (not HOT), e.g. {:?}",
        moved.len(),
        &moved[..moved.len().min(5)]
    );
    client.close().await;
}

/// The fault the first attempt of a listening connection (or of its reconnect) meets: its own
/// probe notification, on the way from the server, is swallowed and the connection frozen
/// (`cut: false`) or closed (`cut: true`). Either is a lost connection, not a deaf server.
fn fail_during_the_probe(cut: bool) -> support::Mode {
    support::Mode::FailOnceOn {
        bytes: b"accord_probe_",
        cut,
    }
}

/// Asserts that `error` is not the verdict for a server that cannot deliver notifications.
fn not_called_deaf(error: &accord::Error) {
    let text = error.to_string();
    assert!(
        !text.contains("listen_url") && !text.contains("PgBouncer"),
        "a lost connection was reported as a deaf server: {text}"
    );
}

/// O1: a listening connection lost while it waits for its own probe notification (a
/// termination or a frozen network right after it connected) is a connection failure: the
/// client reconnects with its usual backoff, `listen` waits for that and succeeds, and nothing
/// blames the deployment. Only a probe that ran its course on a connection that still answers
/// may call the server deaf (which fails `listen` at once and waits 30 s before trying again).
#[tokio::test]
async fn a_listener_lost_during_its_probe_is_not_called_deaf() {
    for cut in [true, false] {
        let h = Harness::postgres("probe_fault").await;
        let (proxy, listen_url) = h.proxy().await;
        // In plain text, so that the proxy can see the probe go by.
        let separator = if listen_url.contains('?') { '&' } else { '?' };
        let listen_url = format!("{listen_url}{separator}sslmode=disable");
        proxy.set(fail_during_the_probe(cut));
        // Generous: a frozen connection needs the 3 s probe and the 5 s health check first.
        let options = h
            .options("o1")
            .listen_url(listen_url)
            .statement_timeout(Duration::from_secs(30));
        let client = h.client_with("o1", options).await;
        let sender = h.client("o2").await;
        let first = h.channel("first");
        let sub = match client.listen([&first]).await {
            Ok(sub) => sub,
            Err(e) => {
                not_called_deaf(&e);
                panic!("listen failed (cut: {cut}): {e}")
            }
        };
        assert!(proxy.has_failed(), "the fault never happened (cut: {cut})");
        sender.notify(&first, "heard").await.unwrap();
        let got = tokio::time::timeout(Duration::from_secs(10), sub.recv()).await;
        assert!(
            matches!(&got, Ok(Ok(Some(accord::Event::Message(m)))) if m.payload == "heard"),
            "cut: {cut}: {got:?}"
        );

        // The same fault on a reconnect: the subscription is told of the gap and hears again,
        // and a `listen` made meanwhile waits for the reconnect instead of failing.
        proxy.set(fail_during_the_probe(cut));
        assert!(h.terminate_connections("o1").await >= 1);
        assert!(
            support::eventually(Duration::from_secs(20), || async { proxy.has_failed() }).await,
            "the reconnect never met the fault (cut: {cut})"
        );
        let second = h.channel("second");
        let during = match client.listen([&second]).await {
            Ok(sub) => sub,
            Err(e) => {
                not_called_deaf(&e);
                panic!("listen during the reconnect failed (cut: {cut}): {e}")
            }
        };
        let got = tokio::time::timeout(Duration::from_secs(20), sub.recv()).await;
        assert!(
            matches!(got, Ok(Ok(Some(accord::Event::Reconnected)))),
            "cut: {cut}: {got:?}"
        );
        sender.notify(&second, "again").await.unwrap();
        // A subscription made while the connection was down may be told of that gap too.
        let got = loop {
            match tokio::time::timeout(Duration::from_secs(10), during.recv()).await {
                Ok(Ok(Some(accord::Event::Reconnected))) => continue,
                other => break other,
            }
        };
        assert!(
            matches!(&got, Ok(Ok(Some(accord::Event::Message(m)))) if m.payload == "again"),
            "cut: {cut}: {got:?}"
        );
        client.close().await;
        sender.close().await;
    }
}

/// A command connection that broke is counted as a reconnect when a new one opens, even when
/// attempts failed in between (the server still down): what `accord top --prometheus` showed as
/// `reconnects` 0 after a restart with a scrape during the outage.
#[tokio::test]
async fn reconnects_are_counted_after_failed_attempts() {
    let h = Harness::postgres("reconnects").await;
    let (proxy, url) = h.proxy().await;
    let client = Client::connect(&url, h.options("o1")).await.unwrap();
    client.counts("jobs/").await.unwrap();
    assert_eq!(client.stats().reconnects, 0);

    // Every connection closed and new ones refused: each statement fails, so does each
    // attempt to open a connection again.
    proxy.set(support::Mode::Cut);
    for _ in 0..2 {
        let e = client.counts("jobs/").await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Connection, "{e}");
    }
    proxy.set(support::Mode::Pass);
    client.counts("jobs/").await.unwrap();
    assert!(
        client.stats().reconnects >= 1,
        "a broken connection was replaced: {:?}",
        client.stats()
    );
    client.close().await;
}

/// G9 through a close: a grant whose statement was sent before the client closed and answered
/// after it is given back before the connections close, not left held until its ttl. The
/// try's statement is held up by a transaction that locks the key's row, and let go only once
/// the client is closed; a plain read then tells whether the key is free.
#[tokio::test]
async fn a_grant_landing_during_close_is_given_back() {
    let h = Harness::postgres("close_in_flight").await;
    let long = || AcquireOptions::new().ttl(Duration::from_secs(120));
    let closing = h.client("closing").await;
    // The key's row exists (free) for the lock below.
    closing
        .acquire("k", long())
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let (locker, connection) = tokio_postgres::connect(&h.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    locker
        .batch_execute(&format!(
            "BEGIN; SELECT 1 FROM accord.leases WHERE namespace = '{}' AND key = 'k' FOR UPDATE",
            h.tag
        ))
        .await
        .unwrap();
    let trying = {
        let closing = closing.clone();
        tokio::spawn(async move { closing.try_acquire("k", long()).await })
    };
    until_waiting_for_a_lock(&h, "closing").await;
    let close = {
        let closing = closing.clone();
        tokio::spawn(async move { closing.close().await })
    };
    while !closing.is_closed() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The try's statement now grants the key, to a client already closing.
    locker.batch_execute("COMMIT").await.unwrap();
    close.await.unwrap();
    assert_eq!(
        trying.await.unwrap().unwrap_err().kind(),
        ErrorKind::Closed,
        "the try ended by the close"
    );
    let holder: Option<String> = h
        .admin()
        .query_one(
            "SELECT owner FROM accord.leases WHERE namespace = $1 AND key = 'k'",
            &[&h.tag],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        holder, None,
        "the grant that landed during the close is held"
    );
}

/// Returns once a statement of `owner`'s client waits for a row lock on the server.
async fn until_waiting_for_a_lock(h: &Harness, owner: &str) {
    while !h.waits_for_a_lock(owner).await {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
