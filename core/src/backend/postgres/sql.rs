//! Every statement accord sends to PostgreSQL. Each operation is one statement (one round trip
//! once prepared); every value is a bind parameter; only the schema, a quoted identifier, is
//! spliced in. Time is always `clock_timestamp()`: the coordinator's clock, never the client's.

use super::secret::wake_tag_sql;
use crate::rules;

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

/// The payload of a wake-up for key `key` (an SQL expression) of namespace `$1`, in the shape
/// `backend::parse_wakeup` reads: the key's tag (never its name: any role may listen), the
/// tickets to wake, `first` and `last` (`last` null: no bound): the head of the line, and when
/// it is shared, every ticket before the next exclusive one; and the tag of the key's pool, if
/// it was offered to one (a claimer of it may look). With nobody in line, no tickets (every
/// waiter of the key may look: a waiter whose ticket this statement could not see yet).
/// `except` is a ticket that the same statement removes (its snapshot still shows it).
/// Mirrors `rules::wake_range`.
fn wake_payload(s: &str, key: &str, except: &str) -> String {
    format!(
        "(SELECT json_build_array({tag},
           h.ticket,
           CASE WHEN h.ticket IS NULL OR NOT h.shared THEN h.ticket
                ELSE (SELECT min(n.ticket) - 1 FROM {s}.tickets n
                       WHERE n.namespace = $1 AND n.key = {key} AND NOT n.granted
                         AND NOT n.shared AND n.expires_at > clock_timestamp()
                         AND n.ticket > h.ticket
                         AND n.ticket IS DISTINCT FROM {except}::bigint) END,
           (SELECT {pool} FROM {s}.leases p
             WHERE p.namespace = $1 AND p.key = {key} AND p.pool IS NOT NULL))::text
           FROM (SELECT NULL) one
           LEFT JOIN LATERAL (
             SELECT t.ticket, t.shared FROM {s}.tickets t
              WHERE t.namespace = $1 AND t.key = {key} AND NOT t.granted
                AND t.expires_at > clock_timestamp()
                AND t.ticket IS DISTINCT FROM {except}::bigint
              ORDER BY t.ticket LIMIT 1) h ON true)",
        tag = wake_tag_sql(s, key),
        pool = wake_tag_sql(s, "p.pool"),
    )
}

/// The payload of a wake-up that names no tickets, for the key (or pool) `key` of namespace
/// `$1` (see [`wake_payload`]).
fn wake_all_payload(s: &str, key: &str) -> String {
    format!(
        "json_build_array({tag}, NULL::bigint, NULL::bigint, NULL::text)::text",
        tag = wake_tag_sql(s, key)
    )
}

/// The two CTEs of an exclusive grant, `taken` (the key's row, when free or expired with no
/// live shared holder and no one in `blockers` ahead, or when this attempt's grant is still
/// live: a retry whose answer was lost; once that grant expired, the retry meets every
/// condition, since shared holders may have come in and leave `attempt` as it was) and `created` (a
/// key never seen): the same rule in `acquire` and `acquire_queued` (`rules::grantable_in_turn`).
/// `guard` is a condition (ending in AND) both apply first.
fn exclusive_grant(
    s: &str,
    seq: &str,
    taken: &str,
    created: &str,
    blockers: &str,
    guard: &str,
) -> String {
    format!(
        "{taken} AS (
                   UPDATE {s}.leases AS l
                      SET owner = $3, fence = nextval({seq}::regclass), attempt = $4,
                          expires_at = clock_timestamp() + $5::bigint * interval '1 millisecond',
                          metadata = l.metadata || COALESCE($6::text::jsonb, '{{}}'::jsonb),
                          updated_at = clock_timestamp(), granted_at = clock_timestamp()
                    WHERE {guard}l.namespace = $1 AND l.key = $2 AND NOT l.done
                      AND ((l.attempt = $4 AND l.expires_at > clock_timestamp())
                           OR ((l.expires_at IS NULL OR l.expires_at <= clock_timestamp())
                               AND (l.shared_until IS NULL OR l.shared_until <= clock_timestamp())
                               AND NOT EXISTS (SELECT 1 FROM {blockers})))
                   RETURNING l.fence, l.expires_at, l.metadata),
                 {created} AS (
                   INSERT INTO {s}.leases
                          (namespace, key, owner, fence, attempt, expires_at, done, metadata,
                           updated_at, granted_at)
                   SELECT $1, $2, $3, nextval({seq}::regclass), $4,
                          clock_timestamp() + $5::bigint * interval '1 millisecond',
                          false, COALESCE($6::text::jsonb, '{{}}'::jsonb), clock_timestamp(),
                          clock_timestamp()
                    WHERE {guard}NOT EXISTS (SELECT 1 FROM seen)
                      AND NOT EXISTS (SELECT 1 FROM {blockers})
                   ON CONFLICT (namespace, key) DO NOTHING
                   RETURNING fence, expires_at, metadata),"
    )
}

pub(crate) struct Sql {
    pub acquire: String,
    pub acquire_batch: String,
    pub acquire_queued: String,
    pub leave_queue: String,
    pub release_shared: String,
    pub holder: String,
    pub renew: String,
    pub renew_batch: String,
    pub release: String,
    pub done: String,
    pub release_batch: String,
    pub done_batch: String,
    pub reset: String,
    pub list_keys: String,
    pub list_holders: String,
    pub notify: &'static str,
    pub notify_batch: &'static str,
    pub offer: String,
    pub claim: String,
    pub counts: String,
    pub count_keys: String,
    pub list_waiters: String,
    pub list_streams: String,
    pub sweep: String,
    /// Durable streams' statements (prepared on first use).
    pub streams: super::streams::StreamSql,
}

