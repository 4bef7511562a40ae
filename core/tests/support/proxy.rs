//! A TCP proxy between a client and the coordinator that the test can switch to cut or stall
//! every connection: the network faults the fault tests need (a cut, a stall), without touching the server.

use std::net::SocketAddr;
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
}

pub struct Proxy {
    port: u16,
    mode: Arc<watch::Sender<Mode>>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let mode = Arc::new(watch::channel(Mode::Pass).0);
        let task = {
            let mode = mode.clone();
            tokio::spawn(async move {
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
                    tokio::spawn(forward(client, upstream, rx));
                }
            })
        };
        Proxy { port, mode, task }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        self.mode.send_replace(Mode::Cut);
    }
}

async fn forward(mut client: TcpStream, upstream: SocketAddr, mut mode: watch::Receiver<Mode>) {
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut cr, mut cw) = client.split();
    let (mut sr, mut sw) = server.split();
    let mut up = [0u8; 16384];
    let mut down = [0u8; 16384];
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
                Ok(n) => if cw.write_all(&down[..n]).await.is_err() { return },
            },
            changed = mode.changed() => {
                if changed.is_err() || *mode.borrow() == Mode::Cut {
                    return;
                }
            }
        }
    }
}
