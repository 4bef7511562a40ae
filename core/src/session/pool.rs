//! Work pools on the session: offer keys, claim up to a batch of them in one statement (or wait
//! for one, woken by a release, an offer or the soonest expiry, never by polling), count them.
//! Claimed keys are grants like any other: renewed in the one keepalive tick, with a fence and
//! a lost signal.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::acquire::{HoldsGrants, EXPIRY_SLACK};
use super::batched;
use super::grant::Grant;
use super::rounds::Rounds;
use super::Session;
use crate::backend::Claimed;
use crate::error::{Error, Result};
use crate::options::{ClaimOptions, PoolCounts};
use crate::validate::{self, OFFER_BATCH};

impl HoldsGrants for Claimed {
    fn grants(&mut self) -> Vec<(String, i64)> {
        self.granted
            .drain(..)
            .map(|(key, g)| (key, g.fence))
            .collect()
    }
}

impl Session {
    /// Offers `keys` (each under `pool`) to the pool, in statements of at most
    /// [`OFFER_BATCH`] keys. Returns how many joined it.
    pub async fn offer(
        &self,
        pool: &str,
        keys: &[String],
        metadata: Option<&crate::Metadata>,
    ) -> Result<u64> {
        self.check_usable()?;
        validate::offer(pool, keys)?;
        let metadata = metadata
            .map(|m| validate::metadata("metadata", m))
            .transpose()?;
        let mut joined = 0;
        for batch in keys.chunks(OFFER_BATCH) {
            joined += self
                .scope
                .backend
                .offer(&self.scope.namespace, pool, batch, metadata.as_deref())
                .await?;
        }
        Ok(joined)
    }

    /// Free, held and done keys of the pool.
    pub async fn counts(&self, pool: &str) -> Result<PoolCounts> {
        self.check_usable()?;
        validate::name("prefix", pool)?;
        self.scope.backend.counts(&self.scope.namespace, pool).await
    }

    /// Claims up to `options.limit` keys of the pool; with a timeout, waits for one when none
    /// is claimable. Empty when nothing was claimable (in time): not an error. `below` bounds
    /// the keys (a semaphore's permits under its limit).
    pub async fn claim(
        self: &Arc<Self>,
        pool: &str,
        options: ClaimOptions,
        below: Option<String>,
    ) -> Result<Vec<Arc<Grant>>> {
        let started = Instant::now();
        let outcome = self.claim_counted(pool, options, below).await;
        let counted = match &outcome {
            Ok(grants) => Ok(grants.len()),
            Err(e) => Err(e.kind()),
        };
        self.scope.stats.acquire_ended(started, counted);
        outcome
    }

    async fn claim_counted(
        self: &Arc<Self>,
        pool: &str,
        options: ClaimOptions,
        below: Option<String>,
    ) -> Result<Vec<Arc<Grant>>> {
        self.check_usable()?;
        validate::name("prefix", pool)?;
        let limit = validate::claim_limit(i64::try_from(options.limit).unwrap_or(i64::MAX))?;
        let ttl = options.ttl.unwrap_or(self.ttl);
        validate::ttl("ttl", ttl)?;
        let metadata = options
            .metadata
            .as_ref()
            .map(|m| validate::metadata("metadata", m))
            .transpose()?;
        let cancel = options.cancel.unwrap_or_default();
        let started = Instant::now();
        let deadline = options.timeout.map(|t| started + t);
        let attempt = ClaimAttempt {
            pool: pool.to_string(),
            limit,
            ttl,
            metadata,
            token: rand::random(),
            below,
        };
        let Some(deadline) = deadline else {
            return self.claim_once(&attempt).await.map(|(granted, _)| granted);
        };
        let waiter = self.dispatch.waiters.register_claimer(pool);
        let slice = self
            .listen_for_releases(deadline, &cancel, &format!("claim of {pool:?}"))
            .await?;
        loop {
            let notified = waiter.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (granted, next_expiry) = self.claim_once(&attempt).await?;
            if !granted.is_empty() {
                if cancel.is_cancelled() {
                    for grant in &granted {
                        self.give_back_unused(grant).await;
                    }
                    return Err(Error::cancelled(&format!("claim of {pool:?}")));
                }
                return Ok(granted);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(Vec::new());
            }
            let retry_in = next_expiry
                .map(|r| r + EXPIRY_SLACK)
                .unwrap_or(slice)
                .min(slice);
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep_until(deadline.min(now + retry_in).into()) => {}
                _ = cancel.cancelled() => return Err(Error::cancelled(&format!("claim of {pool:?}"))),
                _ = self.closed.cancelled() => return Err(Error::closed()),
            }
        }
    }

    /// One claim statement; its grants adopted by the keepalive.
    async fn claim_once(
        &self,
        attempt: &ClaimAttempt,
    ) -> Result<(Vec<Arc<Grant>>, Option<Duration>)> {
        let request = attempt.clone();
        // Claims of many tasks share one statement per round (see `batched::Claim`).
        let (mut claimed, sent) = self
            .send(
                move |scope| async move { Rounds::<batched::Claim>::submit(&scope, request).await },
            )
            .await?;
        let next_expiry = claimed.next_expiry;
        let mut grants = Vec::with_capacity(claimed.granted.len());
        let mut granted = std::mem::take(&mut claimed.granted).into_iter();
        while let Some((key, g)) = granted.next() {
            match self.adopt_grant(key, attempt.ttl, g, sent.at, false).await {
                Ok(grant) => grants.push(grant),
                Err(e) => {
                    // Closed meanwhile: give back the rest too (and what was adopted).
                    for (key, g) in granted {
                        self.scope.give_back(&key, g.fence).await;
                    }
                    for grant in grants {
                        self.abandon(&grant);
                    }
                    return Err(e);
                }
            }
        }
        Ok((grants, next_expiry))
    }
}

/// What one claim call sends with each of its tries.
#[derive(Clone)]
pub(crate) struct ClaimAttempt {
    pub pool: String,
    pub limit: usize,
    pub ttl: Duration,
    pub metadata: Option<String>,
    pub token: i64,
    pub below: Option<String>,
}
