//! `Fleet` and `ShardLease`: a fleet's shards balanced among its members (`client.fleet`). The
//! balancing is the core's (`accord::Fleet`); this file converts the options and maps the
//! events onto `nextEvent()` and an async iterator, each of which asks the core for exactly one
//! event when the user asks (never ahead: asking acknowledges the previous hand-off).

use std::sync::Arc;

use napi::bindgen_prelude::*;
use napi_derive::napi;

use crate::convert::{
    only_known, opt_integer, opt_metadata, opt_millis, opt_ttl, property, settle, settle_map,
    settle_ok, string, strings,
};
use crate::error::{Failure, Outcome};
use crate::lease::{lost_promise, lost_reason_name, status_name};
use crate::membership::{member_infos, MemberInfo};
use crate::subscription::Step;

/// Options of `client.fleet()`: the shards (`shards` or `keys`, exactly one) and how the
/// member balances them. Durations are in milliseconds.
#[napi(object, object_to_js = false, object_from_js = false)]
#[allow(dead_code)] // declares the TypeScript interface; read field by field for clear errors
pub struct FleetOptions {
    /// `n` shards, named `"0"` to `"n-1"` (1 ..= 10000).
    pub shards: Option<u32>,
    /// Shards with these names (1 ..= 10000 distinct, non-empty names), instead of `shards`.
    pub keys: Option<Vec<String>>,
    /// The ttl of the member and shard leases (default: the client's). A member that dies
    /// loses its shards this long after its last renewal.
    pub ttl: Option<f64>,
    /// How often the member reads the fleet and rebalances (default: a third of the ttl; at
    /// least 10, at most the ttl).
    pub period: Option<f64>,
    /// The most hand-offs this member asks for in one period, one shard per request
    /// (default: a quarter of the target share, at least 4; 1 ..= 1000).
    pub max_handoffs_per_period: Option<u32>,
    /// How long a holder asked for a shard waits for its user to finish with it (to ask for
    /// the next event) before releasing it anyway; also how long the asker waits for it
    /// (default: the ttl).
    pub handoff_timeout: Option<f64>,
    /// This member's metadata in the fleet's membership (`fleet.members()`).
    #[napi(ts_type = "Record<string, unknown>")]
    pub metadata: Option<()>,
}

/// Reads `client.fleet(name, options)`'s arguments into the core's options.
pub(crate) fn parse_fleet(
    env: &Env,
    name: &Unknown,
    options: Option<Unknown>,
) -> Outcome<(String, accord::FleetOptions)> {
    let name = string("name", name)?;
    let o = match options {
        Some(o) if o.get_type()? == ValueType::Object && !o.is_array()? => {
            unsafe { o.cast::<Object>() }?
        }
        Some(o) if o.get_type()? == ValueType::Object => {
            return Err(Failure::invalid(
                "options",
                "expected an object, got an array",
            ))
        }
        Some(o) => return Err(Failure::wrong_type("options", "an object", o.get_type()?)),
        None => {
            return Err(Failure::wrong_type(
                "options",
                "an object",
                ValueType::Undefined,
            ))
        }
    };
    only_known(
        "options",
        &o,
        &[
            "shards",
            "keys",
            "ttl",
            "period",
            "maxHandoffsPerPeriod",
            "handoffTimeout",
            "metadata",
        ],
    )?;
    let shards = opt_integer("options.shards", &property(&o, "shards")?)?;
    let keys = property(&o, "keys")?;
    let keys = match keys.get_type()? {
        ValueType::Undefined | ValueType::Null => None,
        _ => Some(strings("options.keys", &keys)?),
    };
    let mut parsed = match (shards, keys) {
        (Some(n), None) => accord::FleetOptions::shards(accord::limits::shards(n)?),
        (None, Some(keys)) => accord::FleetOptions::keys(keys),
        (Some(_), Some(_)) => {
            return Err(Failure::invalid(
                "options",
                "give options.shards or options.keys, not both",
            ))
        }
        (None, None) => {
            return Err(Failure::invalid(
                "options.shards",
                "the shards are required: give options.shards (a count) or options.keys",
            ))
        }
    };
    if let Some(ttl) = opt_ttl("options.ttl", &property(&o, "ttl")?)? {
        parsed = parsed.ttl(ttl);
    }
    if let Some(period) = opt_millis("options.period", &property(&o, "period")?, false)? {
        parsed = parsed.period(period);
    }
    if let Some(n) = opt_integer(
        "options.maxHandoffsPerPeriod",
        &property(&o, "maxHandoffsPerPeriod")?,
    )? {
        parsed = parsed.max_handoffs_per_period(accord::limits::handoffs_per_period(n)?);
    }
    if let Some(t) = opt_millis(
        "options.handoffTimeout",
        &property(&o, "handoffTimeout")?,
        false,
    )? {
        parsed = parsed.handoff_timeout(t);
    }
    if let Some(m) = opt_metadata(env, "options.metadata", &property(&o, "metadata")?)? {
        parsed = parsed.metadata(m);
    }
    Ok((name, parsed))
}

