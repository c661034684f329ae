//! The loopback ADS server: listener lifecycle, the SotW stream logic, and the record
//! of every request.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use futures::channel::mpsc;
use futures::future::BoxFuture;
use futures::{FutureExt, Stream};
use tokio::sync::watch;
use tonic::codec::Streaming;
use xds_proto_core::Status;
use xds_proto_core::pb::envoy::service::discovery::v3::{
    DiscoveryRequest, DiscoveryResponse, ResourceError,
};
use xds_proto_core::pb::google::protobuf::Any;

use crate::codec::{Outbound, ServerCodec, UNDECODABLE};
use crate::resources::resource_name;

/// What a recorded request was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RequestKind {
    /// A request without a response nonce: the first of its type on the stream.
    Subscribe,
    /// A request carrying the nonce of a response and no error: an ACK (possibly with
    /// a changed subscription).
    Ack,
    /// A request carrying the nonce of a response and an error: a NACK.
    Nack,
}

/// One request as the server received it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedRequest {
    /// The server-side number of the stream it came on (1, 2, ... in opening order).
    pub stream: u64,
    /// What it was.
    pub kind: RequestKind,
    /// The type URL.
    pub type_url: String,
    /// `version_info`.
    pub version_info: String,
    /// `resource_names`.
    pub resource_names: Vec<String>,
    /// `response_nonce`.
    pub response_nonce: String,
    /// `error_detail.message`, for a NACK.
    pub error_detail: Option<String>,
    /// Whether it carried the node, and its id.
    pub node_id: Option<String>,
}

/// Counters of a server's life.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// TCP connections accepted (refused ones included).
    pub connections: u64,
    /// ADS streams opened.
    pub streams: u64,
    /// ADS streams open now.
    pub open_streams: u64,
    /// Requests received.
    pub requests: u64,
    /// ACKs received.
    pub acks: u64,
    /// NACKs received.
    pub nacks: u64,
    /// Responses sent (queued for the stream).
    pub responses: u64,
    /// Responses HTTP/2 took from the stream's queue: written, or waiting for the
    /// client's flow-control window. `responses - responses_taken` wait in the server.
    pub responses_taken: u64,
}

#[derive(Clone, Debug, Default)]
struct TypeSnapshot {
    version: String,
    /// Resources by name; resources whose name cannot be read are always sent.
    named: BTreeMap<String, Any>,
    unnamed: Vec<Any>,
    errors: Vec<ResourceError>,
}

impl TypeSnapshot {
    fn replace_resources(&mut self, resources: Vec<Any>) {
        self.named.clear();
        self.unnamed.clear();
        for r in resources {
            match resource_name(&r) {
                Some(name) => {
                    self.named.insert(name, r);
                }
                None => self.unnamed.push(r),
            }
        }
    }
}

#[derive(Default)]
struct State {
    types: HashMap<String, TypeSnapshot>,
    withheld: HashSet<(String, String)>,
    requests: Vec<RecordedRequest>,
    stats: ServerStats,
    refuse: bool,
    /// Requests are counted but not kept in `requests` (see `record_requests`).
    skip_record: bool,
    /// Streams opened before this epoch must close with `close_status`.
    close_epoch: u64,
    close_status: Option<Status>,
    /// How many undecodable messages every stream must have sent (see
    /// `send_undecodable_message`).
    undecodable: u64,
    next_nonce: u64,
}

struct Shared {
    state: Mutex<State>,
    /// Bumped on every change of the snapshot or of the record; streams and waiters
    /// watch it.
    generation: watch::Sender<u64>,
    next_stream: AtomicU64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn bump(&self) {
        self.generation.send_modify(|g| *g += 1);
    }
}

/// Where the server's (and the fault proxy's) tasks run.
#[derive(Clone)]
pub(crate) enum Host {
    /// The runtime that created the server.
    Caller(tokio::runtime::Handle),
    /// A dedicated thread, whose runtime lives as long as `_keep_alive`.
    Thread {
        handle: tokio::runtime::Handle,
        _keep_alive: Arc<std::sync::mpsc::SyncSender<()>>,
    },
}

