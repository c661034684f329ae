//! The A36 scenarios of `XdsServer`, generic over the [`Runtime`] like
//! `security_suite`: one loopback control plane serves both the server's
//! Listener (named from `server_listener_resource_name_template`) and, for the client,
//! an `xds:///` target whose one endpoint is the xDS-enabled server; an `XdsChannel`
//! calls it.
//!
//! The steps, in order: NOT_SERVING before the listener exists (RPCs fail), SERVING once
//! the control plane serves it (RPCs reach the service); a listener update whose route
//! has no `non_forwarding_action` while an RPC is in flight: the in-flight RPC finishes
//! on its draining connection and the next RPCs fail UNAVAILABLE naming the action;
//! the listener removed: NOT_SERVING again (the bootstrap sets `fail_on_data_errors`,
//! so a deletion drops the resource, A88). While SERVING, a connection that sends
//! nothing is closed at the handshake timeout and one that sent its HTTP/2 preface is
//! not; over mTLS, one that never starts its TLS handshake is closed too.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::BoxFuture;
use tonic_prost::ProstCodec;
use xds_adapter_common::{Client, ClientPool, Runtime, XdsChannel, XdsServer, XdsServerBuilder};
use xds_proto_core::Bootstrap;
use xds_proto_core::pb::envoy::extensions::filters::network::http_connection_manager::v3 as hcm_pb;
use xds_proto_core::pb::google::protobuf::Any;
use xds_proto_core::resource::type_url;
use xds_proto_core::server::ServingMode;

use crate::LoopbackServer;
use crate::echo::{ECHO_PATH, EchoReply, EchoRequest, call_echo, echo_request};
use crate::resources::{
    SERVER_LISTENER_TEMPLATE, any, cluster_msg, endpoints, hcm_with, listener, prefix,
    route_config, routes_config, server_filter_chain, server_listener_msg, serving_listener,
    to_cluster,
};
use crate::suite::within;

#[cfg(feature = "tls")]
mod mesh;
#[cfg(feature = "tls")]
mod rbac;
#[cfg(feature = "tls")]
pub use rbac::{CLIENT_1, RbacFigures, server_rbac_scenarios};

const TARGET: &str = "xds:///xds-server.example.com";
const CLIENT_LISTENER: &str = "xds-server.example.com";
const CLIENT_ROUTES: &str = "to-xds-server";
const CLUSTER: &str = "xds-server";
/// The name the service's replies carry.
pub const SERVICE_NAME: &str = "xds-enabled";

/// The echo service the xDS-enabled server runs: answers [`ECHO_PATH`] after the
/// request's `delay_ms` on the runtime's clock.
#[derive(Clone)]
pub struct SuiteEcho<R> {
    rt: R,
}

impl<R: Runtime> SuiteEcho<R> {
    /// The service on `rt` (for benches that serve it without xDS too).
    pub fn new(rt: R) -> SuiteEcho<R> {
        SuiteEcho { rt }
    }
}

struct EchoMethod<R>(R);

impl<R: Runtime> tonic::server::UnaryService<EchoRequest> for EchoMethod<R> {
    type Response = EchoReply;
    type Future = BoxFuture<'static, Result<tonic::Response<EchoReply>, tonic::Status>>;

    fn call(&mut self, request: tonic::Request<EchoRequest>) -> Self::Future {
        let rt = self.0.clone();
        async move {
            let request = request.into_inner();
            if request.delay_ms > 0 {
                rt.sleep(Duration::from_millis(u64::from(request.delay_ms)))
                    .await;
            }
            Ok(tonic::Response::new(EchoReply {
                message: request.message,
                backend: SERVICE_NAME.to_owned(),
            }))
        }
        .boxed()
    }
}

