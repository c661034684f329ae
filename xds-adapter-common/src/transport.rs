//! Connections to xDS servers and to the `xds:///` channel's endpoints: target parsing,
//! the one connection attempt both use (TCP, then TLS for `tls` credentials, then the
//! HTTP/2 handshake until the server's SETTINGS arrive, all under the connect
//! timeout), HTTP/2 keepalive, and the tower service tonic's client runs on. One
//! connection per xDS server is kept and shared by that server's successive ADS
//! streams until it closes, the server sends GOAWAY, or the core drops the channel.

use std::fmt;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::FutureExt;
use futures::channel::oneshot;
use futures::future::{self, AbortHandle, AbortRegistration, Abortable, Either};
use futures::io::{AsyncRead, AsyncWrite};
use xds_proto_core::bootstrap::{ChannelCredentials, ServerConfig, ServerTarget, TlsCredentials};

use crate::frames::{ConnectionState, FrameWatcher, Handshake};
use crate::io::HyperIo;
use crate::runtime::{BoxFuture, HyperExecutor, HyperTimer, Runtime};
use crate::security::{ConnectionTls, FailureNote, explain_alert};

/// The default cap on one received message: 64 MiB, enough for the large CDS/EDS
/// responses of big meshes (tonic's own default is 4 MiB).
pub const DEFAULT_MAX_RECEIVE_MESSAGE_SIZE: usize = 64 * 1024 * 1024;

/// The default bound on one connection attempt (gRPC's minimum connect timeout).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(20);

/// The default time without a frame from the server after which a keepalive PING is
/// sent: 5 minutes, what gRPC C-core sets on its xDS channel
/// (`GRPC_ARG_KEEPALIVE_TIME_MS` in `xds_transport_grpc.cc`). Shorter is not safe as a
/// default: grpc-go and C-core servers allow one PING per 5 minutes by default and
/// answer more frequent ones with GOAWAY `too_many_pings`.
pub const DEFAULT_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5 * 60);

/// The default time a keepalive PING may go unanswered before the connection is taken
/// to be dead: 20 s, gRPC's default `GRPC_ARG_KEEPALIVE_TIMEOUT_MS`.
pub const DEFAULT_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// HTTP/2 keepalive: how a server that goes silent mid-stream is detected, on ADS
/// connections (on by default) and on an `XdsChannel`'s endpoint connections (off by
/// default, as in gRPC's data-plane channels).
///
/// The rule (hyper's HTTP/2 keepalive, which the adapter configures): while at least
/// one stream is open on a connection, a PING is sent once `interval` has passed since
/// the last frame read that counts as activity (response HEADERS, DATA, or the ACK of
/// a PING; SETTINGS, WINDOW_UPDATE and the server's own PINGs do not count). If its
/// ACK has not arrived `timeout` after the PING was sent, the connection is closed
/// ("keep-alive timed out") and every stream on it ends with UNAVAILABLE, which the
/// core treats as any broken stream (backoff, retry, fallback), and the channel as a
/// failed attempt (its route's retry policy applies; the endpoint goes IDLE and
/// reconnects). A server silent since
/// its last frame at `t` is therefore detected at `t + interval + timeout` (the timers
/// run on the adapter's runtime). No PINGs are sent on a connection without streams,
/// as gRPC clients do not by default (`GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS` 0).
/// With keepalive off (`TransportSettings::keepalive` `None`) a silent server is never
/// detected by the client; only the operating system's TCP timeouts end the
/// connection, if the peer's host is gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeepaliveSettings {
    /// Time since the last activity read after which a PING is sent.
    pub interval: Duration,
    /// Time a PING may wait for its ACK before the connection is closed.
    pub timeout: Duration,
}

impl Default for KeepaliveSettings {
    fn default() -> KeepaliveSettings {
        KeepaliveSettings {
            interval: DEFAULT_KEEPALIVE_INTERVAL,
            timeout: DEFAULT_KEEPALIVE_TIMEOUT,
        }
    }
}

