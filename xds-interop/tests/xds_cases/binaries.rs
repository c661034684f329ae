//! The binaries themselves: bad flags end them with a message naming the flag, the
//! server plays `rpc-behavior` and its health follows XdsUpdateHealthService, and the
//! client sends `--qps` per channel and serves CSDS on its stats port; in secure mode
//! the server serves TestService once its Listener arrives, and its maintenance
//! services with CSDS in plaintext meanwhile.

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;
use xds_adapter_tokio::xds_proto_core::pb::envoy::admin::v3::ClientResourceStatus;
use xds_adapter_tokio::xds_proto_core::pb::envoy::service::status::v3::client_config::GenericXdsConfig;
use xds_adapter_tokio::xds_proto_core::pb::envoy::service::status::v3::{
    ClientStatusRequest, ClientStatusResponse,
};
use xds_adapter_tokio::xds_proto_core::resource::type_url;
use xds_interop::pb::health::HealthCheckRequest;
use xds_interop::pb::health::health_check_response::ServingStatus;
use xds_interop::pb::health::health_client::HealthClient;
use xds_interop::pb::testing::test_service_client::TestServiceClient;
use xds_interop::pb::testing::xds_update_health_service_client::XdsUpdateHealthServiceClient;
use xds_interop::pb::testing::{Empty, SimpleRequest, SimpleResponse};
use xds_test_server::resources::{
    SERVER_LISTENER_TEMPLATE, cluster, prefix, server_listener_name, serving_listener, to_cluster,
};

use crate::support::*;

