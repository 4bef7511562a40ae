//! The values of accord's etcd records (JSON), and one key's records read at one revision,
//! as `crate::rules` reads a stored key.
//!
//! etcd has no clock a transaction can read: liveness is a record's existence (a holder's,
//! shared holder's or waiter's record is deleted with its session's lease). The rules are
//! given that as times: `NOW`, a live record expires at `LIVE` (after it), a grant whose
//! record is gone without a release expired at `EXPIRED` (before it).

use etcd_client::{KeyValue, TxnOpResponse};
use serde_json::{json, Value};

use super::keys::{fence_of, revision_of, slot_of};
use crate::error::{Error, Result};
use crate::metadata::Metadata;
use crate::rules::{StoredKey, Waiting};

pub(crate) const NOW: i64 = 1;
pub(crate) const LIVE: i64 = i64::MAX;
pub(crate) const EXPIRED: i64 = 0;

/// Milliseconds on this client's clock (etcd has none): `granted_at`, `updated_at`.
pub(crate) fn client_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn parse(kv: &KeyValue) -> Result<Value> {
    parse_value(kv.key(), kv.value())
}

fn parse_value(key: &[u8], value: &[u8]) -> Result<Value> {
    serde_json::from_slice(value).map_err(|e| {
        Error::internal(format!(
            "an accord record in etcd is not JSON ({}): {e}",
            String::from_utf8_lossy(key)
        ))
    })
}

fn text(v: &Value, field: &str) -> Option<String> {
    v.get(field).and_then(Value::as_str).map(str::to_string)
}

fn metadata(v: &Value) -> Metadata {
    v.get("m")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// A key's row: what outlives its grants.
#[derive(Clone, Debug)]
pub(crate) struct Row {
    pub mod_revision: i64,
    pub metadata: Metadata,
    /// The last grant's owner; `None` once released.
    pub owner: Option<String>,
    pub fence: i64,
    pub done: bool,
    pub updated_ms: i64,
    /// The pool the key was offered to (it stays in it until reset).
    pub pool: Option<String>,
}

impl Row {
    pub fn read(kv: &KeyValue) -> Result<Row> {
        Row::at(parse(kv)?, kv.mod_revision())
    }

    /// The row whose value this client wrote at `mod_revision` ([`Row::granted`],
    /// [`Row::settled`]), as [`Row::read`] would read it back.
    pub fn written(value: &str, mod_revision: i64) -> Result<Row> {
        Row::at(
            parse_value(b"(a row written)", value.as_bytes())?,
            mod_revision,
        )
    }

    fn at(v: Value, mod_revision: i64) -> Result<Row> {
        // A grant writes the row in its own transaction, before the fence is known: then the
        // fence is the row's revision (the holder's create_revision) and slot.
        let fence = match v.get("f").and_then(Value::as_i64) {
            Some(f) => f,
            None => fence_of(
                mod_revision,
                v.get("s").and_then(Value::as_i64).unwrap_or(0),
            ),
        };
        Ok(Row {
            mod_revision,
            metadata: metadata(&v),
            owner: text(&v, "o"),
            fence,
            done: v.get("d").and_then(Value::as_bool).unwrap_or(false),
            updated_ms: v.get("u").and_then(Value::as_i64).unwrap_or(0),
            pool: text(&v, "p"),
        })
    }

    /// The row a grant writes (slot: its place in the transaction; `pool`: the row's, kept).
    pub fn granted(metadata: &Metadata, owner: &str, slot: i64, pool: Option<&str>) -> String {
        json!({"m": metadata, "o": owner, "s": slot, "d": false, "u": client_ms(), "p": pool})
            .to_string()
    }

    /// The row with a known fence: after a renewal's metadata, a release (owner `None`) or a
    /// done (`pool`: the row's, kept), or an offer.
    pub fn settled(
        metadata: &Metadata,
        owner: Option<&str>,
        fence: i64,
        done: bool,
        pool: Option<&str>,
    ) -> String {
        json!({"m": metadata, "o": owner, "f": fence, "d": done, "u": client_ms(), "p": pool})
            .to_string()
    }
}

/// A key as the rules read it, from its row, exclusive holder and whether shared holders live.
pub(crate) fn stored<'a>(
    row: Option<&'a Row>,
    holder: Option<&'a HolderRecord>,
    shared: bool,
) -> Option<StoredKey<'a>> {
    if row.is_none() && holder.is_none() && !shared {
        return None;
    }
    let done = row.is_some_and(|r| r.done);
    Some(StoredKey {
        owner: match holder {
            Some(h) => Some(h.owner.as_str()),
            None => row.and_then(|r| r.owner.as_deref()),
        },
        fence: match holder {
            Some(h) => h.fence(),
            None => row.map_or(0, |r| r.fence),
        },
        expires_at_ms: match holder {
            Some(_) => Some(LIVE),
            // Granted, never released, record gone: expired.
            None if row.is_some_and(|r| r.owner.is_some()) && !done => Some(EXPIRED),
            None => None,
        },
        done,
        attempt: holder.map(|h| h.attempt),
        shared_until_ms: shared.then_some(LIVE),
    })
}

/// The exclusive holder's record.
#[derive(Clone, Debug)]
pub(crate) struct HolderRecord {
    pub key: String,
    pub create_revision: i64,
    pub lease: i64,
    pub owner: String,
    pub attempt: i64,
    pub slot: i64,
    pub granted_ms: i64,
}

