//! Reads: a page of `list`, and a key's holder (as an election reads its leader). One
//! transaction of range reads, so a page is what one revision held.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, TimeZone, Utc};
use etcd_client::{GetOptions, KeyValue, Txn, TxnOp, TxnOpResponse};

use super::keys::range_end;
use super::records::{HolderRecord, Place, Row, LIVE, NOW};
use super::{expires_in, EtcdBackend};
use crate::backend::Holder;
use crate::error::Result;
use crate::options::{KeyState, LeaseInfo, ListPage, ListQuery, ListRange, StateFilter};
use crate::rules::{self, StoredKey};

pub(super) fn time(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms).single().unwrap_or_default()
}

impl EtcdBackend {
    pub(super) async fn holder_of(&self, ns: &str, key: &str) -> Result<Option<Holder>> {
        let look = self.look(ns, key).await?;
        let Some(h) = &look.holder else {
            return Ok(None);
        };
        let mut expiries = self.expiries(Some(h.lease)).await?;
        let Some(expires_at) = self.expiry(&mut expiries, h.lease).await? else {
            return Ok(None);
        };
        Ok(Some(Holder {
            owner: h.owner.clone(),
            fence: h.fence(),
            expires_at,
            metadata: look.metadata(),
            granted_at: time(h.granted_ms),
        }))
    }

    /// The leases' expiry records (one lease's, or all of them), as a cache for [`Self::expiry`].
    async fn expiries(&self, lease: Option<i64>) -> Result<HashMap<i64, Option<DateTime<Utc>>>> {
        let get = match lease {
            Some(id) => TxnOp::get(self.layout.expiry(id), None),
            None => {
                let all = self.layout.expiries();
                let end = range_end(&all);
                TxnOp::get(all, Some(GetOptions::new().with_range(end)))
            }
        };
        let answer = self
            .txn("read expiries", Txn::new().and_then([get]))
            .await?;
        Ok(expiry_records(&answer.op_responses()))
    }

    /// The expiry of a lease as its client last published it (stable between its renewals,
    /// whoever reads it), else from the ttl etcd reports left; `None` once gone.
    async fn expiry(
        &self,
        cache: &mut HashMap<i64, Option<DateTime<Utc>>>,
        lease: i64,
    ) -> Result<Option<DateTime<Utc>>> {
        if let Some(at) = cache.get(&lease) {
            return Ok(*at);
        }
        let at = self.leases.time_to_live(lease).await?.map(expires_in);
        cache.insert(lease, at);
        Ok(at)
    }

    pub(super) async fn list_page(&self, ns: &str, q: &ListQuery) -> Result<ListPage> {
        let answer = self
            .txn("list", Txn::new().and_then(self.list_ops(ns, q)?))
            .await?;
        self.list_from(ns, q, answer.op_responses()).await
    }

    /// The reads a page of `q` needs, in one transaction (or a snapshot's): the rows and
    /// exclusive holders of its range, the namespace's shared holders, the leases' expiries.
    pub(super) fn list_ops(&self, ns: &str, q: &ListQuery) -> Result<Vec<TxnOp>> {
        let range = q.range()?;
        let bound = |start: String| -> (String, Vec<u8>) {
            let end = match &range.below {
                Some(below) => {
                    format!("{}{below}", &start[..start.len() - range.from.len()]).into_bytes()
                }
                None => range_end(&start[..start.len() - range.from.len()]),
            };
            (start, end)
        };
        let (rows_from, rows_end) = bound(self.layout.row(ns, &range.from));
        let (holders_from, holders_end) = bound(self.layout.holder(ns, &range.from));
        let shared = self.layout.all_shared(ns);
        let expiries = self.layout.expiries();
        Ok(vec![
            TxnOp::get(rows_from, Some(GetOptions::new().with_range(rows_end))),
            TxnOp::get(
                holders_from,
                Some(GetOptions::new().with_range(holders_end)),
            ),
            TxnOp::get(
                shared.as_bytes(),
                Some(GetOptions::new().with_range(range_end(&shared))),
            ),
            TxnOp::get(
                expiries.as_bytes(),
                Some(GetOptions::new().with_range(range_end(&expiries))),
            ),
        ])
    }

