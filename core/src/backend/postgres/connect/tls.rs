//! libpq's `sslmode` and `sslrootcert`, turned into a rustls configuration.
//!
//! The table (libpq's "SSL Mode Descriptions", with its note on root files, and libpq 16's
//! `sslrootcert=system`):
//!
//! | sslmode     | TLS                  | certificate checked                                  |
//! |-------------|----------------------|------------------------------------------------------|
//! | disable     | never                | -                                                    |
//! | allow       | if the server has it | no                                                   |
//! | prefer      | if the server has it | no                                                   |
//! | require     | always               | the chain, when the root file exists; else nothing   |
//! | verify-ca   | always               | the chain (the root file must exist)                 |
//! | verify-full | always               | the chain and the host name (the root file must exist) |
//!
//! The root file is `sslrootcert`, else libpq's default `~/.postgresql/root.crt`.
//! `sslrootcert=system` uses the system's trusted roots, makes `verify-full` the default, and
//! refuses every other sslmode (a public CA signs anyone's host name, so a chain alone proves
//! nothing).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore};
use rustls::{Error as TlsError, SignatureScheme};

use crate::error::{Error, Result};

/// libpq's six `sslmode` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SslMode {
    Disable,
    Allow,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Result<Self> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(Error::invalid(
                    "url",
                    format!(
                        "sslmode {other:?} is not one of disable, allow, prefer, require, \
                         verify-ca, verify-full"
                    ),
                ))
            }
        })
    }

    fn name(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// What tokio-postgres is told: it knows disable, prefer and require, and leaves the
    /// certificate to our rustls configuration. `allow` (plain first, TLS if the server insists)
    /// is served as `prefer`: TLS when the server offers it, which is never less private.
    pub fn for_tokio_postgres(self) -> tokio_postgres::config::SslMode {
        use tokio_postgres::config::SslMode as T;
        match self {
            SslMode::Disable => T::Disable,
            SslMode::Allow | SslMode::Prefer => T::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => T::Require,
        }
    }
}

/// What the server's certificate is checked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verify {
    /// Any certificate is accepted (the connection is encrypted, not authenticated).
    Nothing,
    /// The chain must lead to a trusted root (verify-ca, and require with a root file).
    Chain,
    /// And the certificate must name the host (verify-full).
    ChainAndHost,
}

/// Where the trusted roots come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Roots {
    None,
    File(PathBuf),
    System,
}

/// libpq's table applied to one connection string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TlsPlan {
    pub mode: SslMode,
    pub verify: Verify,
    pub roots: Roots,
}

/// libpq's default root file: `~/.postgresql/root.crt` (`%APPDATA%\postgresql\root.crt` on
/// Windows).
pub(crate) fn default_root_cert() -> Option<PathBuf> {
    #[cfg(windows)]
    let (var, dir) = ("APPDATA", "postgresql");
    #[cfg(not(windows))]
    let (var, dir) = ("HOME", ".postgresql");
    let base = std::env::var_os(var).filter(|v| !v.is_empty())?;
    Some(Path::new(&base).join(dir).join("root.crt"))
}