impl HolderRecord {
    pub fn read(kv: &KeyValue) -> Result<HolderRecord> {
        let v = parse(kv)?;
        Ok(HolderRecord {
            key: String::from_utf8_lossy(kv.key()).into_owned(),
            create_revision: kv.create_revision(),
            lease: kv.lease(),
            owner: text(&v, "o").unwrap_or_default(),
            attempt: v.get("a").and_then(Value::as_i64).unwrap_or(0),
            slot: v.get("s").and_then(Value::as_i64).unwrap_or(0),
            granted_ms: v.get("g").and_then(Value::as_i64).unwrap_or(0),
        })
    }

    /// The holder record of the grant with this fence, as its grant put it (what an ending
    /// compares: its create_revision); its lease, attempt and grant time unknown.
    pub fn assumed(key: String, owner: &str, fence: i64) -> HolderRecord {
        HolderRecord {
            key,
            create_revision: revision_of(fence),
            lease: 0,
            owner: owner.to_string(),
            attempt: 0,
            slot: slot_of(fence),
            granted_ms: 0,
        }
    }

    pub fn value(owner: &str, attempt: i64, slot: i64) -> String {
        json!({"o": owner, "a": attempt, "s": slot, "g": client_ms()}).to_string()
    }

    pub fn fence(&self) -> i64 {
        fence_of(self.create_revision, self.slot)
    }
}

/// A shared holder's or a waiter's record (the line and the shared holders of a key).
#[derive(Clone, Debug)]
pub(crate) struct Place {
    pub record: String,
    pub create_revision: i64,
    pub lease: i64,
    pub owner: String,
    pub shared: bool,
    pub metadata: Metadata,
    pub granted_ms: i64,
}

impl Place {
    pub fn read(kv: &KeyValue) -> Result<Place> {
        let v = parse(kv)?;
        Ok(Place {
            record: String::from_utf8_lossy(kv.key()).into_owned(),
            create_revision: kv.create_revision(),
            lease: kv.lease(),
            owner: text(&v, "o").unwrap_or_default(),
            shared: v.get("sh").and_then(Value::as_bool).unwrap_or(false),
            metadata: metadata(&v),
            granted_ms: v.get("g").and_then(Value::as_i64).unwrap_or(0),
        })
    }

    pub fn waiter(owner: &str, shared: bool) -> String {
        json!({"o": owner, "sh": shared}).to_string()
    }

    pub fn holder(owner: &str, metadata: &Metadata) -> String {
        json!({"o": owner, "sh": true, "m": metadata, "g": client_ms()}).to_string()
    }

    /// A waiter's ticket, or a shared holder's fence.
    pub fn ticket(&self) -> i64 {
        fence_of(self.create_revision, 0)
    }

    pub fn waiting(&self) -> Waiting {
        Waiting {
            ticket: self.ticket(),
            shared: self.shared,
            expires_at_ms: LIVE,
        }
    }
}

/// One key's records at one revision, or as this client last knew them (`assumed`).
pub(crate) struct Look {
    pub revision: i64,
    pub row: Option<Row>,
    pub holder: Option<HolderRecord>,
    pub shared: Vec<Place>,
    /// First in line first.
    pub line: Vec<Place>,
    /// Not read but remembered ([`super::known`]): only a transaction that compares every
    /// record it rests on may act on it, and a rule's refusal on it is no answer (read first).
    pub assumed: bool,
}

impl Look {
    /// The records read by [`super::EtcdBackend::look_ops`]' gets (their answers, in order)
    /// at `revision`.
    pub fn read(revision: i64, answers: Vec<TxnOpResponse>) -> Result<Look> {
        let mut gets = answers.into_iter().map(|r| match r {
            TxnOpResponse::Get(g) => g.kvs().to_vec(),
            _ => Vec::new(),
        });
        let mut next = || gets.next().unwrap_or_default();
        let row = next().first().map(Row::read).transpose()?;
        let holder = next().first().map(HolderRecord::read).transpose()?;
        let shared = next().iter().map(Place::read).collect::<Result<Vec<_>>>()?;
        let line = next().iter().map(Place::read).collect::<Result<Vec<_>>>()?;
        Ok(Look {
            revision,
            row,
            holder,
            shared,
            line,
            assumed: false,
        })
    }

    /// The key as this client last knew its row, taken to be free (no holder, no shared
    /// holder, nobody in line).
    pub fn assumed_free(row: Option<Row>) -> Look {
        Look {
            revision: 0,
            row,
            holder: None,
            shared: Vec::new(),
            line: Vec::new(),
            assumed: true,
        }
    }

    /// Whether nothing holds the key or waits for it.
    pub fn free(&self) -> bool {
        self.holder.is_none() && self.shared.is_empty() && self.line.is_empty()
    }

    /// The key as the rules read it.
    pub fn stored(&self) -> Option<StoredKey<'_>> {
        stored(
            self.row.as_ref(),
            self.holder.as_ref(),
            !self.shared.is_empty(),
        )
    }

    /// The pool the key is in, if any.
    pub fn pool(&self) -> Option<&str> {
        self.row.as_ref().and_then(|r| r.pool.as_deref())
    }

    pub fn metadata(&self) -> Metadata {
        self.row
            .as_ref()
            .map(|r| r.metadata.clone())
            .unwrap_or_default()
    }
}

/// `base` with `patch` merged over it (`rules::merge_metadata`); `patch` is validated JSON
/// object text.
pub(crate) fn merged(mut base: Metadata, patch: Option<&str>) -> Result<Metadata> {
    if let Some(patch) = patch {
        let patch: Metadata = serde_json::from_str(patch).map_err(|e| {
            Error::internal(format!("metadata that was validated is not an object: {e}"))
        })?;
        crate::rules::merge_metadata(&mut base, patch);
    }
    Ok(base)
}
