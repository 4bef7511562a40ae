//! Schema version 10: accord's operations as SQL functions, for the application's own
//! transaction (docs/semantics.md, "Fenced writes"). `check_fence` makes a write commit only
//! while its lease is the key's live grant; `done`, `release`, `offer` and `publish` commit with
//! the application's writes or not at all, and wake others at that commit (NOTIFY is
//! transactional).
//!
//! One source for each rule. The statements that change accord's tables are the client's own
//! (`Sql::done`, `Sql::release`, `Sql::release_shared`, `Sql::offer`, `StreamSql::publish`): each
//! becomes the body of an inner SQL function whose `$n` are the statement's parameters, so the
//! grant condition, the metadata merge (`rules::merge_metadata` mirrors `||`), which wake-ups go
//! out and their payloads are the very text the client runs. The argument checks are generated
//! from `validate`'s limits and reserved prefixes. The text is frozen once shipped
//! (`sql::tests::shipped_migrations_are_frozen`): when a statement changes later, a new
//! migration replaces the functions and version 10 keeps a copy of its text.
//!
//! Privilege: every function an application calls is `SECURITY DEFINER` with `search_path`
//! fixed to `pg_catalog, pg_temp`, and every name is schema-qualified (no dynamic SQL anywhere),
//! so a role with EXECUTE runs exactly these statements and nothing it could plant in its own
//! schemas. EXECUTE is revoked from PUBLIC on all of them: a DBA grants it (and USAGE on the
//! schema) to an application role. The inner functions (names starting with `_`) are never
//! granted; they run under their caller's fixed search_path.

use super::sql::{quote_ident, quote_literal, wakeup_channel, Sql};
use crate::fenced::Placeholders;
use crate::validate::{
    MAX_EVENT_BYTES, MAX_METADATA_BYTES, MAX_NAME_BYTES, MAX_OFFER_KEYS, MAX_PUBLISH_EVENTS,
    RESERVED_KEY_PREFIXES,
};

/// The SQLSTATE `check_fence` (and `done`, `release`, the trigger) raise when the fence is not
/// the key's live grant: class `AC` is no standard class, so it is accord's alone.
pub const FENCE_REFUSED: &str = "AC001";
/// The SQLSTATE of a shared grant's `done` (only an exclusive holder may finish a key).
pub const SHARED_DONE: &str = "AC002";

/// The functions and the privileges of every function of version 10.
const PUBLIC_FUNCTIONS: &[&str] = &[
    "check_fence(text, text, bigint)",
    "done(text, text, bigint, jsonb)",
    "release(text, text, bigint)",
    "offer(text, text, text[], jsonb)",
    "publish(text, text, text[])",
    "fenced_write()",
    "fenced_write_by_column()",
];
const INNER_FUNCTIONS: &[&str] = &[
    "_refuse_argument(text, text)",
    "_name(text, text, boolean)",
    "_metadata(text, jsonb)",
    "_grant_of(text, text, bigint)",
    "_refuse_fence(text, text, bigint, text)",
    "_channel_for(text, text, text[])",
    "_done_statement(text, text, text, bigint, text, text)",
    "_release_statement(text, text, text, bigint, text)",
    "_release_shared_statement(text, text, text, bigint, text)",
    "_offer_statement(text, text, text[], text, text)",
    "_publish_statement(text, text[], bytea[], text[])",
    "_fenced_row(text, text, text, text, jsonb)",
];

/// How every function an application calls runs: as the schema's owner, seeing only pg_catalog
/// (and temporary objects last, never first).
const DEFINER: &str = "SECURITY DEFINER SET search_path = pg_catalog, pg_temp";
/// The inner functions: called only from those (EXECUTE is granted to nobody), under their
/// search_path; no SET of their own, which would save and restore it at every call.
const INNER: &str = "";

/// A function whose body is `statement` (one of the client's), its `$n` the function's
/// parameters. PL/pgSQL, not SQL: PL/pgSQL keeps the statement's plan for the session, where
/// a SQL function that cannot be inlined plans it again at every call (measured with pgbench,
/// fsync on, one client: a result insert and `done` in one transaction took 8.1 ms as SQL
/// functions, 6.5 ms as PL/pgSQL; insert and `done` in one statement 6.0 ms, then 3.0 ms).
fn statement_function(s: &str, signature: &str, returns: &str, statement: &str) -> String {
    plpgsql(
        s,
        signature,
        &format!("TABLE ({returns})"),
        INNER,
        &format!("BEGIN\n RETURN QUERY {statement};\nEND"),
    )
}

