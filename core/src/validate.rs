//! The input rules (G11 in docs/semantics.md), checked once in the core so that every binding and backend
//! refuses the same inputs with the same messages.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::metadata::Metadata;
use crate::wording::Why;

/// Keys, namespaces and owners: non-empty UTF-8 without NUL, at most this many bytes.
pub const MAX_NAME_BYTES: usize = 512;
/// Channel names: PostgreSQL identifiers are at most 63 bytes (longer ones are truncated
/// silently by the server, which would merge channels, so they are refused instead).
pub const MAX_CHANNEL_BYTES: usize = 63;
/// Serialized metadata objects: at most 64 KiB.
pub const MAX_METADATA_BYTES: usize = 64 * 1024;
/// Shortest lease: shorter ones could not be renewed reliably over a network.
pub const MIN_TTL: Duration = Duration::from_millis(100);
/// Longest lease.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
/// Most command connections one client opens.
pub const MAX_POOL_SIZE: usize = 64;
/// Largest page `list` returns.
pub const MAX_LIST_LIMIT: usize = 1000;

/// Most keys one `offer` call takes (sent in statements of [`OFFER_BATCH`]).
pub const MAX_OFFER_KEYS: usize = 5000;
/// Keys per offer statement.
pub const OFFER_BATCH: usize = 1000;
/// Most keys one `claim` grants.
pub const MAX_CLAIM_LIMIT: usize = 1000;
/// Most permits of a semaphore.
pub const MAX_PERMITS: usize = 10_000;
/// The largest stream event payload, in bytes of UTF-8.
pub const MAX_EVENT_BYTES: usize = 64 * 1024;
/// The most events one `publish_many` call takes.
pub const MAX_PUBLISH_EVENTS: usize = 10_000;
/// The most events one read of a stream (a subscription's page) fetches.
pub const MAX_PAGE_SIZE: usize = 1_000;

/// A claim's limit from a binding's integer: `InvalidArgument` naming `limit` outside
/// 1..=[`MAX_CLAIM_LIMIT`].
pub fn claim_limit(value: i64) -> Result<usize> {
    count("limit", value, MAX_CLAIM_LIMIT)
}

/// A semaphore's limit from a binding's integer: `InvalidArgument` naming `limit` outside
/// 1..=[`MAX_PERMITS`].
pub fn permits(value: i64) -> Result<usize> {
    count("limit", value, MAX_PERMITS)
}

/// Most shards of one fleet.
pub const MAX_SHARDS: usize = 10_000;
/// Most hand-offs one fleet member asks for in a period.
pub const MAX_HANDOFFS_PER_PERIOD: usize = 1_000;

/// A fleet's shard count from a binding's integer: `InvalidArgument` naming `shards` outside
/// 1..=[`MAX_SHARDS`].
pub fn shards(value: i64) -> Result<usize> {
    count("shards", value, MAX_SHARDS)
}

/// A fleet's hand-offs per period from a binding's integer: `InvalidArgument` naming
/// `max_handoffs_per_period` outside 1..=[`MAX_HANDOFFS_PER_PERIOD`].
pub fn handoffs_per_period(value: i64) -> Result<usize> {
    count("max_handoffs_per_period", value, MAX_HANDOFFS_PER_PERIOD)
}

/// A count the core received as `usize`, judged by the same words as a binding's integer.
pub(crate) fn usize_count(value: usize) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// A pool's prefix and the keys offered under it: the prefix is a name; each key is a name that
/// starts with the prefix and is longer; at most [`MAX_OFFER_KEYS`] keys.
pub(crate) fn offer(prefix: &str, keys: &[String]) -> Result<()> {
    name("prefix", prefix)?;
    if keys.len() > MAX_OFFER_KEYS {
        return Err(Error::invalid(
            "keys",
            format!(
                "{} keys in one offer, the limit is {MAX_OFFER_KEYS} (offer them in several calls)",
                keys.len()
            ),
        ));
    }
    for key in keys {
        name("key", key)?;
        if key.len() <= prefix.len() || !key.starts_with(prefix) {
            return Err(Error::invalid(
                "key",
                format!("{key:?} is not under the prefix {prefix:?}"),
            ));
        }
    }
    Ok(())
}

/// A client's pool size from a binding's integer: `InvalidArgument` naming `pool_size`
/// outside 1..=[`MAX_POOL_SIZE`].
pub fn pool_size(value: i64) -> Result<usize> {
    count("pool_size", value, MAX_POOL_SIZE)
}

