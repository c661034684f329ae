//! gRFC A6's transparent retry of an RPC that reached the server's gRPC library but not
//! its application: its stream was refused (RST_STREAM with REFUSED_STREAM) or was
//! above the last stream id of the connection's GOAWAY. `XdsChannel` retries such an
//! RPC once, at once, on a new pick, without a retry policy and without counting it as
//! one of the policy's attempts; the policy handles the retry's failure as usual.
//!
//! The backends are raw HTTP/2 servers on 127.0.0.1 (the `h2` crate's server side, and
//! for GOAWAY a few hand-written frames), since a gRPC server never refuses a stream on
//! demand; they count the streams they see and answer the ones they accept with the
//! echo reply of the request they read, so a retried request is seen to arrive whole.
//! The control plane is the loopback one, routing the target to one endpoint.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use xds_adapter_tokio::xds_proto_core::pb::envoy::config::route::v3 as route_pb;
use xds_adapter_tokio::xds_proto_core::pb::google::protobuf::UInt32Value;
use xds_adapter_tokio::xds_proto_core::resource::type_url;
use xds_adapter_tokio::{Bootstrap, ClientPool, XdsChannel};
use xds_test_server::LoopbackServer;
use xds_test_server::echo::{EchoReply, EchoRequest, call_echo, echo_request};
use xds_test_server::resources::{
    cluster, cluster_action, endpoints, forward, listener, pb_duration, prefix, rc_any,
    route_config_of, vhost, with_retry,
};

const TARGET: &str = "xds:///refusing.example.com";
const LISTENER: &str = "refusing.example.com";

/// What the backend does with the streams it receives.
#[derive(Clone, Copy, Debug)]
enum Behaviour {
    /// Resets the first `n` streams with this reason, then answers.
    Reset { reason: h2::Reason, n: usize },
    /// On its first connection sends GOAWAY with last stream id 0 once the first
    /// request's headers arrive (refusing it unseen); answers on the next connections.
    GoAwayFirst,
}