/// A PL/pgSQL function.
fn plpgsql(s: &str, signature: &str, returns: &str, security: &str, body: &str) -> String {
    format!(
        "CREATE FUNCTION {s}.{signature} RETURNS {returns} LANGUAGE plpgsql {security} AS {}",
        super::sql::dollar_quote(body)
    )
}

/// The SQL condition "`value` lies under a reserved prefix" (`validate::unreserved`).
fn reserved_condition(value: &str) -> String {
    RESERVED_KEY_PREFIXES
        .iter()
        .map(|(prefix, _, _)| {
            format!(
                "left({value}, {}) = {}",
                prefix.len(),
                quote_literal(prefix)
            )
        })
        .collect::<Vec<_>>()
        .join(" OR ")
}

/// Migration 10's statements.
pub(crate) fn migration(schema: &str) -> Vec<String> {
    let s = quote_ident(schema);
    let sql = Sql::new(schema);
    let wake = quote_literal(&wakeup_channel(schema));
    let reserved = reserved_condition("p_value");
    let mut out = vec![
        // Argument checks, in `validate`'s words: "invalid <field>: <why>".
        plpgsql(
            &s,
            "_refuse_argument(p_field text, p_why text)",
            "void",
            INNER,
            "BEGIN
               RAISE EXCEPTION USING ERRCODE = '22023',
                 MESSAGE = format('accord: invalid %s: %s', p_field, p_why);
             END",
        ),
        plpgsql(
            &s,
            "_name(p_field text, p_value text, p_unreserved boolean)",
            "void",
            INNER,
            &format!(
                "BEGIN
                   IF p_value IS NULL THEN
                     PERFORM {s}._refuse_argument(p_field, 'must not be NULL');
                   ELSIF p_value = '' THEN
                     PERFORM {s}._refuse_argument(p_field, 'must not be empty');
                   ELSIF octet_length(p_value) > {MAX_NAME_BYTES} THEN
                     PERFORM {s}._refuse_argument(p_field, format(
                       'is %s bytes long, the limit is {MAX_NAME_BYTES}', octet_length(p_value)));
                   ELSIF p_unreserved AND ({reserved}) THEN
                     PERFORM {s}._refuse_argument(p_field, format(
                       '%L is under a prefix reserved for accord''s recipes (groups, fleets, elections)',
                       p_value));
                   END IF;
                 END"
            ),
        ),
        plpgsql(
            &s,
            "_metadata(p_field text, p_value jsonb)",
            "void",
            INNER,
            &format!(
                "BEGIN
                   IF p_value IS NULL THEN RETURN; END IF;
                   IF jsonb_typeof(p_value) <> 'object' THEN
                     PERFORM {s}._refuse_argument(p_field, 'must be a JSON object');
                   ELSIF octet_length(p_value::text) > {MAX_METADATA_BYTES} THEN
                     PERFORM {s}._refuse_argument(p_field, format(
                       'is %s bytes as JSON, the limit is {MAX_METADATA_BYTES}',
                       octet_length(p_value::text)));
                   END IF;
                 END"
            ),
        ),
        // Where grant `p_fence` of the key stands, on the server's clock read after the key's
        // row is locked FOR SHARE: every grant of the key (exclusive, and shared, whose count
        // and expiry live on that row) updates the row, so none can commit before this
        // transaction ends. `state`: live, released, done, expired, superseded or never.
        plpgsql(
            &s,
            "_grant_of(p_namespace text, p_key text, p_fence bigint,
                       OUT state text, OUT shared boolean, OUT owner text, OUT why text)",
            "record",
            INNER,
            &format!(
                "DECLARE
                   l record;
                   t record;
                 BEGIN
                   shared := false;
                   SELECT k.fence, k.owner, k.done, k.expires_at INTO l FROM {s}.leases k
                    WHERE k.namespace = p_namespace AND k.key = p_key FOR SHARE;
                   IF NOT FOUND THEN
                     state := 'never'; why := 'never granted';
                     RETURN;
                   END IF;
                   IF l.fence = p_fence THEN
                     owner := l.owner;
                     IF l.done THEN
                       state := 'done'; why := 'the key is done';
                     ELSIF l.expires_at IS NULL THEN
                       state := 'released'; why := 'released';
                     ELSIF l.expires_at <= clock_timestamp() THEN
                       state := 'expired'; why := format('expired at %s', l.expires_at);
                     ELSE
                       state := 'live';
                     END IF;
                     RETURN;
                   END IF;
                   -- A shared holder: a granted ticket (its ticket is its fence).
                   SELECT x.owner, x.expires_at INTO t FROM {s}.tickets x
                    WHERE x.namespace = p_namespace AND x.key = p_key AND x.ticket = p_fence
                      AND x.fence = p_fence AND x.granted;
                   IF FOUND THEN
                     shared := true; owner := t.owner;
                     IF t.expires_at > clock_timestamp() AND NOT l.done THEN
                       state := 'live';
                     ELSE
                       state := 'expired'; why := format('expired at %s', t.expires_at);
                     END IF;
                   ELSIF l.fence > p_fence THEN
                     state := 'superseded'; why := format('superseded by fence %s', l.fence);
                   ELSE
                     state := 'never';
                     why := 'never granted (or a shared grant that has ended)';
                   END IF;
                 END"
            ),
        ),
        plpgsql(
            &s,
            "_refuse_fence(p_namespace text, p_key text, p_fence bigint, p_why text)",
            "void",
            INNER,
            &format!(
                "BEGIN
                   RAISE EXCEPTION USING ERRCODE = '{FENCE_REFUSED}',
                     MESSAGE = format('accord: fence %s is not the live grant of key %L (namespace %L): %s',
                                      p_fence, p_key, p_namespace, p_why),
                     HINT = 'the lease ended before this transaction checked it: roll back, and write nothing on its behalf';
                 END"
            ),
        ),
        // `naming::channel_for` (FNV-1a, 64 bits, over the namespace and each part after a
        // NUL byte), so that a publish here wakes the subscribers the client's would. Numeric
        // arithmetic: bigint would overflow on the wrapping multiply.
        plpgsql(
            &s,
            "_channel_for(p_stem text, p_namespace text, p_parts text[])",
            "text",
            "IMMUTABLE STRICT",
            "DECLARE
               h numeric := 14695981039346656037;
               m numeric := 18446744073709551616;
               b bytea;
               part text;
               lo integer;
             BEGIN
               b := convert_to(p_namespace, 'UTF8');
               FOR i IN 0 .. length(b) - 1 LOOP
                 lo := (h % 256)::integer;
                 h := ((h - lo + (lo # get_byte(b, i))) * 1099511628211) % m;
               END LOOP;
               FOREACH part IN ARRAY p_parts LOOP
                 h := (h * 1099511628211) % m;
                 b := convert_to(part, 'UTF8');
                 FOR i IN 0 .. length(b) - 1 LOOP
                   lo := (h % 256)::integer;
                   h := ((h - lo + (lo # get_byte(b, i))) * 1099511628211) % m;
                 END LOOP;
               END LOOP;
               IF h >= 9223372036854775808 THEN h := h - m; END IF;
               RETURN p_stem || '_' || lpad(to_hex(h::bigint), 16, '0');
             END",
        ),
        statement_function(
            &s,
            "_done_statement(text, text, text, bigint, text, text)",
            "r_metadata text, r_woken bigint",
            &sql.done,
        ),
        statement_function(
            &s,
            "_release_statement(text, text, text, bigint, text)",
            "r_released bigint",
            &sql.release,
        ),
        statement_function(
            &s,
            "_release_shared_statement(text, text, text, bigint, text)",
            "r_released bigint, r_woken bigint",
            &sql.release_shared,
        ),
        statement_function(
            &s,
            "_offer_statement(text, text, text[], text, text)",
            "r_joined bigint, r_woken bigint",
            &sql.offer,
        ),
        statement_function(
            &s,
            "_publish_statement(text, text[], bytea[], text[])",
            "r_seq bigint, r_published_at timestamptz, r_retained boolean, r_woken bigint, r_stored bigint",
            &sql.streams.publish,
        ),
        // check_fence: returns nothing, or raises AC001 naming key, fence and why.
        plpgsql(
            &s,
            "check_fence(namespace text, key text, fence bigint)",
            "void",
            DEFINER,
            &format!(
                "DECLARE g record;
                 BEGIN
{}
                 END",
                check_fence_account(&s)
            ),
        ),
        // done: the client's done statement, once the grant is found live (and locked); the
        // key's merged metadata.
        plpgsql(
            &s,
            "done(namespace text, key text, fence bigint, metadata jsonb DEFAULT NULL)",
            "jsonb",
            DEFINER,
            &format!(
                "DECLARE
                   g record;
                   merged text;
                 BEGIN
                   PERFORM {s}._name('namespace', namespace, false);
                   PERFORM {s}._name('key', key, true);
                   IF fence IS NULL THEN PERFORM {s}._refuse_argument('fence', 'must not be NULL'); END IF;
                   PERFORM {s}._metadata('metadata', metadata);
                   g := {s}._grant_of(namespace, key, fence);
                   IF g.state <> 'live' THEN
                     PERFORM {s}._refuse_fence(namespace, key, fence, g.why);
                   END IF;
                   IF g.shared THEN
                     RAISE EXCEPTION USING ERRCODE = '{SHARED_DONE}',
                       MESSAGE = format('accord: fence %s of key %L (namespace %L) is a shared grant: a shared holder cannot mark its key done; acquire the key exclusively',
                                        fence, key, namespace);
                   END IF;
                   SELECT d.r_metadata INTO merged
                     FROM {s}._done_statement(namespace, key, g.owner, fence, metadata::text, {wake}) d;
                   IF merged IS NULL THEN
                     PERFORM {s}._refuse_fence(namespace, key, fence, 'not recorded');
                   END IF;
                   RETURN merged::jsonb;
                 END"
            ),
        ),
        // release: the client's release (or a shared holder's); releasing again what this
        // very grant released is harmless, as the client's release is.
        plpgsql(
            &s,
            "release(namespace text, key text, fence bigint)",
            "void",
            DEFINER,
            &format!(
                "DECLARE g record;
                 BEGIN
                   PERFORM {s}._name('namespace', namespace, false);
                   PERFORM {s}._name('key', key, false);
                   IF fence IS NULL THEN PERFORM {s}._refuse_argument('fence', 'must not be NULL'); END IF;
                   g := {s}._grant_of(namespace, key, fence);
                   IF g.state = 'released' THEN RETURN; END IF;
                   IF g.state <> 'live' THEN
                     PERFORM {s}._refuse_fence(namespace, key, fence, g.why);
                   END IF;
                   IF g.shared THEN
                     PERFORM 1 FROM {s}._release_shared_statement(namespace, key, g.owner, fence, {wake});
                   ELSE
                     PERFORM 1 FROM {s}._release_statement(namespace, key, g.owner, fence, {wake});
                   END IF;
                 END"
            ),
        ),
        // offer: the client's offer statement; how many keys joined the pool.
        plpgsql(
            &s,
            "offer(namespace text, pool text, keys text[], metadata jsonb DEFAULT NULL)",
            "bigint",
            DEFINER,
            &format!(
                "DECLARE
                   k text;
                   joined bigint;
                 BEGIN
                   PERFORM {s}._name('namespace', namespace, false);
                   PERFORM {s}._name('prefix', pool, true);
                   PERFORM {s}._metadata('metadata', metadata);
                   IF keys IS NULL THEN PERFORM {s}._refuse_argument('keys', 'must not be NULL'); END IF;
                   IF cardinality(keys) > {MAX_OFFER_KEYS} THEN
                     PERFORM {s}._refuse_argument('keys', format(
                       '%s keys in one offer, the limit is {MAX_OFFER_KEYS} (offer them in several calls)',
                       cardinality(keys)));
                   END IF;
                   FOREACH k IN ARRAY keys LOOP
                     PERFORM {s}._name('key', k, true);
                     IF octet_length(k) <= octet_length(pool) OR left(k, length(pool)) <> pool THEN
                       PERFORM {s}._refuse_argument('key', format('%L is not under the prefix %L', k, pool));
                     END IF;
                   END LOOP;
                   IF cardinality(keys) = 0 THEN RETURN 0; END IF;
                   SELECT o.r_joined INTO joined
                     FROM {s}._offer_statement(namespace, pool, keys, metadata::text, {wake}) o;
                   RETURN joined;
                 END"
            ),
        ),
        // publish: the client's publish statement for one stream; the events' seqs. Payloads
        // are text (UTF-8), as every client reads them.
        plpgsql(
            &s,
            "publish(namespace text, stream text, payloads text[])",
            "bigint[]",
            DEFINER,
            &format!(
                "DECLARE
                   p text;
                   n integer;
                   channel text;
                   seqs bigint[];
                 BEGIN
                   PERFORM {s}._name('namespace', namespace, false);
                   PERFORM {s}._name('stream', stream, false);
                   IF payloads IS NULL THEN PERFORM {s}._refuse_argument('payloads', 'must not be NULL'); END IF;
                   n := cardinality(payloads);
                   IF n > {MAX_PUBLISH_EVENTS} THEN
                     PERFORM {s}._refuse_argument('payloads', format(
                       'holds %s events, the limit is {MAX_PUBLISH_EVENTS} per call', n));
                   END IF;
                   FOREACH p IN ARRAY payloads LOOP
                     IF p IS NULL THEN PERFORM {s}._refuse_argument('payload', 'must not be NULL'); END IF;
                     IF octet_length(p) > {MAX_EVENT_BYTES} THEN
                       PERFORM {s}._refuse_argument('payload', format(
                         'is %s bytes long, the limit is {MAX_EVENT_BYTES}', octet_length(p)));
                     END IF;
                   END LOOP;
                   IF n = 0 THEN RETURN '{{}}'; END IF;
                   channel := {s}._channel_for('accord_stream', namespace, ARRAY[stream]);
                   SELECT array_agg(e.r_seq ORDER BY e.r_seq) INTO seqs
                     FROM {s}._publish_statement(
                            namespace, array_fill(stream, ARRAY[n]),
                            ARRAY(SELECT convert_to(x, 'UTF8') FROM unnest(payloads) WITH ORDINALITY u(x, i) ORDER BY i),
                            array_fill(channel, ARRAY[n])) e;
                   RETURN seqs;
                 END"
            ),
        ),
        // The trigger's shared part: the row's key and fence, read by column name.
        plpgsql(
            &s,
            "_fenced_row(p_table text, p_namespace text, p_key_column text, p_fence_column text, p_row jsonb)",
            "void",
            INNER,
            &format!(
                "DECLARE fence text;
                 BEGIN
                   IF p_key_column IS NULL OR p_fence_column IS NULL THEN
                     RAISE EXCEPTION USING ERRCODE = '39P01',
                       MESSAGE = format('accord: the trigger on %s needs its arguments (namespace, key_column, fence_column)', p_table);
                   END IF;
                   IF NOT p_row ? p_key_column THEN
                     RAISE EXCEPTION USING ERRCODE = '42703',
                       MESSAGE = format('accord: table %s has no column %I (fenced_write''s key_column)', p_table, p_key_column);
                   END IF;
                   IF NOT p_row ? p_fence_column THEN
                     RAISE EXCEPTION USING ERRCODE = '42703',
                       MESSAGE = format('accord: table %s has no column %I (fenced_write''s fence_column)', p_table, p_fence_column);
                   END IF;
                   fence := p_row ->> p_fence_column;
                   IF fence IS NULL THEN
                     RAISE EXCEPTION USING ERRCODE = '{FENCE_REFUSED}',
                       MESSAGE = format('accord: a row of %s has no fence (column %I is NULL): a fenced table takes only writes that carry their lease''s fence',
                                        p_table, p_fence_column);
                   END IF;
                   PERFORM {s}.check_fence(p_namespace, p_row ->> p_key_column, fence::bigint);
                 END"
            ),
        ),
        // The triggers: `fenced_write(namespace, key_column, fence_column)` for a table of one
        // namespace, `fenced_write_by_column(namespace_column, key_column, fence_column)`
        // for rows that carry their namespace (as `tsvector_update_trigger` and
        // `tsvector_update_trigger_column` split a literal from a column).
        plpgsql(
            &s,
            "fenced_write()",
            "trigger",
            DEFINER,
            &format!(
                "BEGIN
                   IF TG_NARGS <> 3 OR TG_ARGV[0] IS NULL OR TG_ARGV[0] = '' THEN
                     RAISE EXCEPTION USING ERRCODE = '39P01',
                       MESSAGE = format('accord: fenced_write on %I.%I takes three arguments: namespace, key_column, fence_column',
                                        TG_TABLE_SCHEMA, TG_TABLE_NAME);
                   END IF;
                   PERFORM {s}._fenced_row(format('%I.%I', TG_TABLE_SCHEMA, TG_TABLE_NAME),
                                           TG_ARGV[0], TG_ARGV[1], TG_ARGV[2], to_jsonb(NEW));
                   RETURN NEW;
                 END"
            ),
        ),
        plpgsql(
            &s,
            "fenced_write_by_column()",
            "trigger",
            DEFINER,
            &format!(
                "DECLARE r jsonb := to_jsonb(NEW);
                 BEGIN
                   IF TG_NARGS <> 3 THEN
                     RAISE EXCEPTION USING ERRCODE = '39P01',
                       MESSAGE = format('accord: fenced_write_by_column on %I.%I takes three arguments: namespace_column, key_column, fence_column',
                                        TG_TABLE_SCHEMA, TG_TABLE_NAME);
                   END IF;
                   IF NOT r ? TG_ARGV[0] THEN
                     RAISE EXCEPTION USING ERRCODE = '42703',
                       MESSAGE = format('accord: table %I.%I has no column %I (fenced_write_by_column''s namespace_column)',
                                        TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_ARGV[0]);
                   END IF;
                   PERFORM {s}._fenced_row(format('%I.%I', TG_TABLE_SCHEMA, TG_TABLE_NAME),
                                           r ->> TG_ARGV[0], TG_ARGV[1], TG_ARGV[2], r);
                   RETURN NEW;
                 END"
            ),
        ),
    ];
    for f in PUBLIC_FUNCTIONS.iter().chain(INNER_FUNCTIONS) {
        out.push(format!("REVOKE ALL ON FUNCTION {s}.{f} FROM PUBLIC"));
    }
    out
}

/// `check_fence`'s full account (version 10's whole body, version 11's after its one statement):
/// the arguments checked in `validate`'s words, then the grant's state on the key's row locked
/// `FOR SHARE` (a shared holder's ticket too), and `AC001` saying why when it is not live. Uses
/// the function's `g record`.
fn check_fence_account(s: &str) -> String {
    format!(
        "                   PERFORM {s}._name('namespace', namespace, false);
                   PERFORM {s}._name('key', key, false);
                   IF fence IS NULL THEN PERFORM {s}._refuse_argument('fence', 'must not be NULL'); END IF;
                   g := {s}._grant_of(namespace, key, fence);
                   IF g.state <> 'live' THEN
                     PERFORM {s}._refuse_fence(namespace, key, fence, g.why);
                   END IF;"
    )
}

/// Migration 11's statements: `check_fence` answers the common case, a live exclusive grant,
/// with one statement. Version 10's body made three nested PL/pgSQL calls before it looked at
/// the key (the two names' checks, then `_grant_of`), about 80 µs of server time more than the
/// application's UPDATE; the checks and the full account of why a fence is refused are needed
/// only when the one statement finds no live grant, so they come after it, as in version 10.
/// The same order as `_grant_of`: the key's row locked `FOR SHARE` first, the clock read after
/// the lock (docs/semantics.md, "Proof").
pub(crate) fn migration_11(schema: &str) -> Vec<String> {
    let s = quote_ident(schema);
    let body = format!(
        "#variable_conflict use_variable
         DECLARE
           expires timestamptz;
           g record;
         BEGIN
           SELECT k.expires_at INTO expires FROM {s}.leases k
            WHERE k.namespace = namespace AND k.key = key AND k.fence = fence AND NOT k.done
            FOR SHARE;
           IF expires > clock_timestamp() THEN
             RETURN;
           END IF;
           -- Not a live exclusive grant: the arguments' checks, a shared holder, or why not.
{}
         END",
        check_fence_account(&s)
    );
    // CREATE OR REPLACE keeps the function's owner and the EXECUTE a DBA granted.
    vec![format!(
        "CREATE OR REPLACE FUNCTION {s}.check_fence(namespace text, key text, fence bigint) \
         RETURNS void LANGUAGE plpgsql {DEFINER} AS {}",
        super::sql::dollar_quote(&body)
    )]
}

/// The calls the Rust helpers (and any driver) send in the application's transaction; $1
/// namespace, $2 key, $3 fence (and $4 metadata, JSON text or NULL, for done).
#[derive(Clone, Debug)]
pub(crate) struct FencedCalls {
    pub check: String,
    pub done: String,
    pub release: String,
}

impl FencedCalls {
    pub fn new(schema: &str, placeholders: Placeholders) -> FencedCalls {
        let s = placeholders.literal(&quote_ident(schema));
        let call = |function: &str, casts: &[&str]| {
            let args: Vec<String> = (1..)
                .zip(casts)
                .map(|(n, cast)| format!("{}::{cast}", placeholders.nth(n)))
                .collect();
            format!("SELECT {s}.{function}({})", args.join(", "))
        };
        FencedCalls {
            check: call("check_fence", &["text", "text", "bigint"]),
            done: call("done", &["text", "text", "bigint", "text::jsonb"]) + "::text",
            release: call("release", &["text", "text", "bigint"]),
        }
    }
}
