//! CSDS over real gRPC: a [`ClientPool`] with two targets watching different resources
//! on a loopback management server, its [`CsdsServer`] on 127.0.0.1:0, and
//! envoy-types' generated tonic client (an independent build of the Envoy protos)
//! calling `FetchClientStatus` and `StreamClientStatus`.

use std::time::Duration;

use futures::StreamExt;
use prost::Message;
use xds_adapter_tokio::xds_proto_core::pb::google::protobuf::Any as CoreAny;
use xds_adapter_tokio::xds_proto_core::resource::type_url;
use xds_adapter_tokio::xds_proto_core::{Code, ErrorKind, XdsResourceType};
use xds_adapter_tokio::{
    Bootstrap, Cds, ClientPool, CsdsServer, Lds, STREAM_CLIENT_STATUS_METHOD, WatchStream,
    WatchUpdate,
};
use xds_test_server::LoopbackServer;
use xds_test_server::resources::{cluster_with, invalid_cluster, listener, resource_error};

use envoy_types::pb::envoy::admin::v3::ClientResourceStatus;
use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::listener::v3::Listener;
use envoy_types::pb::envoy::service::status::v3::client_config::GenericXdsConfig;
use envoy_types::pb::envoy::service::status::v3::client_status_discovery_service_client::ClientStatusDiscoveryServiceClient;
use envoy_types::pb::envoy::service::status::v3::{
    ClientConfig, ClientStatusRequest, ClientStatusResponse,
};
use envoy_types::pb::envoy::r#type::matcher::v3::NodeMatcher;

const LDS: &str = type_url::LISTENER;
const CDS: &str = type_url::CLUSTER;
const PROMPT: Duration = Duration::from_secs(10);
const ALPHA: &str = "xds:///alpha.example";
const BETA: &str = "xds:///beta.example";

type CsdsClient = ClientStatusDiscoveryServiceClient<tonic::transport::Channel>;

async fn next<T: XdsResourceType>(watch: &mut WatchStream<T>) -> WatchUpdate<T::Value> {
    let name = watch.name().to_string();
    tokio::time::timeout(PROMPT, watch.next())
        .await
        .unwrap_or_else(|_| panic!("no update of {name}"))
        .unwrap_or_else(|| panic!("the watch of {name} ended"))
}

fn error_kind<V>(update: &WatchUpdate<V>) -> Option<ErrorKind> {
    match update {
        WatchUpdate::Changed(Err(e)) => Some(e.kind),
        _ => None,
    }
}

/// The config of `scope`, which must be there.
fn scope<'a>(response: &'a ClientStatusResponse, scope: &str) -> &'a ClientConfig {
    response
        .config
        .iter()
        .find(|c| c.client_scope == scope)
        .unwrap_or_else(|| panic!("no ClientConfig for {scope}: {response:?}"))
}

/// The resource `name` of `type_url` in `config`, which must be there.
fn resource<'a>(config: &'a ClientConfig, type_url: &str, name: &str) -> &'a GenericXdsConfig {
    config
        .generic_xds_configs
        .iter()
        .find(|g| g.type_url == type_url && g.name == name)
        .unwrap_or_else(|| panic!("no {name} in {}: {config:?}", config.client_scope))
}

fn names(config: &ClientConfig) -> Vec<(&str, &str)> {
    let mut out: Vec<(&str, &str)> = config
        .generic_xds_configs
        .iter()
        .map(|g| (g.type_url.as_str(), g.name.as_str()))
        .collect();
    out.sort();
    out
}

fn status(g: &GenericXdsConfig) -> ClientResourceStatus {
    ClientResourceStatus::try_from(g.client_status).expect("a known status")
}

/// The raw resource CSDS reports must be exactly what the server sent.
fn assert_raw(g: &GenericXdsConfig, sent: &CoreAny) {
    let raw = g.xds_config.as_ref().expect("the raw resource");
    assert_eq!(raw.type_url, sent.type_url);
    assert_eq!(raw.value.as_slice(), sent.value.as_ref(), "{}", g.name);
}

async fn connect(server: &CsdsServer) -> CsdsClient {
    connect_to(server.local_addr())
        .await
        .expect("connect to the CSDS server")
}