impl Host {
    /// The calling tokio runtime, or else a dedicated thread running its own.
    pub(crate) fn current_or_thread() -> Host {
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => Host::Caller(handle),
            Err(_) => {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a tokio runtime for the loopback server");
                let handle = rt.handle().clone();
                let (keep, until) = std::sync::mpsc::sync_channel::<()>(0);
                std::thread::Builder::new()
                    .name("loopback-xds-server".into())
                    .spawn(move || {
                        // Runs the server's tasks until the last handle is dropped.
                        rt.block_on(async move {
                            let _ = tokio::task::spawn_blocking(move || until.recv()).await;
                        });
                    })
                    .expect("a thread for the loopback server");
                Host::Thread {
                    handle,
                    _keep_alive: Arc::new(keep),
                }
            }
        }
    }

    pub(crate) fn handle(&self) -> &tokio::runtime::Handle {
        match self {
            Host::Caller(handle) | Host::Thread { handle, .. } => handle,
        }
    }
}

struct Running {
    stop: futures::channel::oneshot::Sender<()>,
    done: futures::channel::oneshot::Receiver<()>,
}

/// A scriptable ADS management server on 127.0.0.1. See the crate documentation.
pub struct LoopbackServer {
    shared: Arc<Shared>,
    addr: SocketAddr,
    tls: Option<Arc<rustls::ServerConfig>>,
    host: Host,
    running: Mutex<Option<Running>>,
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
        let host = Host::current_or_thread();
        let listener = std::net::TcpListener::bind(("127.0.0.1", port)).expect("bind 127.0.0.1");
        let addr = listener.local_addr().expect("local address");
        let server = LoopbackServer {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                generation: watch::channel(0).0,
                next_stream: AtomicU64::new(1),
            }),
            addr,
            tls,
            host,
            running: Mutex::new(None),
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

    fn serve(&self, listener: std::net::TcpListener) {
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let (stop, stopped) = futures::channel::oneshot::channel::<()>();
        let (done_tx, done) = futures::channel::oneshot::channel::<()>();
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
            connections.abort_all();
            while connections.join_next().await.is_some() {}
            let _ = done_tx.send(());
        });
        *self.running.lock().unwrap_or_else(|e| e.into_inner()) = Some(Running { stop, done });
    }

    /// Stops listening and drops every connection at once (no GOAWAY, no status: as a
    /// crashed server). Connections to the port are refused until [`restart`](Self::restart).
    pub async fn stop(&self) {
        let running = self
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(running) = running {
            let _ = running.stop.send(());
            let _ = running.done.await;
        }
    }

    /// Listens again on the same port, with the same snapshot. A no-op when running.
    ///
    /// # Panics
    /// When the port cannot be bound again.
    pub fn restart(&self) {
        if self
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
        {
            return;
        }
        let listener =
            std::net::TcpListener::bind(self.addr).expect("rebind the loopback server's port");
        self.serve(listener);
    }

    /// Whether the server is listening.
    pub fn is_running(&self) -> bool {
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    // ----- the snapshot -----

    /// Sets the resources of one type at `version`, replacing the type's previous set,
    /// and pushes them to every stream subscribed to the type.
    pub fn set_resources(&self, type_url: &str, version: &str, resources: Vec<Any>) {
        {
            let mut state = self.shared.lock();
            let snapshot = state.types.entry(type_url.to_string()).or_default();
            snapshot.version = version.to_string();
            snapshot.replace_resources(resources);
        }
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
            let snapshot = state.types.entry(type_url.to_string()).or_default();
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
            let snapshot = state.types.entry(type_url.to_string()).or_default();
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
            if let Some(s) = state.types.get_mut(type_url) {
                s.version = version.to_string();
            }
        }
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

    /// Whether requests are kept for [`requests`](Self::requests) (the default). While
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
        if let Some(running) = self
            .running
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take()
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

async fn serve_connection<I>(io: I, service: AdsService)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let result = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
        .serve_connection(
            hyper_util::rt::TokioIo::new(io),
            hyper_util::service::TowerToHyperService::new(service),
        )
        .await;
    if let Err(e) = result {
        tracing::debug!("loopback server: connection ended: {e}");
    }
}

const ADS_PATH: &str =
    "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources";

