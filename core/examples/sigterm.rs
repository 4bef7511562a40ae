//! A fleet member that gives its shards back when Docker or Kubernetes stops it. The stop is a
//! SIGTERM; without a handler the process ends at once and its shards wait for their ttl before
//! the other members can take them. Here the member works until SIGTERM (or Ctrl-C), then
//! closes the client: every shard is released and the membership left, so the others take
//! them at once. `docs/deployment.md` explains the pod's side (terminationGracePeriodSeconds).
//!
//!     ACCORD_URL=postgres://app:secret@localhost/app cargo run -p accord-coord --example sigterm

use accord::{Client, ClientOptions, FleetEvent, FleetOptions};
use tokio::signal::unix::{signal, SignalKind};

#[tokio::main]
async fn main() -> accord::Result<()> {
    let url = std::env::var("ACCORD_URL")
        .unwrap_or_else(|_| "postgres://app:secret@localhost/app".into());
    // Before anything is held: a SIGTERM from then on is seen.
    let mut terminate = signal(SignalKind::terminate()).expect("a SIGTERM handler");
    let client = Client::connect(&url, ClientOptions::new().namespace("examples")).await?;
    let fleet = client.fleet("ingest", FleetOptions::shards(8)).await?;
    loop {
        tokio::select! {
            _ = terminate.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
            event = fleet.next_event() => match event {
                Some(FleetEvent::Assigned { shard, lease }) => {
                    println!("shard {shard}: mine (fence {})", lease.fence());
                }
                Some(FleetEvent::Revoked { shard, reason, .. }) => {
                    println!("shard {shard}: given up ({})", reason.as_str());
                }
                Some(_) => {} // FleetEvent may grow
                None => break,
            },
        }
    }
    // What a `finally` would do: release everything now rather than at the ttl. (With several
    // clients, `accord::close_all().await` closes them all.)
    client.close().await;
    Ok(())
}
