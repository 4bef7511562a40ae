//! The storage rules, in one place: what state a stored key is in, when it may be granted, when
//! a fenced statement still finds its grant, how metadata merges and what a metadata filter
//! matches.
//!
//! PostgreSQL runs these rules as SQL (`backend/postgres/sql.rs`); the embedded store runs
//! them as these functions. Each function names the SQL it mirrors, and its tests pin the
//! cases where a naive version would differ from PostgreSQL (nested containment, numbers by
//! value, arrays as sets). A rule changes here and in that SQL together, never in a backend
//! alone.
//!
//! Times are milliseconds on the coordinator's clock.

use std::time::Duration;

use serde_json::Value;

use crate::error::{Error, ErrorKind};
use crate::metadata::Metadata;
use crate::options::KeyState;

/// The columns of a stored key that the rules read.
#[derive(Clone, Debug)]
pub(crate) struct StoredKey<'a> {
    pub owner: Option<&'a str>,
    pub fence: i64,
    /// Expiry of the current grant; `None` once released or done.
    pub expires_at_ms: Option<i64>,
    pub done: bool,
    /// The acquire call that made the current grant.
    pub attempt: Option<i64>,
    /// While shared holders may be live: the latest expiry of any of them (`None` once the
    /// last one released).
    pub shared_until_ms: Option<i64>,
}

/// A live waiting acquire's place in a key's queue (tickets come from the fence sequence, so
/// a smaller ticket arrived first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Waiting {
    pub ticket: i64,
    pub shared: bool,
    pub expires_at_ms: i64,
}

/// What `list` reports. Mirrors
/// `CASE WHEN done THEN 'done' WHEN expires_at > clock_timestamp() THEN 'held' ELSE 'free' END`.
pub(crate) fn key_state(key: &StoredKey<'_>, now_ms: i64) -> KeyState {
    match key.expires_at_ms {
        _ if key.done => KeyState::Done,
        Some(expires) if expires > now_ms => KeyState::Held,
        _ => KeyState::Free,
    }
}

/// Whether a key is held by shared holders only: `list` shows them (granted tickets), not the
/// key's own row. Mirrors the list statement's `by_shared`.
pub(crate) fn held_by_shared(key: &StoredKey<'_>, now_ms: i64) -> bool {
    !key.done
        && key.shared_until_ms.is_some_and(|u| u > now_ms)
        && key.expires_at_ms.is_none_or(|e| e <= now_ms)
}

/// What an acquire may do with a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Grantable {
    /// Free, expired, never seen, or already granted to this very acquire call (a retry whose
    /// first answer was lost).
    Yes,
    /// Held by a live grant, for this long yet.
    Held(Duration),
    Done,
}

/// An exclusive grant, regardless of any queue (a claim of a pool's key). Mirrors the claim
/// statement's `NOT l.done AND ((l.expires_at IS NULL OR l.expires_at <= clock_timestamp())
/// AND (l.shared_until IS NULL OR l.shared_until <= clock_timestamp()) OR (l.attempt = $4
/// AND l.expires_at > clock_timestamp()))`.
pub(crate) fn grantable(key: Option<&StoredKey<'_>>, attempt: i64, now_ms: i64) -> Grantable {
    grantable_in_turn(key, false, &[], attempt, now_ms)
}

