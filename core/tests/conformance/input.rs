//! G11: bad input gets a clear `InvalidArgument` naming the field, and leaves nothing held.

use std::time::Duration;

use accord::{AcquireOptions, Client, ClientOptions, ErrorKind, ListQuery};
use serde_json::json;

use crate::support::{meta, Harness};

fn expect_invalid<T: std::fmt::Debug>(result: accord::Result<T>, field: &str) {
    let err = result.expect_err("bad input must be refused");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!(
        err.message().contains(field),
        "the message {:?} does not name {field}",
        err.message()
    );
}

pub async fn g11_bad_input_is_refused(h: &Harness) {
    let c = h.client("o1").await;
    let long = "k".repeat(513);
    for key in ["", "a\0b", long.as_str()] {
        expect_invalid(c.try_acquire(key, AcquireOptions::new()).await, "key");
        expect_invalid(c.acquire(key, AcquireOptions::new()).await, "key");
        expect_invalid(c.reset(key).await, "key");
    }
    c.try_acquire(&"k".repeat(512), AcquireOptions::new())
        .await
        .unwrap()
        .expect("512 bytes is allowed")
        .release()
        .await
        .unwrap();
    for ttl in [Duration::from_millis(99), Duration::from_secs(86_401)] {
        expect_invalid(
            c.try_acquire("a", AcquireOptions::new().ttl(ttl)).await,
            "ttl",
        );
    }
    let huge = meta(json!({ "blob": "x".repeat(70_000) }));
    expect_invalid(
        c.try_acquire("a", AcquireOptions::new().metadata(huge.clone()))
            .await,
        "metadata",
    );
    let lease = c
        .try_acquire("a", AcquireOptions::new())
        .await
        .unwrap()
        .unwrap();
    expect_invalid(lease.renew_with_metadata(huge.clone()).await, "metadata");
    expect_invalid(lease.done(Some(huge)).await, "metadata");
    lease.release().await.unwrap();
    expect_invalid(c.notify("", "x").await, "channel");
    expect_invalid(c.notify(&"c".repeat(64), "x").await, "channel");
    expect_invalid(c.notify("ok", "a\0b").await, "payload");
    expect_invalid(c.listen(Vec::<String>::new()).await, "channels");
    expect_invalid(c.list(ListQuery::new().limit(5000)).await, "limit");
    expect_invalid(c.list(ListQuery::new().prefix("a\0")).await, "prefix");

    // Nothing was left held by any of it.
    assert_eq!(c.held_count(), 0);
    let held = c
        .list(ListQuery::new().state(accord::KeyState::Held))
        .await
        .unwrap();
    assert!(held.items.is_empty(), "{held:?}");

    // Client options are checked before connecting.
    for (options, field) in [
        (ClientOptions::new().namespace(""), "namespace"),
        (ClientOptions::new().owner("a\0"), "owner"),
        (ClientOptions::new().ttl(Duration::from_millis(1)), "ttl"),
        (ClientOptions::new().pool_size(0), "pool_size"),
        (ClientOptions::new().schema(""), "schema"),
    ] {
        expect_invalid(Client::connect(&h.url, options).await, field);
    }
    expect_invalid(
        Client::connect("mysql://x", ClientOptions::new()).await,
        "url",
    );
}
