//! The etcd store on clusters that check who connects: `etcds://` against the 3-member TLS
//! cluster of `scripts/with-etcd.sh` (members require a client certificate signed by its
//! throwaway CA; ACCORD_TEST_ETCD_TLS_URL, ACCORD_TEST_ETCD_TLS_DIR), and user/password against
//! its cluster with auth enabled (a user whose role reads and writes `/accord-test/` only;
//! tokens expire after 1 s unused; ACCORD_TEST_ETCD_AUTH_URL). Each test skips, saying why,
//! without its cluster. A refusal names the URL parameter to fix and never the password.
#![cfg(feature = "etcd")]

mod support;

use std::time::Duration;

use accord::{AcquireOptions, Client, ClientOptions, ErrorKind};

/// A hang, not a duration anything is expected to take.
const BOUND: Duration = Duration::from_secs(60);

fn env(name: &str, test: &str) -> Option<String> {
    let value = std::env::var(name).ok();
    if value.is_none() {
        eprintln!("{test}: skipped, {name} is not set (scripts/with-etcd.sh sets it)");
    }
    value
}

/// `url` with this test's own key prefix (under `/accord-test/`, where the auth cluster's
/// user may write).
fn with_prefix(url: &str, test: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!(
        "{url}{separator}prefix=/accord-test/{test}_{:08x}",
        rand::random::<u32>()
    )
}

async fn connect(url: &str) -> accord::Result<Client> {
    let options = ClientOptions::new().ttl(Duration::from_secs(2));
    tokio::time::timeout(BOUND, Client::connect(url, options))
        .await
        .expect("connect hung")
}

/// The whole cycle over TLS with a client certificate: two clients, one holds, the other is
/// refused the key until it is released, then gets it with a greater fence.
async fn acquire_and_release(url: &str) {
    let first = connect(url).await.expect("connect");
    let second = connect(url).await.expect("connect a second client");
    let lease = first
        .acquire("job", AcquireOptions::new())
        .await
        .expect("acquire");
    assert!(second
        .try_acquire("job", AcquireOptions::new())
        .await
        .expect("try_acquire while held")
        .is_none());
    lease.renew().await.expect("renew");
    lease.release().await.expect("release");
    let next = tokio::time::timeout(
        BOUND,
        second.acquire("job", AcquireOptions::new().timeout(BOUND)),
    )
    .await
    .expect("acquire hung")
    .expect("acquire after the release");
    assert!(next.fence() > lease.fence());
    next.release().await.expect("release");
    first.close().await;
    second.close().await;
}

#[tokio::test]
async fn tls_with_a_client_certificate_acquires_and_releases() {
    let test = "tls_acquire";
    let Some(url) = env("ACCORD_TEST_ETCD_TLS_URL", test) else {
        return;
    };
    acquire_and_release(&with_prefix(&url, test)).await;
}

/// The members' certificate names 127.0.0.1 and etcd.accord.test: server_name picks the
/// name checked, and a name it does not carry is refused as server_name's.
#[tokio::test]
async fn tls_server_name_is_the_name_checked() {
    let test = "tls_server_name";
    let Some(url) = env("ACCORD_TEST_ETCD_TLS_URL", test) else {
        return;
    };
    let good = with_prefix(&format!("{url}&server_name=etcd.accord.test"), test);
    connect(&good).await.expect("connect").close().await;
    let err = connect(&with_prefix(&format!("{url}&server_name=other.test"), test))
        .await
        .expect_err("a name the certificate does not carry is refused");
    assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
    assert!(err.message().contains("url: server_name:"), "{err}");
    assert!(err.message().contains("other.test"), "{err}");
}

/// A CA that signed nothing the members show: refused, naming cacert.
#[tokio::test]
async fn tls_with_the_wrong_ca_is_refused_naming_cacert() {
    let test = "tls_wrong_ca";
    let (Some(url), Some(dir)) = (
        env("ACCORD_TEST_ETCD_TLS_URL", test),
        env("ACCORD_TEST_ETCD_TLS_DIR", test),
    ) else {
        return;
    };
    let url = url.replace(&format!("{dir}/ca.pem"), &format!("{dir}/other-ca.pem"));
    let err = connect(&with_prefix(&url, test))
        .await
        .expect_err("a wrong CA is refused");
    assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
    assert!(err.message().contains("url: cacert:"), "{err}");
    assert!(err.message().contains("other-ca.pem"), "{err}");
}

/// The members require a client certificate: without cert= and key=, refused, naming cert.
#[tokio::test]
async fn tls_without_a_client_certificate_is_refused_naming_cert() {
    let test = "tls_no_client_cert";
    let (Some(url), Some(dir)) = (
        env("ACCORD_TEST_ETCD_TLS_URL", test),
        env("ACCORD_TEST_ETCD_TLS_DIR", test),
    ) else {
        return;
    };
    let hosts = url.split('?').next().unwrap();
    let url = format!("{hosts}?cacert={dir}/ca.pem");
    let err = connect(&with_prefix(&url, test))
        .await
        .expect_err("no client certificate is refused");
    assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
    assert!(err.message().contains("url: cert:"), "{err}");
    assert!(err.message().contains("cert= and key="), "{err}");
}

