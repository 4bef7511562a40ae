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
    pub release_batch: String,
    pub done_batch: String,
    pub reset: String,
    pub list: String,
    pub notify: &'static str,
    pub offer: String,
    pub claim: String,
    pub counts: String,
}

impl Sql {
    pub fn new(schema: &str) -> Sql {
        let s = quote_ident(schema);
        // The sequence's name is text here (a literal cast to regclass), so the quoted
        // identifier is quoted once more, as a literal.
        let seq = quote_literal(&format!("{s}.fence_seq"));
        Sql {
            // Grant when the row is free, expired, or already granted to this very attempt (a
            // retry after a lost answer); otherwise report the row as this statement saw it.
            //
            // Two rules shape it. (1) A refusal writes nothing: `seen` reads the row without
            // locking it, and the UPDATE only locks a row whose visible version it may take, so
            // refusing a held or done key takes no row lock, no sequence value and no WAL.
            // (2) The fence and the expiry are computed after the row is locked: they are SET
            // expressions of a plain UPDATE, which PostgreSQL evaluates again on the newest
            // version of the row when it had to wait for a concurrent writer (READ COMMITTED's
            // recheck). INSERT ... ON CONFLICT DO UPDATE would not do: its `excluded` values
            // are computed before the row lock is waited for, so a grant could commit after a
            // later one with a smaller fence. A key never seen is inserted; when a concurrent
            // first grant wins that race, no row comes back and the caller retries at once.
            acquire: format!(
                "WITH seen AS MATERIALIZED (
                   SELECT l.done, l.expires_at FROM {s}.leases l
                    WHERE l.namespace = $1 AND l.key = $2),
                 taken AS (
                   UPDATE {s}.leases AS l
                      SET owner = $3, fence = nextval({seq}::regclass), attempt = $4,
                          expires_at = clock_timestamp() + $5::bigint * interval '1 millisecond',
                          metadata = l.metadata || COALESCE($6::text::jsonb, '{{}}'::jsonb),
                          updated_at = clock_timestamp()
                    WHERE l.namespace = $1 AND l.key = $2 AND NOT l.done
                      AND (l.expires_at IS NULL OR l.expires_at <= clock_timestamp()
                           OR l.attempt = $4)
                   RETURNING l.fence, l.expires_at, l.metadata),
                 created AS (
                   INSERT INTO {s}.leases
                          (namespace, key, owner, fence, attempt, expires_at, done, metadata, updated_at)
                   SELECT $1, $2, $3, nextval({seq}::regclass), $4,
                          clock_timestamp() + $5::bigint * interval '1 millisecond',
                          false, COALESCE($6::text::jsonb, '{{}}'::jsonb), clock_timestamp()
                    WHERE NOT EXISTS (SELECT 1 FROM seen)
                   ON CONFLICT (namespace, key) DO NOTHING
                   RETURNING fence, expires_at, metadata),
                 granted AS (SELECT * FROM taken UNION ALL SELECT * FROM created)
                 SELECT true AS granted, fence, expires_at, metadata::text AS metadata,
                        false AS done, NULL::bigint AS remaining_ms
                   FROM granted
                 UNION ALL
                 SELECT false, NULL, s.expires_at, NULL, s.done,
                        ceil(extract(epoch FROM s.expires_at - clock_timestamp()) * 1000)::bigint
                   FROM seen s
                  WHERE NOT EXISTS (SELECT 1 FROM granted)"
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
            // A retry whose first try committed (its answer lost with the connection) finds
            // the row already released by this very grant (fences are unique per grant): that
            // counts as released too, instead of as a lost lease.
            release: format!(
                "WITH released AS (
                   UPDATE {s}.leases
                      SET owner = NULL, expires_at = NULL, attempt = NULL, updated_at = clock_timestamp()
                    WHERE namespace = $1 AND key = $2 AND owner = $3 AND fence = $4
                      AND NOT done AND expires_at > clock_timestamp()
                   RETURNING key)
                 SELECT (SELECT count(pg_notify($5, json_build_array($1::text, key)::text))
                           FROM released)
                      + (SELECT count(*) FROM {s}.leases
                          WHERE namespace = $1 AND key = $2 AND fence = $4
                            AND owner IS NULL AND expires_at IS NULL AND NOT done)"
            ),
            // The finisher stays recorded as owner; expires_at NULL marks it as no longer live.
            // As for release, a retry that finds the key done by this very grant succeeds.
            // Without metadata to merge, the stored metadata is kept as it is, not rewritten.
            // A key of a work pool wakes nobody when done (`rules::done_wakes`): claimers wait
            // for free keys, and a NOTIFY in a committing transaction takes a server-wide lock
            // that serialises commits (measured: 1.3x the time of a done without it, fsync on).
            done: format!(
                "WITH finished AS (
                   UPDATE {s}.leases
                      SET done = true, expires_at = NULL, attempt = NULL,
                          metadata = CASE WHEN $5::text IS NULL THEN metadata
                                          ELSE metadata || $5::text::jsonb END,
                          updated_at = clock_timestamp()
                    WHERE namespace = $1 AND key = $2 AND owner = $3 AND fence = $4
                      AND NOT done AND expires_at > clock_timestamp()
                   RETURNING key, metadata, pool),
                 woken AS (
                   SELECT count(pg_notify($6, json_build_array($1::text, key)::text)) AS n
                     FROM finished WHERE pool IS NULL)
                 SELECT f.metadata::text, (SELECT n FROM woken)
                   FROM finished f
                 UNION ALL
                 SELECT l.metadata::text, 0 FROM {s}.leases l
                  WHERE l.namespace = $1 AND l.key = $2 AND l.owner = $3 AND l.fence = $4 AND l.done
                    AND NOT EXISTS (SELECT 1 FROM finished)"
            ),
            // Group commit: the releases of many leases of one owner ($2) in one statement,
            // the same rule as `release` per lease. Answers the fences still recorded: freed
            // now, or (a retry) already freed by this very grant. The second half reads the
            // statement's snapshot, where rows freed now still look held: nothing is counted twice.
            release_batch: format!(
                "WITH b AS (SELECT * FROM unnest($3::text[], $4::bigint[]) AS b(key, fence)),
                 released AS (
                   UPDATE {s}.leases AS l
                      SET owner = NULL, expires_at = NULL, attempt = NULL, updated_at = clock_timestamp()
                     FROM b
                    WHERE l.namespace = $1 AND l.key = b.key AND l.owner = $2 AND l.fence = b.fence
                      AND NOT l.done AND l.expires_at > clock_timestamp()
                   RETURNING l.key, l.fence)
                 SELECT r.fence, pg_notify($5, json_build_array($1::text, r.key)::text)::text
                   FROM released r
                 UNION ALL
                 SELECT l.fence, NULL FROM {s}.leases l JOIN b ON l.key = b.key AND l.fence = b.fence
                  WHERE l.namespace = $1 AND l.owner IS NULL AND l.expires_at IS NULL AND NOT l.done"
            ),
            // Group commit of `done`, the same rule per lease; $5 holds each lease's metadata to
            // merge (NULL: kept as it is). Answers the fences done, now or already by this grant.
            done_batch: format!(
                "WITH b AS (SELECT * FROM unnest($3::text[], $4::bigint[], $5::text[])
                              AS b(key, fence, metadata)),
                 finished AS (
                   UPDATE {s}.leases AS l
                      SET done = true, expires_at = NULL, attempt = NULL,
                          metadata = CASE WHEN b.metadata IS NULL THEN l.metadata
                                          ELSE l.metadata || b.metadata::jsonb END,
                          updated_at = clock_timestamp()
                     FROM b
                    WHERE l.namespace = $1 AND l.key = b.key AND l.owner = $2 AND l.fence = b.fence
                      AND NOT l.done AND l.expires_at > clock_timestamp()
                   RETURNING l.key, l.fence, l.metadata, l.pool),
                 woken AS (
                   SELECT count(pg_notify($6, json_build_array($1::text, key)::text)) AS n
                     FROM finished WHERE pool IS NULL)
                 SELECT f.fence, f.metadata::text, (SELECT n FROM woken)
                   FROM finished f
                 UNION ALL
                 SELECT l.fence, l.metadata::text, 0 FROM {s}.leases l
                   JOIN b ON l.key = b.key AND l.fence = b.fence
                  WHERE l.namespace = $1 AND l.owner = $2 AND l.done"
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
            // Work pools. A key joins the pool `$2` when offered: a new row (free, its fence
            // and offer order one sequence value), or a row that was in no pool (whatever its
            // state). A key already in a pool, held or done, stays as it is, and takes no
            // sequence value, row lock or WAL. One wake-up per offer that changed something.
            offer: format!(
                "WITH k AS (SELECT DISTINCT key FROM unnest($3::text[]) AS u(key)),
                 adopted AS (
                   UPDATE {s}.leases AS l
                      SET pool = $2, offered = nextval({seq}::regclass), updated_at = clock_timestamp()
                     FROM k
                    WHERE l.namespace = $1 AND l.key = k.key AND l.pool IS NULL
                   RETURNING l.key),
                 created AS (
                   INSERT INTO {s}.leases
                          (namespace, key, fence, done, metadata, updated_at, pool, offered)
                   SELECT $1, n.key, n.seq, false, COALESCE($4::text::jsonb, '{{}}'::jsonb),
                          clock_timestamp(), $2, n.seq
                     FROM (SELECT k.key, nextval({seq}::regclass) AS seq FROM k
                            WHERE NOT EXISTS (SELECT 1 FROM {s}.leases l
                                               WHERE l.namespace = $1 AND l.key = k.key)) n
                   ON CONFLICT (namespace, key) DO NOTHING
                   RETURNING key),
                 changed AS (SELECT (SELECT count(*) FROM adopted) + (SELECT count(*) FROM created) AS n)
                 SELECT c.n, (SELECT count(pg_notify($5, json_build_array($1::text, $2::text)::text))
                                WHERE c.n > 0)
                   FROM changed c"
            ),
            // Up to $3 keys of pool $2 that are free (or granted to this very claim call, a
            // retry after a lost answer), oldest offer first, in one statement. SKIP LOCKED:
            // a row another claimer is granting is passed over, never waited for. The fence and
            // expiry are SET expressions, computed once the row is locked (as in acquire). When
            // nothing is granted, one row tells how long until the soonest holder expires.
            // $8, when set, bounds the keys from above (a semaphore's permits below its limit).
            claim: format!(
                "WITH picked AS (
                   SELECT l.key FROM {s}.leases l
                    WHERE l.namespace = $1 AND l.pool = $2 AND NOT l.done
                      AND (l.expires_at IS NULL OR l.expires_at <= clock_timestamp()
                           OR l.attempt = $4)
                      AND ($8::text IS NULL OR l.key < $8::text)
                    ORDER BY l.offered
                    LIMIT $3
                    FOR UPDATE SKIP LOCKED),
                 taken AS (
                   UPDATE {s}.leases AS l
                      SET owner = $5, fence = nextval({seq}::regclass), attempt = $4,
                          expires_at = clock_timestamp() + $6::bigint * interval '1 millisecond',
                          metadata = CASE WHEN $7::text IS NULL THEN l.metadata
                                          ELSE l.metadata || $7::text::jsonb END,
                          updated_at = clock_timestamp()
                     FROM picked
                    WHERE l.namespace = $1 AND l.key = picked.key
                   RETURNING l.key, l.fence, l.expires_at, l.metadata)
                 SELECT key, fence, expires_at, metadata::text, NULL::bigint AS remaining_ms
                   FROM taken
                 UNION ALL
                 SELECT NULL, NULL, NULL, NULL,
                        ceil(extract(epoch FROM min(l.expires_at) - clock_timestamp()) * 1000)::bigint
                   FROM {s}.leases l
                  WHERE NOT EXISTS (SELECT 1 FROM taken)
                    AND l.namespace = $1 AND l.pool = $2 AND NOT l.done
                    AND l.expires_at > clock_timestamp()
                    AND ($8::text IS NULL OR l.key < $8::text)"
            ),
            // The three states of docs/semantics.md, over the keys of one pool.
            counts: format!(
                "SELECT count(*) FILTER (WHERE NOT done
                                           AND (expires_at IS NULL OR expires_at <= clock_timestamp())),
                        count(*) FILTER (WHERE NOT done AND expires_at > clock_timestamp()),
                        count(*) FILTER (WHERE done)
                   FROM {s}.leases
                  WHERE namespace = $1 AND pool = $2"
            ),
        }
    }
}