/// Target alpha watches a cluster and a listener that the server sends (ACKED) and a
/// listener it does not have (DOES_NOT_EXIST, after the 1 s resource timeout: a
/// never-received name missing from a SotW response is left to the timer, as in gRPC);
/// target beta watches a cluster that fails
/// validation (NACKED) and one the server reports a TP3 error for (RECEIVED_ERROR).
/// `FetchClientStatus` returns one `ClientConfig` per target with its scope, node,
/// statuses, versions, error states and the raw resources byte for byte; a request
/// with node matchers is refused; a client whose last handle went away drops out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_client_status_reports_every_target_of_the_pool() {
    let server = LoopbackServer::start();
    let cluster_a = cluster_with("cluster-a", 11);
    let listener_a = listener("listener-a", "routes-a");
    server.set_resources(
        CDS,
        "c-1",
        vec![cluster_a.clone(), invalid_cluster("cluster-bad")],
    );
    server.set_resource_errors(
        CDS,
        "c-1",
        vec![resource_error(
            "cluster-denied",
            Code::UNAVAILABLE,
            "backend down",
        )],
    );
    server.set_resources(LDS, "l-1", vec![listener_a.clone()]);
    let bootstrap = Bootstrap::from_json_str(&server.bootstrap_json("csds-node", None)).unwrap();
    let pool = ClientPool::builder(bootstrap)
        .resource_timeout(Duration::from_secs(1))
        .build_pool()
        .expect("pool");

    let alpha = pool.get_or_create(ALPHA);
    let mut a_cluster = alpha.watch::<Cds>("cluster-a").await.unwrap();
    let mut a_listener = alpha.watch::<Lds>("listener-a").await.unwrap();
    let mut a_missing = alpha.watch::<Lds>("listener-missing").await.unwrap();
    assert_eq!(next(&mut a_cluster).await.value().unwrap().max_requests, 11);
    assert_eq!(
        next(&mut a_listener).await.value().unwrap().name,
        "listener-a"
    );
    assert_eq!(
        error_kind(&next(&mut a_missing).await),
        Some(ErrorKind::DoesNotExist)
    );

    let beta = pool.get_or_create(BETA);
    let mut b_bad = beta.watch::<Cds>("cluster-bad").await.unwrap();
    let mut b_denied = beta.watch::<Cds>("cluster-denied").await.unwrap();
    assert_eq!(
        error_kind(&next(&mut b_bad).await),
        Some(ErrorKind::Invalid)
    );
    assert_eq!(
        error_kind(&next(&mut b_denied).await),
        Some(ErrorKind::ServerReported)
    );

    let csds = CsdsServer::serve(pool.clone(), "127.0.0.1:0")
        .await
        .expect("serve CSDS");
    assert!(csds.local_addr().ip().is_loopback());
    let mut grpc = connect(&csds).await;
    let response = grpc
        .fetch_client_status(ClientStatusRequest::default())
        .await
        .expect("FetchClientStatus")
        .into_inner();

    let scopes: Vec<&str> = response
        .config
        .iter()
        .map(|c| c.client_scope.as_str())
        .collect();
    assert_eq!(
        scopes,
        [ALPHA, BETA],
        "one ClientConfig per target, in order"
    );
    for config in &response.config {
        let node = config.node.as_ref().expect("the node");
        assert_eq!(node.id, "csds-node");
        assert_eq!(node.cluster, "loopback-test");
    }

    let a = scope(&response, ALPHA);
    assert_eq!(
        names(a),
        [
            (CDS, "cluster-a"),
            (LDS, "listener-a"),
            (LDS, "listener-missing")
        ]
    );
    let g = resource(a, CDS, "cluster-a");
    assert_eq!(status(g), ClientResourceStatus::Acked);
    assert_eq!(g.version_info, "c-1");
    assert!(g.last_updated.is_some() && g.error_state.is_none());
    assert_raw(g, &cluster_a);
    let decoded = Cluster::decode(g.xds_config.as_ref().unwrap().value.as_slice()).unwrap();
    assert_eq!(decoded.name, "cluster-a");
    let max_requests = decoded.circuit_breakers.unwrap().thresholds[0]
        .max_requests
        .unwrap()
        .value;
    assert_eq!(max_requests, 11);
    let g = resource(a, LDS, "listener-a");
    assert_eq!(status(g), ClientResourceStatus::Acked);
    assert_eq!(g.version_info, "l-1");
    assert_raw(g, &listener_a);
    let decoded = Listener::decode(g.xds_config.as_ref().unwrap().value.as_slice()).unwrap();
    assert_eq!(decoded.name, "listener-a");
    assert!(decoded.api_listener.is_some());
    let g = resource(a, LDS, "listener-missing");
    assert_eq!(status(g), ClientResourceStatus::DoesNotExist);
    assert!(g.xds_config.is_none());
    assert_eq!(g.version_info, "");

    let b = scope(&response, BETA);
    assert_eq!(names(b), [(CDS, "cluster-bad"), (CDS, "cluster-denied")]);
    let g = resource(b, CDS, "cluster-bad");
    assert_eq!(status(g), ClientResourceStatus::Nacked);
    assert!(g.xds_config.is_none(), "never accepted: no raw resource");
    let failure = g.error_state.as_ref().expect("the NACK's error state");
    assert_eq!(failure.version_info, "c-1", "the rejected version");
    assert!(
        failure
            .details
            .contains("unsupported discovery type STATIC"),
        "the validation error: {}",
        failure.details
    );
    assert!(failure.last_update_attempt.is_some());
    let g = resource(b, CDS, "cluster-denied");
    assert_eq!(status(g), ClientResourceStatus::ReceivedError);
    let failure = g.error_state.as_ref().expect("the server's error");
    assert!(
        failure.details.contains("backend down"),
        "{}",
        failure.details
    );

    // Each target has its own ADS stream.
    assert_eq!(server.stats().streams, 2);

    // Filtering by node is refused, as in gRPC's CSDS.
    let refused = grpc
        .fetch_client_status(ClientStatusRequest {
            node_matchers: vec![NodeMatcher::default()],
            ..Default::default()
        })
        .await
        .expect_err("node_matchers are refused");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);

    // A method the service does not have is UNIMPLEMENTED, not a hang.
    let mut raw = tonic::client::Grpc::new(
        tonic::transport::Channel::from_shared(format!("http://{}", csds.local_addr()))
            .unwrap()
            .connect()
            .await
            .unwrap(),
    );
    raw.ready().await.unwrap();
    let unknown = raw
        .unary::<_, ClientStatusResponse, _>(
            tonic::Request::new(ClientStatusRequest::default()),
            http::uri::PathAndQuery::from_static(
                "/envoy.service.status.v3.ClientStatusDiscoveryService/Nope",
            ),
            tonic_prost::ProstCodec::default(),
        )
        .await
        .expect_err("no such method");
    assert_eq!(unknown.code(), tonic::Code::Unimplemented);

    // When alpha's last handle and watch go away, the pool forgets it (and its stream
    // closes); CSDS then reports beta alone.
    drop((a_cluster, a_listener, a_missing, alpha));
    let response = grpc
        .fetch_client_status(ClientStatusRequest::default())
        .await
        .unwrap()
        .into_inner();
    let scopes: Vec<&str> = response
        .config
        .iter()
        .map(|c| c.client_scope.as_str())
        .collect();
    assert_eq!(scopes, [BETA]);
    tokio::time::timeout(
        PROMPT,
        server.wait_for(|_, stats| (stats.open_streams == 1).then_some(())),
    )
    .await
    .expect("alpha's ADS stream closes");

    let addr = csds.local_addr();
    csds.shutdown().await;
    assert!(
        connect_to(addr).await.is_err(),
        "the CSDS port is closed after shutdown"
    );
    drop((b_bad, b_denied, beta));
    pool.shutdown().await;
    server.stop().await;
}