impl Sql {
    pub fn new(schema: &str) -> Sql {
        let s = quote_ident(schema);
        // The sequence's name is text here (a literal cast to regclass), so the quoted
        // identifier is quoted once more, as a literal.
        let seq = quote_literal(&format!("{s}.fence_seq"));
        Sql {
            // Grant when the row is free, expired, or still granted to this very attempt (a
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
            // (3) Waiting acquires queue (`acquire_queued`): while any live ticket waits, or a
            // shared holder is live (`shared_until`), this statement, which has no ticket,
            // refuses: it would jump the queue. `rules::grantable_in_turn` states the rule.
            acquire: format!(
                "WITH seen AS MATERIALIZED (
                   SELECT l.done, l.expires_at FROM {s}.leases l
                    WHERE l.namespace = $1 AND l.key = $2),
                 queue AS MATERIALIZED (
                   SELECT 1 FROM {s}.tickets t
                    WHERE t.namespace = $1 AND t.key = $2 AND NOT t.granted
                      AND t.expires_at > clock_timestamp()
                    LIMIT 1),
                 {grant}
                 granted AS (SELECT * FROM taken UNION ALL SELECT * FROM created)
                 SELECT true AS granted, fence, expires_at, metadata::text AS metadata,
                        false AS done, NULL::bigint AS remaining_ms
                   FROM granted
                 UNION ALL
                 SELECT false, NULL, s.expires_at, NULL, s.done,
                        ceil(extract(epoch FROM s.expires_at - clock_timestamp()) * 1000)::bigint
                   FROM seen s
                  WHERE NOT EXISTS (SELECT 1 FROM granted)",
                grant = exclusive_grant(&s, &seq, "taken", "created", "queue", ""),
            ),
            // Group commit of `acquire` for distinct keys of one owner ($2): $3-$6 hold each
            // key's name, attempt token, ttl and metadata. The rules are those of `acquire`
            // (a refusal writes nothing; the fence is drawn after the row is locked; waiters
            // in line and live shared holders refuse), with one difference: rows are locked
            // with SKIP LOCKED, so a key whose row another transaction has locked at this
            // instant is refused as held instead of waited for. A round thus never waits on a
            // row lock, and rounds of different clients cannot deadlock. Keys never seen are
            // inserted in key order: two rounds inserting the same new keys wait on each other
            // in one order only. Answers one row per key: the grant, or whether it is done.
            // Every key is looked up by itself (LATERAL), as in `renew_batch`: a plan no
            // statistics can turn into a scan of the table per round.
            acquire_batch: format!(
                "WITH b AS (SELECT * FROM unnest($3::text[], $4::bigint[], $5::bigint[], $6::text[])
                              AS b(key, attempt, ttl, metadata)),
                 seen AS MATERIALIZED (
                   SELECT b.key, x.done FROM b
                    CROSS JOIN LATERAL (
                      SELECT l.done FROM {s}.leases l
                       WHERE l.namespace = $1 AND l.key = b.key OFFSET 0) x),
                 queue AS MATERIALIZED (
                   SELECT b.key FROM b
                    CROSS JOIN LATERAL (
                      SELECT 1 FROM {s}.tickets t
                       WHERE t.namespace = $1 AND t.key = b.key AND NOT t.granted
                         AND t.expires_at > clock_timestamp()
                       LIMIT 1) x),
                 picked AS MATERIALIZED (
                   SELECT x.row_id, b.key, b.attempt, b.ttl, b.metadata FROM b
                    CROSS JOIN LATERAL (
                      SELECT l.ctid AS row_id FROM {s}.leases l
                       WHERE l.namespace = $1 AND l.key = b.key AND NOT l.done
                         AND ((l.attempt = b.attempt AND l.expires_at > clock_timestamp())
                              OR ((l.expires_at IS NULL OR l.expires_at <= clock_timestamp())
                                  AND (l.shared_until IS NULL
                                       OR l.shared_until <= clock_timestamp())
                                  AND NOT EXISTS (SELECT 1 FROM queue q WHERE q.key = l.key)))
                         FOR UPDATE OF l SKIP LOCKED) x),
                 taken AS (
                   UPDATE {s}.leases AS l
                      SET owner = $2, fence = nextval({seq}::regclass), attempt = p.attempt,
                          expires_at = clock_timestamp() + p.ttl * interval '1 millisecond',
                          metadata = l.metadata || COALESCE(p.metadata::jsonb, '{{}}'::jsonb),
                          updated_at = clock_timestamp(), granted_at = clock_timestamp()
                     FROM picked p
                    WHERE l.ctid = p.row_id
                   RETURNING l.key, l.fence, l.expires_at, l.metadata),
                 created AS (
                   INSERT INTO {s}.leases
                          (namespace, key, owner, fence, attempt, expires_at, done, metadata,
                           updated_at, granted_at)
                   SELECT $1, b.key, $2, nextval({seq}::regclass), b.attempt,
                          clock_timestamp() + b.ttl * interval '1 millisecond',
                          false, COALESCE(b.metadata::jsonb, '{{}}'::jsonb), clock_timestamp(),
                          clock_timestamp()
                     FROM b
                    WHERE NOT EXISTS (SELECT 1 FROM seen WHERE seen.key = b.key)
                      AND NOT EXISTS (SELECT 1 FROM queue q WHERE q.key = b.key)
                    ORDER BY b.key
                   ON CONFLICT (namespace, key) DO NOTHING
                   RETURNING key, fence, expires_at, metadata),
                 granted AS (SELECT * FROM taken UNION ALL SELECT * FROM created)
                 SELECT b.key, g.fence, g.expires_at, g.metadata::text, COALESCE(s.done, false)
                   FROM b LEFT JOIN granted g ON g.key = b.key LEFT JOIN seen s ON s.key = b.key"
            ),
            // An acquire that waits in line (fair waiting), or any shared acquire: $7 shared,
            // $8 the caller's ticket from its previous try (NULL: none yet, or a retry whose
            // first try's answer was lost: the ticket that try took, found by its attempt
            // token, is the caller's), $9 whether to queue when not granted. The rule is `rules::grantable_in_turn`: tickets `ahead`
            // are the live ones smaller than the caller's (all of them without a live ticket:
            // it is last in line); a shared acquire is only held back by exclusive ones.
            //
            // Granted exclusive: the key's row takes the grant, as in `acquire`, and the
            // ticket goes. Granted shared: the key's row counts one more shared holder and
            // carries their latest expiry (`shared_until`), which an exclusive grant checks on
            // the row itself, so that the row lock orders shared and exclusive grants; the
            // holder is a granted ticket row, fenced and kept alive by the keepalive. Not
            // granted: the ticket's expiry is pushed back (a waiter renews its place each try;
            // one that dies stops, and after its ttl the next in line goes ahead), or a new
            // ticket is taken; the answer says how long until the soonest blocker may end.
            acquire_queued: format!(
                "WITH seen AS MATERIALIZED (
                   SELECT l.done, l.expires_at, l.shared_until FROM {s}.leases l
                    WHERE l.namespace = $1 AND l.key = $2),
                 mine AS MATERIALIZED (
                   SELECT t.ticket FROM {s}.tickets t
                    WHERE t.namespace = $1 AND t.key = $2 AND t.owner = $3
                      AND (t.ticket = $8 OR ($8 IS NULL AND t.attempt = $4))
                      AND NOT t.granted AND t.expires_at > clock_timestamp()
                    ORDER BY t.ticket LIMIT 1),
                 ahead AS MATERIALIZED (
                   SELECT t.ticket, t.expires_at FROM {s}.tickets t
                    WHERE t.namespace = $1 AND t.key = $2 AND NOT t.granted
                      AND t.expires_at > clock_timestamp() AND (NOT $7 OR NOT t.shared)
                      AND t.ticket < COALESCE((SELECT ticket FROM mine), 9223372036854775807)),
                 again AS MATERIALIZED (
                   SELECT t.fence, t.expires_at, t.metadata FROM {s}.tickets t
                    WHERE $7 AND t.namespace = $1 AND t.key = $2 AND t.owner = $3
                      AND t.attempt = $4 AND t.granted AND t.expires_at > clock_timestamp()),
                 -- The key's dead tickets go (waiters and shared holders that stopped renewing):
                 -- never the caller's own, which `kept` or `placed` may write.
                 swept AS (
                   DELETE FROM {s}.tickets t
                    WHERE t.namespace = $1 AND t.key = $2
                      AND t.expires_at <= clock_timestamp()
                      AND NOT (t.owner = $3 AND t.attempt = $4)
                      AND t.ticket IS DISTINCT FROM $8),
                 {grant}
                 s_taken AS (
                   UPDATE {s}.leases AS l
                      SET shared_holders = CASE WHEN l.shared_until > clock_timestamp()
                                                THEN l.shared_holders + 1 ELSE 1 END,
                          shared_until = GREATEST(l.shared_until,
                              clock_timestamp() + $5::bigint * interval '1 millisecond'),
                          updated_at = clock_timestamp()
                    WHERE $7 AND l.namespace = $1 AND l.key = $2 AND NOT l.done
                      AND (l.expires_at IS NULL OR l.expires_at <= clock_timestamp())
                      AND NOT EXISTS (SELECT 1 FROM ahead) AND NOT EXISTS (SELECT 1 FROM again)
                   RETURNING 1),
                 s_created AS (
                   INSERT INTO {s}.leases
                          (namespace, key, fence, done, metadata, updated_at, shared_holders,
                           shared_until)
                   SELECT $1, $2, nextval({seq}::regclass), false, '{{}}'::jsonb,
                          clock_timestamp(), 1,
                          clock_timestamp() + $5::bigint * interval '1 millisecond'
                    WHERE $7 AND NOT EXISTS (SELECT 1 FROM seen)
                      AND NOT EXISTS (SELECT 1 FROM ahead)
                   ON CONFLICT (namespace, key) DO NOTHING
                   RETURNING 1),
                 s_holder AS (
                   INSERT INTO {s}.tickets
                          (namespace, key, ticket, owner, shared, attempt, granted, fence,
                           expires_at, metadata, updated_at, granted_at)
                   SELECT $1, $2, f.v, $3, true, $4, true, f.v,
                          clock_timestamp() + $5::bigint * interval '1 millisecond',
                          COALESCE($6::text::jsonb, '{{}}'::jsonb), clock_timestamp(),
                          clock_timestamp()
                     FROM (SELECT nextval({seq}::regclass) AS v) f
                    WHERE EXISTS (SELECT 1 FROM s_taken) OR EXISTS (SELECT 1 FROM s_created)
                   RETURNING fence, expires_at, metadata),
                 granted AS (
                   SELECT * FROM x_taken UNION ALL SELECT * FROM x_created
                   UNION ALL SELECT * FROM s_holder UNION ALL SELECT * FROM again),
                 placed AS (
                   DELETE FROM {s}.tickets t
                    WHERE t.namespace = $1 AND t.key = $2 AND t.ticket = (SELECT ticket FROM mine)
                      AND EXISTS (SELECT 1 FROM granted)
                   RETURNING t.ticket),
                 kept AS (
                   UPDATE {s}.tickets t
                      SET expires_at = clock_timestamp() + $5::bigint * interval '1 millisecond',
                          updated_at = clock_timestamp()
                    WHERE t.namespace = $1 AND t.key = $2 AND t.ticket = (SELECT ticket FROM mine)
                      AND NOT EXISTS (SELECT 1 FROM granted)
                   RETURNING t.ticket),
                 queued AS (
                   INSERT INTO {s}.tickets
                          (namespace, key, ticket, owner, shared, attempt, granted, expires_at,
                           metadata, updated_at)
                   SELECT $1, $2, nextval({seq}::regclass), $3, $7, $4, false,
                          clock_timestamp() + $5::bigint * interval '1 millisecond',
                          '{{}}'::jsonb, clock_timestamp()
                    WHERE $9 AND NOT EXISTS (SELECT 1 FROM mine)
                      AND NOT EXISTS (SELECT 1 FROM granted)
                      AND NOT COALESCE((SELECT done FROM seen), false)
                   RETURNING ticket)
                 SELECT true AS granted, fence, expires_at, metadata::text AS metadata,
                        false AS done, NULL::bigint AS remaining_ms, NULL::bigint AS ticket
                   FROM granted
                 UNION ALL
                 SELECT false, NULL, NULL, NULL, COALESCE((SELECT done FROM seen), false),
                        ceil(extract(epoch FROM LEAST(
                            (SELECT expires_at FROM seen WHERE expires_at > clock_timestamp()),
                            (SELECT shared_until FROM seen
                              WHERE NOT $7 AND shared_until > clock_timestamp()),
                            (SELECT min(expires_at) FROM ahead)) - clock_timestamp()) * 1000)::bigint,
                        COALESCE((SELECT ticket FROM kept), (SELECT ticket FROM queued))
                  WHERE NOT EXISTS (SELECT 1 FROM granted)",
                grant = exclusive_grant(&s, &seq, "x_taken", "x_created", "ahead", "NOT $7 AND "),
            ),
            // A waiting acquire that gives up (timeout, cancel, its caller gone) leaves the
            // line; when it was at the head of the line of a key no exclusive holder holds, the
            // new head is woken (its turn may have come). With $6 (passing the turn on), the
            // head after $4 is woken whether or not $4 was still in line: a release that named
            // $4 while it was leaving woke nobody (its snapshot still showed $4), and the client
            // that left $4 passes the wake-up on when it hears it.
            leave_queue: format!(
                "WITH gone AS (
                   DELETE FROM {s}.tickets t
                    WHERE t.namespace = $1 AND t.key = $2 AND t.ticket = $4 AND t.owner = $3
                      AND NOT t.granted
                   RETURNING t.ticket),
                 turn AS (
                   SELECT 1
                    WHERE (EXISTS (SELECT 1 FROM gone) OR $6)
                      AND NOT EXISTS (
                        SELECT 1 FROM {s}.leases l
                         WHERE l.namespace = $1 AND l.key = $2
                           AND l.expires_at > clock_timestamp())
                      AND ($6 OR NOT EXISTS (
                        SELECT 1 FROM {s}.tickets t
                         WHERE t.namespace = $1 AND t.key = $2 AND NOT t.granted
                           AND t.expires_at > clock_timestamp() AND t.ticket < $4)))
                 SELECT count(pg_notify($5, {wake_key2})) FROM turn",
                wake_key2 = wake_payload(&s, "$2", "$4"),
            ),
            // A shared holder leaves: its ticket goes and the key counts one holder fewer
            // (`rules::shared_released`); the last one out wakes the head of the line. As for
            // `release`, answers whether the grant was still recorded.
            release_shared: format!(
                "WITH gone AS (
                   DELETE FROM {s}.tickets t
                    WHERE t.namespace = $1 AND t.key = $2 AND t.owner = $3 AND t.fence = $4
                      AND t.granted AND t.expires_at > clock_timestamp()
                   RETURNING t.key),
                 counted AS (
                   UPDATE {s}.leases AS l
                      SET shared_holders = GREATEST(l.shared_holders - 1, 0),
                          shared_until = CASE WHEN l.shared_holders <= 1 THEN NULL
                                              ELSE l.shared_until END,
                          updated_at = clock_timestamp()
                    WHERE l.namespace = $1 AND l.key = $2 AND EXISTS (SELECT 1 FROM gone)
                   RETURNING l.shared_holders)
                 SELECT (SELECT count(*) FROM gone),
                        (SELECT count(pg_notify($5, {wake_key2})) FROM counted
                          WHERE shared_holders = 0)",
                wake_key2 = wake_payload(&s, "$2", "NULL"),
            ),
            // The live exclusive holder of one key, by its primary key (an election's leader).
            holder: format!(
                "SELECT owner, fence, expires_at, metadata::text, granted_at FROM {s}.leases
                  WHERE namespace = $1 AND key = $2 AND NOT done
                    AND expires_at > clock_timestamp()"
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
            // Shared holders ($6-$8, usually empty) are granted tickets; their key's row
            // carries their latest expiry, which an exclusive grant checks.
            //
            // Each lease is looked up by its key (LATERAL: one index probe per lease, in the
            // batch's order, a plan the planner cannot reorder) and locked there; the update
            // then finds the locked rows by their ctids, the only condition on the table it
            // updates, so that no statistics can make it look small: it is fetched row by row
            // (TID scans) or, when small next to the batch, read once into a hash join. Written as a plain join, the planner chose
            // by the table's statistics, and when they said this owner holds nothing (a client
            // that started after the last ANALYZE: its owner id is new) it scanned the table
            // and compared every row with every lease of the batch: 10,000 leases took 75 s,
            // and every one of them was lost.
            //
            // The answer is one row of arrays (fences, expiries; then the fences skipped, done
            // and released), not a row per lease: a tick's 10,000 rows each cost the client a
            // message to parse and a row to allocate.
            //
            // SKIP LOCKED: a row another transaction holds locked (an application's
            // `check_fence`, which holds it FOR SHARE until that transaction ends, `fenced.rs`)
            // is passed over, never waited for, so one fenced transaction never stalls the
            // renewal of every other lease of the client. The skipped lease is reported as
            // such and tried again shortly (`keepalive.rs`), within its deadline.
            renew_batch: format!(
                "WITH b AS MATERIALIZED (
                   SELECT * FROM unnest($3::text[], $4::bigint[], $5::bigint[]) AS b(key, fence, ttl_ms)),
                 due AS MATERIALIZED (
                   SELECT mine.row_id, b.fence, b.ttl_ms FROM b
                    CROSS JOIN LATERAL (
                      SELECT r.ctid AS row_id FROM {s}.leases r
                       WHERE r.namespace = $1 AND r.key = b.key AND r.owner = $2
                         AND r.fence = b.fence AND NOT r.done
                         AND r.expires_at > clock_timestamp()
                         FOR UPDATE SKIP LOCKED) mine),
                 x AS (
                   UPDATE {s}.leases AS l
                      SET expires_at = clock_timestamp() + d.ttl_ms * interval '1 millisecond',
                          updated_at = clock_timestamp()
                     FROM due d
                    WHERE l.ctid = d.row_id
                   RETURNING l.fence, l.expires_at),
                 -- Each lease not renewed, as this statement's snapshot shows its row: live
                 -- (its row was locked: skipped, renewed at the next try), or ended by this
                 -- very grant (`rules::done_by`, `rules::released_by`: the holder's own
                 -- transaction finished it, `fenced.rs`). Any other: not recorded.
                 ended AS MATERIALIZED (
                   SELECT b.fence, st.state FROM b
                    CROSS JOIN LATERAL (
                      SELECT CASE WHEN r.done AND r.owner = $2 THEN 'done'
                                  WHEN NOT r.done AND r.owner IS NULL AND r.expires_at IS NULL
                                    THEN 'released'
                                  WHEN NOT r.done AND r.owner = $2
                                       AND r.expires_at > clock_timestamp() THEN 'skipped'
                             END AS state
                        FROM {s}.leases r
                       WHERE r.namespace = $1 AND r.key = b.key AND r.fence = b.fence
                      OFFSET 0) st
                   WHERE st.state IS NOT NULL
                     AND NOT EXISTS (SELECT 1 FROM due d WHERE d.fence = b.fence)),
                 sb AS MATERIALIZED (
                   SELECT * FROM unnest($6::text[], $7::bigint[], $8::bigint[]) AS b(key, fence, ttl_ms)),
                 -- A shared holder's renewal moves its key's row (`shared_until`) too: only
                 -- those whose ticket and key's row are both free of other locks go now.
                 sh_rows AS MATERIALIZED (
                   SELECT t.row_id, sb.key, sb.fence, sb.ttl_ms FROM sb
                    CROSS JOIN LATERAL (
                      SELECT x.ctid AS row_id FROM {s}.tickets x
                       WHERE x.namespace = $1 AND x.key = sb.key AND x.ticket = sb.fence
                         AND x.owner = $2 AND x.fence = sb.fence AND x.granted
                         AND x.expires_at > clock_timestamp()
                         FOR UPDATE SKIP LOCKED) t),
                 sh_keys AS MATERIALIZED (
                   SELECT k.row_id, k.key FROM (SELECT DISTINCT key FROM sh_rows) r
                    CROSS JOIN LATERAL (
                      SELECT l.ctid AS row_id, l.key FROM {s}.leases l
                       WHERE l.namespace = $1 AND l.key = r.key
                         FOR UPDATE SKIP LOCKED) k),
                 sh AS (
                   UPDATE {s}.tickets AS t
                      SET expires_at = clock_timestamp() + r.ttl_ms * interval '1 millisecond',
                          updated_at = clock_timestamp()
                     FROM sh_rows r
                    WHERE t.ctid = r.row_id AND r.key IN (SELECT key FROM sh_keys)
                   RETURNING t.key, t.fence, t.expires_at),
                 extended AS (
                   UPDATE {s}.leases AS l
                      SET shared_until = GREATEST(l.shared_until, m.until)
                     FROM (SELECT key, max(expires_at) AS until FROM sh GROUP BY key) m
                     JOIN sh_keys k ON k.key = m.key
                    WHERE l.ctid = k.row_id),
                 sh_skipped AS (
                   SELECT sb.fence FROM sb
                    WHERE NOT EXISTS (SELECT 1 FROM sh_rows r
                                       WHERE r.fence = sb.fence
                                         AND r.key IN (SELECT key FROM sh_keys))
                      AND EXISTS (SELECT 1 FROM {s}.tickets x
                                   WHERE x.namespace = $1 AND x.key = sb.key
                                     AND x.ticket = sb.fence AND x.owner = $2 AND x.granted
                                     AND x.expires_at > clock_timestamp()))
                 SELECT COALESCE(array_agg(r.fence), '{{}}'), COALESCE(array_agg(r.expires_at), '{{}}'),
                        ARRAY(SELECT fence FROM ended WHERE state = 'skipped'
                              UNION ALL SELECT fence FROM sh_skipped),
                        ARRAY(SELECT fence FROM ended WHERE state = 'done'),
                        ARRAY(SELECT fence FROM ended WHERE state = 'released')
                   FROM (SELECT fence, expires_at FROM x
                         UNION ALL
                         SELECT fence, expires_at FROM sh) r"
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
                 SELECT (SELECT count(pg_notify($5, {wake}))
                           FROM released)
                      + (SELECT count(*) FROM {s}.leases
                          WHERE namespace = $1 AND key = $2 AND fence = $4
                            AND owner IS NULL AND expires_at IS NULL AND NOT done)",
                wake = wake_payload(&s, "released.key", "NULL"),
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
                   SELECT count(pg_notify($6, {wake})) AS n
                     FROM finished WHERE pool IS NULL)
                 SELECT f.metadata::text, (SELECT n FROM woken)
                   FROM finished f
                 UNION ALL
                 SELECT l.metadata::text, 0 FROM {s}.leases l
                  WHERE l.namespace = $1 AND l.key = $2 AND l.owner = $3 AND l.fence = $4 AND l.done
                    AND NOT EXISTS (SELECT 1 FROM finished)",
                wake = wake_all_payload(&s, "key"),
            ),
            // Group commit: the releases of many leases of one owner ($2) in one statement,
            // the same rule as `release` per lease. Answers the fences still recorded: freed
            // now, or (a retry) already freed by this very grant. The second half reads the
            // statement's snapshot, where rows freed now still look held: nothing is counted twice.
            // Each lease is looked up by its key, as in `renew_batch` (LATERAL: a plan that
            // no statistics can turn into a scan of the table per lease).
            release_batch: format!(
                "WITH b AS (SELECT * FROM unnest($3::text[], $4::bigint[]) AS b(key, fence)),
                 due AS MATERIALIZED (
                   SELECT mine.row_id FROM b
                    CROSS JOIN LATERAL (
                      SELECT r.ctid AS row_id FROM {s}.leases r
                       WHERE r.namespace = $1 AND r.key = b.key AND r.owner = $2
                         AND r.fence = b.fence AND NOT r.done
                         AND r.expires_at > clock_timestamp()
                         FOR UPDATE) mine),
                 released AS (
                   UPDATE {s}.leases AS l
                      SET owner = NULL, expires_at = NULL, attempt = NULL, updated_at = clock_timestamp()
                    WHERE l.ctid = ANY (ARRAY(SELECT row_id FROM due))
                   RETURNING l.key, l.fence)
                 SELECT r.fence, pg_notify($5, {wake})::text
                   FROM released r
                 UNION ALL
                 SELECT ended.fence, NULL FROM b
                  CROSS JOIN LATERAL (
                    SELECT l.fence FROM {s}.leases l
                     WHERE l.namespace = $1 AND l.key = b.key AND l.fence = b.fence
                       AND l.owner IS NULL AND l.expires_at IS NULL AND NOT l.done
                    OFFSET 0) ended",
                wake = wake_payload(&s, "r.key", "NULL"),
            ),
            // Group commit of `done`, the same rule per lease; $5 holds each lease's metadata to
            // merge (NULL: kept as it is). Answers the fences done, now or already by this grant.
            // Each lease looked up by its key, as in `release_batch`.
            done_batch: format!(
                "WITH b AS (SELECT * FROM unnest($3::text[], $4::bigint[], $5::text[])
                              AS b(key, fence, metadata)),
                 due AS MATERIALIZED (
                   SELECT mine.row_id, b.metadata FROM b
                    CROSS JOIN LATERAL (
                      SELECT r.ctid AS row_id FROM {s}.leases r
                       WHERE r.namespace = $1 AND r.key = b.key AND r.owner = $2
                         AND r.fence = b.fence AND NOT r.done
                         AND r.expires_at > clock_timestamp()
                         FOR UPDATE) mine),
                 finished AS (
                   UPDATE {s}.leases AS l
                      SET done = true, expires_at = NULL, attempt = NULL,
                          metadata = CASE WHEN d.metadata IS NULL THEN l.metadata
                                          ELSE l.metadata || d.metadata::jsonb END,
                          updated_at = clock_timestamp()
                     FROM due d
                    WHERE l.ctid = d.row_id
                   RETURNING l.key, l.fence, l.metadata, l.pool),
                 woken AS (
                   SELECT count(pg_notify($6, {wake})) AS n
                     FROM finished WHERE pool IS NULL)
                 SELECT f.fence, f.metadata::text, (SELECT n FROM woken)
                   FROM finished f
                 UNION ALL
                 SELECT ended.fence, ended.metadata::text, 0 FROM b
                  CROSS JOIN LATERAL (
                    SELECT l.fence, l.metadata FROM {s}.leases l
                     WHERE l.namespace = $1 AND l.key = b.key AND l.fence = b.fence
                       AND l.owner = $2 AND l.done
                    OFFSET 0) ended",
                wake = wake_all_payload(&s, "key"),
            ),
            // A live lease is never reset: its holder would keep believing it holds the key.
            // The key's dead tickets go with it (dead: see `rules::waits_in_line`).
            reset: format!(
                "WITH removed AS (
                   DELETE FROM {s}.leases
                    WHERE namespace = $1 AND key = $2
                      AND (done OR expires_at IS NULL OR expires_at <= clock_timestamp())
                   RETURNING key),
                 swept AS (
                   DELETE FROM {s}.tickets t
                    WHERE t.namespace = $1 AND t.key = $2
                      AND t.expires_at <= clock_timestamp())
                 SELECT EXISTS (SELECT 1 FROM removed),
                        EXISTS (SELECT 1 FROM {s}.leases WHERE namespace = $1 AND key = $2)"
            ),
            // A page in key order (`ListQuery::range`): a prefix is a range of the primary key,
            // [$2, $5), so the scan starts at the prefix and stops when the page is full (one
            // row per key: the index order is the page order, nothing is sorted). The page
            // resumes strictly after the cursor's (key, fence) ($6, $7). Sent unprepared
            // (`query_typed`): planned with the values at hand, so the NULL tests fold away and
            // the range becomes the index's bounds. The key's own row is left out while shared
            // holders hold it: `list_holders` lists them.
            //
            // One level, the table scanned where the LIMIT is, so that the planner prices the
            // index range scan for the few rows a page needs. A key's state is computed once
            // per row (LATERAL: the filter and the answer see the same clock reading), and the
            // filters the statistics cannot judge are one opaque condition, which the planner
            // assumes keeps half the rows: their default estimates (a NULL test of a parameter
            // 0.5%, `@>` 0.1%) multiplied down to one row, and a page of one row is priced as
            // reading the whole range. Written as an ordered subquery with the filters
            // outside, the subquery was planned for reading its whole range (a query that
            // orders its rows passes no LIMIT down), so the index scan survived only while the
            // statistics priced it below a bitmap scan and a sort of the range: with one
            // namespace more in the table (another client's 100,000 leases), the generic plan
            // of a page half way through a million keys sorted the 500,000 keys after the
            // cursor (448 ms, not 0.4).
            list_keys: format!(
                "SELECT l.key, s.state, CASE WHEN s.state = 'free' THEN NULL ELSE l.owner END,
                        l.fence, CASE WHEN s.state = 'held' THEN l.expires_at END,
                        l.metadata::text, l.updated_at, false
                   FROM {s}.leases l
                  CROSS JOIN LATERAL (
                        SELECT CASE WHEN l.done THEN 'done'
                                    WHEN l.expires_at > clock_timestamp() THEN 'held'
                                    ELSE 'free' END AS state,
                               (NOT l.done AND l.shared_until IS NOT NULL
                                AND l.shared_until > clock_timestamp()
                                AND (l.expires_at IS NULL OR l.expires_at <= clock_timestamp()))
                                 AS by_shared) s
                  WHERE l.namespace = $1 AND l.key >= $2
                    AND ($5::text IS NULL OR l.key < $5)
                    AND ($6::text IS NULL OR l.key > $6 OR l.fence > $7)
                    -- A state that is never done ($9): folded to `NOT done`, which lets the
                    -- scan use leases_undone.
                    AND (NOT $9::bool OR NOT l.done)
                    -- Held only ($10): folded to `owner IS NOT NULL`, which with `NOT done`
                    -- lets the scan use leases_owned (a held key names its owner).
                    AND (NOT $10::bool OR l.owner IS NOT NULL)
                    AND CASE WHEN ($4::text IS NULL OR l.metadata @> $4::text::jsonb)
                                  AND NOT s.by_shared AND ($3::text IS NULL OR s.state = $3)
                             THEN true ELSE false END
                  ORDER BY l.key
                  LIMIT $8"
            ),
            // The shared holders in the same range (granted tickets, one row each), in
            // (key, fence) order; the client merges them into the keys' page.
            list_holders: format!(
                "SELECT key, 'held', owner, fence, expires_at, metadata::text, updated_at, true
                   FROM {s}.tickets
                  WHERE namespace = $1 AND key >= $2
                    AND ($5::text IS NULL OR key < $5)
                    AND ($6::text IS NULL OR key > $6 OR fence > $7)
                    AND granted AND expires_at > clock_timestamp()
                    AND ($4::text IS NULL OR metadata @> $4::text::jsonb)
                    AND ($3::text IS NULL OR $3 = 'held')
                  ORDER BY key, fence
                  LIMIT $8"
            ),
            notify: "SELECT pg_notify($1, $2)",
            // Group commit of notifications: unnest yields the pairs in array order, so they
            // are sent (and delivered) in the order the callers queued them.
            notify_batch: "SELECT count(pg_notify(u.channel, u.payload))
                             FROM unnest($1::text[], $2::text[]) AS u(channel, payload)",
            // Work pools. A key joins the pool `$2` when offered: a new row (free, its fence
            // and offer order one sequence value), or a row that was in no pool (whatever its
            // state). A key already in a pool, held or done, stays as it is, and takes no
            // sequence value, row lock or WAL. One wake-up per offer that changed something.
            //
            // Each key is looked up by itself (LATERAL, as in `renew_batch`), and only a row in
            // no pool is locked, then updated by its ctid. Written as joins, the planner chose
            // by the statistics, and for a namespace they had not seen (its rows came after the
            // last ANALYZE) it read every row of the namespace twice per offer: 1,000 keys into
            // a namespace of 500,000 took 0.8 s, and filling a pool grew quadratic.
            offer: format!(
                "WITH k AS MATERIALIZED (
                   SELECT DISTINCT key FROM unnest($3::text[]) AS u(key) ORDER BY key),
                 seen AS MATERIALIZED (
                   SELECT k.key, x.unpooled FROM k
                    CROSS JOIN LATERAL (
                      SELECT l.pool IS NULL AS unpooled FROM {s}.leases l
                       WHERE l.namespace = $1 AND l.key = k.key OFFSET 0) x),
                 unpooled AS MATERIALIZED (
                   SELECT x.row_id FROM seen
                    CROSS JOIN LATERAL (
                      SELECT l.ctid AS row_id FROM {s}.leases l
                       WHERE l.namespace = $1 AND l.key = seen.key AND l.pool IS NULL
                         FOR UPDATE) x
                    WHERE seen.unpooled),
                 adopted AS (
                   UPDATE {s}.leases AS l
                      SET pool = $2, offered = nextval({seq}::regclass), updated_at = clock_timestamp()
                    WHERE l.ctid = ANY (ARRAY(SELECT row_id FROM unpooled))
                   RETURNING l.key),
                 created AS (
                   INSERT INTO {s}.leases
                          (namespace, key, fence, done, metadata, updated_at, pool, offered)
                   SELECT $1, n.key, n.seq, false, COALESCE($4::text::jsonb, '{{}}'::jsonb),
                          clock_timestamp(), $2, n.seq
                     FROM (SELECT k.key, nextval({seq}::regclass) AS seq FROM k
                            WHERE NOT EXISTS (SELECT 1 FROM seen WHERE seen.key = k.key)) n
                   ON CONFLICT (namespace, key) DO NOTHING
                   RETURNING key),
                 changed AS (SELECT (SELECT count(*) FROM adopted) + (SELECT count(*) FROM created) AS n)
                 SELECT c.n, (SELECT count(pg_notify($5, {wake}))
                                WHERE c.n > 0)
                   FROM changed c",
                wake = wake_all_payload(&s, "$2"),
            ),
            // Up to $3 keys of pool $2 that are free (or still granted to this very claim call, a
            // retry after a lost answer), oldest offer first, in one statement. SKIP LOCKED:
            // a row another claimer is granting is passed over, never waited for. The fence and
            // expiry are SET expressions, computed once the row is locked (as in acquire). When
            // nothing is granted, one row tells how long until the soonest holder expires.
            // $8, when set, bounds the keys from above (a semaphore's permits below its limit).
            // $9 is past every key of the pool (they all start with its prefix, $2): the soonest
            // expiry is looked for in that range of the key order, never in the namespace.
            //
            // The picked rows are updated by their ctids (they are locked: the ctids stay
            // theirs), a TID scan whatever the statistics say. Joined to the table by key
            // instead, for a namespace the statistics had not seen the planner looped over
            // the namespace once per picked key: 1,000 keys of a namespace of 600,000 took 6
            // minutes.
            claim: format!(
                "WITH picked AS (
                   SELECT l.ctid AS row_id FROM {s}.leases l
                    WHERE l.namespace = $1 AND l.pool = $2 AND NOT l.done
                      AND ((l.expires_at IS NULL OR l.expires_at <= clock_timestamp())
                           AND (l.shared_until IS NULL OR l.shared_until <= clock_timestamp())
                           OR (l.attempt = $4 AND l.expires_at > clock_timestamp()))
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
                          updated_at = clock_timestamp(), granted_at = clock_timestamp()
                    WHERE l.ctid = ANY (ARRAY(SELECT row_id FROM picked))
                   RETURNING l.key, l.fence, l.expires_at, l.metadata)
                 SELECT key, fence, expires_at, metadata::text, NULL::bigint AS remaining_ms
                   FROM taken
                 UNION ALL
                 SELECT NULL, NULL, NULL, NULL,
                        ceil(extract(epoch FROM min(l.expires_at) - clock_timestamp()) * 1000)::bigint
                   FROM {s}.leases l
                  WHERE NOT EXISTS (SELECT 1 FROM taken)
                    AND l.namespace = $1 AND l.pool = $2 AND NOT l.done
                    AND l.key >= $2 AND l.key < $9::text
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
            // Every key in [$2, $3) by state, as `list_keys` and `list_holders` show them: a key
            // held by shared holders (its own lease ended) counts once, as held; then the
            // shared holders. Reads the whole range: exact at any size (`accord top`).
            count_keys: format!(
                "SELECT count(*) FILTER (WHERE NOT done
                                           AND NOT COALESCE(expires_at > clock_timestamp(), false)
                                           AND NOT COALESCE(shared_until > clock_timestamp(), false)),
                        count(*) FILTER (WHERE NOT done
                                           AND (COALESCE(expires_at > clock_timestamp(), false)
                                                OR COALESCE(shared_until > clock_timestamp(), false))),
                        count(*) FILTER (WHERE done),
                        (SELECT count(*) FROM {s}.tickets t
                          WHERE t.namespace = $1 AND t.key >= $2
                            AND ($3::text IS NULL OR t.key < $3)
                            AND t.granted AND t.expires_at > clock_timestamp())
                   FROM {s}.leases
                  WHERE namespace = $1 AND key >= $2 AND ($3::text IS NULL OR key < $3)"
            ),
            // The acquires waiting in line for each key in [$2, $3), exclusive and shared, in
            // key order, up to $4 keys; each row also carries the waiters of the whole range
            // (the window sum runs before the LIMIT). Mirrors `rules::waits_in_line`: a ticket
            // not granted (a granted one is a shared holder) whose place is live.
            list_waiters: format!(
                "SELECT key, count(*) FILTER (WHERE NOT shared), count(*) FILTER (WHERE shared),
                        (sum(count(*)) OVER ())::bigint
                   FROM {s}.tickets
                  WHERE namespace = $1 AND key >= $2 AND ($3::text IS NULL OR key < $3)
                    AND NOT granted AND expires_at > clock_timestamp()
                  GROUP BY key
                  ORDER BY key
                  LIMIT $4"
            ),
            // Each stream of the namespace with its bounds, once per named consumer (with its
            // acknowledged seq), or once alone; up to $2 rows.
            list_streams: format!(
                "SELECT st.stream, st.last_seq,
                        COALESCE((SELECT min(ev.seq) FROM {s}.stream_events ev
                                   WHERE ev.namespace = $1 AND ev.stream = st.stream),
                                 st.last_seq + 1),
                        a.consumer, a.seq
                   FROM {s}.streams st
                   LEFT JOIN {s}.stream_acks a ON a.namespace = st.namespace AND a.stream = st.stream
                  WHERE st.namespace = $1
                  ORDER BY st.stream, a.consumer
                  LIMIT $2"
            ),
            // The bounded sweep a join runs (`rules::member_row_is_sweepable`,
            // `rules::waits_in_line`): up to 1,000 member rows of the group's range [$2, $3)
            // that nobody holds (left or expired; never a done key or a pool's key), and up to
            // 1,000 dead tickets of the namespace. Each row is picked by a read, then deleted
            // only if it still qualifies once locked: a member joining again at that instant
            // has updated its row (a new version, a new ctid), so the delete passes it over.
            // Fences come from the sequence, never from a row: a deleted row sets none back.
            sweep: format!(
                "WITH members AS (
                   DELETE FROM {s}.leases l
                    WHERE l.ctid = ANY (ARRAY(
                            SELECT r.ctid FROM {s}.leases r
                             WHERE r.namespace = $1 AND r.key >= $2
                               AND ($3::text IS NULL OR r.key < $3)
                               AND NOT r.done AND r.pool IS NULL
                               AND (r.expires_at IS NULL
                                    OR r.expires_at <= clock_timestamp())
                               AND (r.shared_until IS NULL OR r.shared_until <= clock_timestamp())
                             LIMIT 1000))
                      AND NOT l.done AND l.pool IS NULL
                      AND (l.expires_at IS NULL
                           OR l.expires_at <= clock_timestamp())
                      AND (l.shared_until IS NULL OR l.shared_until <= clock_timestamp())
                   RETURNING 1),
                 tickets AS (
                   DELETE FROM {s}.tickets t
                    WHERE t.ctid = ANY (ARRAY(
                            SELECT x.ctid FROM {s}.tickets x
                             WHERE x.namespace = $1
                               AND x.expires_at <= clock_timestamp()
                             LIMIT 1000))
                      AND t.expires_at <= clock_timestamp()
                   RETURNING 1)
                 SELECT (SELECT count(*) FROM members), (SELECT count(*) FROM tickets)"
            ),
            streams: super::streams::StreamSql::new(schema),
        }
    }
}

