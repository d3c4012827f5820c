//! A TCP proxy on loopback that can cut every connection through it at once (a dropped network
//! path between the bridge and the daemon) while still accepting new ones. It records when each
//! connection was accepted, so a test can measure how long a reconnect took.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

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
}

impl Proxy {
    /// Proxies a free loopback port to `upstream`.
    ///
    /// # Panics
    /// When loopback cannot be bound.
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("addr");
        let (cut, _) = broadcast::channel(4);
        let accepted = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn({
            let cut = cut.clone();
            let accepted = accepted.clone();
            async move {
                while let Ok((mut client, _)) = listener.accept().await {
                    accepted.lock().expect("lock").push(Instant::now());
                    let mut stop = cut.subscribe();
                    tokio::spawn(async move {
                        let Ok(mut server) = TcpStream::connect(upstream).await else {
                            return;
                        };
                        tokio::select! {
                            _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                            _ = stop.recv() => {}
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