/// The versioned migrations; index + 1 is the version. Never edit one that has shipped: add a
/// new one.
pub(crate) fn migrations(schema: &str) -> Vec<Vec<String>> {
    let s = quote_ident(schema);
    // One statement each: the printed script runs them one by one (EXECUTE), and a schema name
    // may contain anything, `;` and line breaks included, so they are never split from a text.
    vec![
        vec![
            format!("CREATE SEQUENCE {s}.fence_seq AS bigint MINVALUE 1 NO CYCLE"),
            format!(
                "CREATE TABLE {s}.leases (
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
             )"
            ),
            format!("CREATE INDEX leases_newest_first ON {s}.leases (namespace, fence DESC)"),
        ],
        // Version 2: work pools. `pool` is the prefix a key was offered under; `offered` orders
        // claims, oldest offer first. One index serves claims (its `done = false` part, in offer
        // order, so a pool's finished work costs its claims nothing) and counts (the whole
        // pool): each claim and done writes every index, so there is only one more.
        vec![
            format!("ALTER TABLE {s}.leases ADD COLUMN pool text COLLATE \"C\""),
            format!("ALTER TABLE {s}.leases ADD COLUMN offered bigint"),
            format!(
                "CREATE INDEX leases_pool ON {s}.leases (namespace, pool, done, offered)
                  WHERE pool IS NOT NULL"
            ),
        ],
    ]
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
        let mut body = format!(
            "BEGIN\n  IF NOT EXISTS (SELECT 1 FROM {s}.schema_migrations WHERE version = {v}) THEN\n"
        );
        for stmt in m {
            body.push_str(&format!("    EXECUTE {};\n", quote_literal(stmt)));
        }
        body.push_str(&format!(
            "    INSERT INTO {s}.schema_migrations (version) VALUES ({v});\n  END IF;\nEND"
        ));
        out.push_str(&format!("-- version {v}\nDO {};\n", dollar_quote(&body)));
    }
    out.push_str("COMMIT;\n");
    out
}

