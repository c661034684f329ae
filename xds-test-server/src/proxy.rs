//! A fault-injecting TCP proxy on 127.0.0.1, put between a client and a management
//! server to test how the client's transport copes with a server or network that
//! misbehaves: it passes bytes through, accepts connections and never speaks (a
//! server that never sends its HTTP/2 SETTINGS), black-holes its connections on
//! command (a server gone silent mid-stream: nothing forwarded either way, nothing
//! closed), and injects an HTTP/2 GOAWAY between two of the server's frames (a server
//! retiring its connection). It follows the server's frame boundaries (9-byte headers,
//! payloads skipped) only to know where a frame may be inserted.
//!
//! It counts the connections it accepted and those still open (a client that closes
//! its connection is seen here). Like [`LoopbackServer`](crate::LoopbackServer) it runs
//! on the calling tokio runtime, or on a thread of its own when there is none.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures::channel::oneshot;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use crate::host::Host;

/// A GOAWAY with NO_ERROR whose last stream id (2^31 - 1) lets every open stream go
/// on, as a server retiring a connection gracefully sends first.
const GOAWAY: [u8; 17] = [
    0, 0, 8, 0x7, 0, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0,
];

/// A fault-injecting TCP proxy to one upstream server. See the module documentation.
/// Dropping it closes its listener and every connection.
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    _stop: oneshot::Sender<()>,
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .field("upstream", &self.shared.upstream)
            .field("connections", &self.connections())
            .finish()
    }
}

struct Shared {
    upstream: SocketAddr,
    silent: AtomicBool,
    accepted: AtomicUsize,
    open: AtomicUsize,
    links: Mutex<Vec<mpsc::UnboundedSender<Command>>>,
}

/// A command to one relayed connection, acknowledged once carried out.
enum Command {
    BlackHole(oneshot::Sender<()>),
    GoAway(oneshot::Sender<()>),
}

impl FaultProxy {
    /// Starts a pass-through proxy to `upstream` on 127.0.0.1 on a free port.
    ///
    /// # Panics
    /// When no port can be bound on 127.0.0.1.
    pub fn start(upstream: SocketAddr) -> FaultProxy {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).expect("bind 127.0.0.1");
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let addr = listener.local_addr().expect("local address");
        let shared = Arc::new(Shared {
            upstream,
            silent: AtomicBool::new(false),
            accepted: AtomicUsize::new(0),
            open: AtomicUsize::new(0),
            links: Mutex::new(Vec::new()),
        });
        let (stop, stopped) = oneshot::channel::<()>();
        let host = Host::for_caller("loopback-fault-proxy");
        let accept_shared = shared.clone();
        let keep_host = host.clone();
        host.handle().spawn(async move {
            let _host = keep_host;
            let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
            let mut links = tokio::task::JoinSet::new();
            let mut stopped = stopped;
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    accepted = listener.accept() => {
                        let Ok((client, _)) = accepted else { continue };
                        accept_shared.accepted.fetch_add(1, Ordering::SeqCst);
                        let open = OpenLink::new(&accept_shared);
                        let _ = client.set_nodelay(true);
                        if accept_shared.silent.load(Ordering::SeqCst) {
                            links.spawn(async move {
                                swallow(client).await;
                                drop(open);
                            });
                            continue;
                        }
                        let (tx, commands) = mpsc::unbounded_channel();
                        accept_shared.lock_links().push(tx);
                        let upstream = accept_shared.upstream;
                        links.spawn(async move {
                            relay(client, upstream, commands).await;
                            drop(open);
                        });
                    }
                    Some(_) = links.join_next(), if !links.is_empty() => {}
                }
            }
            links.abort_all();
        });
        FaultProxy {
            addr,
            shared,
            _stop: stop,
        }
    }

    /// `127.0.0.1:<port>`, for a bootstrap's `server_uri`.
    pub fn uri(&self) -> String {
        self.addr.to_string()
    }

    /// The address it listens on (for an endpoint of a cluster).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// How many connections it has accepted.
    pub fn connections(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// How many of them are still open: neither the client nor the upstream server has
    /// closed them (a black-holed or silent connection stays open until the client
    /// closes it).
    pub fn open_connections(&self) -> usize {
        self.shared.open.load(Ordering::SeqCst)
    }

    /// Whether connections accepted from now on are held open in silence (read and
    /// discarded, never answered, never forwarded) instead of relayed.
    pub fn set_silent(&self, silent: bool) {
        self.shared.silent.store(silent, Ordering::SeqCst);
    }

    /// Black-holes every open connection: from now on nothing is forwarded in either
    /// direction, and nothing is closed. Connections accepted later are relayed.
    /// Returns how many connections were black-holed, once they all are (bytes sent
    /// after that reach no server).
    pub async fn black_hole(&self) -> usize {
        self.command_all(Command::BlackHole).await
    }

    /// Sends a GOAWAY to the client on every open connection, between two of the
    /// server's frames; returns how many connections it was written to once it was.
    /// The server is not told: it goes on serving the open streams.
    pub async fn send_goaway(&self) -> usize {
        self.command_all(Command::GoAway).await
    }

    /// Sends a command to every open connection; returns how many carried it out.
    async fn command_all(&self, command: fn(oneshot::Sender<()>) -> Command) -> usize {
        let mut done = Vec::new();
        self.shared.lock_links().retain(|link| {
            let (tx, rx) = oneshot::channel();
            done.push(rx);
            link.send(command(tx)).is_ok()
        });
        let mut count = 0;
        for rx in done {
            count += usize::from(rx.await.is_ok());
        }
        count
    }
}

