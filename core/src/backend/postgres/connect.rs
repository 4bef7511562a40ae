//! Turning a libpq-style URL into connections: `sslmode` as libpq understands it, TLS through
//! rustls, and errors that never repeat the URL (it may hold a password).

use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres::config::SslMode;
use tokio_postgres::{AsyncMessage, Client, Config};
use tokio_postgres_rustls::MakeRustlsConnect;
use tokio_util::task::AbortOnDropHandle;

use crate::error::{Error, ErrorKind, Result};

/// libpq's `sslmode` values; tokio-postgres knows only the first three by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verify {
    /// disable / allow / prefer / require: encrypt when asked, trust any certificate (libpq's
    /// behaviour without a root certificate).
    Nothing,
    /// verify-ca: the chain must lead to a trusted root.
    Chain,
    /// verify-full: and the certificate must name the host.
    ChainAndHost,
}

/// Everything needed to open a connection, parsed once.
#[derive(Clone)]
pub(crate) struct ConnectSpec {
    config: Config,
    tls: MakeRustlsConnect,
    /// `host:port` for messages, without user or password.
    pub display: String,
}

impl ConnectSpec {
    pub fn parse(url: &str, application_name: &str, connect_timeout: Duration) -> Result<Self> {
        let (rewritten, verify, root_cert) = extract_tls_params(url)?;
        let mut config: Config = rewritten.parse().map_err(|e: tokio_postgres::Error| {
            Error::invalid("url", format!("not a valid PostgreSQL URL ({e})"))
        })?;
        if config.get_application_name().is_none() {
            config.application_name(application_name);
        }
        config
            .connect_timeout(connect_timeout)
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(10))
            .keepalives_interval(Duration::from_secs(5))
            .keepalives_retries(3);
        if verify != Verify::Nothing {
            config.ssl_mode(SslMode::Require);
        }
        let display = describe(&config);
        let tls = MakeRustlsConnect::new(tls_config(verify, root_cert.as_deref())?);
        Ok(ConnectSpec {
            config,
            tls,
            display,
        })
    }

    /// Opens a connection and drives it on a task; protocol messages the server sends on its
    /// own (notifications, notices) go to `on_message`. The returned receiver completes when
    /// the connection ends.
    pub async fn connect(
        &self,
        mut on_message: impl FnMut(AsyncMessage) + Send + 'static,
    ) -> Result<Connected> {
        let connect = self.config.connect(self.tls.clone());
        let timeout = self
            .config
            .get_connect_timeout()
            .copied()
            .unwrap_or(Duration::from_secs(10));
        let (client, mut connection) = match tokio::time::timeout(timeout, connect).await {
            Ok(Ok(pair)) => pair,
            Ok(Err(e)) => return Err(connect_error(&self.display, e)),
            Err(_) => {
                return Err(Error::new(
                    ErrorKind::Connection,
                    format!(
                        "could not connect to PostgreSQL at {} within {timeout:?}",
                        self.display
                    ),
                ))
            }
        };
        let (ended_tx, ended) = tokio::sync::oneshot::channel();
        let driver = tokio::spawn(async move {
            loop {
                match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                    Some(Ok(message)) => on_message(message),
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, "PostgreSQL connection ended");
                        break;
                    }
                    None => break,
                }
            }
            let _ = ended_tx.send(());
        });
        Ok(Connected {
            client,
            ended,
            driver: AbortOnDropHandle::new(driver),
        })
    }
}

/// An open connection. Dropping it stops its driver task, even when the socket is stalled.
pub(crate) struct Connected {
    pub client: Client,
    /// Completes when the connection ends.
    pub ended: tokio::sync::oneshot::Receiver<()>,
    pub driver: AbortOnDropHandle<()>,
}

fn describe(config: &Config) -> String {
    use tokio_postgres::config::Host;
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        #[cfg(unix)]
        Some(Host::Unix(p)) => p.display().to_string(),
        None => "localhost".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let db = config.get_dbname().unwrap_or("");
    format!("{host}:{port}/{db}")
}

pub(crate) fn connect_error(display: &str, e: tokio_postgres::Error) -> Error {
    match e.as_db_error() {
        Some(db) => Error::new(
            ErrorKind::Connection,
            format!(
                "PostgreSQL at {display} refused the connection: {}",
                db.message()
            ),
        ),
        None => Error::new(
            ErrorKind::Connection,
            format!("could not connect to PostgreSQL at {display}: {e}"),
        ),
    }
    .with_source(e)
}