/// A raw HTTP/2 backend on 127.0.0.1 that refuses streams as its [`Behaviour`] says.
/// It stops when dropped.
struct RefusingBackend {
    addr: SocketAddr,
    streams: Arc<AtomicUsize>,
    connections: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RefusingBackend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RefusingBackend {
    async fn start(behaviour: Behaviour) -> RefusingBackend {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("an address");
        let streams = Arc::new(AtomicUsize::new(0));
        let connections = Arc::new(AtomicUsize::new(0));
        let (s, c) = (streams.clone(), connections.clone());
        let task = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let first = c.fetch_add(1, Ordering::SeqCst) == 0;
                let streams = s.clone();
                tokio::spawn(async move {
                    if first && matches!(behaviour, Behaviour::GoAwayFirst) {
                        go_away_at_first_headers(socket, &streams).await;
                    } else {
                        serve(socket, behaviour, &streams).await;
                    }
                });
            }
        });
        RefusingBackend {
            addr,
            streams,
            connections,
            task,
        }
    }

    fn streams(&self) -> usize {
        self.streams.load(Ordering::SeqCst)
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

/// Serves one connection with the `h2` crate: each stream is reset or answered.
async fn serve(socket: TcpStream, behaviour: Behaviour, streams: &Arc<AtomicUsize>) {
    let Ok(mut connection) = h2::server::handshake(socket).await else {
        return;
    };
    while let Some(Ok((request, mut respond))) = connection.accept().await {
        let seen = streams.fetch_add(1, Ordering::SeqCst);
        match behaviour {
            Behaviour::Reset { reason, n } if seen < n => respond.send_reset(reason),
            _ => {
                tokio::spawn(answer(request, respond));
            }
        }
    }
}

/// Reads the echo request and answers it with a gRPC response: the reply's message is
/// the request's, its backend the stream's id.
async fn answer(
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
) {
    let mut body = request.into_body();
    let mut received = BytesMut::new();
    while let Some(Ok(chunk)) = body.data().await {
        let _ = body.flow_control().release_capacity(chunk.len());
        received.extend_from_slice(&chunk);
    }
    // A gRPC message: a compression flag, a 4-byte length, the message.
    let mut message = received.freeze();
    if message.len() < 5 {
        return;
    }
    message.advance(5);
    let echoed = EchoRequest::decode(message)
        .expect("an echo request")
        .message;
    let reply = EchoReply {
        message: echoed,
        backend: format!("stream {}", respond.stream_id().as_u32()),
    };
    let mut frame = BytesMut::new();
    frame.put_u8(0);
    frame.put_u32(u32::try_from(reply.encoded_len()).expect("a short reply"));
    reply.encode(&mut frame).expect("room for the reply");
    let response = http::Response::builder()
        .status(200)
        .header("content-type", "application/grpc")
        .body(())
        .expect("a response head");
    let Ok(mut send) = respond.send_response(response, false) else {
        return;
    };
    let _ = send.send_data(frame.freeze(), false);
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
    let _ = send.send_trailers(trailers);
}

/// Speaks just enough HTTP/2 by hand to refuse the first request with a GOAWAY whose
/// last stream id is 0 (the `h2` crate's own GOAWAY names the streams it accepted):
/// its SETTINGS, an ACK of the client's, then the GOAWAY at the first HEADERS; then it
/// reads until the client closes.
async fn go_away_at_first_headers(mut socket: TcpStream, streams: &Arc<AtomicUsize>) {
    const SETTINGS: [u8; 9] = [0, 0, 0, 0x4, 0, 0, 0, 0, 0];
    const SETTINGS_ACK: [u8; 9] = [0, 0, 0, 0x4, 0x1, 0, 0, 0, 0];
    const GOAWAY_LAST_0: [u8; 17] = [0, 0, 8, 0x7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    const PREFACE: usize = 24;
    if socket.write_all(&SETTINGS).await.is_err() {
        return;
    }
    let mut preface = [0u8; PREFACE];
    if socket.read_exact(&mut preface).await.is_err() {
        return;
    }
    let mut header = [0u8; 9];
    while socket.read_exact(&mut header).await.is_ok() {
        let length =
            usize::from(header[0]) << 16 | usize::from(header[1]) << 8 | usize::from(header[2]);
        let mut payload = vec![0u8; length];
        if socket.read_exact(&mut payload).await.is_err() {
            return;
        }
        let (kind, flags) = (header[3], header[4]);
        let reply: &[u8] = match (kind, flags & 0x1) {
            (0x4, 0) => &SETTINGS_ACK,
            (0x1, _) => {
                streams.fetch_add(1, Ordering::SeqCst);
                &GOAWAY_LAST_0
            }
            _ => &[],
        };
        if socket.write_all(reply).await.is_err() {
            return;
        }
    }
}

/// The loopback control plane routing [`TARGET`] to `backend`, with a retry policy of
/// `max_attempts` on UNAVAILABLE when given, and a pool on it.
struct Plane {
    _server: LoopbackServer,
    pool: ClientPool,
}

impl Plane {
    fn start(backend: SocketAddr, max_attempts: Option<u32>) -> Plane {
        let server = LoopbackServer::start();
        let mut action = cluster_action("refusing");
        if let Some(max_attempts) = max_attempts {
            let policy = route_pb::RetryPolicy {
                retry_on: "unavailable".into(),
                num_retries: Some(UInt32Value {
                    value: max_attempts - 1,
                }),
                retry_back_off: Some(route_pb::retry_policy::RetryBackOff {
                    base_interval: Some(pb_duration(Duration::from_millis(5))),
                    max_interval: Some(pb_duration(Duration::from_millis(10))),
                }),
                ..Default::default()
            };
            action = with_retry(action, policy);
        }
        let routes = vec![forward(prefix("/"), action)];
        let config = route_config_of("refusing-routes", vec![vhost("v", &[LISTENER], routes)]);
        server.set_resources(
            type_url::LISTENER,
            "1",
            vec![listener(LISTENER, "refusing-routes")],
        );
        server.set_resources(type_url::ROUTE_CONFIGURATION, "1", vec![rc_any(&config)]);
        server.set_resources(type_url::CLUSTER, "1", vec![cluster("refusing")]);
        server.set_resources(
            type_url::CLUSTER_LOAD_ASSIGNMENT,
            "1",
            vec![endpoints("refusing", &[u32::from(backend.port())])],
        );
        let bootstrap = Bootstrap::from_json_str(&server.bootstrap_json("transparent", None))
            .expect("the loopback bootstrap");
        let pool = ClientPool::builder(bootstrap).build_pool().expect("a pool");
        Plane {
            _server: server,
            pool,
        }
    }

    fn channel(&self) -> XdsChannel {
        XdsChannel::builder(TARGET)
            .pool(&self.pool)
            .seed(3)
            .build()
            .expect("a channel")
    }
}

/// One RPC with a 5 s deadline (a hung retry fails the test rather than hanging it).
async fn call(channel: &XdsChannel, message: &str) -> Result<EchoReply, tonic::Status> {
    let mut request = echo_request(message);
    request.set_timeout(Duration::from_secs(5));
    call_echo(channel.clone(), request).await
}

/// A first stream refused with REFUSED_STREAM is retried at once without a retry
/// policy; the second stream gets the whole request and answers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_stream_is_retried_once_without_a_retry_policy() {
    let refused = Behaviour::Reset {
        reason: h2::Reason::REFUSED_STREAM,
        n: 1,
    };
    let backend = RefusingBackend::start(refused).await;
    let plane = Plane::start(backend.addr, None);
    let channel = plane.channel();
    let reply = call(&channel, "once more")
        .await
        .expect("the retry is answered");
    assert_eq!(reply.message, "once more", "the retry carried the request");
    assert_eq!(
        reply.backend, "stream 3",
        "the second stream on the connection"
    );
    assert_eq!(backend.streams(), 2);
    assert_eq!(backend.connections(), 1);
}

/// A backend that refuses every stream: the transparent retry happens once, then the
/// RPC fails UNAVAILABLE (2 streams); with a retry policy of 2 attempts the policy adds
/// its second attempt after the transparent one (3 streams).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_transparent_retry_happens_once_and_counts_as_no_attempt() {
    let refuse_all = Behaviour::Reset {
        reason: h2::Reason::REFUSED_STREAM,
        n: usize::MAX,
    };
    let backend = RefusingBackend::start(refuse_all).await;
    let plane = Plane::start(backend.addr, None);
    let status = call(&plane.channel(), "refused")
        .await
        .expect_err("refused");
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert_eq!(backend.streams(), 2, "one transparent retry");

    let backend = RefusingBackend::start(refuse_all).await;
    let plane = Plane::start(backend.addr, Some(2));
    let status = call(&plane.channel(), "refused")
        .await
        .expect_err("refused");
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert_eq!(
        backend.streams(),
        3,
        "the first attempt, its transparent retry, the policy's second attempt"
    );
}