/// A list page size from a binding's integer: `InvalidArgument` naming `limit` outside
/// 1..=[`MAX_LIST_LIMIT`].
pub fn list_limit(value: i64) -> Result<usize> {
    count("limit", value, MAX_LIST_LIMIT)
}

fn count(field: &str, value: i64, max: usize) -> Result<usize> {
    match usize::try_from(value) {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(Error::invalid(
            field,
            format!("{value} is outside 1..={max}"),
        )),
    }
}

pub(crate) fn name(field: &str, value: &str) -> Result<()> {
    bounded_text(field, value, MAX_NAME_BYTES)
}

/// The key prefixes under which recipes keep their state, with what each is reserved for and
/// the call that manages it. A plain call that would write there (acquire, try_acquire, reset,
/// done, offer, claim) is refused, naming the recipe: a member's, shard's or leader's key taken,
/// reset or marked done by hand would keep the recipe from it with no error. Reading (`list`,
/// `counts`, `snapshot`) stays allowed. Semaphores keep their permits as ordinary keys and
/// survive plain calls instead (`crate::semaphore`).
pub const RESERVED_KEY_PREFIXES: &[(&str, &str, &str)] = &[
    ("accord.group/", "groups", "client.join(...)"),
    ("accord.fleet/", "fleets", "client.fleet(...)"),
    ("accord.election/", "elections", "client.election(...)"),
];

/// A key or pool prefix of a plain call: refused when it lies under a recipe's prefix
/// ([`RESERVED_KEY_PREFIXES`]).
pub(crate) fn unreserved(field: &str, value: &str) -> Result<()> {
    match RESERVED_KEY_PREFIXES
        .iter()
        .find(|(prefix, _, _)| value.starts_with(prefix))
    {
        Some((prefix, recipe, call)) => Err(Error::invalid(
            field,
            format!("{value:?} is under {prefix:?}, which is reserved for {recipe}; use {call}"),
        )),
        None => Ok(()),
    }
}

/// The start of every channel accord notifies on for itself: the wake-ups of waiting acquires
/// (`accord_wakeup_<schema>`, or `accord_wakeup` on the embedded store), the announcements of
/// streams, groups, fleets and elections (`accord_stream_<hash>`, …) and the listening
/// connection's probe (`accord_probe_<random>`). `notify` and `listen` refuse channels that
/// start with it: a forged wake-up or announcement would mislead clients, and a subscription
/// of a client's own channel would share its LISTEN.
pub const RESERVED_CHANNEL_PREFIX: &str = "accord_";

/// A channel of `notify` or `listen`: a bounded name that is not one of accord's own.
pub(crate) fn channel(value: &str) -> Result<()> {
    bounded_text("channel", value, MAX_CHANNEL_BYTES)?;
    if value.starts_with(RESERVED_CHANNEL_PREFIX) {
        return Err(Error::invalid(
            "channel",
            format!(
                "{value:?} starts with {RESERVED_CHANNEL_PREFIX:?}, which is reserved for accord's \
                 own notifications (wake-ups of waiting acquires, streams, groups, fleets, \
                 elections)"
            ),
        ));
    }
    Ok(())
}

fn bounded_text(field: &str, value: &str, max: usize) -> Result<()> {
    if value.is_empty() {
        return Err(Error::invalid(field, "must not be empty"));
    }
    if value.len() > max {
        return Err(Error::invalid(
            field,
            format!("is {} bytes long, the limit is {max}", value.len()),
        ));
    }
    if value.contains('\0') {
        return Err(Error::invalid(field, "must not contain NUL characters"));
    }
    Ok(())
}

/// The unit of a number of a binding's language.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeUnit {
    /// Milliseconds (C, Go, Node).
    Millis,
    /// Seconds (Python).
    Seconds,
}

impl TimeUnit {
    fn symbol(self) -> &'static str {
        match self {
            TimeUnit::Millis => "ms",
            TimeUnit::Seconds => "s",
        }
    }

    fn per_second(self) -> f64 {
        match self {
            TimeUnit::Millis => 1000.0,
            TimeUnit::Seconds => 1.0,
        }
    }
}

/// A number as a binding's user wrote it: `1e300` rather than 301 digits.
fn number(value: f64) -> String {
    if value != 0.0 && !(1e-6..1e15).contains(&value.abs()) {
        format!("{value:e}")
    } else {
        format!("{value}")
    }
}

