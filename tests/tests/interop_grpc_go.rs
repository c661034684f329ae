//! Interop with gRPC-Go's xDS data plane: the project's loopback control plane serves
//! one configuration, and gRPC-Go (the peer in `interop/grpc-go/peer`, built from
//! Debian's `golang-google-grpc-dev` by `interop/grpc-go/build.sh`) runs on it beside
//! xds-proto.
//!
//! The mesh: two gRPC-Go xDS servers (`xds.NewGRPCServer` with xDS server credentials,
//! plaintext fallback) serving the echo service as `go-0` and `go-1`, each serving once
//! the control plane sends the server Listener named after its address (gRFC A36, the
//! bootstrap's `server_listener_resource_name_template`); and the client side
//! `xds:///echo.example.com` → route configuration `echo-routes` → EDS cluster
//! `go-echo` (round robin) → both servers' addresses. Both servers attach ORCA
//! per-call load reports with metrics of their own (A51), which the gRPC-Go client
//! reports back.
//!
//! What it checks: gRPC-Go's own xDS client sends 100 RPCs through it and both backends
//! answer them all, each reply carrying its backend's ORCA report; the tokio
//! `XdsChannel` does the same against the same servers.
//! Those two are plaintext; the mTLS cases (A29, both directions, and a SAN mismatch
//! both ways) are in `interop_grpc_go/mtls.rs`.
//!
//! The binary comes from the build script, which this test runs (a no-op when it is up
//! to date; `XDS_GRPC_GO_PEER=<path>` uses a prebuilt one). When it cannot be had the
//! tests are skipped with a message, unless `XDS_INTEROP_REQUIRED` is set (CI sets
//! it), in which case they fail.

#[path = "interop_grpc_go/mtls.rs"]
mod mtls;
#[path = "interop_grpc_go/peer.rs"]
mod peer;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::json;
use xds_adapter_tokio::{ClientPool, XdsChannel};
use xds_proto_core::resource::type_url;
use xds_test_server::LoopbackServer;
use xds_test_server::echo::{call_echo, echo_request};
use xds_test_server::resources::{
    SERVER_LISTENER_TEMPLATE, cluster, endpoints, listener, route_config, serving_listener,
};

use peer::{BootstrapFile, GoServer, binary_or_skip, run_client};

const TARGET: &str = "xds:///echo.example.com";
const LISTENER: &str = "echo.example.com";
const ROUTES: &str = "echo-routes";
const CLUSTER: &str = "go-echo";
const BACKENDS: [&str; 2] = ["go-0", "go-1"];
const RPCS: u64 = 100;
/// Each backend's flags: the metrics its ORCA per-call reports carry, and for `go-0` a
/// maintenance server (CSDS, channelz, health) beside it.
const FLAGS: [&[&str]; 2] = [
    &[
        "-orca",
        "-cpu-utilization",
        "0.25",
        "-qps",
        "40",
        "-maintenance-port",
        "0",
    ],
    &["-orca", "-application-utilization", "0.5", "-eps", "2"],
];

/// The control plane and the two gRPC-Go servers, serving.
struct GoMesh {
    // Dropped in this order: the servers stop before the control plane.
    backends: Vec<GoServer>,
    bootstrap: BootstrapFile,
    _control_plane: LoopbackServer,
}