async fn connect_to(addr: std::net::SocketAddr) -> Result<CsdsClient, tonic::transport::Error> {
    ClientStatusDiscoveryServiceClient::connect(format!("http://{addr}")).await
}

/// `StreamClientStatus` answers each request on the open call with the state at that
/// moment: a new target and a resource update show in the second response; the call
/// ends OK when the caller half-closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_client_status_answers_every_request_with_the_current_state() {
    let server = LoopbackServer::start();
    server.set_resources(CDS, "v1", vec![cluster_with("cluster-a", 1)]);
    let bootstrap = Bootstrap::from_json_str(&server.bootstrap_json("stream-node", None)).unwrap();
    let pool = ClientPool::builder(bootstrap).build_pool().unwrap();
    let alpha = pool.get_or_create(ALPHA);
    let mut watch = alpha.watch::<Cds>("cluster-a").await.unwrap();
    assert_eq!(next(&mut watch).await.value().unwrap().max_requests, 1);

    let csds = CsdsServer::serve(pool.clone(), "127.0.0.1:0")
        .await
        .unwrap();
    let mut grpc = connect(&csds).await;
    let (requests, outbound) = futures::channel::mpsc::unbounded::<ClientStatusRequest>();
    requests
        .unbounded_send(ClientStatusRequest::default())
        .unwrap();
    let mut responses = grpc
        .stream_client_status(outbound)
        .await
        .expect("StreamClientStatus")
        .into_inner();
    let first = tokio::time::timeout(PROMPT, responses.message())
        .await
        .unwrap()
        .unwrap()
        .expect("a first response");
    assert_eq!(first.config.len(), 1);
    let g = resource(scope(&first, ALPHA), CDS, "cluster-a");
    assert_eq!(
        (g.version_info.as_str(), status(g)),
        ("v1", ClientResourceStatus::Acked)
    );

    // A second target, and a new version for the first.
    let server_side = pool.server_client();
    let mut server_watch = server_side.watch::<Cds>("cluster-a").await.unwrap();
    assert_eq!(
        next(&mut server_watch).await.value().unwrap().max_requests,
        1
    );
    server.set_resources(CDS, "v2", vec![cluster_with("cluster-a", 2)]);
    assert_eq!(next(&mut watch).await.value().unwrap().max_requests, 2);
    assert_eq!(
        next(&mut server_watch).await.value().unwrap().max_requests,
        2
    );

    requests
        .unbounded_send(ClientStatusRequest::default())
        .unwrap();
    let second = tokio::time::timeout(PROMPT, responses.message())
        .await
        .unwrap()
        .unwrap()
        .expect("a second response on the same call");
    let scopes: Vec<&str> = second
        .config
        .iter()
        .map(|c| c.client_scope.as_str())
        .collect();
    assert_eq!(scopes, ["#server", ALPHA]);
    for config in &second.config {
        let g = resource(config, CDS, "cluster-a");
        assert_eq!(g.version_info, "v2");
        let c = Cluster::decode(g.xds_config.as_ref().unwrap().value.as_slice()).unwrap();
        assert_eq!(
            c.circuit_breakers.unwrap().thresholds[0]
                .max_requests
                .unwrap()
                .value,
            2
        );
    }

    // The caller half-closes: the call ends OK, with no further response.
    drop(requests);
    let end = tokio::time::timeout(PROMPT, responses.message())
        .await
        .unwrap();
    assert!(matches!(end, Ok(None)), "{end:?}");
    assert_eq!(
        STREAM_CLIENT_STATUS_METHOD,
        "/envoy.service.status.v3.ClientStatusDiscoveryService/StreamClientStatus"
    );

    let addr = csds.local_addr();
    csds.shutdown().await;
    assert!(
        connect_to(addr).await.is_err(),
        "the CSDS port is closed after shutdown"
    );
    drop((watch, server_watch));
    pool.shutdown().await;
    server.stop().await;
}