/// A ttl a binding received as a whole number of milliseconds (C, Go): `InvalidArgument`
/// naming `field` and the value as given when it is negative or outside [`MIN_TTL`]..=[`MAX_TTL`].
pub fn ttl_millis(field: &str, ms: i64) -> Result<Duration> {
    let value = duration_millis(field, ms)?;
    ttl(field, value)?;
    Ok(value)
}

/// A duration a binding received as a whole number of milliseconds (C, Go) that has no
/// "without limit": `InvalidArgument` naming `field` and the value given when negative.
pub fn duration_millis(field: &str, ms: i64) -> Result<Duration> {
    u64::try_from(ms)
        .map(Duration::from_millis)
        .map_err(|_| Error::invalid(field, Why::new().millis(ms).text(" is negative")))
}

/// A ttl a binding received as a number of `unit`s (Python's seconds, Node's milliseconds):
/// `InvalidArgument` naming `field` and the value as given when it is not a number, negative,
/// or outside [`MIN_TTL`]..=[`MAX_TTL`] (never a converted or clamped value).
pub fn ttl_number(field: &str, value: f64, unit: TimeUnit) -> Result<Duration> {
    if value.is_nan() {
        return Err(Error::invalid(field, "NaN is not a duration"));
    }
    let given = format!("{} {}", number(value), unit.symbol());
    if value < 0.0 {
        return Err(Error::invalid(field, format!("{given} is negative")));
    }
    match Duration::try_from_secs_f64(value / unit.per_second()) {
        Ok(ttl) if (MIN_TTL..=MAX_TTL).contains(&ttl) => Ok(ttl),
        _ => Err(out_of_ttl_range(field, Why::new().text(given))),
    }
}

/// The one wording of the ttl range, after the value (as given, or a duration).
fn out_of_ttl_range(field: &str, value: Why) -> Error {
    Error::invalid(
        field,
        value
            .text(" is outside the allowed range ")
            .duration(MIN_TTL)
            .text("..=")
            .duration(MAX_TTL),
    )
}

/// A duration a binding received as a number of `unit`s (a fleet's period, a stream's
/// max_age): `InvalidArgument` naming `field` and the value as given when it is NaN, negative
/// or too large for a duration; its range is the core's to check where it is used.
pub fn duration_number(field: &str, value: f64, unit: TimeUnit) -> Result<Duration> {
    if value.is_nan() {
        return Err(Error::invalid(field, "NaN is not a duration"));
    }
    let given = || format!("{} {}", number(value), unit.symbol());
    if value < 0.0 {
        return Err(Error::invalid(field, format!("{} is negative", given())));
    }
    Duration::try_from_secs_f64(value / unit.per_second())
        .map_err(|_| Error::invalid(field, format!("{} is too long for a duration", given())))
}

/// The largest magnitude of an integer a double (a JavaScript number) holds exactly: 2^53-1.
pub const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

/// An integer a binding received as a double (a JavaScript number): `InvalidArgument` naming
/// `field` when it is NaN, infinite, has a fraction, or lies beyond ±[`MAX_SAFE_INTEGER`]
/// (where neighbouring integers are the same double). Its range is the core's to check where
/// it is used.
pub fn integer_number(field: &str, value: f64) -> Result<i64> {
    if value.fract() == 0.0 && value.abs() <= MAX_SAFE_INTEGER as f64 {
        return Ok(value as i64);
    }
    // As JavaScript prints numbers: integers in full below 1e21.
    let given = if value.is_nan() {
        "NaN".to_string()
    } else if value.is_infinite() {
        if value > 0.0 { "Infinity" } else { "-Infinity" }.to_string()
    } else if value.fract() == 0.0 && value.abs() < 1e21 {
        // Exactly, as JavaScript does (2**60 is 1152921504606846976, not …847000).
        (value as i128).to_string()
    } else {
        number(value)
    };
    let why = if value.is_finite() && value.fract() == 0.0 {
        format!("{given} is beyond the integers a number holds exactly (±{MAX_SAFE_INTEGER})")
    } else {
        format!("{given} is not an integer")
    };
    Err(Error::invalid(field, why))
}

