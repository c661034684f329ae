//! Weighted round robin (gRFC A58) beside gRPC-Go's: the same three gRPC-Go xDS servers
//! (the interop peer, `interop/grpc-go/peer`) attach per-call ORCA reports with fixed
//! metrics (cpu utilization 0.2, 0.4 and 0.8, 100 qps: weights 500, 250 and 125); the
//! loopback control plane serves one cluster balanced by `wrr_locality` over
//! client-side weighted round robin; gRPC-Go's own client (`weighted_round_robin`) and
//! the tokio `XdsChannel` each send the same RPCs at the same pace, and the shares of
//! the three backends must agree within 5 % of each share.
//!
//! Out-of-band reports are left out: gRPC-Go's ORCA service reports at most every 30 s.
//!
//! gRPC-Go 1.79's xDS converter takes `weight_expiration_period` from
//! `blackout_period` (its `convertWeightedRoundRobinProtoToServiceConfig` reads
//! `GetBlackoutPeriod()` for both), so the blackout here is one that also works as an
//! expiration: 200 ms, while every backend is called many times per 200 ms. (A
//! blackout of 0 would expire every weight at once in gRPC-Go, which would then be
//! round robin.)
//!
//! The peer binary comes as in `interop_grpc_go.rs` (skipped when it cannot be had,
//! unless `XDS_INTEROP_REQUIRED` is set).

#[path = "interop_grpc_go/peer.rs"]
mod peer;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use futures::StreamExt;
use xds_adapter_tokio::{ClientPool, XdsChannel};
use xds_proto_core::pb::envoy::extensions::load_balancing_policies::client_side_weighted_round_robin::v3::ClientSideWeightedRoundRobin;
use xds_proto_core::resource::type_url;
use xds_test_server::LoopbackServer;
use xds_test_server::echo::{call_echo, echo_request};
use xds_test_server::resources::{
    SERVER_LISTENER_TEMPLATE, endpoints, listener, pb_duration, route_config, serving_listener,
    wrr_cluster,
};

use peer::{BootstrapFile, GoServer, binary_or_skip, run_client};

const TARGET: &str = "xds:///wrr.example.com";
const LISTENER: &str = "wrr.example.com";
const ROUTES: &str = "wrr-routes";
const CLUSTER: &str = "go-wrr";
const BACKENDS: [(&str, &str); 3] = [("go-u20", "0.2"), ("go-u40", "0.4"), ("go-u80", "0.8")];
/// Both clients send this many RPCs at this rate, 8 in flight at most.
const RPCS: u64 = 3_000;
const RATE: u64 = 1_000;
const IN_FLIGHT: usize = 8;

/// The control plane and the three gRPC-Go servers, serving.
struct GoWrrMesh {
    backends: Vec<GoServer>,
    bootstrap: BootstrapFile,
    _control_plane: LoopbackServer,
}

