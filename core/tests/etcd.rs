//! The conformance suite on etcd (`ACCORD_TEST_ETCD_URL`, an `etcd://` URL of a cluster; each
//! scenario skips, saying why, without it), built with the cargo feature `etcd`; and how an
//! `etcd://` URL is refused without that feature.
//!
//! The etcd store has every recipe (leases, locks, waiting, notify, pools, streams and
//! snapshots): only the scenarios needing connections ended from outside are ignored, with that
//! reason. Network faults go through a proxy in front of every member (`Harness::proxy`),
//! switched together.

#[cfg(feature = "etcd")]
mod conformance;
mod support;

use accord::{Client, ClientOptions, ErrorKind};

#[cfg(feature = "etcd")]
mod suite {
    use super::support::Harness;
    crate::conformance_suite!(
        Harness::etcd,
        has[member_failure, network_faults, pools, streams, snapshot]
    );
}

/// Without the feature, an etcd URL is refused as unsupported, naming the feature.
#[cfg(not(feature = "etcd"))]
#[tokio::test]
async fn etcd_urls_need_the_feature() {
    let err = Client::connect("etcd://127.0.0.1:2379", ClientOptions::new())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported);
    assert!(err.message().contains("`etcd`"), "{err}");
}

/// An etcd URL's refusals name the parameter, before any connection, and never quote a
/// password (TLS and user/password themselves: core/tests/etcd_secure.rs).
#[cfg(feature = "etcd")]
#[tokio::test]
async fn etcd_url_refusals_name_the_parameter() {
    for (url, says) in [
        ("etcd://127.0.0.1:2379?mode=x", "\"mode\""),
        ("etcd://127.0.0.1:2379?cacert=/ca.pem", "use etcds://"),
        ("etcd://u@127.0.0.1:2379", "no password"),
        ("etcds://127.0.0.1:2379?cert=/c.pem", "cert= needs key="),
    ] {
        let err = Client::connect(url, ClientOptions::new())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{url}");
        assert!(err.message().contains(says), "{url}: {err}");
    }
    let err = Client::connect(
        "etcd://u:secret@127.0.0.1:2379?pasword=secret2",
        ClientOptions::new(),
    )
    .await
    .unwrap_err();
    assert!(err.message().contains("pasword"), "{err}");
    assert!(!format!("{err} {err:?}").contains("secret"), "{err:?}");
}
