//! Every statement accord sends to PostgreSQL. Each operation is one statement (one round trip
//! once prepared); every value is a bind parameter; only the schema, a quoted identifier, is
//! spliced in. Time is always `clock_timestamp()`: the coordinator's clock, never the client's.

/// Quotes an identifier for SQL text (`"` doubled), so any name is safe to splice.
pub(crate) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The channel on which releases and `done` wake waiting acquires of this schema.
pub(crate) fn wakeup_channel(schema: &str) -> String {
    let readable = format!("accord_wakeup_{schema}");
    if readable.len() <= 63 {
        return readable;
    }
    // FNV-1a: stable across builds and processes, so every client of the schema agrees.
    let mut hash: u64 = 0xcbf29ce484222325;
    for b in schema.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x100000001b3);
    }
    format!("accord_wakeup_{hash:016x}")
}

pub(crate) struct Sql {
    pub acquire: String,
    pub renew: String,
    pub renew_batch: String,
    pub release: String,
    pub done: String,
    pub reset: String,
    pub list: String,
    pub notify: &'static str,
}

impl Sql {
    pub fn new(schema: &str) -> Sql {
        let s = quote_ident(schema);
        Sql {
            // Grant when the row is free, expired, or already granted to this very attempt (a
            // retry after a lost answer). Otherwise report the current row: the UNION's second
            // branch reads the statement's snapshot, so a concurrent change may hide the row
            // (the caller then retries shortly).
            acquire: format!(
                "WITH granted AS (
                   INSERT INTO {s}.leases AS l
                          (namespace, key, owner, fence, attempt, expires_at, done, metadata, updated_at)
                   VALUES ($1, $2, $3, nextval('{s}.fence_seq'), $4,
                           clock_timestamp() + $5::bigint * interval '1 millisecond',
                           false, COALESCE($6::text::jsonb, '{{}}'::jsonb), clock_timestamp())
                   ON CONFLICT (namespace, key) DO UPDATE
                      SET owner = excluded.owner, fence = excluded.fence, attempt = excluded.attempt,
                          expires_at = excluded.expires_at, metadata = l.metadata || excluded.metadata,
                          updated_at = excluded.updated_at
                    WHERE NOT l.done
                      AND (l.expires_at IS NULL OR l.expires_at <= clock_timestamp()
                           OR l.attempt = excluded.attempt)
                   RETURNING l.fence, l.expires_at, l.metadata)
                 SELECT true AS granted, fence, expires_at, metadata::text AS metadata,
                        false AS done, NULL::bigint AS remaining_ms
                   FROM granted
                 UNION ALL
                 SELECT false, l.fence, l.expires_at, NULL, l.done,
                        ceil(extract(epoch FROM l.expires_at - clock_timestamp()) * 1000)::bigint
                   FROM {s}.leases l
                  WHERE l.namespace = $1 AND l.key = $2 AND NOT EXISTS (SELECT 1 FROM granted)"
            ),
            renew: format!(
                "UPDATE {s}.leases
                    SET expires_at = clock_timestamp() + $5::bigint * interval '1 millisecond',
                        metadata = metadata || COALESCE($6::text::jsonb, '{{}}'::jsonb),
                        updated_at = clock_timestamp()
                  WHERE namespace = $1 AND key = $2 AND owner = $3 AND fence = $4
                    AND NOT done AND expires_at > clock_timestamp()
                 RETURNING expires_at, metadata::text"
            ),
            // The keepalive tick: every held lease of a client in one statement (G3).
            renew_batch: format!(
                "UPDATE {s}.leases AS l
                    SET expires_at = clock_timestamp() + b.ttl_ms * interval '1 millisecond',
                        updated_at = clock_timestamp()
                   FROM unnest($3::text[], $4::bigint[], $5::bigint[]) AS b(key, fence, ttl_ms)
                  WHERE l.namespace = $1 AND l.owner = $2 AND l.key = b.key AND l.fence = b.fence
                    AND NOT l.done AND l.expires_at > clock_timestamp()
                 RETURNING l.fence, l.expires_at"
            ),
            release: format!(
                "WITH released AS (
                   UPDATE {s}.leases
                      SET owner = NULL, expires_at = NULL, attempt = NULL, updated_at = clock_timestamp()
                    WHERE namespace = $1 AND key = $2 AND owner = $3 AND fence = $4
                      AND NOT done AND expires_at > clock_timestamp()
                   RETURNING key)
                 SELECT count(pg_notify($5, json_build_array($1::text, key)::text)) FROM released"
            ),
            // The finisher stays recorded as owner; expires_at NULL marks it as no longer live.
            done: format!(
                "WITH finished AS (
                   UPDATE {s}.leases
                      SET done = true, expires_at = NULL, attempt = NULL,
                          metadata = metadata || COALESCE($5::text::jsonb, '{{}}'::jsonb),
                          updated_at = clock_timestamp()
                    WHERE namespace = $1 AND key = $2 AND owner = $3 AND fence = $4
                      AND NOT done AND expires_at > clock_timestamp()
                   RETURNING key, metadata)
                 SELECT f.metadata::text, count(pg_notify($6, json_build_array($1::text, f.key)::text))
                   FROM finished f GROUP BY f.metadata::text"
            ),
            // A live lease is never reset: its holder would keep believing it holds the key.
            reset: format!(
                "WITH removed AS (
                   DELETE FROM {s}.leases
                    WHERE namespace = $1 AND key = $2
                      AND (done OR expires_at IS NULL OR expires_at <= clock_timestamp())
                   RETURNING key)
                 SELECT EXISTS (SELECT 1 FROM removed),
                        EXISTS (SELECT 1 FROM {s}.leases WHERE namespace = $1 AND key = $2)"
            ),
            // starts_with compares literally: `%` and `_` in a prefix are ordinary characters.
            list: format!(
                "SELECT key, state, CASE WHEN state = 'free' THEN NULL ELSE owner END, fence,
                        CASE WHEN state = 'held' THEN expires_at END, metadata::text, updated_at
                   FROM (SELECT *, CASE WHEN done THEN 'done'
                                        WHEN expires_at > clock_timestamp() THEN 'held'
                                        ELSE 'free' END AS state
                           FROM {s}.leases
                          WHERE namespace = $1
                            AND ($2::text IS NULL OR starts_with(key, $2))
                            AND ($4::text IS NULL OR metadata @> $4::text::jsonb)
                            AND ($5::bigint IS NULL OR fence < $5)) k
                  WHERE $3::text IS NULL OR state = $3
                  ORDER BY fence DESC
                  LIMIT $6"
            ),
            notify: "SELECT pg_notify($1, $2)",
        }
    }
}