/// Transport settings of a client's ADS connections (beyond what the bootstrap says),
/// or of an `XdsChannel`'s endpoint connections
/// ([`TransportSettings::endpoint_defaults`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransportSettings {
    /// The largest `DiscoveryResponse` accepted, in bytes (ADS only: a channel's RPCs
    /// are bounded by the tonic client's own limit).
    pub max_receive_message_size: usize,
    /// How long one connection attempt may take: TCP, TLS, and until the server's
    /// first HTTP/2 frame (its SETTINGS) has been read. A connection counts as
    /// connected only then; at the deadline the attempt is a connectivity failure.
    pub connect_timeout: Duration,
    /// HTTP/2 keepalive; `None` turns it off. On by default for ADS
    /// ([`DEFAULT_KEEPALIVE_INTERVAL`], [`DEFAULT_KEEPALIVE_TIMEOUT`]), off by default
    /// for endpoint connections ([`TransportSettings::endpoint_defaults`]).
    pub keepalive: Option<KeepaliveSettings>,
    /// The HTTP/2 stream flow-control window, in bytes.
    pub initial_stream_window_size: u32,
    /// The HTTP/2 connection flow-control window, in bytes.
    pub initial_connection_window_size: u32,
}

impl Default for TransportSettings {
    fn default() -> TransportSettings {
        TransportSettings {
            max_receive_message_size: DEFAULT_MAX_RECEIVE_MESSAGE_SIZE,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            keepalive: Some(KeepaliveSettings::default()),
            initial_stream_window_size: 4 * 1024 * 1024,
            initial_connection_window_size: 8 * 1024 * 1024,
        }
    }
}

impl TransportSettings {
    /// The defaults of an `XdsChannel`'s endpoint connections: [`Default`]'s, with
    /// keepalive off, as gRPC's data-plane channels have it (grpc-go's
    /// `keepalive.ClientParameters.Time` and C-core's `GRPC_ARG_KEEPALIVE_TIME_MS`
    /// default to infinity on clients). A backend that goes silent while READY is then
    /// noticed only by the RPCs' deadlines; set [`keepalive`](Self::keepalive) (with an
    /// interval the backends' servers permit, 5 min for gRPC servers by default) to
    /// close such a connection and move its RPCs on.
    pub fn endpoint_defaults() -> TransportSettings {
        TransportSettings {
            keepalive: None,
            ..TransportSettings::default()
        }
    }
}

/// A server URI split into host and port.
///
/// Accepts what the bootstrap accepts ([`ServerTarget`]): `host:port`, `[v6]:port`,
/// `dns:///host:port`, `dns:host:port` and a bare host (port 443).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The host name or IP literal (without brackets).
    pub host: String,
    /// The port.
    pub port: u16,
}

impl Target {
    /// Parses a bootstrap `server_uri`.
    ///
    /// # Errors
    /// Why it is no target the transport can dial (as the bootstrap says it).
    pub fn parse(uri: &str) -> Result<Target, String> {
        let ServerTarget { host, port } = ServerTarget::parse(uri)?;
        Ok(Target { host, port })
    }

