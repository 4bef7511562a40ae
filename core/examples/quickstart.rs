//! README's Rust quick start, runnable: a lease with its fence and lost signal, done-marking,
//! and a notification; then the key is reset, so that it runs again and again (and after the
//! other languages' quick starts, which use the same namespace and key).
//!
//!     ACCORD_URL=postgres://app:secret@localhost/app cargo run -p accord-coord --example quickstart

use std::time::Duration;

use accord::{AcquireOptions, Client, ClientOptions, Event};

#[tokio::main]
async fn main() -> accord::Result<()> {
    let url = std::env::var("ACCORD_URL")
        .unwrap_or_else(|_| "postgres://app:secret@localhost/app".into());
    let client = Client::connect(
        &url,
        ClientOptions::new()
            .namespace("reports")
            .ttl(Duration::from_secs(10)),
    )
    .await?;

    // Wait up to 5 s for the key; the lease renews itself in the background.
    let lease = client
        .acquire(
            "daily/2026-11-22",
            AcquireOptions::new().timeout(Duration::from_secs(5)),
        )
        .await?;
    println!("holding {} with fence {}", lease.key(), lease.fence());
    tokio::select! {
        _ = lease.lost() => eprintln!("lost the lease: stop writing"),
        _ = tokio::time::sleep(Duration::from_secs(1)) => {
            // ... work, passing lease.fence() to whatever you write ...
            lease.done(None).await?; // never granted again until `client.reset(key)`
        }
    }

    // Notifications, from any client or from SQL (`NOTIFY jobs, 'hi'`).
    let subscription = client.listen(["jobs"]).await?;
    client.notify("jobs", "report ready").await?;
    if let Some(Event::Message(m)) = subscription.recv().await? {
        println!("{}: {}", m.channel, m.payload);
    }

    // Done is final: reset makes the key acquirable again, so that this runs again.
    client.reset("daily/2026-11-22").await?;
    client.close().await;
    Ok(())
}