/// The versioned migrations; index + 1 is the version. Never edit one that has shipped: add a
/// new one.
pub(crate) fn migrations(schema: &str) -> Vec<String> {
    let s = quote_ident(schema);
    vec![format!(
        "CREATE SEQUENCE {s}.fence_seq AS bigint MINVALUE 1 NO CYCLE;
         CREATE TABLE {s}.leases (
             namespace  text COLLATE \"C\" NOT NULL,
             key        text COLLATE \"C\" NOT NULL,
             owner      text,
             fence      bigint NOT NULL,
             attempt    bigint,
             expires_at timestamptz,
             done       boolean NOT NULL DEFAULT false,
             metadata   jsonb NOT NULL DEFAULT '{{}}'::jsonb,
             updated_at timestamptz NOT NULL,
             PRIMARY KEY (namespace, key)
         );
         CREATE INDEX leases_newest_first ON {s}.leases (namespace, fence DESC);"
    )]
}

/// The version this library needs.
pub(crate) fn current_version() -> i32 {
    i32::try_from(migrations("x").len()).expect("few migrations")
}

/// Creates the schema and its version table (idempotent).
pub(crate) fn bootstrap(schema: &str) -> String {
    let s = quote_ident(schema);
    format!(
        "CREATE SCHEMA IF NOT EXISTS {s};
         CREATE TABLE IF NOT EXISTS {s}.schema_migrations (
             version    integer PRIMARY KEY,
             applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
         );"
    )
}

/// The advisory lock key that serializes migrations of one schema across processes.
pub(crate) fn migration_lock_sql() -> &'static str {
    "SELECT pg_advisory_xact_lock(hashtextextended('accord.migrate.' || $1, 0))"
}

/// The whole migration as one script, for DBAs who apply it by hand (`--print-sql`).
pub fn migration_script(schema: &str) -> String {
    let s = quote_ident(schema);
    let mut out = String::from("BEGIN;\n");
    out.push_str(&format!(
        "SELECT pg_advisory_xact_lock(hashtextextended('accord.migrate.' || {}, 0));\n",
        quote_literal(schema)
    ));
    out.push_str(&bootstrap(schema));
    out.push('\n');
    for (i, m) in migrations(schema).iter().enumerate() {
        let v = i + 1;
        out.push_str(&format!(
            "-- version {v}\nDO $accord$ BEGIN\n  IF NOT EXISTS (SELECT 1 FROM {s}.schema_migrations WHERE version = {v}) THEN\n"
        ));
        for stmt in m.split(";\n") {
            let stmt = stmt.trim().trim_end_matches(';');
            if !stmt.is_empty() {
                out.push_str(&format!("    EXECUTE {};\n", quote_literal(stmt)));
            }
        }
        out.push_str(&format!(
            "    INSERT INTO {s}.schema_migrations (version) VALUES ({v});\n  END IF;\nEND $accord$;\n"
        ));
    }
    out.push_str("COMMIT;\n");
    out
}

fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_quoted() {
        assert_eq!(quote_ident("accord"), "\"accord\"");
        assert_eq!(quote_ident("a\"; DROP"), "\"a\"\"; DROP\"");
    }

    #[test]
    fn wakeup_channels_fit_in_an_identifier() {
        assert_eq!(wakeup_channel("accord"), "accord_wakeup_accord");
        let long = wakeup_channel(&"s".repeat(63));
        assert!(long.len() <= 63);
        assert_ne!(long, wakeup_channel(&"t".repeat(63)));
    }
}