/// Whether an acquire may be granted now, given the live waiting tickets `ahead` of it (all
/// of them for an acquire that has no ticket yet: it is last in line). Mirrors the
/// `acquire` and `acquire_queued` statements:
/// - a done key is never granted; this very acquire call is granted again while its grant
///   is live (a retry whose first answer was lost), and otherwise only as any other grant;
/// - an exclusive grant needs no live holder, no live shared holder and no ticket ahead;
/// - a shared grant needs no live exclusive holder and no exclusive ticket ahead (shared
///   tickets ahead are being granted alongside it), so a waiting writer stops new readers.
///
/// `Held` carries how long until the soonest blocker may end (a holder's or a dead waiter's
/// expiry: a waiter that dies costs the others at most its ttl).
pub(crate) fn grantable_in_turn(
    key: Option<&StoredKey<'_>>,
    shared: bool,
    ahead: &[Waiting],
    attempt: i64,
    now_ms: i64,
) -> Grantable {
    let mut soonest: Option<i64> = None;
    let mut blocked_until = |until: i64| {
        soonest = Some(soonest.map_or(until, |s| s.min(until)));
    };
    if let Some(key) = key {
        if key.done {
            return Grantable::Done;
        }
        // This very acquire call's grant, still live (a retry whose first answer was lost):
        // granted again. Once that grant has expired, the retry is a new grant and meets every
        // condition below: a shared holder or a waiter may have come in since (a shared grant
        // leaves `attempt` as it was).
        if key.attempt == Some(attempt) && !shared && key.expires_at_ms.is_some_and(|e| e > now_ms)
        {
            return Grantable::Yes;
        }
        if let Some(expires) = key.expires_at_ms.filter(|&e| e > now_ms) {
            blocked_until(expires);
        }
        if let Some(until) = key.shared_until_ms.filter(|&u| u > now_ms && !shared) {
            blocked_until(until);
        }
    }
    for w in ahead.iter().filter(|w| w.expires_at_ms > now_ms) {
        if !(shared && w.shared) {
            blocked_until(w.expires_at_ms);
        }
    }
    match soonest {
        Some(until) => Grantable::Held(Duration::from_millis((until - now_ms) as u64)),
        None => Grantable::Yes,
    }
}

/// Which waiting tickets a key that just became free wakes, as `(first, last)` (`last` None:
/// no bound): the head of the queue, and when the head is shared, every ticket before the
/// next exclusive one (they are granted together). `None`: nobody waits in line. `except` is
/// a ticket leaving the queue in the same statement. Mirrors `sql::wake_payload`.
pub(crate) fn wake_range(
    waiting: &[Waiting],
    except: Option<i64>,
    now_ms: i64,
) -> Option<(i64, Option<i64>)> {
    let mut live: Vec<&Waiting> = waiting
        .iter()
        .filter(|w| w.expires_at_ms > now_ms && Some(w.ticket) != except)
        .collect();
    live.sort_by_key(|w| w.ticket);
    let head = live.first()?;
    if !head.shared {
        return Some((head.ticket, Some(head.ticket)));
    }
    let next_exclusive = live.iter().find(|w| !w.shared).map(|w| w.ticket - 1);
    Some((head.ticket, next_exclusive))
}

/// How many hex digits of the digest a wake-up tag keeps (128 bits).
pub(crate) const WAKE_TAG_HEX: usize = 32;

/// The tag a wake-up carries instead of a key's (or a pool's) name: the first
/// [`WAKE_TAG_HEX`] hex digits of SHA-256 over the schema's wake-up secret, the namespace's
/// length in UTF-8 bytes, `:`, the namespace and the key. Any role may LISTEN on the wake-up
/// channel; without the secret (which only roles that can read accord's tables can read) a
/// tag cannot be told from random, nor a guessed name checked against it. The length keeps
/// (`ab`, `c`) and (`a`, `bc`) apart. Mirrors `sql::wake_tag`.
pub(crate) fn wake_tag(secret: &str, namespace: &str, key: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut digest = Sha256::new();
    digest.update(secret.as_bytes());
    digest.update(namespace.len().to_string().as_bytes());
    digest.update(b":");
    digest.update(namespace.as_bytes());
    digest.update(key.as_bytes());
    let mut hex = String::with_capacity(WAKE_TAG_HEX);
    for byte in digest.finalize().iter().take(WAKE_TAG_HEX / 2) {
        hex.push_str(&format!("{byte:02x}"));
    }
    hex
}

/// Whether a ticket is an acquire waiting in line now, as `snapshot` counts waiters: not
/// granted (a granted ticket is a shared holder) and its place live (a waiter pushes its
/// ticket's expiry back at each try; one that stopped trying loses its place at that expiry).
/// The same liveness `grantable_in_turn` and `wake_range` apply to the tickets ahead. Mirrors
/// `NOT granted AND expires_at > clock_timestamp()`. A ticket past that expiry, granted or
/// not, is dead: nothing reads it again, and the sweeps of `acquire_queued`, `reset` and `sweep`
/// delete it (`expires_at <= clock_timestamp()`).
pub(crate) fn waits_in_line(granted: bool, expires_at_ms: i64, now_ms: i64) -> bool {
    !granted && expires_at_ms > now_ms
}