/// The parameter types of each statement, for sending a statement by its text
/// (`query_typed`, no prepared statement): what PostgreSQL infers when it prepares them, which
/// the pool checks whenever it prepares them (`pool::Stmt::new`), so this table stays true.
pub(crate) mod param_types {
    use tokio_postgres::types::Type;

    pub const ACQUIRE: &[Type] = &[
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::INT8,
        Type::INT8,
        Type::TEXT,
    ];
    pub const ACQUIRE_BATCH: &[Type] = &[
        Type::TEXT,
        Type::TEXT,
        Type::TEXT_ARRAY,
        Type::INT8_ARRAY,
        Type::INT8_ARRAY,
        Type::TEXT_ARRAY,
    ];
    pub const ACQUIRE_QUEUED: &[Type] = &[
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::INT8,
        Type::INT8,
        Type::TEXT,
        Type::BOOL,
        Type::INT8,
        Type::BOOL,
    ];
    pub const LEAVE_QUEUE: &[Type] = &[
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::INT8,
        Type::TEXT,
        Type::BOOL,
    ];
    pub const RELEASE_SHARED: &[Type] =
        &[Type::TEXT, Type::TEXT, Type::TEXT, Type::INT8, Type::TEXT];
    pub const HOLDER: &[Type] = &[Type::TEXT, Type::TEXT];
    pub const RENEW: &[Type] = &[
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::INT8,
        Type::INT8,
        Type::TEXT,
    ];
    pub const RENEW_BATCH: &[Type] = &[
        Type::TEXT,
        Type::TEXT,
        Type::TEXT_ARRAY,
        Type::INT8_ARRAY,
        Type::INT8_ARRAY,
        Type::TEXT_ARRAY,
        Type::INT8_ARRAY,
        Type::INT8_ARRAY,
    ];
    pub const RELEASE: &[Type] = &[Type::TEXT, Type::TEXT, Type::TEXT, Type::INT8, Type::TEXT];
    pub const DONE: &[Type] = &[
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::INT8,
        Type::TEXT,
        Type::TEXT,
    ];
    pub const RELEASE_BATCH: &[Type] = &[
        Type::TEXT,
        Type::TEXT,
        Type::TEXT_ARRAY,
        Type::INT8_ARRAY,
        Type::TEXT,
    ];
    pub const DONE_BATCH: &[Type] = &[
        Type::TEXT,
        Type::TEXT,
        Type::TEXT_ARRAY,
        Type::INT8_ARRAY,
        Type::TEXT_ARRAY,
        Type::TEXT,
    ];
    pub const RESET: &[Type] = &[Type::TEXT, Type::TEXT];
    pub const LIST_KEYS: &[Type] = &[
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::INT8,
        Type::INT8,
        Type::BOOL,
        Type::BOOL,
    ];
    /// The shared holders' page takes the keys' page's first eight parameters, one for one.
    pub const LIST_HOLDERS: &[Type] = LIST_KEYS.split_at(8).0;
    pub const NOTIFY: &[Type] = &[Type::TEXT, Type::TEXT];
    pub const NOTIFY_BATCH: &[Type] = &[Type::TEXT_ARRAY, Type::TEXT_ARRAY];
    pub const OFFER: &[Type] = &[
        Type::TEXT,
        Type::TEXT,
        Type::TEXT_ARRAY,
        Type::TEXT,
        Type::TEXT,
    ];
    pub const CLAIM: &[Type] = &[
        Type::TEXT,
        Type::TEXT,
        Type::INT8,
        Type::INT8,
        Type::TEXT,
        Type::INT8,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
    ];
    pub const COUNTS: &[Type] = &[Type::TEXT, Type::TEXT];
    pub const COUNT_KEYS: &[Type] = &[Type::TEXT, Type::TEXT, Type::TEXT];
    /// The waiters' range is the counts' ($1-$3), then how many keys at most.
    pub const LIST_WAITERS: &[Type] = &[Type::TEXT, Type::TEXT, Type::TEXT, Type::INT8];
    pub const LIST_STREAMS: &[Type] = &[Type::TEXT, Type::INT8];
    pub const SWEEP: &[Type] = &[Type::TEXT, Type::TEXT, Type::TEXT];
    pub const PUBLISH: &[Type] = &[
        Type::TEXT,
        Type::TEXT_ARRAY,
        Type::BYTEA_ARRAY,
        Type::TEXT_ARRAY,
    ];
    pub const READ_STREAM: &[Type] = &[Type::TEXT, Type::TEXT, Type::INT8, Type::INT8];
    pub const STREAM_STATE: &[Type] = &[Type::TEXT, Type::TEXT];
    pub const SET_RETENTION: &[Type] = &[Type::TEXT, Type::TEXT, Type::INT8, Type::INT8];
    pub const TRIM_STREAM: &[Type] = &[Type::TEXT, Type::TEXT, Type::INT8];
    pub const ACK: &[Type] = &[Type::TEXT, Type::TEXT, Type::TEXT, Type::INT8];
    pub const ACKED: &[Type] = &[Type::TEXT, Type::TEXT, Type::TEXT];
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
        // Version 3: fair waiting and shared locks. A waiting acquire holds a ticket (its
        // place in the key's line, from the fence sequence); a shared holder is a granted
        // ticket. The key's row counts its live shared holders and carries their latest
        // expiry, so that shared and exclusive grants meet on one row lock. `granted_at`: when
        // the current grant began (an election's `since`).
        vec![
            format!("ALTER TABLE {s}.leases ADD COLUMN granted_at timestamptz"),
            format!("ALTER TABLE {s}.leases ADD COLUMN shared_holders integer NOT NULL DEFAULT 0"),
            format!("ALTER TABLE {s}.leases ADD COLUMN shared_until timestamptz"),
            format!(
                "CREATE TABLE {s}.tickets (
                 namespace  text COLLATE \"C\" NOT NULL,
                 key        text COLLATE \"C\" NOT NULL,
                 ticket     bigint NOT NULL,
                 owner      text NOT NULL,
                 shared     boolean NOT NULL,
                 attempt    bigint NOT NULL,
                 granted    boolean NOT NULL DEFAULT false,
                 fence      bigint,
                 expires_at timestamptz NOT NULL,
                 metadata   jsonb NOT NULL DEFAULT '{{}}'::jsonb,
                 updated_at timestamptz NOT NULL,
                 granted_at timestamptz,
                 PRIMARY KEY (namespace, key, ticket)
             )"
            ),
        ],
        // Version 4: durable streams (`streams.rs`). A stream's row holds its newest seq: a
        // publisher locks it to take the next seqs, so seqs follow commit order. Events are
        // bytes (any UTF-8, NUL included); a consumer's position is a row of its own.
        vec![
            format!(
                "CREATE TABLE {s}.streams (
                 namespace    text COLLATE \"C\" NOT NULL,
                 stream       text COLLATE \"C\" NOT NULL,
                 last_seq     bigint NOT NULL,
                 published_at timestamptz,
                 max_len      bigint,
                 max_age_ms   bigint,
                 PRIMARY KEY (namespace, stream)
             )"
            ),
            format!(
                "CREATE TABLE {s}.stream_events (
                 namespace    text COLLATE \"C\" NOT NULL,
                 stream       text COLLATE \"C\" NOT NULL,
                 seq          bigint NOT NULL,
                 payload      bytea NOT NULL,
                 published_at timestamptz NOT NULL,
                 PRIMARY KEY (namespace, stream, seq)
             )"
            ),
            format!(
                "CREATE TABLE {s}.stream_acks (
                 namespace  text COLLATE \"C\" NOT NULL,
                 stream     text COLLATE \"C\" NOT NULL,
                 consumer   text COLLATE \"C\" NOT NULL,
                 seq        bigint NOT NULL,
                 updated_at timestamptz NOT NULL,
                 PRIMARY KEY (namespace, stream, consumer)
             )"
            ),
        ],
        // Version 5: list pages in key order (a prefix is a range of the primary key), so the
        // index on fence goes. Without it no grant, renewal or release changes an indexed
        // column: PostgreSQL updates those rows in place (HOT), writing no index entry, and a
        // claim or an acquire writes one index fewer.
        vec![format!("DROP INDEX IF EXISTS {s}.leases_newest_first")],
        // Version 6: the keys not done, in key order, for pages of free or held keys: in a pool
        // half way through its work they lie past every done key. `done` is already an indexed
        // column (leases_pool), so this adds no index write to any update; a new key writes
        // one entry more, and a key marked done leaves it (its new version is not indexed).
        vec![format!(
            "CREATE INDEX leases_undone ON {s}.leases (namespace, key) WHERE NOT done"
        )],
        // Version 7: half of each page left free, so that a renewal stays on its row's page
        // (HOT: no index entry, one WAL record). Version 5 made renewals HOT-eligible, but a
        // page filled to the brim has no room for the new version, and a tick renews every
        // lease on a page in one transaction, whose old versions cannot be pruned before it
        // commits: the page needs room for a second copy of its rows. Measured with 100,000
        // held leases renewed in statements of 10,000 (four rounds): fill factor 100, 3% of
        // the renewals HOT and 187 MB of WAL; 70, 76% and 103 MB; 50, 99% and 73 MB, at half
        // the server time. The price: pages of keys never updated again (done keys) are half
        // empty. Applies to pages written from now on; VACUUM FULL rewrites the rest.
        vec![format!("ALTER TABLE {s}.leases SET (fillfactor = 50)")],
        // Version 8: the keys that name an owner and are not done, in key order, for pages of
        // held keys (a held key names its owner): at 1,000,000 free keys and none held such a
        // page read every undone key (0.6-1.4 s); through this index, two buffers (0.07 ms).
        // A renewal leaves the owner as it is, so it stays HOT; a grant (owner set) and a
        // release (owner cleared) now change an indexed column and write index entries:
        // measured on 50,000 keys granted, renewed and released in bulk, 0.74 s and 20 MB of
        // WAL before, 1.9 s and 36 MB after (renewals still HOT).
        vec![format!(
            "CREATE INDEX leases_owned ON {s}.leases (namespace, key)
              WHERE owner IS NOT NULL AND NOT done"
        )],
        // Version 9: the compatibility record (`rules::schema_fit`): each version from here on
        // records the oldest client version that may still run on it. And `holders`: who
        // holds what, for psql, row for row what `list` with the state held returns (the
        // key's row while an exclusive grant is live, `rules::key_state`; each live shared
        // holder, a granted ticket, as `list_holders`). Keeps version 8's clients working.
        vec![
            format!("ALTER TABLE {s}.schema_migrations ADD COLUMN compatible_from integer"),
            format!(
                "CREATE VIEW {s}.holders AS
                 SELECT namespace, key, false AS shared, owner, fence, granted_at, expires_at,
                        metadata, updated_at
                   FROM {s}.leases
                  WHERE NOT done AND expires_at > clock_timestamp()
                 UNION ALL
                 SELECT namespace, key, true, owner, fence, granted_at, expires_at, metadata,
                        updated_at
                   FROM {s}.tickets
                  WHERE granted AND expires_at > clock_timestamp()"
            ),
        ],
        // Version 10: accord's operations as functions for the application's own transaction
        // (`fenced.rs`): check_fence, done, release, offer, publish and the fenced_write
        // triggers. Functions only: clients of 8 and 9 keep working.
        super::fenced::migration(schema),
        // Version 11: check_fence answers a live exclusive grant with one statement (the same
        // rule, the same lock; the checks and the account of a refusal after it).
        super::fenced::migration_11(schema),
    ]
}

