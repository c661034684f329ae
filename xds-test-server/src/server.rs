//! The loopback ADS server: listener lifecycle, the scripted snapshot, and the state
//! its streams share (the record's types are in `record`). Connections are served by
//! `service`; the streams' logic is in `session` (the loop), `sotw` and `delta` (what
//! each ADS variant sends).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;
use xds_proto_core::Status;
use xds_proto_core::pb::envoy::service::discovery::v3::ResourceError;
use xds_proto_core::pb::google::protobuf::Any;

use crate::delta::DeltaQuirks;
use crate::host::Host;
use crate::ports::RefusingPort;
use crate::record::{RecordedRequest, RecordedResponse, RequestKind, ServerStats};
use crate::resources::resource_name;
use crate::service::{AdsService, serve_connection};

/// One type's resources as the server has them.
#[derive(Clone, Debug, Default)]
pub(crate) struct TypeSnapshot {
    pub(crate) version: String,
    /// Resources by name; resources whose name cannot be read are always sent (SotW
    /// only: a delta resource needs a name).
    pub(crate) named: BTreeMap<String, Any>,
    /// The delta version of each named resource: the snapshot version at which its
    /// bytes last changed.
    pub(crate) versions: BTreeMap<String, String>,
    pub(crate) unnamed: Vec<Any>,
    pub(crate) errors: Vec<ResourceError>,
    /// Bumped on every change of the type (resources, errors, withheld names), so
    /// that a delta stream looks again only at types that changed.
    pub(crate) revision: u64,
}

impl TypeSnapshot {
    /// Replaces the resources at `self.version`; a resource whose bytes did not
    /// change keeps its delta version.
    fn replace_resources(&mut self, resources: Vec<Any>) {
        let old = std::mem::take(&mut self.named);
        let mut old_versions = std::mem::take(&mut self.versions);
        self.unnamed.clear();
        for r in resources {
            match resource_name(&r) {
                Some(name) => {
                    let version = match (old.get(&name), old_versions.remove(&name)) {
                        (Some(previous), Some(v)) if *previous == r => v,
                        _ => self.version.clone(),
                    };
                    self.versions.insert(name.clone(), version);
                    self.named.insert(name, r);
                }
                None => self.unnamed.push(r),
            }
        }
    }
}

/// Everything the server's streams share, behind one lock.
#[derive(Default)]
pub(crate) struct State {
    pub(crate) types: HashMap<String, TypeSnapshot>,
    withheld: HashSet<(String, String)>,
    pub(crate) requests: Vec<RecordedRequest>,
    responses: Vec<RecordedResponse>,
    pub(crate) stats: ServerStats,
    pub(crate) delta_quirks: DeltaQuirks,
    refuse: bool,
    /// Requests and responses are counted but not kept (see `record_requests`).
    skip_record: bool,
    /// Streams opened before this epoch must close with `close_status`.
    pub(crate) close_epoch: u64,
    pub(crate) close_status: Option<Status>,
    /// How many undecodable messages every stream must have sent (see
    /// `send_undecodable_message`).
    pub(crate) undecodable: u64,
    next_nonce: u64,
}

impl State {
    /// Counts and keeps a request.
    pub(crate) fn record_request(&mut self, request: RecordedRequest) {
        self.stats.requests += 1;
        match request.kind {
            RequestKind::Ack => self.stats.acks += 1,
            RequestKind::Nack => self.stats.nacks += 1,
            RequestKind::Subscribe => {}
        }
        if !self.skip_record {
            self.requests.push(request);
        }
    }

    /// Counts and keeps a response.
    pub(crate) fn record_response(&mut self, response: RecordedResponse) {
        self.stats.responses += 1;
        if !self.skip_record {
            self.responses.push(response);
        }
    }

    /// A nonce no response of this server had.
    pub(crate) fn next_nonce(&mut self) -> String {
        self.next_nonce += 1;
        format!("nonce-{}", self.next_nonce)
    }

    /// Whether the server holds back this resource (see `LoopbackServer::withhold`).
    pub(crate) fn is_withheld(&self, type_url: &str, name: &str) -> bool {
        self.withheld
            .contains(&(type_url.to_string(), name.to_string()))
    }

    fn snapshot_mut(&mut self, type_url: &str) -> &mut TypeSnapshot {
        let snapshot = self.types.entry(type_url.to_string()).or_default();
        snapshot.revision += 1;
        snapshot
    }

    /// Sets the resources of one type at `version`.
    pub(crate) fn set_resources(&mut self, type_url: &str, version: &str, resources: Vec<Any>) {
        let snapshot = self.snapshot_mut(type_url);
        snapshot.version = version.to_string();
        snapshot.replace_resources(resources);
    }
}