impl GoMesh {
    async fn start(binary: &Path) -> GoMesh {
        let control_plane = LoopbackServer::start();
        let bootstrap = BootstrapFile::new(&control_plane, "grpc-go-interop", None);
        let mut backends = Vec::new();
        for (name, flags) in BACKENDS.into_iter().zip(FLAGS) {
            backends.push(GoServer::start(binary, &bootstrap, name, flags).await);
        }
        let mut listeners = vec![listener(LISTENER, ROUTES)];
        listeners.extend(
            backends
                .iter()
                .map(|b| serving_listener(SERVER_LISTENER_TEMPLATE, b.addr())),
        );
        let ports: Vec<u32> = backends
            .iter()
            .map(|b| u32::from(b.addr().port()))
            .collect();
        control_plane.set_resources(type_url::LISTENER, "1", listeners);
        control_plane.set_resources(
            type_url::ROUTE_CONFIGURATION,
            "1",
            vec![route_config(ROUTES, CLUSTER)],
        );
        control_plane.set_resources(type_url::CLUSTER, "1", vec![cluster(CLUSTER)]);
        control_plane.set_resources(
            type_url::CLUSTER_LOAD_ASSIGNMENT,
            "1",
            vec![endpoints(CLUSTER, &ports)],
        );
        for backend in &mut backends {
            backend.wait_serving().await;
        }
        GoMesh {
            backends,
            bootstrap,
            _control_plane: control_plane,
        }
    }
}

/// Every RPC succeeded and both backends answered some.
fn assert_both_answered(who: &str, backends: &BTreeMap<String, u64>) {
    assert_eq!(
        backends.keys().map(String::as_str).collect::<Vec<_>>(),
        BACKENDS,
        "{who}: replies by backend {backends:?}"
    );
    assert_eq!(backends.values().sum::<u64>(), RPCS, "{who}: {backends:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_go_client_reaches_both_grpc_go_servers_through_the_loopback_control_plane() {
    let Some(binary) = binary_or_skip() else {
        return;
    };
    let mesh = GoMesh::start(&binary).await;
    let rpcs = RPCS.to_string();
    let report = run_client(
        &binary,
        &mesh.bootstrap,
        // xDS credentials: the cluster has no UpstreamTlsContext, so they fall back to
        // plaintext (the mTLS cases will give it one).
        &[
            "-target",
            TARGET,
            "-rpcs",
            &rpcs,
            "-concurrency",
            "4",
            "-xds-creds",
        ],
    )
    .await;
    println!("gRPC-Go client: {report:?}");
    assert_eq!(report.rpcs, RPCS);
    assert_eq!(
        report.statuses.keys().collect::<Vec<_>>(),
        [&0],
        "every RPC OK: {:?}",
        report.statuses
    );
    assert_both_answered("gRPC-Go client", &report.backends);
    assert!(report.first_success.is_some_and(|t| t <= report.elapsed));
    // Each backend's per-call ORCA report holds exactly the metrics its flags gave.
    assert_eq!(
        report.orca.get("go-0"),
        Some(&json!({"cpu_utilization": 0.25, "rps_fractional": 40}))
    );
    assert_eq!(
        report.orca.get("go-1"),
        Some(&json!({"application_utilization": 0.5, "eps": 2}))
    );
    drop(mesh);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xds_channel_reaches_both_grpc_go_servers_through_the_loopback_control_plane() {
    let Some(binary) = binary_or_skip() else {
        return;
    };
    let mesh = GoMesh::start(&binary).await;
    let pool = ClientPool::from_bootstrap_json(mesh.bootstrap.json()).expect("a pool");
    let channel = XdsChannel::builder(TARGET)
        .pool(&pool)
        .seed(7)
        .build()
        .expect("a channel");
    let mut backends = BTreeMap::new();
    for i in 0..RPCS {
        let call = call_echo(channel.clone(), echo_request(&format!("rust {i}")));
        let reply = tokio::time::timeout(Duration::from_secs(30), call)
            .await
            .expect("an RPC in time")
            .expect("an RPC to a gRPC-Go server");
        assert_eq!(reply.message, format!("rust {i}"), "echoed");
        *backends.entry(reply.backend).or_insert(0) += 1;
    }
    println!("XdsChannel: replies by backend {backends:?}");
    assert_both_answered("XdsChannel", &backends);
    assert_eq!(mesh.backends.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_both_ways_with_grpc_go_and_the_same_failure_on_a_san_mismatch() {
    let Some(binary) = binary_or_skip() else {
        return;
    };
    mtls::both_directions(&binary).await;
}