impl TlsPlan {
    /// Applies libpq's table to the URL's `sslmode` and `sslrootcert` (None when absent);
    /// `default_root` is libpq's default root file, used when `sslrootcert` is not given.
    pub fn resolve(
        sslmode: Option<&str>,
        sslrootcert: Option<&str>,
        default_root: Option<PathBuf>,
    ) -> Result<TlsPlan> {
        let mode = sslmode.map(SslMode::parse).transpose()?;
        // libpq ignores an empty sslrootcert.
        let sslrootcert = sslrootcert.filter(|s| !s.is_empty());
        if sslrootcert == Some("system") {
            let mode = mode.unwrap_or(SslMode::VerifyFull);
            if mode != SslMode::VerifyFull {
                return Err(Error::invalid(
                    "url",
                    format!(
                        "sslmode={} may not be used with sslrootcert=system: use \
                         sslmode=verify-full, or leave sslmode out (a public CA vouches for a \
                         chain to anyone's host, so only the host name check protects you)",
                        mode.name()
                    ),
                ));
            }
            return Ok(TlsPlan {
                mode,
                verify: Verify::ChainAndHost,
                roots: Roots::System,
            });
        }
        let mode = mode.unwrap_or(SslMode::Prefer);
        let file = sslrootcert.map(PathBuf::from).or(default_root);
        // libpq tests existence only (stat): a file that exists but cannot be read is an error
        // when the certificates are loaded, not a reason to skip verification.
        let existing = file.clone().filter(|f| std::fs::metadata(f).is_ok());
        let (verify, roots) = match (mode, existing) {
            (SslMode::Disable | SslMode::Allow | SslMode::Prefer, _) => {
                (Verify::Nothing, Roots::None)
            }
            (SslMode::Require, None) => (Verify::Nothing, Roots::None),
            (SslMode::Require | SslMode::VerifyCa, Some(f)) => (Verify::Chain, Roots::File(f)),
            (SslMode::VerifyFull, Some(f)) => (Verify::ChainAndHost, Roots::File(f)),
            (SslMode::VerifyCa | SslMode::VerifyFull, None) => {
                let missing = match file {
                    Some(f) => format!("root certificate file \"{}\" does not exist", f.display()),
                    None => "no root certificate file (sslrootcert) is given, and there is no \
                             home folder to find ~/.postgresql/root.crt in"
                        .to_string(),
                };
                return Err(Error::invalid(
                    "url",
                    format!(
                        "sslmode={} needs trusted roots, but {missing}: provide the file, use \
                         the system's trusted roots with sslrootcert=system, or choose an \
                         sslmode that does not verify the certificate",
                        mode.name()
                    ),
                ));
            }
        };
        Ok(TlsPlan {
            mode,
            verify,
            roots,
        })
    }

    /// The rustls configuration, and the trusted roots described for error messages.
    pub fn client_config(&self) -> Result<(ClientConfig, String)> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::internal(format!("TLS setup: {e}")))?;
        let (store, described) = match &self.roots {
            Roots::None => (RootCertStore::empty(), "no trusted roots".to_string()),
            Roots::File(path) => (
                roots_from_file(path)?,
                format!("the root certificate file \"{}\"", path.display()),
            ),
            Roots::System => system_roots(),
        };
        let verifier: Arc<dyn ServerCertVerifier> = if self.verify == Verify::Nothing {
            Arc::new(WithoutRoots {
                provider,
                accept: true,
            })
        } else if store.is_empty() {
            // Only the system's store can be empty here: no certificate can be verified.
            Arc::new(WithoutRoots {
                provider,
                accept: false,
            })
        } else {
            let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider)
                .build()
                .map_err(|e| Error::invalid("url", format!("TLS roots ({described}): {e}")))?;
            if self.verify == Verify::Chain {
                Arc::new(ChainOnly(webpki))
            } else {
                webpki
            }
        };
        let config = builder
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok((config, described))
    }
}

fn roots_from_file(path: &Path) -> Result<RootCertStore> {
    let shown = path.display();
    let mut roots = RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(path).map_err(|e| {
        Error::invalid(
            "url",
            format!("root certificate file \"{shown}\" cannot be read: {e}"),
        )
    })?;
    for cert in certs {
        let cert = cert.map_err(|e| {
            Error::invalid("url", format!("root certificate file \"{shown}\": {e}"))
        })?;
        roots.add(cert).map_err(|e| {
            Error::invalid("url", format!("root certificate file \"{shown}\": {e}"))
        })?;
    }
    if roots.is_empty() {
        return Err(Error::invalid(
            "url",
            format!("root certificate file \"{shown}\" holds no PEM certificate"),
        ));
    }
    Ok(roots)
}