/// A stream reset with another reason (the server may have processed it) is no
/// transparent retry: without a retry policy the RPC fails after one stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_reset_for_another_reason_is_not_retried() {
    let reset = Behaviour::Reset {
        reason: h2::Reason::INTERNAL_ERROR,
        n: 1,
    };
    let backend = RefusingBackend::start(reset).await;
    let plane = Plane::start(backend.addr, None);
    let status = call(&plane.channel(), "reset").await.expect_err("reset");
    assert_ne!(status.code(), tonic::Code::Ok);
    assert_eq!(backend.streams(), 1);
}

/// A GOAWAY whose last stream id is below the RPC's stream refuses it unseen: the RPC
/// is retried on a new connection (the old one is retired) and answered there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_above_the_goaways_last_stream_id_is_retried_on_a_new_connection() {
    let backend = RefusingBackend::start(Behaviour::GoAwayFirst).await;
    let plane = Plane::start(backend.addr, None);
    let channel = plane.channel();
    let reply = call(&channel, "after goaway")
        .await
        .expect("retried and answered");
    assert_eq!(reply.message, "after goaway");
    assert_eq!(
        reply.backend, "stream 1",
        "the first stream of a new connection"
    );
    assert_eq!(backend.streams(), 2);
    assert_eq!(backend.connections(), 2);
}