/// What a binding reports for an integer beyond 64 bits (a Python int): `InvalidArgument`
/// naming `field` and the value as given, `given` in decimal. Every count and seq of accord
/// fits in 64 bits with room to spare.
pub fn beyond_64_bits(field: &str, given: &str) -> Error {
    Error::invalid(
        field,
        format!("{given} is outside the 64-bit integer range (accord's counts and seqs are far smaller)"),
    )
}

/// What a binding reports when a string it was given holds an unpaired UTF-16 surrogate
/// (JavaScript strings can). Text in accord (keys, namespaces, owners, channels, payloads,
/// names) is Unicode: a sequence of Unicode scalar values, which a lone surrogate is not.
/// Replacing it (with U+FFFD, as a lossy conversion does) would make two different strings the
/// same key, so it is refused.
pub fn unpaired_surrogate(field: &str) -> Error {
    Error::invalid(
        field,
        "holds an unpaired UTF-16 surrogate, which is not Unicode text (replacing it would make \
         different strings the same)",
    )
}

/// What a binding reports when metadata it was given holds a value JSON cannot hold (NaN or
/// ±Infinity, a Map, a Set, a function, …): `at` says where (`metadata.rows`), `what` what it
/// is. Metadata is a JSON object (G11); a value a serializer would turn silently into `null` or
/// `{}` is refused instead.
pub fn not_json(field: &str, at: &str, what: &str) -> Error {
    Error::invalid(field, format!("{at} is {what}, which JSON cannot hold"))
}

pub(crate) fn ttl(field: &str, ttl: Duration) -> Result<()> {
    if ttl < MIN_TTL || ttl > MAX_TTL {
        return Err(out_of_ttl_range(field, Why::new().duration(ttl)));
    }
    Ok(())
}

/// Checks a metadata object and returns its JSON text, ready to be bound as a parameter.
pub(crate) fn metadata(field: &str, value: &Metadata) -> Result<String> {
    let text = serde_json::to_string(value)
        .map_err(|e| Error::invalid(field, format!("cannot be serialized as JSON: {e}")))?;
    if text.len() > MAX_METADATA_BYTES {
        return Err(Error::invalid(
            field,
            format!(
                "is {} bytes as JSON, the limit is {MAX_METADATA_BYTES}",
                text.len()
            ),
        ));
    }
    // Coordinators store text without NUL (PostgreSQL's jsonb rejects \u0000).
    if text.contains("\\u0000") {
        return Err(Error::invalid(field, "must not contain NUL characters"));
    }
    Ok(text)
}

pub(crate) fn payload(value: &str, max_bytes: usize) -> Result<()> {
    if value.len() > max_bytes {
        return Err(Error::invalid(
            "payload",
            format!(
                "is {} bytes long, the coordinator accepts at most {max_bytes}",
                value.len()
            ),
        ));
    }
    if value.contains('\0') {
        return Err(Error::invalid("payload", "must not contain NUL characters"));
    }
    Ok(())
}

/// A stream event's payload: any UTF-8 (NUL included: it is stored as bytes), up to 64 KiB.
pub(crate) fn event_payload(value: &str) -> Result<()> {
    if value.len() > MAX_EVENT_BYTES {
        return Err(Error::invalid(
            "payload",
            format!(
                "is {} bytes long, the limit is {MAX_EVENT_BYTES}",
                value.len()
            ),
        ));
    }
    Ok(())
}

/// A subscription's page size, from a binding's integer.
pub fn page_size(value: i64) -> Result<usize> {
    count("page_size", value, MAX_PAGE_SIZE)
}

/// A stream's `max_len` from a binding's integer: `InvalidArgument` naming `max_len` outside
/// 1..=2^63-1.
pub fn stream_max_len(value: i64) -> Result<u64> {
    if value < 1 {
        return Err(Error::invalid(
            "max_len",
            format!("{value} is outside 1..=9223372036854775807"),
        ));
    }
    Ok(value as u64)
}

/// How many events one `publish_many` carries: `InvalidArgument` naming `payloads` over
/// [`MAX_PUBLISH_EVENTS`] (a binding checks this before copying them).
pub fn publish_events(count: usize) -> Result<usize> {
    if count > MAX_PUBLISH_EVENTS {
        return Err(Error::invalid(
            "payloads",
            format!("holds {count} events, the limit is {MAX_PUBLISH_EVENTS} per call"),
        ));
    }
    Ok(count)
}

/// A seq given by a caller: 0 (before the first event) or more.
pub(crate) fn seq(field: &str, value: i64) -> Result<()> {
    if value < 0 {
        return Err(Error::invalid(field, format!("{value} is negative")));
    }
    Ok(())
}