    /// The page of `q` from the answers of [`Self::list_ops`].
    pub(super) async fn list_from(
        &self,
        ns: &str,
        q: &ListQuery,
        responses: Vec<TxnOpResponse>,
    ) -> Result<ListPage> {
        let range = q.range()?;
        let mut expiries = expiry_records(&responses[3..]);
        let mut gets = responses.into_iter().map(|r| match r {
            TxnOpResponse::Get(g) => g.kvs().to_vec(),
            _ => Vec::<KeyValue>::new(),
        });
        let mut next = || gets.next().unwrap_or_default();
        let (rows, holders, shared_records) = (next(), next(), next());
        let rows_prefix = self.layout.rows(ns);
        let RangeRecords {
            holders,
            shared: shared_holders,
        } = self.range_records(ns, &range, &holders, &shared_records)?;
        let shared_keys: HashSet<&str> = shared_holders.iter().map(|(k, _)| k.as_str()).collect();

        let wanted = q.limit.saturating_add(1);
        let after = |key: &str, fence: i64| match &range.after {
            Some((k, f)) => (key, fence) > (k.as_str(), *f),
            None => true,
        };
        let state_wanted = |state: KeyState| !matches!(q.state, StateFilter::Only(s) if s != state);
        let metadata_wanted = |m: &crate::metadata::Metadata| {
            q.metadata
                .as_ref()
                .is_none_or(|f| rules::metadata_contains(m, f))
        };

        let mut keys_page = Vec::new();
        for kv in &rows {
            if keys_page.len() == wanted {
                break;
            }
            let key = String::from_utf8_lossy(&kv.key()[rows_prefix.len()..]).into_owned();
            let row = Row::read(kv)?;
            let holder = holders.get(&key);
            let stored = stored_key(&row, holder, shared_keys.contains(key.as_str()));
            if !after(&key, stored.fence) || rules::held_by_shared(&stored, NOW) {
                continue;
            }
            let state = rules::key_state(&stored, NOW);
            if !state_wanted(state) || !metadata_wanted(&row.metadata) {
                continue;
            }
            let expires_at = match (state, holder) {
                (KeyState::Held, Some(h)) => self.expiry(&mut expiries, h.lease).await?,
                _ => None,
            };
            keys_page.push(LeaseInfo {
                owner: if state == KeyState::Free {
                    None
                } else {
                    stored.owner.map(str::to_string)
                },
                fence: stored.fence,
                key,
                state,
                expires_at,
                metadata: row.metadata,
                updated_at: time(row.updated_ms),
                shared: false,
            });
        }
        let mut holders_page = Vec::new();
        for (key, place) in shared_holders {
            if holders_page.len() == wanted {
                break;
            }
            if !after(&key, place.ticket())
                || !state_wanted(KeyState::Held)
                || !metadata_wanted(&place.metadata)
            {
                continue;
            }
            holders_page.push(LeaseInfo {
                fence: place.ticket(),
                expires_at: self.expiry(&mut expiries, place.lease).await?,
                owner: Some(place.owner),
                key,
                state: KeyState::Held,
                metadata: place.metadata,
                updated_at: time(place.granted_ms),
                shared: true,
            });
        }
        Ok(ListPage::merged(keys_page, holders_page, q.limit))
    }
}

/// The live lock records of a list range, by key.
pub(super) struct RangeRecords {
    /// Each key's exclusive holder.
    pub holders: HashMap<String, HolderRecord>,
    /// The shared holders in the range, in (key, fence) order.
    pub shared: Vec<(String, Place)>,
}

impl EtcdBackend {
    /// Reads the exclusive holders of a range and the namespace's shared holders (keeping
    /// those in the range), as [`Self::list_ops`] got them.
    pub(super) fn range_records(
        &self,
        ns: &str,
        range: &ListRange,
        holders: &[KeyValue],
        shared: &[KeyValue],
    ) -> Result<RangeRecords> {
        let holders_prefix = self.layout.holders(ns);
        let holders = holders
            .iter()
            .map(|kv| {
                let h = HolderRecord::read(kv)?;
                let key = String::from_utf8_lossy(&kv.key()[holders_prefix.len()..]).into_owned();
                Ok((key, h))
            })
            .collect::<Result<_>>()?;
        let mut in_range: Vec<(String, Place)> = Vec::new();
        for kv in shared {
            let place = Place::read(kv)?;
            if let Some(key) = self.layout.shared_key(ns, &place.record) {
                if range.contains(key) {
                    in_range.push((key.to_string(), place));
                }
            }
        }
        in_range.sort_by(|a, b| (a.0.as_str(), a.1.ticket()).cmp(&(b.0.as_str(), b.1.ticket())));
        Ok(RangeRecords {
            holders,
            shared: in_range,
        })
    }
}

/// A listed key as the rules read it: its row, its exclusive holder's record if live, and
/// whether it has live shared holders.
pub(super) fn stored_key<'a>(
    row: &'a Row,
    holder: Option<&'a HolderRecord>,
    shared: bool,
) -> StoredKey<'a> {
    StoredKey {
        owner: match holder {
            Some(h) => Some(h.owner.as_str()),
            None => row.owner.as_deref(),
        },
        fence: holder.map_or(row.fence, HolderRecord::fence),
        expires_at_ms: holder.map(|_| LIVE),
        done: row.done,
        attempt: None,
        shared_until_ms: shared.then_some(LIVE),
    }
}

/// Lease id → expiry, from the gets of expiry records (`P/x/<lease in hex>` → milliseconds).
pub(super) fn expiry_records(responses: &[TxnOpResponse]) -> HashMap<i64, Option<DateTime<Utc>>> {
    let mut found = HashMap::new();
    for response in responses {
        let TxnOpResponse::Get(got) = response else {
            continue;
        };
        for kv in got.kvs() {
            let ms = std::str::from_utf8(kv.value())
                .ok()
                .and_then(|v| v.parse::<i64>().ok());
            if let Some(ms) = ms {
                found.insert(kv.lease(), Some(time(ms)));
            }
        }
    }
    found
}
