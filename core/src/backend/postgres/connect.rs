//! Turning a libpq-style URL into connections: `sslmode` and `sslrootcert` as libpq understands
//! them (the table is in [`tls`]), TLS through rustls, and errors that name their cause (refused,
//! unresolved, certificate not trusted or not for this host) and never repeat the URL (it may
//! hold a password).

mod tls;

use std::error::Error as StdError;
use std::time::Duration;

use tokio_postgres::{AsyncMessage, Client, Config};
use tokio_postgres_rustls::MakeRustlsConnect;
use tokio_util::task::AbortOnDropHandle;

#[cfg(feature = "etcd")]
pub(crate) use self::tls::explain as explain_tls;
use self::tls::TlsPlan;
use crate::error::{Error, ErrorKind, Result};

/// Everything needed to open a connection, parsed once.
#[derive(Clone)]
pub(crate) struct ConnectSpec {
    config: Config,
    tls: MakeRustlsConnect,
    /// `host:port/dbname` for messages, without user or password.
    pub display: String,
    /// The server(s) as `host:port` (or the socket), for errors about reaching them.
    endpoint: String,
    /// The host name(s) of the URL, for errors about resolving or matching them.
    host_names: String,
    /// The trusted roots, for "certificate verify failed" messages.
    roots: String,
}