impl GoWrrMesh {
    async fn start(binary: &Path) -> GoWrrMesh {
        let control_plane = LoopbackServer::start();
        let bootstrap = BootstrapFile::new(&control_plane, "grpc-go-wrr", None);
        let mut backends = Vec::new();
        for (name, utilization) in BACKENDS {
            let flags = ["-orca", "-cpu-utilization", utilization, "-qps", "100"];
            backends.push(GoServer::start(binary, &bootstrap, name, &flags).await);
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
        let config = ClientSideWeightedRoundRobin {
            blackout_period: Some(pb_duration(Duration::from_millis(200))),
            weight_update_period: Some(pb_duration(Duration::from_millis(100))),
            ..Default::default()
        };
        control_plane.set_resources(type_url::LISTENER, "1", listeners);
        control_plane.set_resources(
            type_url::ROUTE_CONFIGURATION,
            "1",
            vec![route_config(ROUTES, CLUSTER)],
        );
        control_plane.set_resources(type_url::CLUSTER, "1", vec![wrr_cluster(CLUSTER, config)]);
        control_plane.set_resources(
            type_url::CLUSTER_LOAD_ASSIGNMENT,
            "1",
            vec![endpoints(CLUSTER, &ports)],
        );
        for backend in &mut backends {
            backend.wait_serving().await;
        }
        GoWrrMesh {
            backends,
            bootstrap,
            _control_plane: control_plane,
        }
    }
}

/// Each backend's share of the RPCs.
fn shares(counts: &BTreeMap<String, u64>) -> BTreeMap<String, f64> {
    let total: u64 = counts.values().sum();
    counts
        .iter()
        .map(|(name, n)| (name.clone(), *n as f64 / total as f64))
        .collect()
}

/// The tokio `XdsChannel` sending [`RPCS`] at [`RATE`]: replies by backend.
async fn xds_channel_run(mesh: &GoWrrMesh) -> BTreeMap<String, u64> {
    let pool = ClientPool::from_bootstrap_json(mesh.bootstrap.json()).expect("a pool");
    let channel = XdsChannel::builder(TARGET)
        .pool(&pool)
        .seed(5)
        .build()
        .expect("a channel");
    let start = Instant::now();
    let replies = futures::stream::iter(0..RPCS)
        .map(|i| {
            let channel = channel.clone();
            async move {
                let at = start + Duration::from_secs(i) / RATE as u32;
                tokio::time::sleep_until(at.into()).await;
                let call = call_echo(channel, echo_request(&format!("rust {i}")));
                tokio::time::timeout(Duration::from_secs(30), call)
                    .await
                    .expect("an RPC in time")
                    .expect("an RPC to a gRPC-Go server")
                    .backend
            }
        })
        .buffer_unordered(IN_FLIGHT);
    let mut counts = BTreeMap::new();
    let mut replies = std::pin::pin!(replies);
    while let Some(backend) = replies.next().await {
        *counts.entry(backend).or_insert(0) += 1;
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weighted_round_robin_shares_agree_with_grpc_go() {
    let Some(binary) = binary_or_skip() else {
        return;
    };
    let mesh = GoWrrMesh::start(&binary).await;
    let (rpcs, rate, in_flight) = (RPCS.to_string(), RATE.to_string(), IN_FLIGHT.to_string());
    let args = [
        "-target",
        TARGET,
        "-rpcs",
        &rpcs,
        "-rate",
        &rate,
        "-concurrency",
        &in_flight,
    ];
    let go = run_client(&binary, &mesh.bootstrap, &args).await;
    assert_eq!(go.rpcs, RPCS);
    assert_eq!(
        go.statuses.keys().collect::<Vec<_>>(),
        [&0],
        "all OK: {go:?}"
    );
    assert_eq!(go.backends.values().sum::<u64>(), RPCS, "{go:?}");
    assert!(go.first_success.is_some_and(|t| t <= go.elapsed));
    // The reports gRPC-Go's client saw are the ones its weights came from.
    for (name, utilization) in BACKENDS {
        let cpu = go
            .orca
            .get(name)
            .and_then(|r| r["cpu_utilization"].as_f64());
        assert_eq!(cpu, utilization.parse().ok(), "{name}: {:?}", go.orca);
    }
    let rust = xds_channel_run(&mesh).await;
    let (go_shares, rust_shares) = (shares(&go.backends), shares(&rust));
    println!(
        "gRPC-Go weighted_round_robin: {:?} {go_shares:.3?}",
        go.backends
    );
    println!("XdsChannel weighted round robin: {rust:?} {rust_shares:.3?}");
    for (name, _) in BACKENDS {
        let (g, r) = (go_shares[name], rust_shares[name]);
        assert!(
            (g - r).abs() <= 0.05 * g,
            "{name}: gRPC-Go {g:.3}, XdsChannel {r:.3} (beyond 5 %)"
        );
    }
    // Both are weighted, not round robin: the least utilized backend gets the most.
    assert!(rust_shares["go-u20"] > 0.45, "{rust_shares:?}");
    assert_eq!(mesh.backends.len(), 3);
}