    /// The HTTP origin tonic puts into the request (`http://` or `https://`).
    fn origin(&self, tls: bool) -> Result<http::Uri, String> {
        let scheme = if tls { "https" } else { "http" };
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        format!("{scheme}://{host}:{}", self.port)
            .parse()
            .map_err(|e| format!("invalid origin for {}: {e}", self.host))
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// An established HTTP/2 connection to one server: the server's SETTINGS arrived.
#[derive(Clone, Debug)]
pub(crate) struct Connection {
    pub(crate) send: hyper::client::conn::http2::SendRequest<tonic::body::Body>,
    pub(crate) origin: http::Uri,
    state: Arc<ConnectionState>,
}

impl Connection {
    /// Whether a new stream may use it: open, and not being closed by the server
    /// (GOAWAY).
    pub(crate) fn takes_new_streams(&self) -> bool {
        !self.send.is_closed() && !self.state.is_going_away()
    }

    /// The state its stream shares with it (to learn why the connection ended).
    pub(crate) fn state(&self) -> Arc<ConnectionState> {
        self.state.clone()
    }
}

trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

/// Where a connection attempt goes: the host and port to dial, with TLS or without,
/// and how its errors name the peer. An xDS server's comes from its bootstrap entry;
/// an endpoint's is its address, with the TLS its channel's credentials give it.
#[derive(Clone, Debug)]
pub(crate) struct Peer {
    target: Target,
    tls: Option<PeerTls>,
    /// How errors name the peer: the server URI, or the endpoint's address.
    label: String,
}

/// The TLS of a connection attempt.
#[derive(Clone, Debug)]
struct PeerTls {
    config: Arc<rustls::ClientConfig>,
    /// The server name sent (SNI, unless an IP address) and given to the verifier;
    /// `None`: the target's host.
    server_name: Option<rustls::pki_types::ServerName<'static>>,
    /// Where an xDS verifier says why it refused the server.
    note: Option<FailureNote>,
}

impl Peer {
    /// The xDS server `config` names, with its channel credentials (`tls` ones built
    /// by `tls_config`).
    pub(crate) fn server(
        config: &ServerConfig,
        tls_config: impl FnOnce(&TlsCredentials) -> Result<Arc<rustls::ClientConfig>, String>,
    ) -> Result<Peer, String> {
        let target = Target::parse(&config.server_uri)?;
        let tls = match &config.channel_creds {
            ChannelCredentials::Insecure => None,
            ChannelCredentials::Tls(creds) => Some(PeerTls {
                config: tls_config(creds)?,
                server_name: None,
                note: None,
            }),
            ChannelCredentials::GoogleDefault => {
                return Err(
                    "google_default channel credentials are not supported by this adapter".into(),
                );
            }
            other => return Err(format!("channel credentials {other:?} are not supported")),
        };
        Ok(Peer {
            target,
            tls,
            label: config.server_uri.clone(),
        })
    }

    /// An endpoint of a cluster, in plaintext.
    pub(crate) fn endpoint(address: SocketAddr) -> Peer {
        Peer {
            target: Target {
                host: address.ip().to_string(),
                port: address.port(),
            },
            tls: None,
            label: address.to_string(),
        }
    }

    /// An endpoint of a cluster with an `UpstreamTls` (A29).
    pub(crate) fn endpoint_xds_tls(address: SocketAddr, tls: ConnectionTls) -> Peer {
        Peer {
            tls: Some(PeerTls {
                config: tls.config,
                server_name: Some(tls.server_name),
                note: Some(tls.note),
            }),
            ..Peer::endpoint(address)
        }
    }

    /// An endpoint dialled with fallback TLS credentials (its IP as server name).
    pub(crate) fn endpoint_tls(address: SocketAddr, config: Arc<rustls::ClientConfig>) -> Peer {
        Peer {
            tls: Some(PeerTls {
                config,
                server_name: Some(rustls::pki_types::ServerName::IpAddress(
                    address.ip().into(),
                )),
                note: None,
            }),
            ..Peer::endpoint(address)
        }
    }
}

/// Connects to `peer`: TCP, TLS, the HTTP/2 handshake, and until the server's
/// SETTINGS frame has been read, all bounded by the connect timeout. At the deadline
/// (or on any failure) the half-open connection is dropped. `on_closed` runs when an
/// established connection ends, with the error that ended it, if any.
///
/// The one connection attempt of the adapters: ADS connections and the `xds:///`
/// channel's endpoint connections both count as connected only here.
pub(crate) async fn connect<R: Runtime>(
    rt: &R,
    peer: &Peer,
    settings: &TransportSettings,
    on_closed: impl FnOnce(Option<String>) + Send + 'static,
) -> Result<Connection, String> {
    // Set once TCP (and TLS) are up: a timeout then awaited the server's SETTINGS.
    let awaiting_settings = AtomicBool::new(false);
    let (abort, registration) = AbortHandle::new_pair();
    let label = &peer.label;
    let attempt = async {
        let (conn, handshake) = open(
            rt,
            peer,
            settings,
            &awaiting_settings,
            registration,
            on_closed,
        )
        .await?;
        match handshake.await {
            Ok(Ok(())) => Ok(conn),
            Ok(Err(reason)) => Err(
                match explain_alert(&reason).filter(|_| peer.tls.is_some()) {
                    Some(why) => format!("{label}: {why}: {reason}"),
                    None => format!("{label}: {reason}"),
                },
            ),
            Err(oneshot::Canceled) => Err(format!(
                "{label}: the connection ended before the SETTINGS frame"
            )),
        }
    };
    let timeout = settings.connect_timeout;
    let result = match future::select(pin!(attempt), rt.sleep(timeout)).await {
        Either::Left((result, _)) => result,
        Either::Right(((), _)) if awaiting_settings.load(Ordering::Relaxed) => Err(format!(
            "{label}: timed out before receiving SETTINGS frame (connect timeout {timeout:?})"
        )),
        Either::Right(((), _)) => Err(format!(
            "{label}: connection attempt timed out after {timeout:?}"
        )),
    };
    if result.is_err() {
        abort.abort();
    }
    result
}

/// Opens the connection up to the HTTP/2 handshake and spawns its task; the receiver
/// learns when the server's SETTINGS arrive (or the connection ends first).
async fn open<R: Runtime>(
    rt: &R,
    peer: &Peer,
    settings: &TransportSettings,
    awaiting_settings: &AtomicBool,
    registration: AbortRegistration,
    on_closed: impl FnOnce(Option<String>) + Send + 'static,
) -> Result<(Connection, oneshot::Receiver<Handshake>), String> {
    let target = &peer.target;
    let origin = target.origin(peer.tls.is_some())?;
    let tcp = rt
        .connect_tcp(&target.host, target.port)
        .await
        .map_err(|e| format!("TCP connect to {target} failed: {e}"))?;
    let io: Box<dyn Io> = match &peer.tls {
        None => Box::new(tcp),
        Some(tls) => {
            let name = match &tls.server_name {
                Some(name) => name.clone(),
                None => rustls::pki_types::ServerName::try_from(target.host.clone())
                    .map_err(|e| format!("invalid TLS server name {:?}: {e}", target.host))?,
            };
            let stream = futures_rustls::TlsConnector::from(tls.config.clone())
                .connect(name, tcp)
                .await
                .map_err(|e| {
                    let why = tls.note.as_ref().and_then(FailureNote::take);
                    let why = why.unwrap_or_else(|| e.to_string());
                    format!("TLS handshake with {target} failed: {why}")
                })?;
            Box::new(stream)
        }
    };
    awaiting_settings.store(true, Ordering::Relaxed);
    let (state, handshake) = ConnectionState::new();
    let io = HyperIo::watched(io, FrameWatcher::new(state.clone()));
    let (send, conn) = http2_builder(rt, settings)
        .handshake::<_, tonic::body::Body>(io)
        .await
        .map_err(|e| format!("HTTP/2 handshake with {target} failed: {e}"))?;
    let task_state = state.clone();
    let task = Abortable::new(
        async move {
            let error = match conn.await {
                Err(e) => Some(error_chain(&e)),
                Ok(()) => task_state.quiet_end_reason(),
            };
            if task_state.ended(error.as_deref()) {
                on_closed(error);
            }
        },
        registration,
    );
    rt.spawn(Box::pin(task.map(drop)));
    let conn = Connection {
        send,
        origin,
        state,
    };
    Ok((conn, handshake))
}

/// hyper's HTTP/2 client as the settings say: flow-control windows, and keepalive
/// PINGs only while a stream is open (see [`KeepaliveSettings`]).
fn http2_builder<R: Runtime>(
    rt: &R,
    settings: &TransportSettings,
) -> hyper::client::conn::http2::Builder<HyperExecutor<R>> {
    let mut builder = hyper::client::conn::http2::Builder::new(HyperExecutor(rt.clone()));
    builder
        .timer(HyperTimer::new(rt.clone()))
        .initial_stream_window_size(settings.initial_stream_window_size)
        .initial_connection_window_size(settings.initial_connection_window_size);
    if let Some(keepalive) = settings.keepalive {
        builder
            .keep_alive_interval(keepalive.interval)
            .keep_alive_timeout(keepalive.timeout)
            .keep_alive_while_idle(false);
    }
    builder
}

/// An error and its sources, joined with `: `.
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// The tower service tonic's generic client runs on: requests go straight onto the
/// HTTP/2 connection.
#[derive(Clone, Debug)]
pub(crate) struct H2Service(pub(crate) hyper::client::conn::http2::SendRequest<tonic::body::Body>);

impl tower_service::Service<http::Request<tonic::body::Body>> for H2Service {
    type Response = http::Response<hyper::body::Incoming>;
    type Error = hyper::Error;
    type Future = BoxFuture<Result<Self::Response, hyper::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), hyper::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        Box::pin(self.0.send_request(request))
    }
}

