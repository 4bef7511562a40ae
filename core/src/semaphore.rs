//! The [`Semaphore`] handle: at most `limit` holders of a name at once, each holding one of
//! `limit` permit keys of a work pool (so each holder has an ordinary lease: fence, keepalive,
//! lost signal, release). The permits are ordinary keys, not reserved: a semaphore survives plain
//! calls on them instead, restoring a permit that a plain `reset` deleted or a plain `done`
//! retired when an acquire finds no free permit.

use std::sync::Arc;

use crate::backend::ResetOutcome;
use crate::error::{Error, ErrorKind, Result};
use crate::lease::Lease;
use crate::options::{AcquireOptions, ClaimOptions, KeyState, ListQuery};
use crate::session::{Grant, Session};
use crate::validate::{self, MAX_NAME_BYTES, MAX_PERMITS};
use crate::wording::Why;

/// Permit keys are `<name>#<index>`, the index zero-padded to this many digits, so that
/// "below the limit" is a comparison of keys.
const PERMIT_DIGITS: usize = 5;

/// At most `limit` live holders of `name`. Open it with [`crate::Client::semaphore`].
///
/// The limit is the number of permits this handle takes from: a handle opened with a larger
/// limit offers the permits it adds at once; one opened with a smaller limit never takes a
/// permit above its limit, so a lowered limit takes effect as the holders of higher permits
/// release (or expire). Open every handle of a name with the same limit.
#[derive(Clone)]
pub struct Semaphore {
    session: Arc<Session>,
    name: String,
    limit: usize,
    pool: String,
    below: String,
}

impl std::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.name)
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

impl Semaphore {
    pub(crate) async fn open(session: &Arc<Session>, name: &str, limit: usize) -> Result<Self> {
        session.check_usable()?;
        validate::name("name", name)?;
        // Room for the permit suffix within a key's limit.
        let max_name = MAX_NAME_BYTES - PERMIT_DIGITS - 1;
        if name.len() > max_name {
            return Err(Error::invalid(
                "name",
                format!(
                    "is {} bytes long, a semaphore's limit is {max_name}",
                    name.len()
                ),
            ));
        }
        validate::permits(i64::try_from(limit).unwrap_or(i64::MAX))?;
        let pool = format!("{name}#");
        offer_permits(session, &pool, name, limit).await?;
        Ok(Semaphore {
            session: session.clone(),
            name: name.to_string(),
            below: permit_key(name, limit),
            limit,
            pool,
        })
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The number of permits this handle takes from.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Waits for a permit (up to the options' timeout: then `Timeout`; `Cancelled` when its
    /// cancel token fires). The lease's key is the permit (`<name>#<index>`).
    pub async fn acquire(&self, options: AcquireOptions) -> Result<Lease> {
        let timeout = options.timeout.unwrap_or(std::time::Duration::MAX / 4);
        let started = std::time::Instant::now();
        match self.claim(options, Some(timeout)).await? {
            Some(lease) => Ok(lease),
            None => Err(Error::worded(
                ErrorKind::Timeout,
                Why::new()
                    .text("timed out after ")
                    .duration(started.elapsed())
                    .text(format!(
                        " waiting for a permit of semaphore {:?}",
                        self.name
                    )),
            )),
        }
    }

    /// A permit if one is free now; `None` if all `limit` are held.
    pub async fn try_acquire(&self, options: AcquireOptions) -> Result<Option<Lease>> {
        self.claim(options, None).await
    }

    async fn claim(
        &self,
        options: AcquireOptions,
        timeout: Option<std::time::Duration>,
    ) -> Result<Option<Lease>> {
        let mut claim = ClaimOptions::new();
        if let Some(ttl) = options.ttl {
            claim = claim.ttl(ttl);
        }
        if let Some(metadata) = options.metadata {
            claim = claim.metadata(metadata);
        }
        if let Some(cancel) = options.cancel {
            claim = claim.cancel(cancel);
        }
        // A claim that finds no free permit first restores any permit a plain call took out of
        // the pool, then tries again (waiting, with a timeout): the slow path alone pays for it.
        let mut grants = self.claim_once(claim.clone()).await?;
        if grants.is_empty() && (self.restore_permits().await? || timeout.is_some()) {
            if let Some(timeout) = timeout {
                claim = claim.timeout(timeout);
            }
            grants = self.claim_once(claim).await?;
        }
        Ok(grants
            .into_iter()
            .next()
            .map(|grant| Lease::new(self.session.clone(), grant)))
    }

    async fn claim_once(&self, claim: ClaimOptions) -> Result<Vec<Arc<Grant>>> {
        self.session
            .claim(&self.pool, claim, Some(self.below.clone()))
            .await
            .map_err(|e| match e.kind() {
                // Named for what the caller did, not for the pool of permits underneath.
                ErrorKind::Cancelled => {
                    Error::cancelled(&format!("acquire of semaphore {:?}", self.name))
                }
                _ => e,
            })
    }

    /// Whether `key` is one of this handle's permits (`<name>#<digits>` below its limit), not
    /// another key that happens to start with the pool's prefix.
    fn is_permit(&self, key: &str) -> bool {
        key.strip_prefix(self.pool.as_str()).is_some_and(|digits| {
            digits.len() == PERMIT_DIGITS && digits.bytes().all(|b| b.is_ascii_digit())
        }) && key < self.below.as_str()
    }

    /// Puts back the permits under this handle's limit that plain calls took out of the pool:
    /// `reset` of a free permit deletes its row (offered again here) and `done` retires it
    /// (reset, then offered again). One count of the pool when nothing is missing. Returns
    /// whether a permit came back.
    async fn restore_permits(&self) -> Result<bool> {
        let counts = self.session.counts(&self.pool).await?;
        if counts.done == 0 && counts.total() >= validate::usize_count(self.limit) as u64 {
            return Ok(false);
        }
        let mut restored = false;
        if counts.done > 0 {
            let scope = &self.session.scope;
            let mut query = ListQuery::new()
                .prefix(self.pool.clone())
                .state(KeyState::Done)
                .limit(validate::MAX_LIST_LIMIT);
            loop {
                let page = scope.backend.list(&scope.namespace, &query).await?;
                let permits = page.items.iter().filter(|i| self.is_permit(&i.key));
                for item in permits {
                    restored |= matches!(
                        scope.backend.reset(&scope.namespace, &item.key).await?,
                        ResetOutcome::Reset
                    );
                }
                match page.next_cursor {
                    Some(cursor) => query = query.cursor(cursor),
                    None => break,
                }
            }
        }
        let offered = offer_permits(&self.session, &self.pool, &self.name, self.limit).await?;
        Ok(restored || offered > 0)
    }
}

/// Offers the permits `name#00000` … below `limit` (idempotent: a permit in the pool stays as
/// it is). Returns how many joined.
async fn offer_permits(
    session: &Arc<Session>,
    pool: &str,
    name: &str,
    limit: usize,
) -> Result<u64> {
    let permits: Vec<String> = (0..limit).map(|i| permit_key(name, i)).collect();
    let mut joined = 0;
    for batch in permits.chunks(validate::MAX_OFFER_KEYS) {
        joined += session.offer(pool, batch, None).await?;
    }
    Ok(joined)
}

fn permit_key(name: &str, index: usize) -> String {
    debug_assert!(index <= MAX_PERMITS);
    format!("{name}#{index:0width$}", width = PERMIT_DIGITS)
}