impl<R: Runtime> tower_service::Service<http::Request<hyper::body::Incoming>> for SuiteEcho<R> {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<hyper::body::Incoming>) -> Self::Future {
        let method = EchoMethod(self.rt.clone());
        async move {
            if request.uri().path() != ECHO_PATH {
                return Ok(tonic::Status::unimplemented("no such method").into_http());
            }
            let mut grpc =
                tonic::server::Grpc::new(ProstCodec::<EchoReply, EchoRequest>::default());
            Ok(grpc.unary(method, request).await)
        }
        .boxed()
    }
}

/// The handshake timeout the scenarios give the server.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_millis(400);

/// The keepalive the scenarios give the server: PING after 1 s without a frame, closed
/// 0.5 s later without its ACK.
const KEEPALIVE: xds_adapter_common::KeepaliveSettings = xds_adapter_common::KeepaliveSettings {
    interval: Duration::from_millis(1000),
    timeout: Duration::from_millis(500),
};

/// How long a TCP connection to `addr` that sends `first` (maybe nothing) stays open,
/// up to `limit` (`None`: still open then). On a thread of its own, with blocking
/// sockets, so that it runs the same on every runtime.
async fn connection_lifetime(
    addr: SocketAddr,
    first: &'static [u8],
    limit: Duration,
) -> Option<Duration> {
    use std::io::{Read, Write};
    let (tx, rx) = futures::channel::oneshot::channel();
    std::thread::spawn(move || {
        let mut stream = std::net::TcpStream::connect(addr).expect("connect to the xDS server");
        let start = Instant::now();
        stream.write_all(first).expect("send the first bytes");
        let mut buf = [0u8; 1024];
        let closed = loop {
            let left = limit.saturating_sub(start.elapsed());
            if left.is_zero() {
                break None;
            }
            stream.set_read_timeout(Some(left)).expect("a read timeout");
            match stream.read(&mut buf) {
                // The server's SETTINGS and the like: keep reading.
                Ok(n) if n > 0 => continue,
                Ok(_) => break Some(start.elapsed()),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    break None;
                }
                Err(_) => break Some(start.elapsed()),
            }
        };
        let _ = tx.send(closed);
    });
    rx.await.expect("the connection thread")
}

/// The client preface and an empty SETTINGS frame (RFC 9113 §3.4).
const PREFACE_AND_SETTINGS: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0";

/// A connection that says nothing is closed at the handshake timeout, not before; one
/// that sent its preface outlives it, and (plaintext, with [`KEEPALIVE`]) is closed
/// once a keepalive PING goes unanswered. Returns the silent one's lifetime.
async fn check_handshake_timeout(addr: SocketAddr, plaintext: bool) -> Duration {
    let silent = connection_lifetime(addr, b"", HANDSHAKE_TIMEOUT * 10)
        .await
        .expect("a silent connection is closed");
    assert!(
        silent >= HANDSHAKE_TIMEOUT.mul_f32(0.9) && silent < HANDSHAKE_TIMEOUT * 10,
        "a silent connection lived {silent:?}, the handshake timeout is {HANDSHAKE_TIMEOUT:?}"
    );
    if plaintext {
        let greeted = connection_lifetime(addr, PREFACE_AND_SETTINGS, HANDSHAKE_TIMEOUT * 2).await;
        assert_eq!(
            greeted, None,
            "a connection that sent its preface was closed"
        );
        // It never answers the server's PING: closed after interval + timeout.
        let unanswered = connection_lifetime(addr, PREFACE_AND_SETTINGS, Duration::from_secs(10))
            .await
            .expect("a connection that never answers a PING is closed");
        let expected = KEEPALIVE.interval + KEEPALIVE.timeout;
        assert!(
            unanswered >= expected.mul_f32(0.9) && unanswered < expected * 4,
            "a connection that never answered a PING lived {unanswered:?}, keepalive {KEEPALIVE:?}"
        );
    }
    silent
}