/// The HTTP service: routes the ADS method, answers everything else UNIMPLEMENTED.
#[derive(Clone)]
struct AdsService {
    shared: Arc<Shared>,
}

impl tower_service::Service<http::Request<hyper::body::Incoming>> for AdsService {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<hyper::body::Incoming>) -> Self::Future {
        if request.uri().path() != ADS_PATH {
            let path = request.uri().path().to_string();
            return async move {
                Ok(tonic::Status::unimplemented(format!("no method {path}")).into_http())
            }
            .boxed();
        }
        let handler = StreamHandler {
            shared: self.shared.clone(),
        };
        async move {
            let mut grpc = tonic::server::Grpc::new(ServerCodec)
                .max_decoding_message_size(64 * 1024 * 1024)
                .max_encoding_message_size(usize::MAX);
            Ok(grpc.streaming(handler, request).await)
        }
        .boxed()
    }
}

type ResponseStream = Pin<Box<dyn Stream<Item = Result<Outbound, tonic::Status>> + Send>>;

/// Starts the SotW logic of one stream.
struct StreamHandler {
    shared: Arc<Shared>,
}

impl tower_service::Service<tonic::Request<Streaming<DiscoveryRequest>>> for StreamHandler {
    type Response = tonic::Response<ResponseStream>;
    type Error = tonic::Status;
    type Future = futures::future::Ready<Result<Self::Response, tonic::Status>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), tonic::Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: tonic::Request<Streaming<DiscoveryRequest>>) -> Self::Future {
        let (tx, rx) = mpsc::unbounded();
        let id = self.shared.next_stream.fetch_add(1, Ordering::SeqCst);
        let undecodable_sent = {
            let mut state = self.shared.lock();
            state.stats.streams += 1;
            state.stats.open_streams += 1;
            state.undecodable
        };
        self.shared.bump();
        let session = Session {
            shared: self.shared.clone(),
            id,
            tx,
            types: HashMap::new(),
            undecodable_sent,
        };
        tokio::spawn(session.run(request.into_inner()));
        let outbound = CountTaken {
            queue: rx,
            shared: self.shared.clone(),
        };
        futures::future::ready(Ok(tonic::Response::new(
            Box::pin(outbound) as ResponseStream
        )))
    }
}

/// A stream's response queue as tonic reads it: counts what HTTP/2 takes.
struct CountTaken {
    queue: mpsc::UnboundedReceiver<Result<Outbound, tonic::Status>>,
    shared: Arc<Shared>,
}

impl Stream for CountTaken {
    type Item = Result<Outbound, tonic::Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let next = Pin::new(&mut self.queue).poll_next(cx);
        if let Poll::Ready(Some(Ok(Outbound::Response(_)))) = &next {
            self.shared.lock().stats.responses_taken += 1;
            self.shared.bump();
        }
        next
    }
}

/// What one stream subscribes to and was sent, per type.
#[derive(Default)]
struct StreamType {
    names: BTreeSet<String>,
    last_nonce: String,
    sent_version: Option<String>,
    /// Must be answered.
    dirty: bool,
}

struct Session {
    shared: Arc<Shared>,
    id: u64,
    tx: mpsc::UnboundedSender<Result<Outbound, tonic::Status>>,
    types: HashMap<String, StreamType>,
    /// How many undecodable messages it has sent.
    undecodable_sent: u64,
}