pub(crate) struct Shared {
    state: Mutex<State>,
    /// The LRS service's settings and record (see `lrs`).
    lrs: Mutex<crate::lrs::LrsState>,
    /// Bumped on every change of the snapshot or of the record; streams and waiters
    /// watch it.
    pub(crate) generation: watch::Sender<u64>,
    pub(crate) next_stream: AtomicU64,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn lock_lrs(&self) -> MutexGuard<'_, crate::lrs::LrsState> {
        self.lrs.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn bump(&self) {
        self.generation.send_modify(|g| *g += 1);
    }
}

struct Running {
    stop: futures::channel::oneshot::Sender<()>,
    /// The port, kept from the moment the listener closed (see [`RefusingPort`]).
    done: futures::channel::oneshot::Receiver<Option<RefusingPort>>,
}

/// A scriptable ADS management server on 127.0.0.1. See the crate documentation.
pub struct LoopbackServer {
    pub(crate) shared: Arc<Shared>,
    addr: SocketAddr,
    tls: Option<Arc<rustls::ServerConfig>>,
    host: Host,
    listening: Mutex<Listening>,
}

/// Whether the server listens; while stopped, the port it holds for
/// [`restart`](LoopbackServer::restart).
enum Listening {
    Running(Running),
    Stopped(Option<RefusingPort>),
}

impl std::fmt::Debug for LoopbackServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoopbackServer")
            .field("addr", &self.addr)
            .field("tls", &self.tls.is_some())
            .field("stats", &self.stats())
            .finish()
    }
}

impl LoopbackServer {
    /// Starts a plaintext server on 127.0.0.1 on a free port.
    ///
    /// # Panics
    /// When no port can be bound on 127.0.0.1.
    pub fn start() -> LoopbackServer {
        LoopbackServer::start_with(None, 0)
    }

    /// Starts a TLS server on 127.0.0.1 on a free port, with this rustls configuration
    /// (for example `tls::TestPki::server_config`, with the `tls` feature).
    ///
    /// # Panics
    /// When no port can be bound on 127.0.0.1.
    pub fn start_tls(config: Arc<rustls::ServerConfig>) -> LoopbackServer {
        LoopbackServer::start_with(Some(config), 0)
    }