impl Shared {
    fn lock_links(&self) -> std::sync::MutexGuard<'_, Vec<mpsc::UnboundedSender<Command>>> {
        self.links.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Counts one open connection for as long as it lives.
struct OpenLink(Arc<Shared>);

impl OpenLink {
    fn new(shared: &Arc<Shared>) -> OpenLink {
        shared.open.fetch_add(1, Ordering::SeqCst);
        OpenLink(shared.clone())
    }
}

impl Drop for OpenLink {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Holds a connection open, reading and discarding, never answering.
async fn swallow(mut client: TcpStream) {
    let mut buf = vec![0; 16 * 1024];
    while matches!(client.read(&mut buf).await, Ok(n) if n > 0) {}
}

/// Relays one connection until either side closes it, obeying commands.
async fn relay(
    mut client: TcpStream,
    upstream: SocketAddr,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = server.set_nodelay(true);
    let mut from_client = vec![0; 16 * 1024];
    let mut from_server = vec![0; 16 * 1024];
    let mut frames = FrameBoundaries::default();
    let mut black_holed = false;
    let mut goaways: Vec<oneshot::Sender<()>> = Vec::new();
    loop {
        tokio::select! {
            read = client.read(&mut from_client) => {
                let n = match read { Ok(n) if n > 0 => n, _ => return };
                if !black_holed && server.write_all(&from_client[..n]).await.is_err() {
                    return;
                }
            }
            read = server.read(&mut from_server) => {
                let n = match read { Ok(n) if n > 0 => n, _ => return };
                if black_holed {
                    continue;
                }
                let bytes = &from_server[..n];
                if frames.forward(bytes, &mut client, &mut goaways).await.is_err() {
                    return;
                }
            }
            Some(command) = commands.recv() => match command {
                Command::BlackHole(done) => {
                    black_holed = true;
                    let _ = done.send(());
                }
                Command::GoAway(done) => {
                    goaways.push(done);
                    if frames.at_boundary()
                        && frames.forward(&[], &mut client, &mut goaways).await.is_err()
                    {
                        return;
                    }
                }
            },
        }
    }
}

/// Where the server's HTTP/2 frames begin and end in the byte stream.
#[derive(Debug, Default)]
struct FrameBoundaries {
    header: [u8; 9],
    header_len: usize,
    skip: usize,
}

impl FrameBoundaries {
    fn at_boundary(&self) -> bool {
        self.header_len == 0 && self.skip == 0
    }

    /// Consumes bytes up to the next frame boundary (or all of them); returns how many.
    fn advance(&mut self, bytes: &[u8]) -> usize {
        if self.skip > 0 {
            let n = self.skip.min(bytes.len());
            self.skip -= n;
            return n;
        }
        let n = (9 - self.header_len).min(bytes.len());
        self.header[self.header_len..self.header_len + n].copy_from_slice(&bytes[..n]);
        self.header_len += n;
        if self.header_len == 9 {
            self.header_len = 0;
            let [a, b, c, ..] = self.header;
            self.skip = usize::from(a) << 16 | usize::from(b) << 8 | usize::from(c);
        }
        n
    }

    /// Writes `bytes` to the client, with a GOAWAY at the first frame boundary for
    /// each pending request (acknowledged once written).
    async fn forward(
        &mut self,
        bytes: &[u8],
        client: &mut TcpStream,
        goaways: &mut Vec<oneshot::Sender<()>>,
    ) -> std::io::Result<()> {
        let mut written = 0;
        let mut pos = 0;
        loop {
            if !goaways.is_empty() && self.at_boundary() {
                client.write_all(&bytes[written..pos]).await?;
                client.write_all(&GOAWAY).await?;
                written = pos;
                for done in goaways.drain(..) {
                    let _ = done.send(());
                }
            }
            if pos == bytes.len() {
                break;
            }
            pos += self.advance(&bytes[pos..]);
        }
        client.write_all(&bytes[written..]).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boundaries_follow_headers_and_skip_payloads() {
        let mut frames = FrameBoundaries::default();
        let mut bytes = vec![0, 0, 3, 0x4, 0, 0, 0, 0, 0, 1, 2, 3];
        bytes.extend([0, 0, 0, 0x4, 1, 0, 0, 0, 0]);
        let mut stops = Vec::new();
        let mut pos = 0;
        while pos < bytes.len() {
            pos += frames.advance(&bytes[pos..]);
            if frames.at_boundary() {
                stops.push(pos);
            }
        }
        assert_eq!(stops, vec![12, 21], "after each whole frame");
        assert!(!{
            frames.advance(&[0, 0]);
            frames.at_boundary()
        });
    }
}