/// A shard's lease as the fleet's user sees it (in an `'assigned'` event): its fence, to pass
/// to the resources you write, and its status. The fleet holds, renews and releases the lease
/// itself: there is nothing to release here.
#[napi(custom_finalize)]
pub struct ShardLease {
    inner: accord::ShardLease,
    lost: Option<ObjectRef<false>>,
}

impl ObjectFinalize for ShardLease {
    fn finalize(mut self, env: Env) -> Result<()> {
        if let Some(lost) = self.lost.take() {
            lost.unref(&env)?;
        }
        Ok(())
    }
}

#[napi]
impl ShardLease {
    /// The shard.
    #[napi(getter)]
    pub fn shard(&self) -> String {
        self.inner.shard().to_string()
    }

    /// The key of its lease (`accord.fleet/<name>/s/<shard>`).
    #[napi(getter)]
    pub fn key(&self) -> String {
        self.inner.key().to_string()
    }

    /// The fence of this grant of the shard: larger than every earlier grant's.
    #[napi(getter)]
    pub fn fence(&self) -> BigInt {
        BigInt::from(self.inner.fence())
    }

    /// The lease's status now, as `lease.status` reads.
    #[napi(
        getter,
        ts_return_type = "'held' | 'ending' | 'released' | 'done' | 'lost'"
    )]
    pub fn status(&self, env: &Env) -> Result<&'static str> {
        status_name(self.inner.status()).map_err(|f| f.into_napi(env))
    }

    /// True once the lease was lost.
    #[napi(getter)]
    pub fn is_lost(&self) -> bool {
        self.inner.is_lost()
    }

    /// Why the lease was lost, as `lease.lostReason`; `null` unless lost.
    #[napi(
        getter,
        ts_return_type = "'not_renewed' | 'not_recorded' | 'client_closed' | 'forked' | null"
    )]
    pub fn lost_reason(&self, env: &Env) -> Result<Option<&'static str>> {
        lost_reason_name(self.inner.status()).map_err(|f| f.into_napi(env))
    }

    /// Resolves when the lease is lost (the fleet then yields `'revoked'` with reason
    /// `'lost'`); never if the fleet gives it back. Waiting on it keeps the event loop alive
    /// until the lease ends.
    #[napi(getter, ts_return_type = "Promise<void>")]
    pub fn lost<'e>(&mut self, env: &'e Env) -> Result<Object<'e>> {
        if let Some(lost) = &self.lost {
            return lost.get_value(env);
        }
        let promise = lost_promise(env, self.inner.lost_signal())?;
        self.lost = Some(promise.create_ref()?);
        Ok(promise)
    }
}

/// What a fleet yields, in order per shard: `'assigned'` (this member now holds `shard`; its
/// `lease` carries the fence), then `'revoked'` (it no longer does; `fence` is the fence of
/// the grant revoked), then perhaps `'assigned'` again. A revocation's `reason`: `'handoff'`,
/// another member asked for the shard and it is released when you ask for the next event, so
/// checkpoint first; `'lost'`, its lease was lost; `'closed'`, the fleet or client closed.
#[napi(
    discriminant = "type",
    discriminant_case = "lowercase",
    object_from_js = false
)]
pub enum FleetEvent {
    Assigned {
        shard: String,
        lease: ShardLease,
    },
    Revoked {
        shard: String,
        #[napi(ts_type = "'handoff' | 'lost' | 'closed'")]
        reason: &'static str,
        fence: BigInt,
    },
}

impl FleetEvent {
    fn convert(event: accord::FleetEvent) -> Outcome<Self> {
        Ok(match event {
            accord::FleetEvent::Assigned { shard, lease } => FleetEvent::Assigned {
                shard,
                lease: ShardLease {
                    inner: lease,
                    lost: None,
                },
            },
            accord::FleetEvent::Revoked {
                shard,
                reason,
                fence,
            } => FleetEvent::Revoked {
                shard,
                reason: reason.as_str(),
                fence: BigInt::from(fence),
            },
            other => {
                return Err(accord::Error::internal(format!(
                    "a fleet event this binding does not know: {other:?}"
                ))
                .into())
            }
        })
    }
}

