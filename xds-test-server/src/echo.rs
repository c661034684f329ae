//! Loopback echo backends: the data-plane servers that `xds:///` channels send RPCs to
//! in the adapters' channel tests, the benchmark and the CLI demo.
//!
//! One unary method, [`ECHO_PATH`], with a hand-written prost message pair and tonic's
//! generic server and client code (no build-time codegen). An [`EchoBackend`] answers
//! with its name, counts what it served, and can be told to fail: every RPC
//! ([`EchoBackend::set_failing`], for outlier detection) or the next few
//! ([`EchoBackend::fail_next`], for retries), each with UNAVAILABLE. A request may ask
//! for a delay before the answer ([`EchoRequest::delay_ms`], for deadlines).
//!
//! [`EchoBackend::start_with_orca`] starts one that reports its load (gRFC A51) through
//! the adapters' ORCA server layer ([`EchoOrca`]): per call, its
//! [`ServerMetricRecorder`]'s metrics and, when asked, the rate of RPCs it actually
//! serves as `qps`; out of band, the `OpenRcaService` too when given one.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use http::uri::PathAndQuery;
use tonic::client::{Grpc, GrpcService};
use tonic_prost::ProstCodec;
use tower_layer::Layer;
pub use xds_adapter_common::orca::ServerMetricRecorder;
use xds_adapter_common::orca::{CallMetricRecorder, OrcaLayer, OrcaService};
use xds_adapter_common::runtime::Runtime;

use crate::host::Host;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The echo method's path.
pub const ECHO_PATH: &str = "/xds.test.Echo/Echo";

/// The echo service's name (the path's prefix is `/` + this + `/`).
pub const ECHO_SERVICE: &str = "xds.test.Echo";

/// The echo request.
#[derive(Clone, PartialEq, prost::Message)]
pub struct EchoRequest {
    /// Echoed back.
    #[prost(string, tag = "1")]
    pub message: String,
    /// How long the backend waits before it answers, in milliseconds.
    #[prost(uint32, tag = "2")]
    pub delay_ms: u32,
}

/// The echo reply.
#[derive(Clone, PartialEq, prost::Message)]
pub struct EchoReply {
    /// The request's message.
    #[prost(string, tag = "1")]
    pub message: String,
    /// The name of the backend that answered.
    #[prost(string, tag = "2")]
    pub backend: String,
}

/// Calls [`ECHO_PATH`] on any channel tonic's generic client takes (a plain tonic
/// channel or an `xds:///` one). Set a deadline (`grpc-timeout`) and metadata on the
/// request as usual.
///
/// # Errors
/// The RPC's status.
pub async fn call_echo<T>(
    channel: T,
    request: tonic::Request<EchoRequest>,
) -> Result<EchoReply, tonic::Status>
where
    T: GrpcService<tonic::body::Body>,
    T::Error: Into<BoxError>,
    T::ResponseBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    <T::ResponseBody as http_body::Body>::Error: Into<BoxError>,
{
    Ok(call_echo_response(channel, request).await?.into_inner())
}

/// [`call_echo`], with the response's metadata.
///
/// # Errors
/// The RPC's status.
pub async fn call_echo_response<T>(
    channel: T,
    request: tonic::Request<EchoRequest>,
) -> Result<tonic::Response<EchoReply>, tonic::Status>
where
    T: GrpcService<tonic::body::Body>,
    T::Error: Into<BoxError>,
    T::ResponseBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    <T::ResponseBody as http_body::Body>::Error: Into<BoxError>,
{
    let mut grpc = Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unavailable(e.into().to_string()))?;
    let codec = ProstCodec::<EchoRequest, EchoReply>::default();
    grpc.unary(request, PathAndQuery::from_static(ECHO_PATH), codec)
        .await
}

/// An echo request carrying `message`, answered at once.
pub fn echo_request(message: &str) -> tonic::Request<EchoRequest> {
    tonic::Request::new(EchoRequest {
        message: message.to_owned(),
        delay_ms: 0,
    })
}

#[derive(Debug, Default)]
struct Counters {
    received: AtomicU64,
    served: AtomicU64,
    failed: AtomicU64,
    failing: AtomicBool,
    fail_next: AtomicU64,
    /// TLS connections accepted, and the client's leaf certificate of each (DER, empty
    /// without one).
    tls_connections: std::sync::Mutex<Vec<Vec<u8>>>,
}

impl Counters {
    /// Whether this RPC is to fail, consuming one of the `fail_next` failures.
    fn take_failure(&self) -> bool {
        if self.failing.load(Ordering::Relaxed) {
            return true;
        }
        self.fail_next
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok()
    }
}

/// An echo gRPC server on 127.0.0.1. It stops when dropped.
#[derive(Debug)]
pub struct EchoBackend {
    name: Arc<str>,
    addr: SocketAddr,
    counters: Arc<Counters>,
    _stop: futures::channel::oneshot::Sender<()>,
    _host: Host,
}

