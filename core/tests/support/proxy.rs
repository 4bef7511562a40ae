//! A TCP proxy between a client and the coordinator that the test can switch to cut, stall or
//! reset every connection: the network faults the fault tests need (a cut, a stall, connections
//! ended from outside), without touching the server.
//! One proxy may front several servers (an etcd cluster's members), one port each: one switch
//! then cuts or stalls the client's way to all of them.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Forward everything.
    Pass,
    /// Close every connection and refuse new ones (a dead network, fast failure).
    Cut,
    /// Keep connections open but forward nothing (a hung network, no error at all). New
    /// connections are accepted and stall too. Leaving this mode closes them.
    Stall,
    /// Forward everything until the server sends these bytes; then that one connection fails,
    /// once: the bytes are swallowed, and the connection stalls (`cut: false`, until the mode
    /// changes) or is closed (`cut: true`). Later connections pass. A fault at the exact moment
    /// a test needs it, e.g. while a listening connection waits for a notification it expects.
    FailOnceOn { bytes: &'static [u8], cut: bool },
    /// Close every connection open now, as a server or a load balancer ending them does; new
    /// connections pass. Setting it again closes those opened since.
    Reset,
}

pub struct Proxy {
    /// One port per upstream, in the order given.
    ports: Vec<u16>,
    mode: Arc<watch::Sender<Mode>>,
    /// Whether a `FailOnceOn` fault happened (it happens once per setting of the mode).
    failed: Arc<AtomicBool>,
    /// Connections forwarded now (to every upstream).
    open: Arc<AtomicUsize>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Proxy {
    pub async fn start(upstream: SocketAddr) -> Proxy {
        Proxy::start_all(&[upstream]).await
    }

    /// A proxy in front of each of `upstreams`, all switched together.
    pub async fn start_all(upstreams: &[SocketAddr]) -> Proxy {
        let mode = Arc::new(watch::channel(Mode::Pass).0);
        let failed = Arc::new(AtomicBool::new(false));
        let open = Arc::new(AtomicUsize::new(0));
        let mut ports = Vec::new();
        let mut tasks = Vec::new();
        for &upstream in upstreams {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            ports.push(listener.local_addr().unwrap().port());
            let mode = mode.clone();
            let failed = failed.clone();
            let open = open.clone();
            tasks.push(tokio::spawn(async move {
                loop {
                    let Ok((client, _)) = listener.accept().await else {
                        return;
                    };
                    let current = *mode.borrow();
                    if current == Mode::Cut {
                        drop(client);
                        continue;
                    }
                    let rx = mode.subscribe();
                    tokio::spawn(forward(client, upstream, rx, failed.clone(), open.clone()));
                }
            }));
        }
        Proxy {
            ports,
            mode,
            failed,
            open,
            tasks,
        }
    }

    /// The port in front of the first upstream.
    pub fn port(&self) -> u16 {
        self.ports[0]
    }

    /// The ports, one per upstream in the order given.
    pub fn ports(&self) -> &[u16] {
        &self.ports
    }

    pub fn set(&self, mode: Mode) {
        self.failed.store(false, Ordering::SeqCst);
        self.mode.send_replace(mode);
    }

    /// How many connections it forwards now.
    pub fn open_connections(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    /// Closes every connection open now (`Mode::Reset`); returns how many there were.
    pub fn reset(&self) -> usize {
        let open = self.open_connections();
        self.set(Mode::Reset);
        open
    }

    /// Whether the `FailOnceOn` fault of the current mode has happened.
    pub fn has_failed(&self) -> bool {
        self.failed.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        self.mode.send_replace(Mode::Cut);
    }
}

async fn forward(
    mut client: TcpStream,
    upstream: SocketAddr,
    mut mode: watch::Receiver<Mode>,
    failed: Arc<AtomicBool>,
    open: Arc<AtomicUsize>,
) {
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        return;
    };
    open.fetch_add(1, Ordering::SeqCst);
    let _counted = Counted(open);
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut cr, mut cw) = client.split();
    let (mut sr, mut sw) = server.split();
    let mut up = [0u8; 16384];
    let mut down = [0u8; 16384];
    // The end of the last chunk from the server, so that bytes split across two reads match.
    let mut tail: Vec<u8> = Vec::new();
    loop {
        if *mode.borrow() == Mode::Stall {
            // Hold both sockets silently until the mode changes, then drop them.
            let _ = mode.changed().await;
            return;
        }
        tokio::select! {
            n = cr.read(&mut up) => match n {
                Ok(0) | Err(_) => return,
                Ok(n) => if sw.write_all(&up[..n]).await.is_err() { return },
            },
            n = sr.read(&mut down) => match n {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    let current = *mode.borrow();
                    if let Mode::FailOnceOn { bytes, cut } = current {
                        tail.extend_from_slice(&down[..n]);
                        if tail.windows(bytes.len()).any(|w| w == bytes)
                            && !failed.swap(true, Ordering::SeqCst)
                        {
                            if !cut {
                                let _ = mode.changed().await;
                            }
                            return;
                        }
                        let keep = tail.len().saturating_sub(bytes.len());
                        tail.drain(..keep);
                    }
                    if cw.write_all(&down[..n]).await.is_err() { return }
                }
            },
            changed = mode.changed() => {
                if changed.is_err() || matches!(*mode.borrow(), Mode::Cut | Mode::Reset) {
                    return;
                }
            }
        }
    }
}

/// Counts a forwarded connection until it ends.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}