/// What the scenarios saw, for the test to print.
#[derive(Debug, Default)]
pub struct ServerFigures {
    /// Every serving mode the callback reported, in order.
    pub modes: Vec<ServingMode>,
    /// The status of an RPC on a route without `non_forwarding_action`.
    pub not_forwarding: String,
    /// How long the in-flight RPC across the listener update took.
    pub in_flight: Duration,
    /// How long a connection that sent nothing stayed open.
    pub silent_connection: Duration,
}

fn free_port() -> u16 {
    let probe = std::net::TcpListener::bind(("127.0.0.1", 0)).expect("bind 127.0.0.1");
    probe.local_addr().expect("an address").port()
}

/// The server's listener on `addr` whose one chain routes every RPC to a cluster (no
/// `non_forwarding_action`).
fn forwarding_listener(addr: SocketAddr) -> Any {
    let routes = hcm_pb::http_connection_manager::RouteSpecifier::RouteConfig(routes_config(
        "forwarding",
        vec![to_cluster(prefix("/"), "elsewhere")],
    ));
    let chain = server_filter_chain("forwarding", &hcm_with(routes, None));
    let name = crate::resources::server_listener_name(SERVER_LISTENER_TEMPLATE, addr);
    any(
        type_url::LISTENER,
        &server_listener_msg(&name, addr, vec![chain]),
    )
}

async fn until<R: Runtime, T>(
    rt: &R,
    what: &str,
    mut attempt: impl FnMut() -> BoxFuture<'static, Option<T>>,
) -> T {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(out) = attempt().await {
            return out;
        }
        assert!(Instant::now() < deadline, "{what}: not within 20 s");
        rt.sleep(Duration::from_millis(25)).await;
    }
}

fn call<R: Runtime>(
    channel: &XdsChannel<R>,
    message: &str,
    delay_ms: u32,
) -> BoxFuture<'static, Result<EchoReply, tonic::Status>> {
    let channel = channel.clone();
    let mut request = echo_request(message);
    request.get_mut().delay_ms = delay_ms;
    request.set_timeout(Duration::from_secs(5));
    async move { call_echo(channel, request).await }.boxed()
}