/// Whether a group's member row may be deleted: nobody holds it (left, or expired) and it is
/// neither done nor a pool's key (those rows carry state: a done key must stay done, an offered
/// key stays offered). Deleting it sets no fence back: fences come from the sequence. Mirrors
/// the `sweep` statement's `NOT done AND pool IS NULL AND (expires_at IS NULL OR expires_at <=
/// clock_timestamp()) AND (shared_until IS NULL OR shared_until <= clock_timestamp())`.
pub(crate) fn member_row_is_sweepable(key: &StoredKey<'_>, pooled: bool, now_ms: i64) -> bool {
    !key.done
        && !pooled
        && key.expires_at_ms.is_none_or(|e| e <= now_ms)
        && key.shared_until_ms.is_none_or(|u| u <= now_ms)
}

/// A shared grant's effect on the key's count of shared holders and their latest expiry:
/// a count whose holders all expired starts again at one. Mirrors the `acquire_queued`
/// statement's `shared_holders = CASE WHEN l.shared_until > clock_timestamp() THEN
/// l.shared_holders + 1 ELSE 1 END, shared_until = GREATEST(l.shared_until, <expiry>)`.
pub(crate) fn shared_granted(
    holders: i64,
    until_ms: Option<i64>,
    expires_ms: i64,
    now_ms: i64,
) -> (i64, i64) {
    match until_ms {
        Some(until) if until > now_ms => (holders + 1, until.max(expires_ms)),
        _ => (1, expires_ms),
    }
}

/// A shared holder leaving: (holders, latest expiry). At zero the key has no shared holder
/// and wakes the head of its queue. Mirrors `release_shared`.
pub(crate) fn shared_released(holders: i64, until_ms: Option<i64>) -> (i64, Option<i64>) {
    if holders <= 1 {
        (0, None)
    } else {
        (holders - 1, until_ms)
    }
}

/// Whether a fenced statement (renew, release, done) finds its grant live. Mirrors
/// `owner = $3 AND fence = $4 AND NOT done AND expires_at > clock_timestamp()`.
pub(crate) fn holds(key: &StoredKey<'_>, owner: &str, fence: i64, now_ms: i64) -> bool {
    key.owner == Some(owner)
        && key.fence == fence
        && !key.done
        && key.expires_at_ms.is_some_and(|e| e > now_ms)
}

/// Whether a release finds the key already released by this very grant (a retry whose first
/// try committed): that counts as released. Mirrors the release statement's second count,
/// `fence = $4 AND owner IS NULL AND expires_at IS NULL AND NOT done`.
pub(crate) fn released_by(key: &StoredKey<'_>, fence: i64) -> bool {
    key.fence == fence && key.owner.is_none() && key.expires_at_ms.is_none() && !key.done
}

/// Whether a done finds the key already done by this very grant. Mirrors the done
/// statement's second branch, `owner = $3 AND fence = $4 AND done`.
pub(crate) fn done_by(key: &StoredKey<'_>, owner: &str, fence: i64) -> bool {
    key.owner == Some(owner) && key.fence == fence && key.done
}

/// Whether marking a key done wakes the waiters of that key. Mirrors the done statement's
/// `WHERE pool IS NULL` on its `pg_notify`: a key of a work pool wakes nobody (claimers wait
/// for free keys; an acquire waiting on that very key learns it is done at the holder's expiry).
pub(crate) fn done_wakes(pool: Option<&str>) -> bool {
    pool.is_none()
}

/// Mirrors `metadata || patch` on jsonb objects: the patch's top-level keys replace the
/// base's (nested objects are replaced whole, not merged).
pub(crate) fn merge_metadata(base: &mut Metadata, patch: Metadata) {
    base.extend(patch);
}

/// Mirrors `metadata @> filter` (jsonb containment) for a filter object.
pub(crate) fn metadata_contains(metadata: &Metadata, filter: &Metadata) -> bool {
    object_contains(metadata, filter)
}

fn object_contains(value: &Metadata, filter: &Metadata) -> bool {
    filter
        .iter()
        .all(|(k, f)| value.get(k).is_some_and(|v| contains(v, f)))
}