/// Files that cannot serve are refused before any connection, naming their parameter.
#[tokio::test]
async fn tls_files_that_cannot_serve_are_refused_naming_the_parameter() {
    let test = "tls_bad_files";
    let (Some(url), Some(dir)) = (
        env("ACCORD_TEST_ETCD_TLS_URL", test),
        env("ACCORD_TEST_ETCD_TLS_DIR", test),
    ) else {
        return;
    };
    for (from, to, param) in [
        ("ca.pem", "missing.pem", "cacert"),
        // A key file given as the CA: no certificate in it.
        ("ca.pem", "ca-key.pem", "cacert"),
        ("client.pem", "missing.pem", "cert"),
        // A certificate given as the key: no private key in it.
        ("client-key.pem", "client.pem", "key"),
    ] {
        let bad = url.replace(&format!("{dir}/{from}"), &format!("{dir}/{to}"));
        let err = connect(&bad).await.expect_err("refused");
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{param}: {err}");
        assert!(
            err.message().starts_with(&format!("url: {param}: ")),
            "{param}: {err}"
        );
        assert!(err.message().contains(to), "{param}: {err}");
    }
}

/// A wrong password is refused, naming the password parameter and the user, never the
/// password; a cluster with auth enabled refuses a URL without a user, naming the user.
#[tokio::test]
async fn auth_wrong_password_or_no_user_is_refused_naming_the_field() {
    let test = "auth_refused";
    let Some(url) = env("ACCORD_TEST_ETCD_AUTH_URL", test) else {
        return;
    };
    let (scheme_user, hosts) = url.rsplit_once('@').unwrap();
    let user = scheme_user.strip_prefix("etcd://").unwrap();
    let name = user.split(':').next().unwrap();
    let wrong = format!("etcd://{name}:not-the-password-42@{hosts}");
    let err = connect(&with_prefix(&wrong, test))
        .await
        .expect_err("a wrong password is refused");
    assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
    assert!(err.message().starts_with("url: password:"), "{err}");
    assert!(err.message().contains(&format!("{name:?}")), "{err}");
    assert!(!err.message().contains("not-the-password-42"), "{err}");
    assert!(
        !format!("{err:?}").contains("not-the-password-42"),
        "{err:?}"
    );

    let anonymous = format!("etcd://{hosts}");
    let err = connect(&with_prefix(&anonymous, test))
        .await
        .expect_err("no user is refused");
    assert!(err.message().starts_with("url: user:"), "{err}");
}

/// etcd's simple tokens expire when unused for --auth-token-ttl (1 s on the test cluster).
/// A lease held longer than that stays held (its keep-alives and renewals go on with the
/// token); a client idle for longer than that (nothing held, so nothing sent) finds its token
/// expired, and its next calls authenticate again instead of failing.
#[tokio::test]
async fn auth_leases_outlive_their_token() {
    let test = "auth_token_expiry";
    let Some(url) = env("ACCORD_TEST_ETCD_AUTH_URL", test) else {
        return;
    };
    acquire_and_release(&with_prefix(&url, test)).await;
    let url = with_prefix(&url, test);
    let client = connect(&url).await.expect("connect");
    let lease = client
        .acquire("job", AcquireOptions::new())
        .await
        .expect("acquire");
    // A witness: a raw client of the same user whose token is left unused, so that the test
    // knows etcd dropped tokens unused for as long as this client waits.
    let witness = support::etcd::authenticated(&url).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    support::etcd::assert_token_expired(witness).await;
    assert!(
        !lease.is_lost(),
        "the lease was lost while held past the token's ttl"
    );
    lease.renew().await.expect("renew");
    lease.release().await.expect("release");

    // Idle: nothing held, nothing sent; the client's tokens expire.
    let witness = support::etcd::authenticated(&url).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    support::etcd::assert_token_expired(witness).await;
    let again = client
        .acquire("job", AcquireOptions::new().timeout(BOUND))
        .await
        .expect("acquire after the token expired");
    again.release().await.expect("release");
    client.close().await;
}

/// A watch stream carries the token it opens with, and etcd checks it when the stream's
/// watches are created: a client idle past the token's ttl that then listens must
/// authenticate again rather than take etcd's cancel for a compaction or a failure.
#[tokio::test]
async fn auth_listening_after_the_token_expired() {
    let test = "auth_listen_expired";
    let Some(url) = env("ACCORD_TEST_ETCD_AUTH_URL", test) else {
        return;
    };
    let url = with_prefix(&url, test);
    let listener = connect(&url).await.expect("connect");
    let witness = support::etcd::authenticated(&url).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    support::etcd::assert_token_expired(witness).await;
    let subscription = listener.listen(["news"]).await.expect("listen");
    listener.notify("news", "after").await.expect("notify");
    let event = tokio::time::timeout(BOUND, subscription.recv())
        .await
        .expect("recv hung")
        .expect("recv");
    match event {
        Some(accord::Event::Message(m)) => assert_eq!(m.payload, "after"),
        other => panic!("expected the notification, got {other:?}"),
    }
    listener.close().await;
}

/// With auth on, a member down at connect does not fail the connect: the others are
/// authenticated through, and calls go to them.
#[tokio::test]
async fn auth_connects_with_a_member_down() {
    let test = "auth_member_down";
    let (Some(url), Some(_)) = (
        env("ACCORD_TEST_ETCD_AUTH_URL", test),
        env("ACCORD_TEST_ETCD_AUTH_MEMBERS", test),
    ) else {
        return;
    };
    let cluster = support::etcd::Cluster::from_vars(
        "ACCORD_TEST_ETCD_AUTH_URL",
        "ACCORD_TEST_ETCD_AUTH_MEMBERS",
    );
    // The URL's last member (the others' tests and witnesses use the first).
    let down = cluster.members[2].kill().await;
    acquire_and_release(&with_prefix(&url, test)).await;
    // Dropped: the member starts again (it rejoins on its own; later tests tolerate it
    // starting, as a member down at connect is what this test shows they may meet).
    drop(down);
}