/// A schema name is spliced into SQL as a quoted identifier, so it only has to fit.
pub(crate) fn schema(value: &str) -> Result<()> {
    bounded_text("schema", value, MAX_CHANNEL_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use crate::wording::{Durations, Fields, Style};

    #[test]
    fn names_are_bounded_and_clean() {
        assert!(name("key", "a/b").is_ok());
        assert!(name("key", "").unwrap_err().message().contains("key"));
        assert!(name("key", "a\0b").is_err());
        assert!(name("key", &"x".repeat(512)).is_ok());
        assert!(name("key", &"x".repeat(513)).is_err());
        // 171 three-byte characters = 513 bytes: the limit counts bytes, not characters.
        assert!(name("key", &"€".repeat(171)).is_err());
    }

    #[test]
    fn recipe_prefixes_are_reserved() {
        let refused = unreserved("key", "accord.fleet/f/s/0").unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::InvalidArgument);
        assert!(refused.message().contains("invalid key"), "{refused}");
        assert!(refused
            .message()
            .contains("reserved for fleets; use client.fleet(...)"));
        assert!(unreserved("prefix", "accord.group/g/").is_err());
        assert!(unreserved("key", "accord.election/e").is_err());
        assert!(unreserved("key", "accord.elections").is_ok());
        assert!(unreserved("key", "jobs/accord.fleet/x").is_ok());
        assert!(unreserved("key", "accord").is_ok());
    }

    #[test]
    fn numbers_of_bindings_by_the_cores_rules() {
        let node = Style {
            durations: Durations::Millis,
            fields: Fields::Camel,
        };
        let refused = |r: Result<i64>| r.unwrap_err().message_in(&node);
        assert_eq!(integer_number("limit", 7.0).unwrap(), 7);
        assert_eq!(integer_number("limit", -1.0).unwrap(), -1);
        assert_eq!(
            integer_number("limit", MAX_SAFE_INTEGER as f64).unwrap(),
            MAX_SAFE_INTEGER
        );
        assert_eq!(
            refused(integer_number("limit", f64::NAN)),
            "invalid limit: NaN is not an integer"
        );
        assert_eq!(
            refused(integer_number("limit", f64::NEG_INFINITY)),
            "invalid limit: -Infinity is not an integer"
        );
        assert_eq!(
            refused(integer_number("page_size", 1.5)),
            "invalid pageSize: 1.5 is not an integer"
        );
        assert_eq!(
            refused(integer_number("limit", 2f64.powi(53))),
            "invalid limit: 9007199254740992 is beyond the integers a number holds exactly \
             (±9007199254740991)"
        );
        let duration = |v| {
            duration_number("max_age", v, TimeUnit::Millis)
                .unwrap_err()
                .message_in(&node)
        };
        assert_eq!(duration(f64::NAN), "invalid maxAge: NaN is not a duration");
        assert_eq!(duration(-5.0), "invalid maxAge: -5 ms is negative");
        assert_eq!(
            duration(1e300),
            "invalid maxAge: 1e300 ms is too long for a duration"
        );
        assert_eq!(
            duration_number("period", 1.5, TimeUnit::Seconds).unwrap(),
            Duration::from_millis(1500)
        );
        assert_eq!(
            beyond_64_bits("limit", "9223372036854775808").message(),
            "invalid limit: 9223372036854775808 is outside the 64-bit integer range (accord's \
             counts and seqs are far smaller)"
        );
    }

    #[test]
    fn a_ttl_reads_in_the_callers_unit() {
        let cli = Style {
            durations: Durations::Humantime,
            fields: Fields::Kebab,
        };
        let python = Style {
            durations: Durations::Seconds,
            fields: Fields::Snake,
        };
        let refused = ttl("ttl", Duration::from_secs(25 * 3600)).unwrap_err();
        assert_eq!(
            refused.message_in(&cli),
            "invalid ttl: 25h is outside the allowed range 100ms..=24h"
        );
        assert_eq!(
            refused.message_in(&python),
            "invalid ttl: 90000 s is outside the allowed range 0.1 s..=86400 s"
        );
    }

    #[test]
    fn ttl_range() {
        assert!(ttl("ttl", Duration::from_millis(99)).is_err());
        assert!(ttl("ttl", Duration::from_millis(100)).is_ok());
        assert!(ttl("ttl", Duration::from_secs(86400)).is_ok());
        assert!(ttl("ttl", Duration::from_secs(86401)).is_err());
    }

    #[test]
    fn metadata_limits() {
        let mut m = Metadata::new();
        m.insert("k".into(), "v".into());
        assert_eq!(metadata("metadata", &m).unwrap(), r#"{"k":"v"}"#);
        m.insert("big".into(), "x".repeat(70_000).into());
        assert!(metadata("metadata", &m)
            .unwrap_err()
            .message()
            .contains("metadata"));
        let mut nul = Metadata::new();
        nul.insert("k".into(), "a\0b".into());
        assert!(metadata("metadata", &nul).is_err());
    }

    #[test]
    fn counts_name_their_field_and_range() {
        assert_eq!(pool_size(64).unwrap(), 64);
        assert_eq!(
            pool_size(-1).unwrap_err().message(),
            "invalid pool_size: -1 is outside 1..=64"
        );
        assert_eq!(list_limit(1000).unwrap(), 1000);
        assert!(list_limit(0).unwrap_err().message().contains("limit"));
    }

    #[test]
    fn channels() {
        assert!(channel(&"c".repeat(63)).is_ok());
        assert!(channel(&"c".repeat(64)).is_err());
        assert!(channel("with \"quotes\"; and spaces ✓").is_ok());
        for own in [
            "accord_wakeup_accord",
            "accord_wakeup",
            "accord_stream_0a",
            "accord_",
        ] {
            let err = channel(own).unwrap_err();
            assert!(err.message().contains(own), "{err}");
            assert!(err.message().contains("reserved"), "{err}");
        }
        for fine in [
            "accord",
            "accordion",
            "Accord_x",
            "ACCORD_WAKEUP",
            "jobs_accord_x",
        ] {
            assert!(channel(fine).is_ok(), "{fine}");
        }
    }

    #[test]
    fn ttls_from_bindings_name_the_value_given() {
        assert_eq!(ttl_millis("ttl", 100).unwrap(), MIN_TTL);
        assert_eq!(ttl_millis("ttl", 86_400_000).unwrap(), MAX_TTL);
        let c = Style {
            durations: Durations::Millis,
            fields: Fields::Snake,
        };
        assert_eq!(
            ttl_millis("ttl", -5).unwrap_err().message_in(&c),
            "invalid ttl: -5 ms is negative"
        );
        assert_eq!(
            ttl_millis("ttl", 0).unwrap_err().message_in(&c),
            "invalid ttl: 0 ms is outside the allowed range 100 ms..=86400000 ms"
        );
        assert_eq!(
            ttl_millis("ttl", i64::MAX).unwrap_err().message_in(&c),
            format!(
                "invalid ttl: {} ms is outside the allowed range 100 ms..=86400000 ms",
                i64::MAX
            )
        );
        assert_eq!(
            ttl_millis("ttl", 0).unwrap_err().message(),
            "invalid ttl: 0s is outside the allowed range 100ms..=86400s"
        );
        assert_eq!(
            ttl_number("ttl", 1.5, TimeUnit::Seconds).unwrap(),
            Duration::from_millis(1500)
        );
        let python = Style {
            durations: Durations::Seconds,
            fields: Fields::Snake,
        };
        assert_eq!(
            ttl_number("ttl", 1e300, TimeUnit::Seconds)
                .unwrap_err()
                .message_in(&python),
            "invalid ttl: 1e300 s is outside the allowed range 0.1 s..=86400 s"
        );
        assert_eq!(
            ttl_number("ttl", 86401.0, TimeUnit::Seconds)
                .unwrap_err()
                .message_in(&python),
            "invalid ttl: 86401 s is outside the allowed range 0.1 s..=86400 s"
        );
        assert_eq!(
            ttl_number("ttl", f64::INFINITY, TimeUnit::Seconds)
                .unwrap_err()
                .message_in(&python),
            "invalid ttl: inf s is outside the allowed range 0.1 s..=86400 s"
        );
        assert_eq!(
            ttl_number("options.ttl", -5.0, TimeUnit::Millis)
                .unwrap_err()
                .message(),
            "invalid options.ttl: -5 ms is negative"
        );
        assert!(ttl_number("ttl", f64::NAN, TimeUnit::Millis)
            .unwrap_err()
            .message()
            .contains("NaN"));
    }
}