/// jsonb containment below the top level: objects contain sub-objects, arrays contain every
/// element of the filter array (in any order, duplicates ignored), scalars are equal (numbers
/// by value: `1` and `1.0` are equal). PostgreSQL's one exception, an array containing a bare
/// scalar, applies only at the top level, which for metadata is always an object.
fn contains(value: &Value, filter: &Value) -> bool {
    match (value, filter) {
        (Value::Object(v), Value::Object(f)) => object_contains(v, f),
        (Value::Array(v), Value::Array(f)) => {
            f.iter().all(|fe| v.iter().any(|ve| contains(ve, fe)))
        }
        (Value::Number(v), Value::Number(f)) => numbers_equal(v, f),
        (Value::Array(_) | Value::Object(_), _) | (_, Value::Array(_) | Value::Object(_)) => false,
        (v, f) => v == f,
    }
}

fn numbers_equal(a: &serde_json::Number, b: &serde_json::Number) -> bool {
    if let (Some(a), Some(b)) = (a.as_i64(), b.as_i64()) {
        return a == b;
    }
    if let (Some(a), Some(b)) = (a.as_u64(), b.as_u64()) {
        return a == b;
    }
    match (a.as_f64(), b.as_f64()) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// Which clients may run on a schema: the compatibility rule of rolling deploys, read by both
/// stores at connect (`backend/postgres/mod.rs`, `backend/sqlite/store.rs`).
///
/// A schema version is also the version of what clients exchange through the store (wake-up
/// payloads, the keys and metadata of recipes, fleet hand-offs). Each version from
/// `COMPATIBILITY_RECORDED_FROM` on records, in `schema_migrations.compatible_from`, the oldest
/// client schema version that may still run on it: clients of every version from there up to
/// the schema's own may run side by side. A version that changes nothing older clients read or
/// write keeps the previous version's clients (a view, an index); one that changes what they
/// exchange or need (a payload, a column they must write) names itself.
///
/// Each version from `COMPATIBILITY_RECORDED_FROM` on, with the oldest client version it keeps
/// working. Version 9 (the view `holders`, this record) changes nothing clients exchange: 8's
/// clients keep working. Version 10 (functions for the application's transaction: fenced
/// writes) adds functions only, whose wake-ups are the clients' own statements: 8's clients
/// keep working (though only 10's keepalive passes over a row a fenced transaction holds,
/// instead of waiting for it). Version 11 (a faster `check_fence`, the same rule) replaces a
/// function's body only: 8's clients keep working. (Version 8's clients do not mix with 7's:
/// wake-up payloads and fleet hand-offs changed.)
pub(crate) const KEEPS_CLIENTS_FROM: &[(i32, i32)] = &[(9, 8), (10, 8), (11, 8)];

/// The version whose migration adds `schema_migrations.compatible_from`: rows before it have
/// none (their clients do not read it).
pub(crate) const COMPATIBILITY_RECORDED_FROM: i32 = 9;

/// The oldest client schema version that may run on a schema at `version` (a version not listed
/// keeps only its own clients).
pub(crate) fn compatible_from(version: i32) -> i32 {
    KEEPS_CLIENTS_FROM
        .iter()
        .find(|(v, _)| *v == version)
        .map_or(version, |(_, from)| *from)
}

/// What a client at schema version `mine` finds in a store at version `installed`, whose newest
/// row says it keeps clients from `compatible_from` (`None`: not recorded, which only a version
/// before `COMPATIBILITY_RECORDED_FROM`, or a row written by hand, lacks: taken as keeping its
/// own clients only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SchemaFit {
    /// The client's version: nothing to do.
    Current,
    /// Older than the client: migrate (or say how).
    Behind,
    /// Newer, and it keeps this client working: run.
    NewerCompatible,
    /// Newer, and this client may not run on it: refuse, saying to upgrade the client.
    TooNew { compatible_from: i32 },
}

pub(crate) fn schema_fit(mine: i32, installed: i32, compatible_from: Option<i32>) -> SchemaFit {
    if installed < mine {
        return SchemaFit::Behind;
    }
    if installed == mine {
        return SchemaFit::Current;
    }
    let from = compatible_from.unwrap_or(installed);
    if from <= mine {
        SchemaFit::NewerCompatible
    } else {
        SchemaFit::TooNew {
            compatible_from: from,
        }
    }
}