/// Quotes text as a string literal, whatever `standard_conforming_strings` says: `'` doubled,
/// and with a backslash in the text, an `E'...'` literal with backslashes doubled (what
/// PostgreSQL's own `quote_literal` does).
pub(crate) fn quote_literal(text: &str) -> String {
    let quoted = text.replace('\'', "''");
    if text.contains('\\') {
        format!("E'{}'", quoted.replace('\\', "\\\\"))
    } else {
        format!("'{quoted}'")
    }
}

/// Dollar-quotes `body` with a tag it does not contain, so that no text inside (a schema
/// named `$accord$`, say) can end the quoted block early.
pub(crate) fn dollar_quote(body: &str) -> String {
    let mut n = 0u32;
    loop {
        let tag = if n == 0 {
            "$accord$".to_string()
        } else {
            format!("$accord_{n}$")
        };
        // The closing tag must be found first right after the body: a body ending in
        // `$accord` would otherwise close early with the tag's own first `$`.
        let closed = format!("{body}{tag}");
        if closed.find(&tag) == Some(body.len()) {
            return format!("{tag}{closed}");
        }
        n += 1;
    }
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
    fn literals_are_quoted_whatever_the_server_setting() {
        assert_eq!(quote_literal("a"), "'a'");
        assert_eq!(quote_literal("it's"), "'it''s'");
        assert_eq!(quote_literal("a\\'b"), "E'a\\\\''b'");
    }

    #[test]
    fn dollar_quotes_pick_a_tag_the_body_lacks() {
        assert_eq!(dollar_quote("x"), "$accord$x$accord$");
        assert_eq!(
            dollar_quote("a $accord$ b $accord_1$"),
            "$accord_2$a $accord$ b $accord_1$$accord_2$"
        );
        assert_eq!(dollar_quote("x $accord"), "$accord_1$x $accord$accord_1$");
    }

    #[test]
    fn wakeup_channels_fit_in_an_identifier() {
        assert_eq!(wakeup_channel("accord"), "accord_wakeup_accord");
        let long = wakeup_channel(&"s".repeat(63));
        assert!(long.len() <= 63);
        assert_ne!(long, wakeup_channel(&"t".repeat(63)));
    }
}