impl EchoBackend {
    /// Starts a backend named `name` on a free port of 127.0.0.1, on the calling tokio
    /// runtime or else on a thread of its own.
    ///
    /// # Panics
    /// When no port can be bound on 127.0.0.1.
    pub fn start(name: &str) -> EchoBackend {
        EchoBackend::start_with(name, None, None)
    }

    /// [`start`](Self::start)s a backend that reports its load as `orca` says.
    ///
    /// # Panics
    /// When no port can be bound on 127.0.0.1.
    pub fn start_with_orca(name: &str, orca: EchoOrca) -> EchoBackend {
        EchoBackend::start_with(name, Some(Arc::new(orca)), None)
    }

    /// Starts a backend that terminates TLS with `config` (which should advertise ALPN
    /// `h2`) before HTTP/2; a failed handshake closes the connection. It records each
    /// accepted connection's client certificate ([`Self::tls_client_certificates`]).
    ///
    /// # Panics
    /// As [`Self::start`].
    pub fn start_tls(name: &str, config: Arc<rustls::ServerConfig>) -> EchoBackend {
        EchoBackend::start_with(name, None, Some(tokio_rustls::TlsAcceptor::from(config)))
    }

    fn start_with(
        name: &str,
        orca: Option<Arc<EchoOrca>>,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> EchoBackend {
        let host = Host::for_caller("loopback-echo-backend");
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).expect("bind 127.0.0.1");
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let addr = listener.local_addr().expect("local address");
        let (stop, stopped) = futures::channel::oneshot::channel::<()>();
        let service = EchoService {
            name: Arc::from(name),
            counters: Arc::default(),
            orca,
        };
        let backend = EchoBackend {
            name: service.name.clone(),
            addr,
            counters: service.counters.clone(),
            _stop: stop,
            _host: host.clone(),
        };
        host.handle().spawn(serve(listener, service, tls, stopped));
        backend
    }

    /// The backend's name, as its replies carry it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// RPCs received so far, answered or not (one still waiting out its
    /// [`EchoRequest::delay_ms`] is counted).
    pub fn received(&self) -> u64 {
        self.counters.received.load(Ordering::Relaxed)
    }

    /// RPCs answered with a reply.
    pub fn served(&self) -> u64 {
        self.counters.served.load(Ordering::Relaxed)
    }

    /// RPCs answered with UNAVAILABLE (because it was failing or told to fail them).
    pub fn failed(&self) -> u64 {
        self.counters.failed.load(Ordering::Relaxed)
    }

