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

/// Mirrors the acquire statement's `WHERE NOT l.done AND (l.expires_at IS NULL OR
/// l.expires_at <= clock_timestamp() OR l.attempt = $4)` (and its insert of a key never seen).
pub(crate) fn grantable(key: Option<&StoredKey<'_>>, attempt: i64, now_ms: i64) -> Grantable {
    let Some(key) = key else {
        return Grantable::Yes;
    };
    if key.done {
        return Grantable::Done;
    }
    match key.expires_at_ms {
        Some(expires) if expires > now_ms && key.attempt != Some(attempt) => {
            Grantable::Held(Duration::from_millis((expires - now_ms) as u64))
        }
        _ => Grantable::Yes,
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
        }
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