/// Records `version` as applied: from `rules::COMPATIBILITY_RECORDED_FROM` on, with the oldest
/// client version it keeps working.
pub(crate) fn record_version(schema: &str, version: i32) -> String {
    let s = quote_ident(schema);
    if version < rules::COMPATIBILITY_RECORDED_FROM {
        return format!("INSERT INTO {s}.schema_migrations (version) VALUES ({version})");
    }
    format!(
        "INSERT INTO {s}.schema_migrations (version, compatible_from) VALUES ({version}, {})",
        rules::compatible_from(version)
    )
}

/// The newest applied version and the clients it keeps (NULL before version 9: read through
/// `to_jsonb`, so that the same statement reads a table without the column).
pub(crate) fn installed_version(schema: &str) -> String {
    format!(
        "SELECT m.version, (to_jsonb(m) ->> 'compatible_from')::integer
           FROM {}.schema_migrations m ORDER BY m.version DESC LIMIT 1",
        quote_ident(schema)
    )
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
pub(crate) fn migration_lock_sql(schema: &str) -> String {
    format!(
        "SELECT pg_advisory_xact_lock(hashtextextended('accord.migrate.' || {}, 0))",
        quote_literal(schema)
    )
}

/// The whole migration as one script, for DBAs who apply it by hand (`--print-sql`).
pub fn migration_script(schema: &str) -> String {
    let s = quote_ident(schema);
    let mut out = String::from("BEGIN;\n");
    out.push_str(&migration_lock_sql(schema));
    out.push_str(";\n");
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
        let version = i32::try_from(v).expect("few migrations");
        body.push_str(&format!(
            "    {};\n  END IF;\nEND",
            record_version(schema, version)
        ));
        let keeps = if version < rules::COMPATIBILITY_RECORDED_FROM {
            String::new()
        } else {
            format!(
                " (keeps clients from schema {} on)",
                rules::compatible_from(version)
            )
        };
        out.push_str(&format!(
            "-- version {v}{keeps}\nDO {};\n",
            dollar_quote(&body)
        ));
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
    fn every_version_from_9_says_which_clients_it_keeps() {
        for version in rules::COMPATIBILITY_RECORDED_FROM..=current_version() {
            let from = rules::KEEPS_CLIENTS_FROM
                .iter()
                .find(|(v, _)| *v == version)
                .map(|(_, from)| *from);
            assert!(
                from.is_some_and(|f| f <= version),
                "version {version} must say which clients it keeps (rules::KEEPS_CLIENTS_FROM)"
            );
        }
    }

    /// The SHA-256 of each shipped version's statements (schema `accord`), version 1 first.
    /// A version's text never changes once shipped; when a statement that a migration copies
    /// changes (version 10's functions are the client's statements), freeze the old text into
    /// that migration and add a new one.
    const SHIPPED: &[&str] = &[
        "ab86d4e09a88eebc04d4ffdc46d5f4bf1420f2ee7a1d2a93e1fcfd09a41e2b25",
        "5e84e7b791a3637af489a3412219af511765814ad3d883c6b40ce9158fdaddba",
        "089a248481947e0213e211345fa0f5502fcbd418b850258015887d311c530f97",
        "8ad50bf5a19704f2fb75f0abfbfa9d2e4d9eac31eff55af4961d427bb22cd96e",
        "a1bad1a3750d58c559cc1ff1ef279898b7a2c06d81d580e75d6f84432114350c",
        "769c1496edb794c4ef49713168e8cb310961e9a9177bcbcf0fccde6e1a5fd49c",
        "059ec546718d419dcf98e65b265462732778ab2632dbe5f4b35ae2ef674307b6",
        "336c06891c4b2d54b34afe3212afd456beea2cd4bbeb7a62a19bd8945fecb08d",
        "8b0741b3d5230a942c42fcd124d91a9d2ed1995b47ecee21de6335ebb0371abf",
        "d70a1e76c7d3923a933ec872accbb19f5bfaa8c6d1243e1f79c38a05bc8ace99",
        "0f8247f6f549825c287419e9f54eb41ad4fac95b30aebcc77b46700f0d1eff74",
    ];

    #[test]
    fn shipped_migrations_are_frozen() {
        use sha2::{Digest, Sha256};
        let digests: Vec<String> = migrations("accord")
            .iter()
            .map(|statements| {
                let digest = Sha256::digest(statements.join("\n;\n").as_bytes());
                digest.iter().map(|b| format!("{b:02x}")).collect()
            })
            .collect();
        for (i, (shipped, now)) in SHIPPED.iter().zip(&digests).enumerate() {
            assert_eq!(
                shipped,
                now,
                "migration {} changed after it shipped: add a new one instead",
                i + 1
            );
        }
        assert_eq!(
            SHIPPED.len(),
            digests.len(),
            "a new migration: pin its digest here ({:?})",
            &digests[SHIPPED.len().min(digests.len())..]
        );
    }

    #[test]
    fn wakeup_channels_fit_in_an_identifier() {
        assert_eq!(wakeup_channel("accord"), "accord_wakeup_accord");
        let long = wakeup_channel(&"s".repeat(63));
        assert!(long.len() <= 63);
        assert_ne!(long, wakeup_channel(&"t".repeat(63)));
    }
}
