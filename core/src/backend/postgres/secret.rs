//! The schema's wake-up secret: the key of the tags that wake-ups carry instead of names
//! (`rules::wake_tag`). Any role that can connect may LISTEN on the wake-up channel; only roles
//! that can read accord's tables can read the secret, so only they can tell which key a tag
//! stands for, or check a guessed name against one.
//!
//! It is a row of the leases table, so that no schema change is needed: namespace `''` (no
//! client's namespace is empty, so no call can read, free or reset it), key
//! [`SECRET_KEY`], done (final), the secret in its metadata. The first client that can write
//! creates it; every statement that wakes reads it (an index lookup on the primary key).

use tokio_postgres::Client;

use super::sql::quote_ident;
use crate::rules::WAKE_TAG_HEX;

/// The key of the secret's row (in namespace `''`).
const SECRET_KEY: &str = "accord.wakeup-secret";

/// The SQL expression of `rules::wake_tag` for the key `key` (an SQL expression) of the
/// namespace `$1`; NULL while the schema has no secret. Mirrors `rules::wake_tag`.
pub(crate) fn wake_tag_sql(s: &str, key: &str) -> String {
    format!(
        "substr(encode(sha256(convert_to(
           (SELECT w.metadata->>'secret' FROM {s}.leases w
             WHERE w.namespace = '' AND w.key = '{SECRET_KEY}')
           || octet_length(convert_to($1::text, 'UTF8'))::text || ':' || $1::text || {key}::text,
           'UTF8')), 'hex'), 1, {WAKE_TAG_HEX})"
    )
}

/// Reads the schema's secret, creating it first if this role may (256 random bits from
/// `gen_random_uuid`, PostgreSQL's strong random source). `None` when there is none and this
/// role cannot create it: its waiters then wake on every wake-up (correct, only slower).
pub(crate) async fn fetch(client: &Client, schema: &str) -> Option<String> {
    let s = quote_ident(schema);
    let create = format!(
        "INSERT INTO {s}.leases (namespace, key, fence, done, metadata, updated_at)
         VALUES ('', '{SECRET_KEY}', 0, true,
                 jsonb_build_object('secret',
                   md5(gen_random_uuid()::text) || md5(gen_random_uuid()::text)),
                 clock_timestamp())
         ON CONFLICT (namespace, key) DO NOTHING"
    );
    let read = format!(
        "SELECT metadata->>'secret' FROM {s}.leases WHERE namespace = '' AND key = '{SECRET_KEY}'"
    );
    let read = || async {
        match client.query_opt(read.as_str(), &[]).await {
            Ok(row) => row.and_then(|r| r.get::<_, Option<String>>(0)),
            Err(e) => {
                tracing::warn!(target: "accord", error = %e, "could not read the wake-up secret: every wake-up wakes every waiter");
                None
            }
        }
    };
    // Read first: once it exists (every connect but the schema's first), no write is tried.
    if let Some(secret) = read().await {
        return Some(secret);
    }
    if let Err(e) = client.execute(create.as_str(), &[]).await {
        tracing::warn!(target: "accord", error = %e, "could not create the wake-up secret");
    }
    read().await
}
