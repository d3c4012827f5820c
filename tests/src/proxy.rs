//! A TCP proxy on loopback that can cut every connection through it at once (a dropped network
//! path between the bridge and the daemon) while still accepting new ones. It records when each
//! connection was accepted, so a test can measure how long a reconnect took. Started with
//! [`Proxy::cutting_at`], it reads the client's WebSocket frames (unmasked) and drops the
//! connection, the frame unsent, the first time one carries a given text: a path that fails in
//! the middle of one particular call.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

/// The running proxy.
#[derive(Debug)]
pub struct Proxy {
    /// Where to connect instead of the upstream.
    pub addr: SocketAddr,
    cut: broadcast::Sender<()>,
    accepted: Arc<Mutex<Vec<Instant>>>,
    task: JoinHandle<()>,
    needle_cut: Arc<AtomicBool>,
}

impl Proxy {
    /// Proxies a free loopback port to `upstream`.
    ///
    /// # Panics
    /// When loopback cannot be bound.
    pub async fn start(upstream: SocketAddr) -> Self {
        Self::run(upstream, None).await
    }

    /// Proxies a free loopback port to `upstream`, a WebSocket server, and cuts the connection
    /// that first sends a frame whose payload contains `needle` (the frame is not passed on);
    /// later connections, and later frames with the text, pass.
    ///
    /// # Panics
    /// When loopback cannot be bound.
    pub async fn cutting_at(upstream: SocketAddr, needle: &str) -> Self {
        Self::run(upstream, Some(needle.as_bytes().to_vec())).await
    }

    /// Whether the connection carrying the needle has been cut.
    #[must_use]
    pub fn has_cut(&self) -> bool {
        self.needle_cut.load(Ordering::SeqCst)
    }

    async fn run(upstream: SocketAddr, needle: Option<Vec<u8>>) -> Self {
        let needle_cut = Arc::new(AtomicBool::new(false));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("addr");
        let (cut, _) = broadcast::channel(4);
        let accepted = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn({
            let cut = cut.clone();
            let accepted = accepted.clone();
            let watched = needle_cut.clone();
            async move {
                while let Ok((mut client, _)) = listener.accept().await {
                    accepted.lock().expect("lock").push(Instant::now());
                    let mut stop = cut.subscribe();
                    let (needle, needle_cut) = (needle.clone(), watched.clone());
                    tokio::spawn(async move {
                        let Ok(mut server) = TcpStream::connect(upstream).await else {
                            return;
                        };
                        match needle {
                            None => {
                                tokio::select! {
                                    _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                                    _ = stop.recv() => {}
                                }
                            }
                            Some(needle) => {
                                let (mut client_rd, mut client_wr) = client.split();
                                let (mut server_rd, mut server_wr) = server.split();
                                tokio::select! {
                                    _ = tokio::io::copy(&mut server_rd, &mut client_wr) => {}
                                    () = watch_frames(&mut client_rd, &mut server_wr, &needle, &needle_cut) => {}
                                    _ = stop.recv() => {}
                                }
                            }
                        }
                        // Dropping both ends resets the connection: neither side gets a goodbye.
                    });
                }
            }
        });
        Self {
            addr,
            cut,
            accepted,
            task,
            needle_cut,
        }
    }

    /// Drops every open connection (new ones are still accepted).
    pub fn cut(&self) {
        let _ = self.cut.send(());
    }

    /// When each connection was accepted, in order.
    ///
    /// # Panics
    /// Never in practice (poisoned lock).
    #[must_use]
    pub fn accepted(&self) -> Vec<Instant> {
        self.accepted.lock().expect("lock").clone()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Passes the client's bytes on: the HTTP upgrade as it comes, then whole WebSocket frames (RFC
/// 6455 §5.2), each unmasked to be read. Returns (and so ends the connection) at the first frame
/// whose payload contains `needle`, unless a connection has been cut for it already.
async fn watch_frames(
    from: &mut (impl AsyncReadExt + Unpin),
    to: &mut (impl AsyncWriteExt + Unpin),
    needle: &[u8],
    cut: &AtomicBool,
) {
    let mut buf: Vec<u8> = Vec::new();
    let mut upgraded = false;
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let Ok(n) = from.read(&mut chunk).await else {
            return;
        };
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        if !upgraded {
            let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            if to.write_all(&buf[..end + 4]).await.is_err() {
                return;
            }
            buf.drain(..end + 4);
            upgraded = true;
        }
        while let Some((len, payload)) = frame(&buf) {
            if !cut.load(Ordering::SeqCst) && payload.windows(needle.len()).any(|w| w == needle) {
                cut.store(true, Ordering::SeqCst);
                return;
            }
            if to.write_all(&buf[..len]).await.is_err() {
                return;
            }
            buf.drain(..len);
        }
    }
}

/// The first whole frame in `buf`: its length in bytes and its payload, unmasked.
fn frame(buf: &[u8]) -> Option<(usize, Vec<u8>)> {
    let b1 = *buf.get(1)?;
    let masked = b1 & 0x80 != 0;
    let (len, mut at) = match b1 & 0x7f {
        126 => (
            usize::from(u16::from_be_bytes([*buf.get(2)?, *buf.get(3)?])),
            4,
        ),
        127 => {
            let bytes: [u8; 8] = buf.get(2..10)?.try_into().ok()?;
            (usize::try_from(u64::from_be_bytes(bytes)).ok()?, 10)
        }
        n => (usize::from(n), 2),
    };
    let mask: Option<[u8; 4]> = if masked {
        let m = buf.get(at..at + 4)?.try_into().ok()?;
        at += 4;
        Some(m)
    } else {
        None
    };
    let body = buf.get(at..at + len)?;
    let payload = match mask {
        Some(m) => body.iter().enumerate().map(|(i, b)| b ^ m[i % 4]).collect(),
        None => body.to_vec(),
    };
    Some((at + len, payload))
}
