//! The ground the etcd store's tests stand on: the throwaway cluster of `scripts/with-etcd.sh`
//! serves through every member with the `etcd-client` crate (the client the store is built on),
//! a member killed with -9 leaves a quorum that takes writes, a restarted member rejoins with
//! what it missed, and the proxy in front of a member cuts it off the network.
#![cfg(feature = "etcd")]

mod support;

use etcd_client::{Client, GetOptions};
use support::etcd::Cluster;
use support::Mode;

fn unique(name: &str) -> String {
    format!("accord-test/{name}/{:08x}", rand::random::<u32>())
}

async fn read(client: &mut Client, key: &str) -> Option<String> {
    // Linearizable (etcd's default): the member answers with what the cluster committed.
    let response = client.get(key, None::<GetOptions>).await.expect("get");
    response
        .kvs()
        .first()
        .map(|kv| kv.value_str().expect("a UTF-8 value").to_string())
}

/// Writes `key` through `member`, and reads it back through every running member.
async fn write_and_read_everywhere(cluster: &Cluster, through: usize, key: &str, value: &str) {
    let mut writer = cluster.members[through].client().await;
    writer.put(key, value, None).await.expect("put");
    for member in cluster.members.iter().filter(|m| m.is_running()) {
        let mut reader = member.client().await;
        assert_eq!(
            read(&mut reader, key).await.as_deref(),
            Some(value),
            "{key} read through {}",
            member.name
        );
    }
}

#[tokio::test]
async fn every_member_takes_writes_and_serves_everyone_elses() {
    let cluster = Cluster::from_env();
    assert_eq!(cluster.members.len(), 3);
    let _faults = cluster.faults().await;
    for (i, member) in cluster.members.iter().enumerate() {
        let key = unique(&format!("via-{}", member.name));
        write_and_read_everywhere(&cluster, i, &key, &member.name).await;
    }
}

/// Kills `victim`, writes through a survivor, restarts the victim and reads the write through
/// it: it rejoined and caught up with what it missed.
async fn survive_and_rejoin(cluster: &Cluster, victim: usize) {
    let key = unique(&format!("while-{}-down", cluster.members[victim].name));
    let survivor = (victim + 1) % cluster.members.len();
    let down = cluster.members[victim].kill().await;
    // A write needs a leader among the survivors (none to wait for when a follower died).
    cluster.leader().await;
    write_and_read_everywhere(cluster, survivor, &key, "written").await;

    down.restart().await;
    let mut rejoined = cluster.members[victim].client().await;
    assert_eq!(read(&mut rejoined, &key).await.as_deref(), Some("written"));
    // And it takes writes again.
    write_and_read_everywhere(cluster, victim, &unique("after-rejoin"), "again").await;
}

#[tokio::test]
async fn a_killed_follower_leaves_a_quorum_and_rejoins() {
    let cluster = Cluster::from_env();
    let _faults = cluster.faults().await;
    let leader = cluster.leader().await;
    let follower = (leader + 1) % cluster.members.len();
    survive_and_rejoin(&cluster, follower).await;
}

#[tokio::test]
async fn a_killed_leader_is_replaced_and_rejoins() {
    let cluster = Cluster::from_env();
    let _faults = cluster.faults().await;
    let leader = cluster.leader().await;
    survive_and_rejoin(&cluster, leader).await;
}

#[tokio::test]
async fn a_cut_proxy_takes_its_member_off_the_network() {
    let cluster = Cluster::from_env();
    let _faults = cluster.faults().await;
    let (proxies, url) = cluster.proxied().await;
    assert!(url.starts_with("etcd://127.0.0.1:"), "{url}");
    let ports: Vec<u16> = proxies.iter().map(|p| p.port()).collect();
    let via = |i: usize| vec![format!("127.0.0.1:{}", ports[i])];
    let options = || {
        etcd_client::ConnectOptions::new()
            .with_connect_timeout(std::time::Duration::from_secs(2))
            .with_timeout(std::time::Duration::from_secs(2))
    };
    let key = unique("through-proxy");

    let mut client = Client::connect(via(0), Some(options()))
        .await
        .expect("connect");
    client
        .put(key.as_str(), "one", None)
        .await
        .expect("put through the proxy");

    proxies[0].set(Mode::Cut);
    assert!(
        client.get(key.as_str(), None).await.is_err(),
        "a read through a cut proxy succeeded"
    );
    // Only that member's path is cut: the others still serve.
    let mut other = Client::connect(via(1), Some(options()))
        .await
        .expect("connect");
    assert_eq!(read(&mut other, &key).await.as_deref(), Some("one"));

    proxies[0].set(Mode::Pass);
    let mut again = Client::connect(via(0), Some(options()))
        .await
        .expect("reconnect");
    assert_eq!(read(&mut again, &key).await.as_deref(), Some("one"));
}