/// The refusal of a client too old for its store: `store` names it ("schema \"accord\"", "the
/// SQLite store /path").
pub(crate) fn too_new_error(store: &str, installed: i32, compatible_from: i32, mine: i32) -> Error {
    Error::new(
        ErrorKind::Database,
        format!(
            "{store} is at version {installed}; this accord (schema {mine}) cannot run on it \
             (it keeps clients from schema {compatible_from} on): upgrade this client \
             (docs/deployment.md, \"Upgrades\")"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Metadata {
        match v {
            Value::Object(m) => m,
            _ => panic!("not an object"),
        }
    }

    fn held(expires: Option<i64>, done: bool, attempt: Option<i64>) -> StoredKey<'static> {
        StoredKey {
            owner: Some("w"),
            fence: 7,
            expires_at_ms: expires,
            done,
            attempt,
            shared_until_ms: None,
        }
    }

    #[test]
    fn schemas_fit_clients_by_their_record() {
        assert_eq!(schema_fit(9, 8, None), SchemaFit::Behind);
        assert_eq!(schema_fit(9, 9, Some(8)), SchemaFit::Current);
        assert_eq!(schema_fit(9, 10, Some(9)), SchemaFit::NewerCompatible);
        assert_eq!(schema_fit(9, 10, Some(8)), SchemaFit::NewerCompatible);
        assert_eq!(
            schema_fit(9, 10, Some(10)),
            SchemaFit::TooNew {
                compatible_from: 10
            }
        );
        // Unrecorded: it keeps its own clients only.
        assert_eq!(
            schema_fit(9, 10, None),
            SchemaFit::TooNew {
                compatible_from: 10
            }
        );
        assert_eq!(compatible_from(9), 8);
        assert_eq!(compatible_from(1000), 1000);
    }

    #[test]
    fn states_follow_the_list_case() {
        assert_eq!(key_state(&held(Some(200), true, None), 100), KeyState::Done);
        assert_eq!(
            key_state(&held(Some(200), false, None), 100),
            KeyState::Held
        );
        // `expires_at > now`: at the instant of expiry the key is free.
        assert_eq!(
            key_state(&held(Some(100), false, None), 100),
            KeyState::Free
        );
        assert_eq!(key_state(&held(None, false, None), 100), KeyState::Free);
    }

    #[test]
    fn grants_follow_the_acquire_where_clause() {
        assert_eq!(grantable(None, 1, 100), Grantable::Yes);
        assert_eq!(
            grantable(Some(&held(None, true, None)), 1, 100),
            Grantable::Done
        );
        assert_eq!(
            grantable(Some(&held(Some(150), false, Some(2))), 1, 100),
            Grantable::Held(Duration::from_millis(50))
        );
        // The same acquire call retried after a lost answer is granted again.
        assert_eq!(
            grantable(Some(&held(Some(150), false, Some(1))), 1, 100),
            Grantable::Yes
        );
        assert_eq!(
            grantable(Some(&held(Some(100), false, Some(2))), 1, 100),
            Grantable::Yes
        );
    }

    #[test]
    fn a_retry_after_its_grant_expired_meets_every_condition() {
        // The call's first grant expired (its answer lost), then shared holders came: a shared
        // grant leaves `attempt` as it was, and the retry must not be granted beside them.
        let read_held = StoredKey {
            shared_until_ms: Some(400),
            ..held(Some(90), false, Some(1))
        };
        assert_eq!(
            grantable_in_turn(Some(&read_held), false, &[], 1, 100),
            Grantable::Held(Duration::from_millis(300))
        );
        assert_eq!(
            grantable(Some(&read_held), 1, 100),
            Grantable::Held(Duration::from_millis(300))
        );
        // Nor past a waiter in line.
        let expired = held(Some(90), false, Some(1));
        assert!(matches!(
            grantable_in_turn(Some(&expired), false, &[waiting(5, false)], 1, 100),
            Grantable::Held(_)
        ));
        // While its grant is live, waiters behind it do not stop it (it holds the key).
        let live = held(Some(150), false, Some(1));
        assert_eq!(
            grantable_in_turn(Some(&live), false, &[waiting(5, false)], 1, 100),
            Grantable::Yes
        );
    }

    fn waiting(ticket: i64, shared: bool) -> Waiting {
        Waiting {
            ticket,
            shared,
            expires_at_ms: 1_000,
        }
    }

    #[test]
    fn only_rows_nobody_holds_are_swept() {
        let left = held(None, false, None);
        assert!(member_row_is_sweepable(&left, false, 100));
        assert!(member_row_is_sweepable(
            &held(Some(100), false, None),
            false,
            100
        ));
        assert!(!member_row_is_sweepable(
            &held(Some(101), false, None),
            false,
            100
        ));
        assert!(!member_row_is_sweepable(
            &held(None, true, None),
            false,
            100
        ));
        assert!(!member_row_is_sweepable(&left, true, 100));
        let read_held = StoredKey {
            shared_until_ms: Some(101),
            ..left
        };
        assert!(!member_row_is_sweepable(&read_held, false, 100));
    }

    #[test]
    fn waiters_are_live_tickets_not_granted() {
        assert!(waits_in_line(false, 101, 100));
        // At the instant of expiry the place is gone, as `expires_at > clock_timestamp()`.
        assert!(!waits_in_line(false, 100, 100));
        // A granted ticket is a shared holder, not a waiter.
        assert!(!waits_in_line(true, 101, 100));
    }

    #[test]
    fn turns_follow_the_queued_acquire_statement() {
        let free = held(None, false, None);
        // Nobody ahead: granted; a live waiter ahead holds an exclusive acquire back until
        // its place expires.
        assert_eq!(
            grantable_in_turn(Some(&free), false, &[], 1, 100),
            Grantable::Yes
        );
        assert_eq!(
            grantable_in_turn(Some(&free), false, &[waiting(5, true)], 1, 100),
            Grantable::Held(Duration::from_millis(900))
        );
        // A dead waiter's place no longer counts.
        let dead = Waiting {
            expires_at_ms: 50,
            ..waiting(5, false)
        };
        assert_eq!(
            grantable_in_turn(Some(&free), false, &[dead], 1, 100),
            Grantable::Yes
        );
        // Shared: other readers ahead are no obstacle, a writer ahead is.
        assert_eq!(
            grantable_in_turn(Some(&free), true, &[waiting(5, true)], 1, 100),
            Grantable::Yes
        );
        assert!(matches!(
            grantable_in_turn(Some(&free), true, &[waiting(5, false)], 1, 100),
            Grantable::Held(_)
        ));
        // Live shared holders stop an exclusive grant, not a shared one.
        let read_held = StoredKey {
            shared_until_ms: Some(400),
            ..free.clone()
        };
        assert_eq!(
            grantable_in_turn(Some(&read_held), false, &[], 1, 100),
            Grantable::Held(Duration::from_millis(300))
        );
        assert_eq!(
            grantable_in_turn(Some(&read_held), true, &[], 1, 100),
            Grantable::Yes
        );
        // An exclusive holder stops both; the soonest blocker is reported.
        let write_held = held(Some(250), false, Some(9));
        assert_eq!(
            grantable_in_turn(Some(&write_held), true, &[waiting(5, false)], 1, 100),
            Grantable::Held(Duration::from_millis(150))
        );
        assert_eq!(
            grantable_in_turn(Some(&held(None, true, None)), true, &[], 1, 100),
            Grantable::Done
        );
    }

    #[test]
    fn wake_tags_are_keyed_and_unambiguous() {
        let tag = wake_tag("s", "ns", "key");
        assert_eq!(tag.len(), WAKE_TAG_HEX);
        assert_eq!(tag, wake_tag("s", "ns", "key"));
        assert_ne!(tag, wake_tag("t", "ns", "key"));
        assert_ne!(wake_tag("s", "ab", "c"), wake_tag("s", "a", "bc"));
        assert!(!tag.contains("key") && !tag.contains("ns"));
    }

    #[test]
    fn a_freed_key_wakes_the_head_of_its_line() {
        assert_eq!(wake_range(&[], None, 100), None);
        let line = [waiting(7, false), waiting(3, false), waiting(9, true)];
        assert_eq!(wake_range(&line, None, 100), Some((3, Some(3))));
        assert_eq!(wake_range(&line, Some(3), 100), Some((7, Some(7))));
        // Readers at the head wake together, up to the next writer.
        let readers = [
            waiting(3, true),
            waiting(4, true),
            waiting(8, false),
            waiting(9, true),
        ];
        assert_eq!(wake_range(&readers, None, 100), Some((3, Some(7))));
        assert_eq!(wake_range(&readers[..2], None, 100), Some((3, None)));
    }

    #[test]
    fn shared_holders_are_counted_on_the_key() {
        assert_eq!(shared_granted(0, None, 500, 100), (1, 500));
        assert_eq!(shared_granted(2, Some(700), 500, 100), (3, 700));
        // Holders that all expired start the count again.
        assert_eq!(shared_granted(2, Some(90), 500, 100), (1, 500));
        assert_eq!(shared_released(3, Some(700)), (2, Some(700)));
        assert_eq!(shared_released(1, Some(700)), (0, None));
    }

    #[test]
    fn fenced_statements_match_owner_fence_and_liveness() {
        let k = held(Some(150), false, None);
        assert!(holds(&k, "w", 7, 100));
        assert!(!holds(&k, "x", 7, 100));
        assert!(!holds(&k, "w", 8, 100));
        assert!(!holds(&k, "w", 7, 150));
        assert!(!holds(&held(Some(150), true, None), "w", 7, 100));
        let released = StoredKey {
            owner: None,
            expires_at_ms: None,
            ..k.clone()
        };
        assert!(released_by(&released, 7));
        assert!(!released_by(&released, 8));
        assert!(done_by(&held(None, true, None), "w", 7));
        assert!(!done_by(&held(None, true, None), "x", 7));
    }

    #[test]
    fn merge_replaces_top_level_keys_like_jsonb_concat() {
        // SELECT '{"a":{"x":1},"b":1}'::jsonb || '{"a":{"y":2}}' = {"a": {"y": 2}, "b": 1}
        let mut base = obj(json!({"a": {"x": 1}, "b": 1}));
        merge_metadata(&mut base, obj(json!({"a": {"y": 2}})));
        assert_eq!(Value::Object(base), json!({"a": {"y": 2}, "b": 1}));
    }

    /// Each case is `SELECT doc::jsonb @> filter::jsonb` on PostgreSQL 15.
    #[test]
    fn containment_matches_jsonb() {
        let cases = [
            (json!({"a": 1, "b": 2}), json!({}), true),
            (json!({"a": 1, "b": 2}), json!({"a": 1}), true),
            (json!({"a": 1}), json!({"a": 2}), false),
            (json!({"a": 1}), json!({"b": null}), false),
            (json!({"a": null}), json!({"a": null}), true),
            (json!({"a": 1}), json!({"a": 1.0}), true),
            (json!({"a": "1"}), json!({"a": 1}), false),
            (json!({"a": {"b": 1, "c": 2}}), json!({"a": {"b": 1}}), true),
            (
                json!({"a": {"b": 1}}),
                json!({"a": {"b": 1, "c": 2}}),
                false,
            ),
            (
                json!({"a": {"b": {"c": [1, 2]}}}),
                json!({"a": {"b": {"c": [2]}}}),
                true,
            ),
            (json!({"tags": ["x", "y"]}), json!({"tags": ["y"]}), true),
            (
                json!({"tags": ["x", "y"]}),
                json!({"tags": ["y", "x", "y"]}),
                true,
            ),
            (json!({"tags": ["x", "y"]}), json!({"tags": []}), true),
            (json!({"tags": ["x"]}), json!({"tags": ["x", "z"]}), false),
            // The bare-scalar exception holds only at the top level.
            (json!({"tags": ["x", "y"]}), json!({"tags": "y"}), false),
            (
                json!({"tags": [{"k": 1, "v": 2}]}),
                json!({"tags": [{"k": 1}]}),
                true,
            ),
            (json!({"a": [[1, 2], [3]]}), json!({"a": [[3]]}), true),
            (json!({"a": {}}), json!({"a": []}), false),
        ];
        for (doc, filter, expected) in cases {
            assert_eq!(
                metadata_contains(&obj(doc.clone()), &obj(filter.clone())),
                expected,
                "{doc} @> {filter}"
            );
        }
    }
}