/// Pulls `sslmode` and `sslrootcert` out of the URL (tokio-postgres rejects libpq's verify-*
/// modes and root certificate files), returning the rest for tokio-postgres to parse.
fn extract_tls_params(url: &str) -> Result<(String, Verify, Option<String>)> {
    let is_url = url.starts_with("postgres://") || url.starts_with("postgresql://");
    let mut verify = Verify::Nothing;
    let mut root_cert = None;
    let mut handle = |name: &str, value: &str| -> Result<Option<String>> {
        match name {
            "sslmode" => {
                let (mode, v) = match value {
                    "disable" => ("disable", Verify::Nothing),
                    "allow" | "prefer" => ("prefer", Verify::Nothing),
                    "require" => ("require", Verify::Nothing),
                    "verify-ca" => ("require", Verify::Chain),
                    "verify-full" => ("require", Verify::ChainAndHost),
                    other => {
                        return Err(Error::invalid(
                            "url",
                            format!("sslmode {other:?} is not one of disable, allow, prefer, require, verify-ca, verify-full"),
                        ))
                    }
                };
                verify = v;
                Ok(Some(format!("sslmode={mode}")))
            }
            "sslrootcert" => {
                root_cert = Some(value.to_string());
                Ok(None)
            }
            "sslcert" | "sslkey" | "sslpassword" => Err(Error::new(
                ErrorKind::Unsupported,
                format!("TLS client certificates ({name}) are not supported yet"),
            )),
            _ => Ok(Some(format!("{name}={value}"))),
        }
    };
    let rewritten = if is_url {
        match url.split_once('?') {
            None => url.to_string(),
            Some((base, query)) => {
                let mut kept = Vec::new();
                for pair in query.split('&').filter(|p| !p.is_empty()) {
                    let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
                    if let Some(p) = handle(name, &percent_decode(value))? {
                        // Re-encode only what we rewrote; others pass through untouched.
                        kept.push(if name == "sslmode" {
                            p
                        } else {
                            pair.to_string()
                        });
                    }
                }
                if kept.is_empty() {
                    base.to_string()
                } else {
                    format!("{base}?{}", kept.join("&"))
                }
            }
        }
    } else {
        let mut kept = Vec::new();
        for pair in url.split_whitespace() {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            if let Some(p) = handle(name.trim(), value.trim())? {
                kept.push(if name == "sslmode" {
                    p
                } else {
                    pair.to_string()
                });
            }
        }
        kept.join(" ")
    };
    Ok((rewritten, verify, root_cert))
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(b) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn tls_config(verify: Verify, root_cert: Option<&str>) -> Result<ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::internal(format!("TLS setup: {e}")))?;
    let config = match verify {
        Verify::Nothing => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider)))
            .with_no_client_auth(),
        Verify::Chain | Verify::ChainAndHost => {
            let mut roots = RootCertStore::empty();
            match root_cert {
                Some(path) => {
                    for cert in CertificateDer::pem_file_iter(path).map_err(|e| {
                        Error::invalid("url", format!("sslrootcert {path:?} cannot be read: {e}"))
                    })? {
                        let cert = cert.map_err(|e| {
                            Error::invalid("url", format!("sslrootcert {path:?}: {e}"))
                        })?;
                        roots.add(cert).map_err(|e| {
                            Error::invalid("url", format!("sslrootcert {path:?}: {e}"))
                        })?;
                    }
                }
                None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
            }
            let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots),
                provider.clone(),
            )
            .build()
            .map_err(|e| Error::invalid("url", format!("TLS roots: {e}")))?;
            let verifier: Arc<dyn ServerCertVerifier> = if verify == Verify::Chain {
                Arc::new(ChainOnly(verifier))
            } else {
                verifier
            };
            builder
                .dangerous()
                .with_custom_certificate_verifier(verifier)
                .with_no_client_auth()
        }
    };
    Ok(config)
}

/// sslmode=require: encrypted, certificate not checked (as libpq does without a root file).
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// sslmode=verify-ca: the chain is verified, the host name is not.
#[derive(Debug)]
struct ChainOnly(Arc<rustls::client::WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName))
            | Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libpq_sslmodes_are_understood() {
        let (u, v, r) = extract_tls_params(
            "postgres://u:p@h:5/db?sslmode=verify-full&sslrootcert=%2Ftmp%2Fca.pem&connect_timeout=3",
        )
        .unwrap();
        assert_eq!(u, "postgres://u:p@h:5/db?sslmode=require&connect_timeout=3");
        assert_eq!(v, Verify::ChainAndHost);
        assert_eq!(r.as_deref(), Some("/tmp/ca.pem"));
        let (u, v, _) = extract_tls_params("host=h sslmode=allow dbname=x").unwrap();
        assert_eq!(u, "host=h sslmode=prefer dbname=x");
        assert_eq!(v, Verify::Nothing);
        assert!(extract_tls_params("postgres://h/db?sslmode=bogus").is_err());
    }

    #[test]
    fn errors_never_show_the_password() {
        let err = match ConnectSpec::parse(
            "postgres://user:s3cret@h/db?bogus_option=1",
            "accord",
            Duration::from_secs(1),
        ) {
            Err(e) => e,
            Ok(_) => panic!("an unknown option must be refused"),
        };
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        assert!(!err.to_string().contains("s3cret"), "{err}");
        let spec = ConnectSpec::parse(
            "postgres://user:s3cret@h:6543/db",
            "accord",
            Duration::from_secs(1),
        )
        .unwrap();
        assert_eq!(spec.display, "h:6543/db");
    }
}
