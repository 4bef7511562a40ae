//! The conformance suite on etcd (`ACCORD_TEST_ETCD_URL`, an `etcd://` URL of a cluster; each
//! scenario skips, saying why, without it), built with the cargo feature `etcd`; and how an
//! `etcd://` URL is refused without that feature.
//!
//! This step of the etcd store has leases, locks, waiting, notify and work pools: scenarios
//! needing streams or snapshots are ignored with that reason, as are those needing the faults this
//! harness cannot make yet (a proxy per member, terminated connections).

#[cfg(feature = "etcd")]
mod conformance;
mod support;

use accord::{Client, ClientOptions, ErrorKind};

#[cfg(feature = "etcd")]
mod suite {
    use super::support::Harness;
    crate::conformance_suite!(Harness::etcd, has[member_failure, pools]);
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

/// TLS and user/password come later: refused as not supported yet, before any connection.
#[cfg(feature = "etcd")]
#[tokio::test]
async fn etcds_and_credentials_are_not_supported_yet() {
    for url in ["etcds://127.0.0.1:2379", "etcd://u:p@127.0.0.1:2379"] {
        let err = Client::connect(url, ClientOptions::new())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported, "{url}");
        assert!(err.message().contains("not supported yet"), "{url}: {err}");
    }
    let err = Client::connect("etcd://127.0.0.1:2379?mode=x", ClientOptions::new())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.message().contains("mode=x"), "{err}");
}