/// Runs the scenarios with `serve`, the adapter's way of binding an `XdsServer`.
pub async fn server_scenarios<R, F, Fut>(serve: F) -> ServerFigures
where
    R: Runtime,
    F: FnOnce(XdsServerBuilder<R>, SocketAddr, SuiteEcho<R>) -> Fut,
    Fut: Future<Output = Result<XdsServer, Box<dyn std::error::Error + Send + Sync>>>,
{
    let rt = R::current().expect("a runtime");
    let control = LoopbackServer::start();
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let client_side = vec![listener(CLIENT_LISTENER, CLIENT_ROUTES)];
    control.set_resources(type_url::LISTENER, "1", client_side.clone());
    control.set_resources(
        type_url::ROUTE_CONFIGURATION,
        "1",
        vec![route_config(CLIENT_ROUTES, CLUSTER)],
    );
    control.set_resources(
        type_url::CLUSTER,
        "1",
        vec![any(type_url::CLUSTER, &cluster_msg(CLUSTER, 1024))],
    );
    control.set_resources(
        type_url::CLUSTER_LOAD_ASSIGNMENT,
        "1",
        vec![endpoints(CLUSTER, &[u32::from(addr.port())])],
    );
    let client_bootstrap =
        Bootstrap::from_json_str(&control.bootstrap_json("channel", None)).expect("bootstrap");
    let pool = ClientPool::<R>::builder(client_bootstrap)
        .build_pool()
        .expect("a pool");
    let channel = XdsChannel::<R>::builder(TARGET)
        .pool(&pool)
        .build()
        .expect("a channel");

    let server_json = control
        .bootstrap_json("xds-server", None)
        .replacen(
            r#""server_features": ["xds_v3"]"#,
            r#""server_features": ["xds_v3", "fail_on_data_errors"]"#,
            1,
        )
        .replacen(
            r#""node""#,
            &format!(
                r#""server_listener_resource_name_template": "{SERVER_LISTENER_TEMPLATE}", "node""#
            ),
            1,
        );
    let server_client = Client::<R>::from_bootstrap_json(&server_json).expect("server client");
    let modes = Arc::new(Mutex::new(Vec::new()));
    let seen = modes.clone();
    let builder = XdsServerBuilder::new(server_client)
        .drain_grace(Duration::from_secs(10))
        .handshake_timeout(HANDSHAKE_TIMEOUT)
        .keepalive(Some(KEEPALIVE))
        .on_serving_mode(move |_, mode| seen.lock().unwrap().push(mode.clone()));
    let mut figures = ServerFigures::default();
    let server = serve(builder, addr, SuiteEcho { rt: rt.clone() })
        .await
        .expect("the xDS server starts");
    within(
        &rt,
        Duration::from_secs(60),
        "the server scenarios",
        async {
            // NOT_SERVING: no listener yet; connections are closed without a byte.
            assert!(matches!(server.mode(), ServingMode::NotServing(_)));
            let refused = call(&channel, "before", 0).await;
            assert_eq!(refused.unwrap_err().code(), tonic::Code::Unavailable);

            // SERVING once the control plane serves the listener.
            let mut with_server = client_side.clone();
            with_server.push(serving_listener(SERVER_LISTENER_TEMPLATE, addr));
            control.set_resources(type_url::LISTENER, "2", with_server);
            let reply = until(&rt, "an RPC served", || {
                call(&channel, "served", 0).map(Result::ok).boxed()
            })
            .await;
            assert_eq!(reply.backend, SERVICE_NAME);
            assert_eq!(server.mode(), ServingMode::Serving);
            figures.silent_connection = check_handshake_timeout(addr, true).await;

            // A listener update while an RPC is in flight: it finishes on its draining
            // connection; new RPCs use the new routes, whose action is not
            // non_forwarding_action: UNAVAILABLE.
            let in_flight = call(&channel, "in flight", 1500);
            let started = Instant::now();
            let in_flight = rt_spawned(&rt, in_flight);
            rt.sleep(Duration::from_millis(300)).await;
            let mut updated = client_side.clone();
            updated.push(forwarding_listener(addr));
            control.set_resources(type_url::LISTENER, "3", updated);
            let status = until(&rt, "a refused RPC", || {
                call(&channel, "after", 0).map(Result::err).boxed()
            })
            .await;
            assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
            assert!(
                status.message().contains("non_forwarding_action"),
                "{}",
                status.message()
            );
            figures.not_forwarding = status.message().to_owned();
            let reply = in_flight
                .await
                .expect("the RPC task")
                .expect("the in-flight RPC finishes");
            assert_eq!(reply.message, "in flight");
            figures.in_flight = started.elapsed();

            // The listener removed: NOT_SERVING.
            control.set_resources(type_url::LISTENER, "4", client_side.clone());
            until(&rt, "NOT_SERVING", || {
                let mode = server.mode();
                async move { matches!(mode, ServingMode::NotServing(_)).then_some(()) }.boxed()
            })
            .await;
            let refused = call(&channel, "removed", 0).await;
            assert_eq!(refused.unwrap_err().code(), tonic::Code::Unavailable);
        },
    )
    .await;
    figures.modes = modes.lock().unwrap().clone();
    assert!(
        matches!(figures.modes.first(), Some(ServingMode::Serving)),
        "{:?}",
        figures.modes
    );
    assert!(
        matches!(figures.modes.last(), Some(ServingMode::NotServing(_))),
        "{:?}",
        figures.modes
    );
    server.shutdown();
    figures
}