/// The shared connection of one server: successive streams reuse it while it is open.
#[derive(Debug, Default)]
pub(crate) struct ChannelSlot {
    conn: futures::lock::Mutex<Option<Connection>>,
    /// The `tls` channel credentials' files, as a `file_watcher` reads them (A65).
    tls: std::sync::Mutex<Option<xds_proto_core::security::FileWatcherState>>,
}

impl ChannelSlot {
    /// The open connection, or a new one when there is none or the server is closing
    /// it (GOAWAY: the streams on it go on until the server ends them). The `bool` is
    /// true for a new connection.
    pub(crate) async fn get_or_connect<R: Runtime>(
        self: &Arc<Self>,
        rt: &R,
        config: &ServerConfig,
        settings: &TransportSettings,
        on_connecting: impl FnOnce(),
        on_closed: impl FnOnce(Option<String>) + Send + 'static,
    ) -> Result<(Connection, bool), String> {
        let mut guard = self.conn.lock().await;
        if let Some(conn) = guard.as_ref().filter(|c| c.takes_new_streams()) {
            return Ok((conn.clone(), false));
        }
        *guard = None;
        on_connecting();
        let peer = Peer::server(config, |creds| {
            let mut state = self.tls.lock().unwrap_or_else(|e| e.into_inner());
            crate::tls::client_config(&mut state, rt.now(), creds)
        })?;
        let conn = connect(rt, &peer, settings, on_closed).await?;
        *guard = Some(conn.clone());
        Ok((conn, true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_in_every_supported_form() {
        let t = |host: &str, port| {
            Ok(Target {
                host: host.to_string(),
                port,
            })
        };
        assert_eq!(Target::parse("xds.example:443"), t("xds.example", 443));
        assert_eq!(Target::parse("127.0.0.1:18000"), t("127.0.0.1", 18000));
        assert_eq!(
            Target::parse("dns:///xds.example:8080"),
            t("xds.example", 8080)
        );
        assert_eq!(
            Target::parse("dns:xds.example:8080"),
            t("xds.example", 8080)
        );
        assert_eq!(Target::parse("[::1]:9000"), t("::1", 9000));
        assert_eq!(Target::parse("xds.example"), t("xds.example", 443));
        assert!(Target::parse("unix:/tmp/sock").is_err());
        assert!(Target::parse("https://x:1").is_err());
        assert!(Target::parse("host:notaport").is_err());
        assert!(Target::parse(":80").is_err());
        assert_eq!(
            Target::parse("[::1]:9000").unwrap().to_string(),
            "[::1]:9000"
        );
        assert_eq!(
            Target::parse("[::1]:9000")
                .unwrap()
                .origin(true)
                .unwrap()
                .to_string(),
            "https://[::1]:9000/"
        );
    }
}