    /// Starts a server on 127.0.0.1:`port` (0 for a free port).
    ///
    /// # Panics
    /// When the port cannot be bound.
    pub fn start_with(tls: Option<Arc<rustls::ServerConfig>>, port: u16) -> LoopbackServer {
        let host = Host::for_caller("loopback-xds-server");
        let listener = std::net::TcpListener::bind(("127.0.0.1", port)).expect("bind 127.0.0.1");
        let addr = listener.local_addr().expect("local address");
        let server = LoopbackServer {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                lrs: Mutex::default(),
                generation: watch::channel(0).0,
                next_stream: AtomicU64::new(1),
            }),
            addr,
            tls,
            host,
            listening: Mutex::new(Listening::Stopped(None)),
        };
        server.serve(listener);
        server
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `127.0.0.1:<port>`, for a bootstrap's `server_uri`.
    pub fn uri(&self) -> String {
        self.addr.to_string()
    }

    /// A bootstrap JSON for a client of this server with node id `node_id`: insecure
    /// credentials, or `tls` with the given CA file (and client certificate and key
    /// for mTLS).
    pub fn bootstrap_json(
        &self,
        node_id: &str,
        tls_files: Option<(&str, Option<(&str, &str)>)>,
    ) -> String {
        let creds = match tls_files {
            None => r#"{"type": "insecure"}"#.to_string(),
            Some((ca, client)) => {
                let mut config = format!(r#""ca_certificate_file": {}"#, json_string(ca));
                if let Some((cert, key)) = client {
                    config.push_str(&format!(
                        r#", "certificate_file": {}, "private_key_file": {}"#,
                        json_string(cert),
                        json_string(key)
                    ));
                }
                format!(r#"{{"type": "tls", "config": {{{config}}}}}"#)
            }
        };
        format!(
            r#"{{"xds_servers": [{{"server_uri": "{}", "channel_creds": [{creds}], "server_features": ["xds_v3"]}}],
                 "node": {{"id": {}, "cluster": "loopback-test"}}}}"#,
            self.uri(),
            json_string(node_id)
        )
    }

    /// A bootstrap JSON for a client of this server that speaks delta xDS to it
    /// (`"api_type": "AGGREGATED_DELTA_GRPC"`), with insecure credentials and node id
    /// `node_id`.
    pub fn delta_bootstrap_json(&self, node_id: &str) -> String {
        format!(
            r#"{{"xds_servers": [{{"server_uri": "{}", "channel_creds": [{{"type": "insecure"}}], "server_features": ["xds_v3"], "api_type": "AGGREGATED_DELTA_GRPC"}}],
                 "node": {{"id": {}, "cluster": "loopback-test"}}}}"#,
            self.uri(),
            json_string(node_id)
        )
    }

    fn serve(&self, listener: std::net::TcpListener) {
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let (stop, stopped) = futures::channel::oneshot::channel::<()>();
        let (done_tx, done) = futures::channel::oneshot::channel();
        let addr = self.addr;
        let shared = self.shared.clone();
        let tls = self.tls.clone().map(tokio_rustls::TlsAcceptor::from);
        self.host.handle().spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
            let mut connections = tokio::task::JoinSet::new();
            let mut stopped = stopped;
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    accepted = listener.accept() => {
                        let Ok((tcp, _)) = accepted else { continue };
                        let refuse = {
                            let mut state = shared.lock();
                            state.stats.connections += 1;
                            state.refuse
                        };
                        shared.bump();
                        if refuse {
                            drop(tcp);
                            continue;
                        }
                        let _ = tcp.set_nodelay(true);
                        let service = AdsService { shared: shared.clone() };
                        let tls = tls.clone();
                        connections.spawn(async move {
                            match tls {
                                None => serve_connection(tcp, service).await,
                                Some(acceptor) => match acceptor.accept(tcp).await {
                                    Ok(stream) => serve_connection(stream, service).await,
                                    Err(e) => tracing::debug!("loopback server: TLS accept failed: {e}"),
                                },
                            }
                        });
                    }
                    Some(_) = connections.join_next(), if !connections.is_empty() => {}
                }
            }
            drop(listener);
            // Taken again at once: between the close and a restart, a server another
            // test starts could be given the port.
            let reserved = RefusingPort::at(addr)
                .inspect_err(|e| tracing::warn!("loopback server: cannot keep {addr}: {e}"))
                .ok();
            connections.abort_all();
            while connections.join_next().await.is_some() {}
            let _ = done_tx.send(reserved);
        });
        *self.listening() = Listening::Running(Running { stop, done });
    }

    fn listening(&self) -> std::sync::MutexGuard<'_, Listening> {
        self.listening.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stops listening and drops every connection at once (no GOAWAY, no status: as a
    /// crashed server). Connections to the port are refused until [`restart`](Self::restart).
    pub async fn stop(&self) {
        let running = {
            let mut listening = self.listening();
            match std::mem::replace(&mut *listening, Listening::Stopped(None)) {
                Listening::Running(running) => running,
                stopped => {
                    *listening = stopped;
                    return;
                }
            }
        };
        let _ = running.stop.send(());
        if let Ok(reserved) = running.done.await {
            *self.listening() = Listening::Stopped(reserved);
        }
    }

    /// Listens again on the same port, with the same snapshot. A no-op when running.
    ///
    /// # Panics
    /// When the port cannot be bound again.
    pub fn restart(&self) {
        let reserved = match &mut *self.listening() {
            Listening::Running(_) => return,
            Listening::Stopped(reserved) => reserved.take(),
        };
        let listener = match reserved {
            Some(port) => port.listen(),
            None => std::net::TcpListener::bind(self.addr),
        };
        self.serve(listener.expect("listen on the loopback server's port again"));
    }

    /// Whether the server is listening.
    pub fn is_running(&self) -> bool {
        matches!(*self.listening(), Listening::Running(_))
    }

    // ----- the snapshot -----

    /// Sets the resources of one type at `version`, replacing the type's previous set,
    /// and pushes them to every stream subscribed to the type.
    pub fn set_resources(&self, type_url: &str, version: &str, resources: Vec<Any>) {
        self.shared
            .lock()
            .set_resources(type_url, version, resources);
        self.shared.bump();
    }

    /// Sets the resources and the TP3 `resource_errors` of one type at `version` in one
    /// change, so that a single response carries both.
    pub fn set_resources_and_errors(
        &self,
        type_url: &str,
        version: &str,
        resources: Vec<Any>,
        errors: Vec<ResourceError>,
    ) {
        {
            let mut state = self.shared.lock();
            let snapshot = state.snapshot_mut(type_url);
            snapshot.version = version.to_string();
            snapshot.replace_resources(resources);
            snapshot.errors = errors;
        }
        self.shared.bump();
    }

    /// Sets the TP3 `resource_errors` of a type (sent with its resources, for the names
    /// a stream subscribes to) at `version`.
    pub fn set_resource_errors(&self, type_url: &str, version: &str, errors: Vec<ResourceError>) {
        {
            let mut state = self.shared.lock();
            let snapshot = state.snapshot_mut(type_url);
            snapshot.version = version.to_string();
            snapshot.errors = errors;
        }
        self.shared.bump();
    }

    /// Stops sending one resource (until [`release`](Self::release)), without a
    /// version change: streams subscribing to it from now on do not get it.
    pub fn withhold(&self, type_url: &str, name: &str) {
        self.shared
            .lock()
            .withheld
            .insert((type_url.to_string(), name.to_string()));
        self.shared.bump();
    }

    /// Sends a withheld resource again, under a new `version`.
    pub fn release(&self, type_url: &str, name: &str, version: &str) {
        {
            let mut state = self.shared.lock();
            state
                .withheld
                .remove(&(type_url.to_string(), name.to_string()));
            if state.types.contains_key(type_url) {
                state.snapshot_mut(type_url).version = version.to_string();
            }
        }
        self.shared.bump();
    }

    /// Sets how the server's delta streams deviate from the plain protocol, as istiod
    /// does (see [`DeltaQuirks`]). Applies to requests from now on.
    pub fn set_delta_quirks(&self, quirks: DeltaQuirks) {
        self.shared.lock().delta_quirks = quirks;
        self.shared.bump();
    }

    /// Ends every open ADS stream with this status (as trailers).
    pub fn close_streams(&self, status: Status) {
        {
            let mut state = self.shared.lock();
            state.close_epoch = self.shared.next_stream.load(Ordering::SeqCst);
            state.close_status = Some(status);
        }
        self.shared.bump();
    }

    /// Sends every open ADS stream one message that is not a `DiscoveryResponse` (its
    /// bytes do not decode as one), as a broken or mismatched server would.
    pub fn send_undecodable_message(&self) {
        self.shared.lock().undecodable += 1;
        self.shared.bump();
    }

    /// While true, connections are accepted and dropped at once, so the client's
    /// connection attempts fail.
    pub fn refuse_connections(&self, refuse: bool) {
        self.shared.lock().refuse = refuse;
        self.shared.bump();
    }

    // ----- the record -----

    /// Whether requests and responses are kept for [`requests`](Self::requests) and
    /// [`responses`](Self::responses) (the default). While
    /// false they are still counted in [`stats`](Self::stats): for load tests, where a
    /// client that resends 10,000 names on every subscription change would otherwise
    /// make the record grow quadratically.
    pub fn record_requests(&self, record: bool) {
        self.shared.lock().skip_record = !record;
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.clone()
    }

    /// Every response sent so far (queued for its stream), in order. Kept unless
    /// [`record_requests`](Self::record_requests) is off.
    pub fn responses(&self) -> Vec<RecordedResponse> {
        self.shared.lock().responses.clone()
    }

    /// Waits until `done` holds for the responses sent so far (checked on every
    /// change), and returns what it returned. Runs on any executor; wrap it in a
    /// timeout.
    pub async fn wait_for_responses<T>(
        &self,
        mut done: impl FnMut(&[RecordedResponse]) -> Option<T>,
    ) -> T {
        let mut changes = self.shared.generation.subscribe();
        loop {
            if let Some(t) = done(&self.shared.lock().responses) {
                return t;
            }
            if changes.changed().await.is_err() {
                futures::future::pending::<()>().await;
            }
        }
    }

    /// The counters.
    pub fn stats(&self) -> ServerStats {
        self.shared.lock().stats
    }

    /// Waits until `done` holds for the record (checked on every change), and returns
    /// what it returned. Runs on any executor; wrap it in a timeout.
    pub async fn wait_for<T>(
        &self,
        mut done: impl FnMut(&[RecordedRequest], &ServerStats) -> Option<T>,
    ) -> T {
        let mut changes = self.shared.generation.subscribe();
        loop {
            {
                let state = self.shared.lock();
                if let Some(t) = done(&state.requests, &state.stats) {
                    return t;
                }
            }
            if changes.changed().await.is_err() {
                futures::future::pending::<()>().await;
            }
        }
    }
}

impl Drop for LoopbackServer {
    fn drop(&mut self) {
        let listening = self.listening.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Listening::Running(running) = std::mem::replace(listening, Listening::Stopped(None))
        {
            let _ = running.stop.send(());
        }
    }
}

fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn stop_refuses_and_keeps_the_port_until_restart_listens_on_it_again() {
        let server = LoopbackServer::start();
        let addr = server.addr();
        let connect = || std::net::TcpStream::connect(addr);
        assert!(server.is_running() && connect().is_ok());

        server.stop().await;
        // A second stop is a no-op, and returns.
        tokio::time::timeout(Duration::from_secs(5), server.stop())
            .await
            .expect("a second stop returns");
        assert!(!server.is_running());
        let refused = connect().expect_err("a stopped server refuses");
        assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
        // Kept from others: a bind without SO_REUSEADDR (as a port the kernel picks) fails.
        let other = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None);
        let taken = other.and_then(|s| s.bind(&addr.into()));
        assert_eq!(
            taken.map_err(|e| e.kind()),
            Err(std::io::ErrorKind::AddrInUse)
        );

        server.restart();
        server.restart();
        assert!(server.is_running());
        assert!(connect().is_ok(), "listening on the same port again");
    }
}