/// Runs a binary with `args` to its end: exit code and stderr.
fn run(binary: &str, args: &[&str]) -> (Option<i32>, String) {
    let output = Command::new(binary)
        .args(args)
        .env_remove("GRPC_XDS_BOOTSTRAP")
        .env_remove("GRPC_XDS_BOOTSTRAP_CONFIG")
        .output()
        .expect("the binary runs");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn bad_flags_end_the_binaries_naming_the_flag() {
    let server = env!("CARGO_BIN_EXE_xds-interop-server");
    let client = env!("CARGO_BIN_EXE_xds-interop-client");
    let cases: [(&str, &[&str], &str); 7] = [
        (
            server,
            &["--secure_mode=true", "--port=8081"],
            "--maintenance_port: must differ from --port",
        ),
        (
            server,
            &["--secure_mode=true", "--port=1", "--maintenance_port=2"],
            "bootstrap:",
        ),
        (server, &["--port=0"], "--port: a port from 1 to 65535"),
        (server, &["--colour=blue"], "--colour: unknown flag"),
        (
            client,
            &["--server=xds:///a", "--qps=0"],
            "--qps: from 1 to 100000",
        ),
        (
            client,
            &["--server=xds:///a", "--metadata=UnaryCall"],
            "--metadata: \"UnaryCall\": not Method:key:value",
        ),
        (
            client,
            &["--server=xds:///a", "--stats_port=1"],
            "bootstrap:",
        ),
    ];
    for (binary, args, message) in cases {
        let (code, stderr) = run(binary, args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(message),
            "{args:?}: {stderr:?} does not say {message:?}"
        );
    }
}

/// A UnaryCall to `channel` with `rpc-behavior: behavior` and a deadline of `timeout`.
async fn unary(
    channel: &Channel,
    behavior: &str,
    timeout: Duration,
) -> Result<tonic::Response<SimpleResponse>, tonic::Status> {
    let mut request = tonic::Request::new(SimpleRequest::default());
    request
        .metadata_mut()
        .insert("rpc-behavior", behavior.parse().expect("ASCII"));
    request.set_timeout(timeout);
    TestServiceClient::new(channel.clone())
        .unary_call(request)
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_plays_rpc_behavior() {
    let backend = Backend::start("behaving-0").await;
    let channel = Channel::from_shared(format!("http://127.0.0.1:{}", backend.port()))
        .expect("an endpoint")
        .connect()
        .await
        .expect("the backend");
    let second = Duration::from_secs(5);
    let ok = unary(&channel, "", second).await.expect("no behavior");
    assert_eq!(
        ok.metadata().get("hostname").map(|v| v.to_str().ok()),
        Some(Some("behaving-0"))
    );
    let reply = ok.into_inner();
    assert_eq!(
        (reply.hostname.as_str(), reply.server_id.as_str()),
        ("behaving-0", "behaving-0")
    );
    let failed = unary(&channel, "error-code-5", second)
        .await
        .expect_err("error-code");
    assert_eq!(failed.code(), tonic::Code::NotFound);
    assert!(failed.metadata().get("hostname").is_some(), "{failed:?}");
    unary(&channel, "hostname=other error-code-5", second)
        .await
        .expect("another host's behavior");
    let start = std::time::Instant::now();
    unary(&channel, "sleep-0.3", second).await.expect("sleep");
    assert!(
        start.elapsed() >= Duration::from_millis(300),
        "{:?}",
        start.elapsed()
    );
    // Never answered: tonic's own channel ends it at the deadline (as CANCELLED
    // "Timeout expired", where the server would have said DEADLINE_EXCEEDED).
    let start = std::time::Instant::now();
    let open = unary(&channel, "keep-open", Duration::from_millis(300))
        .await
        .expect_err("open");
    assert!(
        start.elapsed() >= Duration::from_millis(300),
        "{:?}",
        start.elapsed()
    );
    assert!(
        matches!(
            open.code(),
            tonic::Code::Cancelled | tonic::Code::DeadlineExceeded
        ),
        "{open:?}"
    );
    let bad = unary(&channel, "jump", second).await.expect_err("unknown");
    assert_eq!(bad.code(), tonic::Code::InvalidArgument, "{bad:?}");
    let mut unknown = tonic::client::Grpc::new(channel.clone());
    unknown.ready().await.expect("ready");
    let codec = tonic_prost::ProstCodec::<Empty, Empty>::default();
    let path = PathAndQuery::from_static("/grpc.testing.UnimplementedService/UnimplementedCall");
    let status = unknown
        .unary(tonic::Request::new(Empty {}), path, codec)
        .await
        .expect_err("unknown");
    assert_eq!(status.code(), tonic::Code::Unimplemented);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_health_follows_xds_update_health_service() {
    let backend = Backend::start("health-0").await;
    let channel = Channel::from_shared(format!("http://127.0.0.1:{}", backend.port()))
        .expect("an endpoint")
        .connect()
        .await
        .expect("the backend");
    let mut health = HealthClient::new(channel.clone());
    let mut update = XdsUpdateHealthServiceClient::new(channel);
    let mut status = async || {
        let response = health
            .check(HealthCheckRequest::default())
            .await
            .expect("Check");
        response.into_inner().status()
    };
    assert_eq!(status().await, ServingStatus::Serving);
    update
        .set_not_serving(Empty {})
        .await
        .expect("SetNotServing");
    assert_eq!(status().await, ServingStatus::NotServing);
    update.set_serving(Empty {}).await.expect("SetServing");
    assert_eq!(status().await, ServingStatus::Serving);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_sends_qps_per_channel_and_serves_csds_on_its_stats_port() {
    let plane = ControlPlane::start();
    let backend = Backend::start("csds-0").await;
    plane.set(
        vec![cluster("c")],
        vec![assignment("c", &[&backend])],
        vec![to_cluster(prefix(""), "c")],
    );
    let target = format!("--server={TARGET}");
    let args = [target.as_str(), "--qps=20", "--num_channels=2"];
    let mut client = InteropClient::start(&ClientBinary::Ours, &plane.bootstrap(), &args).await;
    wait_for_peers(&mut client, &names([&backend]), Duration::from_secs(30)).await;
    // 20 a second on each of the two channels.
    let (ok, all) = count(
        &window(&mut client, Duration::from_secs(2)).await,
        "UNARY_CALL",
        tonic::Code::Ok,
    );
    assert!(
        ok == all && (60..=100).contains(&all),
        "{ok} of {all} RPCs OK in 2 s, expected about 80"
    );
    let configs = fetch_client_status(client.stats_channel()).await;
    let acked = |type_url: &str, name: &str| acked(&configs, type_url, name);
    assert!(acked(type_url::LISTENER, LISTENER), "{configs:#?}");
    assert!(acked(type_url::CLUSTER, "c"), "{configs:#?}");
}

/// The xDS configs of a CSDS FetchClientStatus on `channel`, of every client.
async fn fetch_client_status(channel: Channel) -> Vec<GenericXdsConfig> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.expect("the CSDS port");
    let path = PathAndQuery::from_static(
        "/envoy.service.status.v3.ClientStatusDiscoveryService/FetchClientStatus",
    );
    let codec = tonic_prost::ProstCodec::<ClientStatusRequest, ClientStatusResponse>::default();
    let response = grpc
        .unary(
            tonic::Request::new(ClientStatusRequest::default()),
            path,
            codec,
        )
        .await
        .expect("FetchClientStatus")
        .into_inner();
    response
        .config
        .into_iter()
        .flat_map(|c| c.generic_xds_configs)
        .collect()
}

/// Whether `configs` has `name` of `type_url`, ACKed.
fn acked(configs: &[GenericXdsConfig], type_url: &str, name: &str) -> bool {
    configs.iter().any(|c| {
        c.type_url == type_url
            && c.name == name
            && c.client_status == ClientResourceStatus::Acked as i32
    })
}

/// A plaintext channel to 127.0.0.1:`port`.
async fn connect(port: u16) -> Channel {
    Channel::from_shared(format!("http://127.0.0.1:{port}"))
        .expect("an endpoint")
        .connect()
        .await
        .expect("the port")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_secure_server_serves_once_its_listener_arrives_and_maintenance_in_plaintext() {
    let plane = ControlPlane::start();
    let bootstrap = plane.server_bootstrap(SERVER_LISTENER_TEMPLATE);
    let backend = Backend::start_binary("secure-0", ServerBinary::OursXds { bootstrap }).await;
    let maintenance = connect(backend.maintenance_port().expect("a maintenance port")).await;
    let port = u16::try_from(backend.port()).expect("a port");
    let listening = SocketAddr::from(([127, 0, 0, 1], port));
    // NOT_SERVING without its Listener: connections are closed without a byte.
    let refused = async {
        let channel = Channel::from_shared(format!("http://{listening}")).expect("an endpoint");
        match channel.connect().await {
            Err(_) => true,
            Ok(channel) => unary(&channel, "", Duration::from_secs(2)).await.is_err(),
        }
    };
    assert!(refused.await, "TestService answers without its Listener");
    // Health, XdsUpdateHealthService and CSDS of the server's xDS client on the
    // plaintext maintenance port, meanwhile.
    let mut health = HealthClient::new(maintenance.clone());
    let check = health.check(HealthCheckRequest::default()).await;
    assert_eq!(
        check.expect("Check").into_inner().status(),
        ServingStatus::Serving
    );
    plane.set_listeners(vec![serving_listener(SERVER_LISTENER_TEMPLATE, listening)]);
    let name = server_listener_name(SERVER_LISTENER_TEMPLATE, listening);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let reply = loop {
        if let Ok(channel) = Channel::from_shared(format!("http://{listening}"))
            .expect("an endpoint")
            .connect()
            .await
            && let Ok(reply) = unary(&channel, "", Duration::from_secs(2)).await
        {
            break reply.into_inner();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never served on {listening}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(reply.hostname, "secure-0");
    let configs = fetch_client_status(maintenance.clone()).await;
    assert!(acked(&configs, type_url::LISTENER, &name), "{configs:#?}");
    XdsUpdateHealthServiceClient::new(maintenance)
        .set_not_serving(Empty {})
        .await
        .expect("SetNotServing");
    let check = health.check(HealthCheckRequest::default()).await;
    assert_eq!(
        check.expect("Check").into_inner().status(),
        ServingStatus::NotServing
    );
}