    /// The client leaf certificate (DER; empty when the client sent none) of every TLS
    /// connection accepted so far, in order.
    pub fn tls_client_certificates(&self) -> Vec<Vec<u8>> {
        let certs = self.counters.tls_connections.lock();
        certs.unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Makes every RPC fail with UNAVAILABLE (`true`) until told otherwise.
    pub fn set_failing(&self, failing: bool) {
        self.counters.failing.store(failing, Ordering::Relaxed);
    }

    /// Makes the next `n` RPCs fail with UNAVAILABLE.
    pub fn fail_next(&self, n: u64) {
        self.counters.fail_next.store(n, Ordering::Relaxed);
    }
}

async fn serve(
    listener: std::net::TcpListener,
    service: EchoService,
    tls: Option<tokio_rustls::TlsAcceptor>,
    mut stopped: futures::channel::oneshot::Receiver<()>,
) {
    let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut stopped => break,
            accepted = listener.accept() => {
                let Ok((tcp, _)) = accepted else { continue };
                let _ = tcp.set_nodelay(true);
                let service = service.clone();
                let tls = tls.clone();
                connections.spawn(async move {
                    match tls {
                        None => serve_connection(tcp, service).await,
                        Some(tls) => {
                            let Ok(stream) = tls.accept(tcp).await else { return };
                            let client_cert = (stream.get_ref().1.peer_certificates())
                                .and_then(|c| c.first())
                                .map_or_else(Vec::new, |c| c.to_vec());
                            let connections = &service.counters.tls_connections;
                            connections.lock().unwrap_or_else(|e| e.into_inner()).push(client_cert);
                            serve_connection(stream, service).await;
                        }
                    }
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    connections.abort_all();
}

/// How an ORCA echo backend reports its load (gRFC A51).
pub struct EchoOrca {
    recorder: ServerMetricRecorder,
    measured_qps: Option<RateMeter>,
    oob: Option<OobService>,
}

type OobService = Box<
    dyn Fn(
            http::Request<hyper::body::Incoming>,
        ) -> BoxFuture<'static, http::Response<tonic::body::Body>>
        + Send
        + Sync,
>;

impl std::fmt::Debug for EchoOrca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EchoOrca")
            .field("recorder", &self.recorder)
            .field(
                "measured_qps",
                &self.measured_qps.as_ref().map(|m| m.window),
            )
            .field("oob", &self.oob.is_some())
            .finish()
    }
}

impl EchoOrca {
    /// Every reply carries `recorder`'s metrics as its per-call report.
    pub fn new(recorder: ServerMetricRecorder) -> EchoOrca {
        EchoOrca {
            recorder,
            measured_qps: None,
            oob: None,
        }
    }

    /// Each call also records, as its `qps`, the RPCs the backend received in the last
    /// `window` (per second): what it actually serves, not what the recorder says.
    pub fn measured_qps(mut self, window: Duration) -> EchoOrca {
        self.measured_qps = Some(RateMeter::new(window));
        self
    }

    /// Also serves the out-of-band `OpenRcaService` (pass one over the same recorder).
    pub fn out_of_band<R: Runtime>(mut self, service: OrcaService<R>) -> EchoOrca {
        self.oob = Some(Box::new(move |request| {
            let mut service = service.clone();
            Box::pin(async move {
                match tower_service::Service::call(&mut service, request).await {
                    Ok(response) => response,
                    Err(never) => match never {},
                }
            })
        }));
        self
    }
}

/// RPCs per second over a sliding window.
struct RateMeter {
    window: Duration,
    seen: std::sync::Mutex<std::collections::VecDeque<std::time::Instant>>,
}

impl RateMeter {
    fn new(window: Duration) -> RateMeter {
        RateMeter {
            window,
            seen: Default::default(),
        }
    }

    /// Counts one RPC now; the rate over the window up to now.
    fn tick(&self) -> f64 {
        let now = std::time::Instant::now();
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.push_back(now);
        while seen.front().is_some_and(|t| now - *t > self.window) {
            seen.pop_front();
        }
        seen.len() as f64 / self.window.as_secs_f64()
    }
}

async fn serve_connection<IO>(io: IO, service: EchoService)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let _ = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
        .serve_connection(
            hyper_util::rt::TokioIo::new(io),
            hyper_util::service::TowerToHyperService::new(service),
        )
        .await;
}

/// The HTTP service: routes [`ECHO_PATH`] (through the ORCA layer when the backend
/// reports load) and the ORCA out-of-band service if it has one, and answers
/// everything else UNIMPLEMENTED.
#[derive(Clone)]
struct EchoService {
    name: Arc<str>,
    counters: Arc<Counters>,
    orca: Option<Arc<EchoOrca>>,
}

impl tower_service::Service<http::Request<hyper::body::Incoming>> for EchoService {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<hyper::body::Incoming>) -> Self::Future {
        if let Some(orca) = self.orca.clone() {
            let path = request.uri().path();
            if let Some(oob) = orca.oob.as_ref().filter(|_| path == STREAM_CORE_METRICS) {
                return oob(request).map(Ok).boxed();
            }
            let plain = EchoService {
                orca: None,
                ..self.clone()
            };
            let mut layered = OrcaLayer::new(orca.recorder.clone()).layer(Measured(plain, orca));
            let response = tower_service::Service::call(&mut layered, request);
            return async move {
                let response = response.await?;
                Ok(response.map(tonic::body::Body::new))
            }
            .boxed();
        }
        if request.uri().path() != ECHO_PATH {
            let path = request.uri().path().to_string();
            return async move {
                Ok(tonic::Status::unimplemented(format!("no method {path}")).into_http())
            }
            .boxed();
        }
        let method = EchoMethod(self.clone());
        async move {
            let mut grpc =
                tonic::server::Grpc::new(ProstCodec::<EchoReply, EchoRequest>::default());
            Ok(grpc.unary(method, request).await)
        }
        .boxed()
    }
}

const STREAM_CORE_METRICS: &str = xds_proto_core::orca::STREAM_CORE_METRICS_PATH;

/// The echo service under the ORCA layer: records the measured qps on each call.
#[derive(Clone)]
struct Measured(EchoService, Arc<EchoOrca>);

impl tower_service::Service<http::Request<hyper::body::Incoming>> for Measured {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<hyper::body::Incoming>) -> Self::Future {
        if let Some(meter) = &self.1.measured_qps
            && request.uri().path() == ECHO_PATH
            && let Some(call) = request.extensions().get::<CallMetricRecorder>()
        {
            call.record_qps(meter.tick());
        }
        tower_service::Service::call(&mut self.0, request)
    }
}

struct EchoMethod(EchoService);

impl tonic::server::UnaryService<EchoRequest> for EchoMethod {
    type Response = EchoReply;
    type Future = BoxFuture<'static, Result<tonic::Response<EchoReply>, tonic::Status>>;

    fn call(&mut self, request: tonic::Request<EchoRequest>) -> Self::Future {
        let service = self.0.clone();
        async move {
            let request = request.into_inner();
            service.counters.received.fetch_add(1, Ordering::Relaxed);
            if request.delay_ms > 0 {
                tokio::time::sleep(Duration::from_millis(u64::from(request.delay_ms))).await;
            }
            if service.counters.take_failure() {
                service.counters.failed.fetch_add(1, Ordering::Relaxed);
                return Err(tonic::Status::unavailable(format!(
                    "{} is failing",
                    service.name
                )));
            }
            service.counters.served.fetch_add(1, Ordering::Relaxed);
            Ok(tonic::Response::new(EchoReply {
                message: request.message,
                backend: service.name.to_string(),
            }))
        }
        .boxed()
    }
}