/// Runs `fut` as a task of its own, so it makes progress while the caller waits.
fn rt_spawned<R: Runtime, T: Send + 'static>(
    rt: &R,
    fut: BoxFuture<'static, T>,
) -> futures::channel::oneshot::Receiver<T> {
    let (tx, rx) = futures::channel::oneshot::channel();
    rt.spawn(Box::pin(async move {
        let _ = tx.send(fut.await);
    }));
    rx
}

/// mTLS through the chain's `DownstreamTlsContext` (A29 on an xDS server): the server's
/// listener requires a client certificate of the mesh CA (provider instance `server`
/// of the server's bootstrap); an `XdsChannel` with xDS credentials presenting
/// `client-1` is served, and the RPC hook sees the client's SPIFFE ID; a cluster
/// without an identity is refused. Returns the SANs the hook saw and the refusal.
#[cfg(feature = "tls")]
pub async fn server_mtls_scenarios<R, F, Fut>(serve: F) -> (Vec<String>, String)
where
    R: Runtime,
    F: FnOnce(XdsServerBuilder<R>, SocketAddr, SuiteEcho<R>) -> Fut,
    Fut: Future<Output = Result<XdsServer, Box<dyn std::error::Error + Send + Sync>>>,
{
    use crate::resources::{mtls_server_listener, tls_cluster, upstream_tls_context};
    use crate::security_suite::{INSTANCE, MeshPki, SERVER_ID};
    use xds_adapter_common::server::{ServerRpc, ServerRpcHook};

    /// Records the client identities of the RPCs it lets through.
    struct SeenIdentities(Arc<Mutex<Vec<String>>>);

    impl ServerRpcHook for SeenIdentities {
        fn on_rpc(&self, rpc: &ServerRpc<'_>) -> Result<(), tonic::Status> {
            let sans = rpc
                .peer_identity
                .map(|p| p.sans.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>())
                .unwrap_or_default();
            self.0.lock().unwrap().extend(sans);
            Ok(())
        }
    }

    let rt = R::current().expect("a runtime");
    let pki = MeshPki::generate();
    let mesh::Mesh {
        control,
        addr,
        pool: _pool,
        channel,
        server_client,
    } = mesh::mesh(&rt, &pki, "secure-channel", |addr| {
        let name = crate::resources::server_listener_name(SERVER_LISTENER_TEMPLATE, addr);
        mtls_server_listener(&name, "127.0.0.1", u32::from(addr.port()), "server")
    });
    let seen = Arc::new(Mutex::new(Vec::new()));
    let builder = XdsServerBuilder::new(server_client)
        .handshake_timeout(HANDSHAKE_TIMEOUT)
        .rpc_hook(SeenIdentities(seen.clone()));
    let server = serve(builder, addr, SuiteEcho { rt: rt.clone() })
        .await
        .expect("the xDS server starts");
    let refusal = within(&rt, Duration::from_secs(60), "the mTLS scenarios", async {
        let reply = until(&rt, "an mTLS RPC served", || {
            call(&channel, "mtls", 0).map(Result::ok).boxed()
        })
        .await;
        assert_eq!(reply.backend, SERVICE_NAME);
        // No TLS handshake at all: closed at the handshake timeout.
        check_handshake_timeout(addr, false).await;
        let no_identity = tls_cluster(CLUSTER, &upstream_tls_context(INSTANCE, None, &[SERVER_ID]));
        control.set_resources(type_url::CLUSTER, "2", vec![no_identity]);
        let status = until(&rt, "a refused RPC without a client certificate", || {
            call(&channel, "no identity", 0).map(Result::err).boxed()
        })
        .await;
        assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
        status.message().to_owned()
    })
    .await;
    server.shutdown();
    assert_eq!(
        server.mode(),
        ServingMode::NotServing("the server is shut down".into())
    );
    let sans = seen.lock().unwrap().clone();
    assert!(
        sans.iter()
            .any(|s| s.contains("spiffe://mesh.test/ns/default/sa/client-1")),
        "{sans:?}"
    );
    (sans, refusal)
}