/// How far `timestamp` is from the wall clock now, in seconds either way.
fn seconds_from_now(timestamp: &envoy_types::pb::google::protobuf::Timestamp) -> f64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let at = timestamp.seconds as f64 + f64::from(timestamp.nanos) * 1e-9;
    (now - at).abs()
}

/// CSDS times are wall-clock times (the core's instants are virtual, counted from the
/// client's start): an ACKed resource's `last_updated` and a NACKed one's
/// `last_update_attempt` are within seconds of `SystemTime::now()`, not near 1970.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csds_timestamps_are_wall_clock_times() {
    let server = LoopbackServer::start();
    server.set_resources(
        CDS,
        "c-1",
        vec![cluster_with("cluster-a", 1), invalid_cluster("cluster-bad")],
    );
    let bootstrap = Bootstrap::from_json_str(&server.bootstrap_json("clock-node", None)).unwrap();
    let pool = ClientPool::builder(bootstrap).build_pool().unwrap();
    let alpha = pool.get_or_create(ALPHA);
    let mut good = alpha.watch::<Cds>("cluster-a").await.unwrap();
    let mut bad = alpha.watch::<Cds>("cluster-bad").await.unwrap();
    assert_eq!(next(&mut good).await.value().unwrap().max_requests, 1);
    assert_eq!(error_kind(&next(&mut bad).await), Some(ErrorKind::Invalid));

    let csds = CsdsServer::serve(pool.clone(), "127.0.0.1:0")
        .await
        .unwrap();
    let response = connect(&csds)
        .await
        .fetch_client_status(ClientStatusRequest::default())
        .await
        .unwrap()
        .into_inner();
    let a = scope(&response, ALPHA);
    let updated = resource(a, CDS, "cluster-a")
        .last_updated
        .as_ref()
        .expect("last_updated");
    assert!(seconds_from_now(updated) < 10.0, "last_updated {updated:?}");
    let attempt = resource(a, CDS, "cluster-bad")
        .error_state
        .as_ref()
        .and_then(|e| e.last_update_attempt.as_ref())
        .expect("last_update_attempt");
    assert!(
        seconds_from_now(attempt) < 10.0,
        "last_update_attempt {attempt:?}"
    );

    csds.shutdown().await;
    drop((good, bad, alpha));
    pool.shutdown().await;
    server.stop().await;
}