impl ConnectSpec {
    pub fn parse(url: &str, application_name: &str, connect_timeout: Duration) -> Result<Self> {
        let (rewritten, sslmode, sslrootcert) = extract_tls_params(url)?;
        let plan = TlsPlan::resolve(
            sslmode.as_deref(),
            sslrootcert.as_deref(),
            tls::default_root_cert(),
        )?;
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
            .keepalives_retries(3)
            .ssl_mode(plan.mode.for_tokio_postgres());
        let (display, endpoint, host_names) = describe(&config);
        let (tls_config, roots) = plan.client_config()?;
        Ok(ConnectSpec {
            config,
            tls: MakeRustlsConnect::new(tls_config),
            display,
            endpoint,
            host_names,
            roots,
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
            Ok(Err(e)) => return Err(self.connect_error(e)),
            Err(_) => {
                return Err(Error::worded(
                    ErrorKind::Connection,
                    crate::Why::new()
                        .text(format!(
                            "could not connect to PostgreSQL at {} within ",
                            self.display
                        ))
                        .duration(timeout),
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

impl ConnectSpec {
    /// A failed connection attempt, named by its cause: the server's refusal, a refused or
    /// timed-out TCP connection, a host name that does not resolve, a certificate that is not
    /// trusted or not for this host. tokio-postgres' own wording ("error connecting to server",
    /// "error performing TLS handshake") says none of that; the cause is found down its chain.
    fn connect_error(&self, e: tokio_postgres::Error) -> Error {
        let why = match e.as_db_error() {
            Some(db) => format!(
                "PostgreSQL at {} refused the connection: {}",
                self.display,
                db.message()
            ),
            None => format!(
                "could not connect to PostgreSQL at {}: {}",
                self.display,
                self.cause(&e)
            ),
        };
        Error::new(ErrorKind::Connection, why).with_source(e)
    }

    fn cause(&self, e: &tokio_postgres::Error) -> String {
        let chain = causes(e);
        for &cause in &chain {
            if let Some(tls) = cause.downcast_ref::<rustls::Error>() {
                return tls::explain(tls, &self.host_names, &self.roots);
            }
            if let Some(io) = cause.downcast_ref::<std::io::Error>() {
                use std::io::ErrorKind as K;
                match io.kind() {
                    K::ConnectionRefused => {
                        return format!(
                            "connection refused by {} (is the server running there and \
                             accepting TCP connections?)",
                            self.endpoint
                        )
                    }
                    K::TimedOut => return format!("timed out connecting to {}", self.endpoint),
                    _ => {}
                }
                // The standard library's wording for a getaddrinfo failure.
                let text = io.to_string();
                if let Some(detail) = text.strip_prefix("failed to lookup address information") {
                    let detail = detail.trim_start_matches(':').trim();
                    return format!("could not resolve host name {}: {detail}", self.host_names);
                }
            }
        }
        // Anything else: every message of the chain, outermost first, tokio-postgres' generic
        // words said plainly (or left out when they repeat "could not connect").
        let mut parts: Vec<String> = Vec::new();
        for cause in chain {
            let text = match cause.to_string() {
                t if t == "error connecting to server" => continue,
                t if t == "error performing TLS handshake" => "TLS handshake failed".to_string(),
                t => t,
            };
            if !text.is_empty() && parts.last() != Some(&text) {
                parts.push(text);
            }
        }
        if parts.is_empty() {
            return e.to_string();
        }
        parts.join(": ")
    }
}

/// An error and its causes, outermost first. `io::Error::source` skips the error it wraps (it
/// returns that error's own source), so a wrapped error is reached through `get_ref`: that is
/// where rustls' verdict sits inside tokio-postgres' TLS error.
pub(crate) fn causes<'a>(e: &'a (dyn StdError + 'static)) -> Vec<&'a (dyn StdError + 'static)> {
    let mut chain = Vec::new();
    let mut next = Some(e);
    while let Some(cause) = next {
        if chain.len() == 16 {
            break;
        }
        chain.push(cause);
        next = match cause.downcast_ref::<std::io::Error>() {
            Some(io) => io.get_ref().map(|inner| inner as &(dyn StdError + 'static)),
            None => cause.source(),
        };
    }
    chain
}

/// `host:port/dbname` for messages; the server(s) as `host:port` or socket; the host name(s)
/// quoted.
fn describe(config: &Config) -> (String, String, String) {
    use tokio_postgres::config::Host;
    let ports = config.get_ports();
    let port = |i: usize| ports.get(i).or(ports.first()).copied().unwrap_or(5432);
    let hosts: Vec<(String, bool)> = match config.get_hosts() {
        [] => vec![("localhost".to_string(), true)],
        hosts => hosts
            .iter()
            .map(|h| match h {
                Host::Tcp(h) => (h.clone(), true),
                #[cfg(unix)]
                Host::Unix(p) => (p.display().to_string(), false),
            })
            .collect(),
    };
    let db = config.get_dbname().unwrap_or("");
    let display = format!("{}:{}/{db}", hosts[0].0, port(0));
    let endpoint = hosts
        .iter()
        .enumerate()
        .map(|(i, (h, tcp))| match tcp {
            true => format!("{h}:{}", port(i)),
            false => format!("socket \"{h}/.s.PGSQL.{}\"", port(i)),
        })
        .collect::<Vec<_>>()
        .join(", ");
    let host_names = hosts
        .iter()
        .map(|(h, _)| format!("\"{h}\""))
        .collect::<Vec<_>>()
        .join(", ");
    (display, endpoint, host_names)
}

/// Pulls `sslmode` and `sslrootcert` out of the URL (tokio-postgres rejects libpq's verify-*
/// modes and root certificate files; the TLS plan sets its sslmode), returning the rest for
/// tokio-postgres to parse, and the two values (the last one given wins, as in libpq).
fn extract_tls_params(url: &str) -> Result<(String, Option<String>, Option<String>)> {
    let is_url = url.starts_with("postgres://") || url.starts_with("postgresql://");
    let mut sslmode = None;
    let mut sslrootcert = None;
    let mut handle = |name: &str, value: String| -> Result<bool> {
        match name {
            "sslmode" => sslmode = Some(value),
            "sslrootcert" => sslrootcert = Some(value),
            "sslcert" | "sslkey" | "sslpassword" => {
                return Err(Error::new(
                    ErrorKind::Unsupported,
                    format!("TLS client certificates ({name}) are not supported yet"),
                ))
            }
            _ => return Ok(true),
        }
        Ok(false)
    };
    let rewritten = if is_url {
        match url.split_once('?') {
            None => url.to_string(),
            Some((base, query)) => {
                let mut kept = Vec::new();
                for pair in query.split('&').filter(|p| !p.is_empty()) {
                    let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
                    // Others pass through untouched.
                    if handle(name, percent_decode(value))? {
                        kept.push(pair);
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
        for (name, value) in keyword_values(url)? {
            if handle(&name, value.clone())? {
                kept.push(format!("{name}={}", quote_value(&value)));
            }
        }
        kept.join(" ")
    };
    Ok((rewritten, sslmode, sslrootcert))
}

/// Splits a libpq keyword/value connection string: `key = value` with optional spaces around
/// `=`, values either bare (up to white space) or single-quoted, `\` escaping the next
/// character in both. Errors never quote a value (it may be a password).
fn keyword_values(text: &str) -> Result<Vec<(String, String)>> {
    let malformed = |what: &str| Error::invalid("url", format!("the connection string {what}"));
    let mut pairs = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Ok(pairs);
        }
        let mut name = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            name.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(malformed(&format!("lacks \"=\" after {name:?}")));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    Some('\'') => break,
                    Some('\\') => value.extend(chars.next()),
                    Some(c) => value.push(c),
                    None => {
                        return Err(malformed(&format!(
                            "has an unterminated quoted value for {name:?}"
                        )))
                    }
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.extend(chars.next());
                } else {
                    value.push(c);
                }
            }
        }
        pairs.push((name, value));
    }
}

/// A value for a keyword/value connection string, single-quoted with `\` and `'` escaped.
fn quote_value(value: &str) -> String {
    format!("'{}'", value.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// Decodes `%XX` escapes of a URL component (bytes, so that no multi-byte character is cut).
pub(crate) fn percent_decode(s: &str) -> String {
    let hex = |b: u8| (b as char).to_digit(16);
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(hi), Some(lo)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((hi * 16 + lo) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_parameters_are_taken_out() {
        let (u, m, r) = extract_tls_params(
            "postgres://u:p@h:5/db?sslmode=verify-full&sslrootcert=%2Ftmp%2Fca.pem&connect_timeout=3",
        )
        .unwrap();
        assert_eq!(u, "postgres://u:p@h:5/db?connect_timeout=3");
        assert_eq!(m.as_deref(), Some("verify-full"));
        assert_eq!(r.as_deref(), Some("/tmp/ca.pem"));
        let (u, m, r) = extract_tls_params("host=h sslmode=allow dbname=x").unwrap();
        assert_eq!(u, "host='h' dbname='x'");
        assert_eq!(m.as_deref(), Some("allow"));
        assert_eq!(r, None);
        // libpq's keyword/value syntax: spaces around `=`, quoted values with escapes; a
        // password that looks like a parameter stays the password.
        let (u, m, _) = extract_tls_params(
            "host = h sslmode = verify-full password='abc  sslmode=x\\'y' user=u\\ v",
        )
        .unwrap();
        assert_eq!(m.as_deref(), Some("verify-full"));
        assert_eq!(u, "host='h' password='abc  sslmode=x\\'y' user='u v'");
        let parsed: Config = u.parse().unwrap();
        assert_eq!(parsed.get_password(), Some(&b"abc  sslmode=x'y"[..]));
        assert_eq!(parsed.get_user(), Some("u v"));
        let err = extract_tls_params("host=h password='secret").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        assert!(!err.message().contains("secret"), "{err}");
        // A `%` before a multi-byte character is left as it is, not cut through.
        let (_, _, r) = extract_tls_params("postgres://h/db?sslrootcert=/tmp/%a€%41").unwrap();
        assert_eq!(r.as_deref(), Some("/tmp/%a€A"));
        let (_, m, r) = extract_tls_params(
            "postgres://h/db?sslrootcert=system&sslmode=require&sslmode=verify-full",
        )
        .unwrap();
        assert_eq!(
            (m.as_deref(), r.as_deref()),
            (Some("verify-full"), Some("system"))
        );
        let err = extract_tls_params("postgres://h/db?sslkey=k").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported);
        let err = ConnectSpec::parse("postgres://h/db?sslmode=bogus", "a", Duration::from_secs(1))
            .err()
            .unwrap();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    }

    #[test]
    fn servers_are_named_for_errors() {
        let spec = |url: &str| ConnectSpec::parse(url, "a", Duration::from_secs(1)).unwrap();
        let one = spec("postgres://u:pw@db.test/app");
        assert_eq!(one.display, "db.test:5432/app");
        assert_eq!(one.endpoint, "db.test:5432");
        assert_eq!(one.host_names, "\"db.test\"");
        let two = spec("postgres://u:pw@a:1,b:2/app");
        assert_eq!(two.endpoint, "a:1, b:2");
        assert_eq!(two.host_names, "\"a\", \"b\"");
        #[cfg(unix)]
        assert_eq!(
            spec("host=/run/pg port=5433 user=u").endpoint,
            "socket \"/run/pg/.s.PGSQL.5433\""
        );
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