/// The operating system's trust store, as OpenSSL (and so libpq) finds it: the platform's
/// store, `SSL_CERT_FILE` / `SSL_CERT_DIR` on Unix.
fn system_roots() -> (RootCertStore, String) {
    let found = rustls_native_certs::load_native_certs();
    for e in &found.errors {
        tracing::warn!(error = %e, "reading the system's trusted root certificates");
    }
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(found.certs);
    let described = if roots.is_empty() {
        "the system's trusted roots (none were found)".to_string()
    } else {
        "the system's trusted roots".to_string()
    };
    (roots, described)
}

/// Accepts any certificate (sslmode without verification), or, with `accept` false, rejects
/// every one as of an unknown issuer (verification against an empty system store). Signatures
/// over the handshake are still checked, so the peer holds the certificate's key.
#[derive(Debug)]
struct WithoutRoots {
    provider: Arc<CryptoProvider>,
    accept: bool,
}

impl ServerCertVerifier for WithoutRoots {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, TlsError> {
        if self.accept {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(TlsError::InvalidCertificate(
                CertificateError::UnknownIssuer,
            ))
        }
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The chain is verified, the host name is not (verify-ca; require with a root file).
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, TlsError> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(TlsError::InvalidCertificate(CertificateError::NotValidForName))
            | Err(TlsError::InvalidCertificate(CertificateError::NotValidForNameContext {
                ..
            })) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        self.0.verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        self.0.verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// Why a TLS handshake failed, in libpq's words where libpq has some.
pub(crate) fn explain(e: &TlsError, host: &str, roots: &str) -> String {
    use CertificateError as C;
    let TlsError::InvalidCertificate(c) = e else {
        return match e {
            TlsError::AlertReceived(alert) => {
                format!("the server ended the TLS handshake (alert {alert:?})")
            }
            other => format!("TLS handshake failed: {other}"),
        };
    };
    let why = match c {
        C::NotValidForName => {
            return format!("the server's certificate does not match host name \"{host}\"")
        }
        C::NotValidForNameContext {
            expected,
            presented,
        } => {
            let names: Vec<&str> = presented.iter().map(|n| general_name(n)).collect();
            let names = if names.is_empty() {
                "no host name".to_string()
            } else {
                names.join(", ")
            };
            return format!(
                "the server's certificate does not match host name \"{}\" (it is for {names})",
                expected.to_str()
            );
        }
        C::UnknownIssuer => {
            format!("unknown issuer: the server's certificate is not signed by a CA in {roots}")
        }
        C::Expired => "the certificate has expired".to_string(),
        C::NotValidYet => "the certificate is not valid yet".to_string(),
        C::Revoked => "the certificate is revoked".to_string(),
        C::BadSignature => "bad signature".to_string(),
        C::BadEncoding => "the certificate is malformed".to_string(),
        C::InvalidPurpose => "the certificate is not meant for a server".to_string(),
        other => other.to_string(),
    };
    format!("certificate verify failed: {why}")
}

/// `DnsName("db.example")` / `IpAddress(10.0.0.1)` (webpki's wording) as plain names.
fn general_name(name: &str) -> &str {
    name.strip_prefix("DnsName(\"")
        .and_then(|n| n.strip_suffix("\")"))
        .or_else(|| {
            name.strip_prefix("IpAddress(")
                .and_then(|n| n.strip_suffix(')'))
        })
        .unwrap_or(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(mode: Option<&str>, root: Option<&str>, default: Option<&Path>) -> Result<TlsPlan> {
        TlsPlan::resolve(mode, root, default.map(Path::to_path_buf))
    }

    #[test]
    fn libpqs_table() {
        let dir = std::env::temp_dir().join(format!("accord-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let present = dir.join("root.crt");
        std::fs::write(&present, "").unwrap();
        let absent = dir.join("absent.crt");
        let (p, a) = (present.to_str().unwrap(), absent.to_str().unwrap());
        let file = |f: &Path| Roots::File(f.to_path_buf());
        type Case<'a> = (
            Option<&'a str>,
            Option<&'a str>,
            Option<&'a Path>,
            Verify,
            Roots,
        );
        let cases: &[Case] = &[
            (None, None, None, Verify::Nothing, Roots::None),
            (Some("disable"), Some(p), None, Verify::Nothing, Roots::None),
            (Some("allow"), Some(p), None, Verify::Nothing, Roots::None),
            (Some("prefer"), Some(p), None, Verify::Nothing, Roots::None),
            (Some("require"), None, None, Verify::Nothing, Roots::None),
            (Some("require"), Some(a), None, Verify::Nothing, Roots::None),
            (
                Some("require"),
                Some(p),
                None,
                Verify::Chain,
                file(&present),
            ),
            // libpq's default root file counts as given.
            (
                Some("require"),
                None,
                Some(&present),
                Verify::Chain,
                file(&present),
            ),
            (
                Some("require"),
                Some(""),
                Some(&present),
                Verify::Chain,
                file(&present),
            ),
            (
                Some("require"),
                None,
                Some(&absent),
                Verify::Nothing,
                Roots::None,
            ),
            (
                Some("verify-ca"),
                Some(p),
                None,
                Verify::Chain,
                file(&present),
            ),
            (
                Some("verify-ca"),
                None,
                Some(&present),
                Verify::Chain,
                file(&present),
            ),
            (
                Some("verify-full"),
                Some(p),
                Some(&absent),
                Verify::ChainAndHost,
                file(&present),
            ),
            (
                None,
                Some("system"),
                None,
                Verify::ChainAndHost,
                Roots::System,
            ),
            (
                Some("verify-full"),
                Some("system"),
                None,
                Verify::ChainAndHost,
                Roots::System,
            ),
        ];
        for (mode, root, default, verify, roots) in cases {
            let got = plan(*mode, *root, *default)
                .unwrap_or_else(|e| panic!("{mode:?} {root:?} {default:?}: {e}"));
            assert_eq!(
                (got.verify, &got.roots),
                (*verify, roots),
                "{mode:?} {root:?} {default:?}"
            );
        }
        // verify-* need a root file that exists.
        for mode in ["verify-ca", "verify-full"] {
            for (root, default) in [
                (Some(a), None),
                (None, Some(absent.as_path())),
                (None, None),
            ] {
                let err = plan(Some(mode), root, default).unwrap_err();
                assert_eq!(err.kind(), crate::ErrorKind::InvalidArgument);
                assert!(err.message().contains("sslrootcert=system"), "{err}");
            }
        }
        // sslrootcert=system allows verify-full only.
        for mode in ["disable", "allow", "prefer", "require", "verify-ca"] {
            let err = plan(Some(mode), Some("system"), None).unwrap_err();
            assert_eq!(err.kind(), crate::ErrorKind::InvalidArgument);
            assert!(err.message().contains(&format!("sslmode={mode}")), "{err}");
        }
        assert!(plan(Some("bogus"), None, None).is_err());
        // An existing root file that holds no certificate is refused, not skipped.
        let empty = plan(Some("require"), Some(p), None).unwrap();
        assert!(empty.client_config().is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn certificate_failures_are_named() {
        let unknown = TlsError::InvalidCertificate(CertificateError::UnknownIssuer);
        let text = explain(&unknown, "h", "root certificate file \"/x\"");
        assert!(
            text.starts_with("certificate verify failed: unknown issuer"),
            "{text}"
        );
        assert!(text.contains("/x"), "{text}");
        let expired = TlsError::InvalidCertificate(CertificateError::Expired);
        assert_eq!(
            explain(&expired, "h", ""),
            "certificate verify failed: the certificate has expired"
        );
        let misnamed = TlsError::InvalidCertificate(CertificateError::NotValidForNameContext {
            expected: ServerName::try_from("db.test").unwrap(),
            presented: vec![
                "DnsName(\"localhost\")".into(),
                "IpAddress(127.0.0.1)".into(),
            ],
        });
        assert_eq!(
            explain(&misnamed, "db.test", ""),
            "the server's certificate does not match host name \"db.test\" \
             (it is for localhost, 127.0.0.1)"
        );
    }
}
