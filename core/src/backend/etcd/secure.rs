//! How the client proves who it is to etcd and checks who the members are: the TLS settings
//! of an etcds:// URL read into the gRPC client's configuration, and a refused connection
//! (a certificate not trusted, a client certificate missing, a wrong password) worded by the
//! URL parameter to change. No message quotes the password.

use etcd_client::{Certificate, ConnectOptions, Identity, TlsOptions};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::url::{refused, EtcdUrl, TlsFiles};
use crate::backend::postgres::{causes, explain_tls};
use crate::error::{Error, ErrorKind, Result};

/// `base` with the URL's TLS settings, each file read and checked now: a missing or
/// unreadable file fails here, naming its parameter, before any connection.
pub(crate) fn with_tls(base: ConnectOptions, files: &TlsFiles) -> Result<ConnectOptions> {
    let mut tls = TlsOptions::new();
    match &files.cacert {
        Some(path) => {
            let pem = read("cacert", path)?;
            certificates("cacert", path, &pem)?;
            tls = tls.ca_certificate(Certificate::from_pem(pem));
        }
        // etcdctl without --cacert trusts the system's roots; so does accord.
        None => tls = tls.with_native_roots(),
    }
    if let Some((cert, key)) = &files.identity {
        let cert_pem = read("cert", cert)?;
        certificates("cert", cert, &cert_pem)?;
        let key_pem = read("key", key)?;
        PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
            refused(
                "key",
                format!("{key} holds no PEM private key (PKCS#8, PKCS#1 or SEC1): {e}"),
            )
        })?;
        tls = tls.identity(Identity::from_pem(cert_pem, key_pem));
    }
    if let Some(name) = &files.server_name {
        tls = tls.domain_name(name.clone());
    }
    Ok(base.with_tls(tls))
}

fn read(param: &str, path: &str) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| refused(param, format!("cannot read {path}: {e}")))
}

fn certificates(param: &str, path: &str, pem: &[u8]) -> Result<()> {
    let mut found = 0;
    for cert in CertificateDer::pem_slice_iter(pem) {
        cert.map_err(|e| refused(param, format!("{path} is not a PEM certificate file: {e}")))?;
        found += 1;
    }
    if found == 0 {
        return Err(refused(
            param,
            format!("{path} holds no PEM certificate (-----BEGIN CERTIFICATE-----)"),
        ));
    }
    Ok(())
}

/// A refusal on the way in, worded by the URL parameter that would fix it; `None` when `e`
/// is none of those (an unreachable cluster, say).
pub(crate) fn explain(e: &etcd_client::Error, url: &EtcdUrl) -> Option<Error> {
    let user = url.user.as_ref().map(|(name, _)| name.as_str());
    if let etcd_client::Error::GRpcStatus(status) = e {
        let message = status.message();
        let why = if message.contains("authentication failed") {
            let name = user.unwrap_or("");
            format!(
                "password: etcd refused user {name:?}: {} (check the user and password)",
                message.trim_start_matches("etcdserver: ")
            )
        } else if message.contains("user name is empty") {
            "user: the cluster has authentication enabled; give user:password@ (or user=, \
             password=)"
                .to_string()
        } else if message.contains("authentication is not enabled") && user.is_some() {
            "user: the cluster has authentication disabled; drop the user and password".to_string()
        } else {
            String::new()
        };
        if !why.is_empty() {
            return Some(Error::new(ErrorKind::Connection, format!("url: {why}")));
        }
    }
    let tls = url.tls.as_ref()?;
    // The crate's error names no source: the chain starts inside it.
    let chain = match e {
        etcd_client::Error::GRpcStatus(status) => causes(status),
        etcd_client::Error::TransportError(transport) => causes(transport),
        _ => return None,
    };
    // A member that requires a client certificate and got none ends the connection once TLS
    // 1.3's handshake is done on the client's side: the client sees its alert, or only the
    // connection closing under its first request.
    let closed = chain.iter().any(|cause| {
        let broken = cause.downcast_ref::<std::io::Error>().is_some_and(|io| {
            use std::io::ErrorKind as K;
            matches!(
                io.kind(),
                K::BrokenPipe | K::ConnectionReset | K::UnexpectedEof
            )
        });
        // hyper's wording when the connection ended before the answer.
        broken || cause.to_string() == "connection closed"
    });
    // An alert after the handshake reaches the client through h2, which keeps its text only.
    let alert = chain
        .iter()
        .map(|cause| cause.to_string())
        .find(|text| text.starts_with("received fatal alert"));
    match (&tls.identity, alert) {
        (None, alert) if closed || alert.is_some() => {
            let how = alert.unwrap_or_else(|| "closed the connection".to_string());
            return Some(Error::new(
                ErrorKind::Connection,
                format!(
                    "url: cert: the member ended the connection after the TLS handshake \
                     ({how}), as members started with --client-cert-auth do to a client \
                     without a certificate; give cert= and key="
                ),
            ));
        }
        (Some((cert, _)), Some(alert)) => {
            return Some(Error::new(
                ErrorKind::Connection,
                format!(
                    "url: cert: the member refused the client certificate {cert} ({alert}): is \
                     it signed by a CA the members trust (--trusted-ca-file)?"
                ),
            ));
        }
        _ => {}
    }
    for cause in &chain {
        let Some(verdict) = cause.downcast_ref::<rustls::Error>() else {
            continue;
        };
        let param = match verdict {
            rustls::Error::InvalidCertificate(c) if names_mismatch(c) => "server_name",
            rustls::Error::InvalidCertificate(_) => "cacert",
            _ => "url",
        };
        let roots = match &tls.cacert {
            Some(path) => path.clone(),
            None => "the system's roots (give cacert=)".to_string(),
        };
        let host = tls.server_name.as_deref().unwrap_or("the URL's host");
        let why = explain_tls(verdict, host, &roots);
        let what = if param == "url" {
            "url".to_string()
        } else {
            format!("url: {param}")
        };
        return Some(Error::new(ErrorKind::Connection, format!("{what}: {why}")));
    }
    None
}

fn names_mismatch(c: &rustls::CertificateError) -> bool {
    matches!(
        c,
        rustls::CertificateError::NotValidForName
            | rustls::CertificateError::NotValidForNameContext { .. }
    )
}
