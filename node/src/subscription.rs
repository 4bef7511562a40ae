//! `Subscription`: an async iterator of notifications and `Reconnected` events.

use std::sync::Arc;

use napi::bindgen_prelude::*;
use napi::threadsafe_function::ThreadsafeFunction;
use napi_derive::napi;
use tokio_util::sync::CancellationToken;

use crate::convert::settle_ok;

/// What a subscription yields: a notification on one of its channels (`type: 'message'`, with
/// the `channel` it was sent on and its `payload`, possibly empty), or `type: 'reconnected'`:
/// the listening connection was re-established and notifications sent while it was down were
/// missed, so re-read whatever state they were about.
#[napi(
    discriminant = "type",
    discriminant_case = "lowercase",
    object_from_js = false
)]
pub enum SubscriptionEvent {
    Message { channel: String, payload: String },
    Reconnected,
}

/// Notifications on one or more channels, in the order the coordinator delivered them:
/// `for await (const event of subscription)` yields `Message`s and `Reconnected` events.
///
/// Notifications queue up in memory until read. An open subscription keeps the Node process
/// alive; `close()` it (or leave a `for await` loop, or dispose it) when done.
#[napi]
pub struct Subscription {
    inner: Arc<accord::Subscription>,
    /// Cancelled on close: ends the task that holds the reference on the event loop.
    closed: CancellationToken,
}

/// What the event loop sees of an open subscription: a referenced threadsafe function that is
/// never called, dropped when the subscription or its client closes.
type KeepAlive = ThreadsafeFunction<(), (), (), Status, false>;

impl Subscription {
    /// Wraps an open subscription. Runs on the JavaScript thread.
    pub(crate) fn open(
        env: &Env,
        inner: accord::Subscription,
        client_closed: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<Subscription> {
        let closed = CancellationToken::new();
        let noop =
            env.create_function_from_closure::<(), (), _>("accordSubscription", |_| Ok(()))?;
        let keep_alive: KeepAlive = noop
            .build_threadsafe_function::<()>()
            .callee_handled::<false>()
            .build()?;
        let until = closed.clone();
        napi::bindgen_prelude::spawn(async move {
            tokio::select! {
                _ = until.cancelled() => {}
                _ = client_closed => {}
            }
            drop(keep_alive);
        });
        Ok(Subscription {
            inner: Arc::new(inner),
            closed,
        })
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        // Collected while open: stop holding the event loop. Dropping the core subscription
        // UNLISTENs in the background.
        self.closed.cancel();
    }
}

/// An iteration step, as `next()` and `return()` resolve it (typed as `IteratorResult`), of
/// a subscription, a member watch or a fleet.
pub struct Step<T = SubscriptionEvent> {
    done: bool,
    value: Option<T>,
}

impl<T> Step<T> {
    /// `{ done: false, value }`.
    pub(crate) fn of(value: T) -> Self {
        Step {
            done: false,
            value: Some(value),
        }
    }

    /// `{ done: true, value: undefined }`.
    pub(crate) fn end() -> Self {
        Step {
            done: true,
            value: None,
        }
    }
}

impl<T: ToNapiValue> ToNapiValue for Step<T> {
    unsafe fn to_napi_value(env: sys::napi_env, step: Self) -> Result<sys::napi_value> {
        let env = Env::from_raw(env);
        let mut object = Object::new(&env)?;
        object.set("done", step.done)?;
        match step.value {
            Some(event) => object.set("value", event)?,
            None => object.set("value", ())?,
        }
        unsafe { Object::to_napi_value(env.raw(), object) }
    }
}

impl From<Option<accord::Event>> for Step {
    fn from(event: Option<accord::Event>) -> Self {
        Step {
            done: event.is_none(),
            value: event.map(|event| match event {
                accord::Event::Message(m) => SubscriptionEvent::Message {
                    channel: m.channel,
                    payload: m.payload,
                },
                accord::Event::Reconnected => SubscriptionEvent::Reconnected,
            }),
        }
    }
}

#[napi]
impl Subscription {
    /// The channels this subscription receives.
    #[napi(getter)]
    pub fn channels(&self) -> Vec<String> {
        self.inner.channels().to_vec()
    }

    /// True once closed (by `close()` or by closing the client).
    #[napi(getter)]
    pub fn closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// The next event: `{ done: false, value }`, or `{ done: true }` once the subscription is
    /// closed. Rejects with `ACCORD_CLOSED` once the client is closed.
    #[napi(ts_return_type = "Promise<IteratorResult<SubscriptionEvent, undefined>>")]
    pub fn next<'e>(&self, env: &'e Env) -> Result<PromiseRaw<'e, Step>> {
        let inner = self.inner.clone();
        settle_ok(env, async move { Ok(Step::from(inner.recv().await?)) })
    }

    /// Closes the subscription (what leaving a `for await` loop calls).
    #[napi(
        js_name = "return",
        ts_return_type = "Promise<IteratorReturnResult<undefined>>"
    )]
    pub fn return_<'e>(&self, env: &'e Env) -> Result<PromiseRaw<'e, Step>> {
        let inner = self.inner.clone();
        self.closed.cancel();
        settle_ok(env, async move {
            inner.close().await;
            Ok(Step::from(None))
        })
    }

    /// Stops delivery (a pending `next()` resolves with `done: true`) and UNLISTENs channels
    /// no other subscription of the client needs.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn close<'e>(&self, env: &'e Env) -> Result<PromiseRaw<'e, ()>> {
        let inner = self.inner.clone();
        self.closed.cancel();
        settle_ok(env, async move {
            inner.close().await;
            Ok(())
        })
    }

    #[napi(well_known_symbol = "asyncIterator", ts_return_type = "this")]
    pub fn iterator<'e>(&self, this: This<'e>) -> This<'e> {
        this
    }

    /// `await using subscription = await client.listen(...)` closes it at the end of the block.
    #[napi(well_known_symbol = "asyncDispose", ts_return_type = "Promise<void>")]
    pub fn dispose<'e>(&self, env: &'e Env) -> Result<PromiseRaw<'e, ()>> {
        self.close(env)
    }
}