/// A member of a fleet, opened by `client.fleet(name, { shards })`: it takes and gives back
/// shards in the background so that the fleet's members hold about as many each. Read what
/// happens with `for await (const event of fleet)` or `await fleet.nextEvent()`.
///
/// Asking for the next event tells the fleet the previous one was handled: a shard revoked
/// for a hand-off is released then (or after `handoffTimeout`), so do the hand-off's work
/// (a checkpoint) in the loop body, before asking again. Nothing reads events ahead of you.
///
/// `close()` (also what leaving a `for await` loop and `await using` do) hands every shard back:
/// each yields `'revoked'` with reason `'closed'`, then the events end. A fleet does not keep
/// the Node process alive by itself, only a pending `nextEvent()` does; a fleet collected
/// without `close()` closes in the background.
#[napi]
pub struct Fleet {
    inner: Arc<accord::Fleet>,
}

impl Fleet {
    pub(crate) fn adopt(fleet: accord::Fleet) -> Fleet {
        Fleet {
            inner: Arc::new(fleet),
        }
    }

    fn next_converted<'e, V, M>(&self, env: &'e Env, map: M) -> Result<PromiseRaw<'e, V>>
    where
        V: ToNapiValue,
        M: FnOnce(Option<FleetEvent>) -> V + 'static,
    {
        let fleet = self.inner.clone();
        settle(
            env,
            async move { Ok(fleet.next_event().await) },
            move |_, outcome| {
                let event = outcome?.map(FleetEvent::convert).transpose()?;
                Ok(map(event))
            },
        )
    }
}

#[napi]
impl Fleet {
    /// The fleet's name.
    #[napi(getter)]
    pub fn name(&self) -> String {
        self.inner.name().to_string()
    }

    /// True once the fleet stopped (closed, or its client closed).
    #[napi(getter)]
    pub fn closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// The shards this member holds now, in name order.
    #[napi]
    pub fn shards(&self) -> Vec<String> {
        self.inner.shards()
    }

    /// The fleet's live members (one read), oldest first.
    #[napi(ts_return_type = "Promise<MemberInfo[]>")]
    pub fn members<'e>(&self, env: &'e Env) -> Result<PromiseRaw<'e, Vec<MemberInfo>>> {
        let fleet = self.inner.clone();
        settle_map(
            env,
            async move { Ok(fleet.members().await?) },
            |_, members| Ok(member_infos(members)),
        )
    }

    /// The next event; `null` once the fleet is closed and every event was read. Asking
    /// acknowledges the previous `'revoked'` hand-off (see the class).
    #[napi(ts_return_type = "Promise<FleetEvent | null>")]
    pub fn next_event<'e>(&self, env: &'e Env) -> Result<PromiseRaw<'e, Option<FleetEvent>>> {
        self.next_converted(env, |event| event)
    }

    /// `nextEvent()` as an iterator step: `{ done: false, value }`, or `{ done: true }` once the
    /// fleet is closed and every event was read.
    #[napi(ts_return_type = "Promise<IteratorResult<FleetEvent, undefined>>")]
    pub fn next<'e>(&self, env: &'e Env) -> Result<PromiseRaw<'e, Step<FleetEvent>>> {
        self.next_converted(env, |event| match event {
            Some(event) => Step::of(event),
            None => Step::end(),
        })
    }

    /// Closes the fleet (what leaving a `for await` loop calls).
    #[napi(
        js_name = "return",
        ts_return_type = "Promise<IteratorReturnResult<undefined>>"
    )]
    pub fn return_<'e>(&self, env: &'e Env) -> Result<PromiseRaw<'e, Step<FleetEvent>>> {
        let fleet = self.inner.clone();
        settle_ok(env, async move {
            fleet.close().await;
            Ok(Step::end())
        })
    }

    /// Hands every shard back (each yields `'revoked'` with reason `'closed'`, then is
    /// released, waking the members waiting for it), leaves the fleet's membership and stops.
    /// Resolves once all that is done. Idempotent.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn close<'e>(&self, env: &'e Env) -> Result<PromiseRaw<'e, ()>> {
        let fleet = self.inner.clone();
        settle_ok(env, async move {
            fleet.close().await;
            Ok(())
        })
    }

    #[napi(well_known_symbol = "asyncIterator", ts_return_type = "this")]
    pub fn iterator<'e>(&self, this: This<'e>) -> This<'e> {
        this
    }

    /// `await using fleet = await client.fleet(name, options)` closes it at the end of the
    /// block.
    #[napi(well_known_symbol = "asyncDispose", ts_return_type = "Promise<void>")]
    pub fn dispose<'e>(&self, env: &'e Env) -> Result<PromiseRaw<'e, ()>> {
        self.close(env)
    }
}
