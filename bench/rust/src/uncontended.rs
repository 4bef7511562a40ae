//! Scenario 1: try_acquire + release on one key, one client, one connection; accord against
//! its own statements sent raw (the floor) and against a session advisory lock.

use std::time::{Duration, Instant};

use accord::{Client, ClientOptions};

use crate::raw::{self, AccordSql, Prepared};
use crate::record::Record;
use crate::{BenchResult, Config, NAMESPACE, SCHEMA};

enum Contender {
    Accord(Client),
    Raw(tokio_postgres::Client, Prepared),
    Advisory(
        tokio_postgres::Client,
        tokio_postgres::Statement,
        tokio_postgres::Statement,
    ),
}

impl Contender {
    async fn pair(&self, key: &str) -> BenchResult<()> {
        match self {
            Contender::Accord(client) => raw::accord_pair(client, key).await?,
            Contender::Raw(client, stmts) => stmts.pair(client, key).await?,
            Contender::Advisory(client, lock, unlock) => {
                let id: i64 = 4242;
                if !client.query_one(lock, &[&id]).await?.get::<_, bool>(0) {
                    return Err("advisory lock 4242 is held".into());
                }
                if !client.query_one(unlock, &[&id]).await?.get::<_, bool>(0) {
                    return Err("advisory lock 4242 was not held".into());
                }
            }
        }
        Ok(())
    }
}

async fn rounds(
    contender: &Contender,
    key: &str,
    n: usize,
) -> BenchResult<(Vec<Duration>, Duration)> {
    let mut samples = Vec::with_capacity(n);
    let started = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        contender.pair(key).await?;
        samples.push(t.elapsed());
    }
    Ok((samples, started.elapsed()))
}

pub async fn run(config: &Config) -> BenchResult<Vec<Record>> {
    let accord = Client::connect(
        &config.url,
        ClientOptions::new()
            .schema(SCHEMA)
            .namespace(NAMESPACE)
            .pool_size(1),
    )
    .await?;
    let raw_client = raw::connect(&config.url).await?;
    let prepared = Prepared::on(&raw_client, &AccordSql::new()?).await?;
    let advisory = raw::connect(&config.url).await?;
    let lock = advisory.prepare("SELECT pg_try_advisory_lock($1)").await?;
    let unlock = advisory.prepare("SELECT pg_advisory_unlock($1)").await?;

    let mut contenders = vec![
        (
            Record::new("rust/accord", "accord, Rust core (try_acquire + release)"),
            Contender::Accord(accord),
        ),
        (
            Record::new(
                "rust/raw-sql",
                "raw SQL: accord's two statements, tokio-postgres",
            ),
            Contender::Raw(raw_client, prepared),
        ),
        (
            Record::new(
                "rust/advisory",
                "pg_try_advisory_lock + pg_advisory_unlock, tokio-postgres",
            ),
            Contender::Advisory(advisory, lock, unlock),
        ),
    ];
    if let Some(root_cert) = &config.tls_root_cert {
        // The same two, encrypted with the same TLS stack (rustls), the certificate checked.
        let base = config.url.split('?').next().unwrap_or(&config.url);
        let accord_tls = Client::connect(
            &format!("{base}?sslmode=verify-full&sslrootcert={root_cert}"),
            ClientOptions::new()
                .schema(SCHEMA)
                .namespace(NAMESPACE)
                .pool_size(1),
        )
        .await?;
        let raw_tls = raw::connect_tls(&format!("{base}?sslmode=require"), root_cert).await?;
        let prepared_tls = Prepared::on(&raw_tls, &AccordSql::new()?).await?;
        contenders.push((
            Record::new("rust/accord-tls", "accord, Rust core, over TLS"),
            Contender::Accord(accord_tls),
        ));
        contenders.push((
            Record::new(
                "rust/raw-sql-tls",
                "raw SQL over TLS: tokio-postgres + rustls",
            ),
            Contender::Raw(raw_tls, prepared_tls),
        ));
    }
    for (record, contender) in &contenders {
        rounds(contender, &format!("bench-{}", record.id), config.warmup).await?;
    }
    for half in [config.pairs / 2, config.pairs - config.pairs / 2] {
        for (record, contender) in &mut contenders {
            let key = format!("bench-{}", record.id);
            let (samples, elapsed) = rounds(contender, &key, half).await?;
            record.add(samples, elapsed);
        }
    }
    let mut records = Vec::new();
    for (record, contender) in contenders {
        if let Contender::Accord(client) = contender {
            client.close().await;
        }
        records.push(record);
    }
    Ok(records)
}