impl Session {
    async fn run(mut self, mut inbound: Streaming<DiscoveryRequest>) {
        let mut changes = self.shared.generation.subscribe();
        loop {
            tokio::select! {
                message = inbound.message() => match message {
                    Ok(Some(request)) => {
                        self.on_request(request);
                        // Read the whole burst before answering: one response per type.
                        while let Some(Ok(Some(request))) = inbound.message().now_or_never() {
                            self.on_request(request);
                        }
                    }
                    _ => break,
                },
                changed = changes.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    self.on_snapshot_change();
                },
            }
            if let Some(status) = self.close_status() {
                let code = tonic::Code::from_i32(status.code.0);
                let _ = self
                    .tx
                    .unbounded_send(Err(tonic::Status::new(code, status.message)));
                break;
            }
            self.send_undecodable();
            self.respond();
        }
        {
            let mut state = self.shared.lock();
            state.stats.open_streams -= 1;
        }
        self.shared.bump();
    }

    fn close_status(&self) -> Option<Status> {
        let state = self.shared.lock();
        (self.id < state.close_epoch)
            .then(|| state.close_status.clone())
            .flatten()
    }

    fn send_undecodable(&mut self) {
        let due = self.shared.lock().undecodable;
        while self.undecodable_sent < due {
            self.undecodable_sent += 1;
            let raw = Outbound::Raw(bytes::Bytes::from_static(UNDECODABLE));
            let _ = self.tx.unbounded_send(Ok(raw));
        }
    }

    fn on_request(&mut self, request: DiscoveryRequest) {
        let kind = if request.response_nonce.is_empty() {
            RequestKind::Subscribe
        } else if request.error_detail.is_some() {
            RequestKind::Nack
        } else {
            RequestKind::Ack
        };
        {
            let mut state = self.shared.lock();
            state.stats.requests += 1;
            match kind {
                RequestKind::Ack => state.stats.acks += 1,
                RequestKind::Nack => state.stats.nacks += 1,
                RequestKind::Subscribe => {}
            }
            if !state.skip_record {
                state.requests.push(RecordedRequest {
                    stream: self.id,
                    kind,
                    type_url: request.type_url.clone(),
                    version_info: request.version_info.clone(),
                    resource_names: request.resource_names.clone(),
                    response_nonce: request.response_nonce.clone(),
                    error_detail: request.error_detail.as_ref().map(|s| s.message.clone()),
                    node_id: request.node.as_ref().map(|n| n.id.clone()),
                });
            }
        }
        self.shared.bump();
        let st = self.types.entry(request.type_url.clone()).or_default();
        if kind != RequestKind::Subscribe && request.response_nonce != st.last_nonce {
            return; // a stale nonce: ignored, as go-control-plane does
        }
        let names: BTreeSet<String> = request.resource_names.into_iter().collect();
        if kind == RequestKind::Subscribe || names != st.names {
            st.dirty = true;
        }
        st.names = names;
    }

    fn on_snapshot_change(&mut self) {
        let state = self.shared.lock();
        for (type_url, st) in &mut self.types {
            if let Some(snapshot) = state.types.get(type_url)
                && st.sent_version.as_deref() != Some(snapshot.version.as_str())
            {
                st.dirty = true;
            }
        }
    }

    fn respond(&mut self) {
        let mut responses = Vec::new();
        {
            let mut state = self.shared.lock();
            let mut types: Vec<&String> = self.types.keys().collect();
            types.sort();
            let types: Vec<String> = types.into_iter().cloned().collect();
            for type_url in types {
                let st = self.types.get_mut(&type_url).expect("present");
                if !st.dirty {
                    continue;
                }
                st.dirty = false;
                let Some(snapshot) = state.types.get(&type_url) else {
                    continue; // nothing for this type yet: wait for it
                };
                let wanted = |name: &str| st.names.is_empty() || st.names.contains(name);
                let withheld = |name: &str| {
                    state
                        .withheld
                        .contains(&(type_url.clone(), name.to_string()))
                };
                let resources: Vec<Any> = snapshot
                    .named
                    .iter()
                    .filter(|(name, _)| wanted(name) && !withheld(name))
                    .map(|(_, r)| r.clone())
                    .chain(snapshot.unnamed.iter().cloned())
                    .collect();
                let resource_errors: Vec<ResourceError> = snapshot
                    .errors
                    .iter()
                    .filter(|e| e.resource_name.as_ref().is_none_or(|n| wanted(&n.name)))
                    .cloned()
                    .collect();
                let version = snapshot.version.clone();
                state.next_nonce += 1;
                let nonce = format!("nonce-{}", state.next_nonce);
                st.sent_version = Some(version.clone());
                st.last_nonce = nonce.clone();
                state.stats.responses += 1;
                responses.push(DiscoveryResponse {
                    version_info: version,
                    resources,
                    type_url: type_url.clone(),
                    nonce,
                    resource_errors,
                    ..Default::default()
                });
            }
        }
        if !responses.is_empty() {
            self.shared.bump();
        }
        for r in responses {
            let _ = self.tx.unbounded_send(Ok(Outbound::Response(r)));
        }
    }
}
