//! The driver's parts: the loopback control plane serving one target
//! ([`ControlPlane`]), the interop binaries as processes ([`processes`]), ours and
//! gRPC-Go's ([`grpc_go`]), a case run with both clients ([`both`]), and the
//! waits gRPC's driver does on the client's stats ([`wait_for_peers`] and friends),
//! polled rather than slept.

#![allow(dead_code)]

pub mod both;
pub mod grpc_go;
pub mod processes;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use xds_adapter_tokio::xds_proto_core::pb::envoy::config::route::v3 as route;
use xds_adapter_tokio::xds_proto_core::pb::google::protobuf::Any;
use xds_adapter_tokio::xds_proto_core::resource::type_url;
use xds_interop::pb::testing::LoadBalancerStatsResponse;
use xds_interop::pb::testing::load_balancer_accumulated_stats_response::MethodStats;
use xds_test_server::LoopbackServer;
use xds_test_server::resources::{endpoints, listener, rc_any, routes_config};

pub use processes::{Backend, ClientBinary, InteropClient, ServerBinary};

/// The client's target.
pub const TARGET: &str = "xds:///interop.test";
/// Its listener.
pub const LISTENER: &str = "interop.test";
/// Its route configuration.
pub const ROUTES: &str = "interop-routes";
/// The paths of the two methods.
pub const UNARY: &str = "/grpc.testing.TestService/UnaryCall";
/// See [`UNARY`].
pub const EMPTY: &str = "/grpc.testing.TestService/EmptyCall";

/// The loopback control plane, serving one listener on RDS and whatever clusters
/// and routes a case sets; every change is a new version of every type.
pub struct ControlPlane {
    pub server: LoopbackServer,
    version: AtomicU64,
}

impl ControlPlane {
    /// Starts it, serving the listener [`LISTENER`] on the routes [`ROUTES`].
    pub fn start() -> ControlPlane {
        let plane = ControlPlane {
            server: LoopbackServer::start(),
            version: AtomicU64::new(0),
        };
        plane.set_listener(listener(LISTENER, ROUTES));
        plane
    }

    /// The client's bootstrap.
    pub fn bootstrap(&self) -> String {
        self.server.bootstrap_json("xds-interop-driver", None)
    }

    /// An xDS-enabled server's bootstrap: the client's with
    /// `server_listener_resource_name_template` (gRFC A36) set to `template`.
    pub fn server_bootstrap(&self, template: &str) -> String {
        let client = self.server.bootstrap_json("xds-interop-server", None);
        let open = client.find('{').expect("a JSON object");
        format!(
            "{{\"server_listener_resource_name_template\": \"{template}\", {}",
            &client[open + 1..]
        )
    }

    fn next_version(&self) -> String {
        (self.version.fetch_add(1, Ordering::Relaxed) + 1).to_string()
    }

    /// Replaces the listener.
    pub fn set_listener(&self, listener: Any) {
        self.set_listeners(vec![listener]);
    }

    /// Replaces the listeners: the client's and xDS-enabled servers'.
    pub fn set_listeners(&self, listeners: Vec<Any>) {
        self.server
            .set_resources(type_url::LISTENER, &self.next_version(), listeners);
    }

    /// Replaces the clusters and endpoints, then the routes (so that a route never
    /// names a cluster the server does not have).
    pub fn set(&self, clusters: Vec<Any>, assignments: Vec<Any>, routes: Vec<route::Route>) {
        let version = self.next_version();
        self.server
            .set_resources(type_url::CLUSTER, &version, clusters);
        self.server
            .set_resources(type_url::CLUSTER_LOAD_ASSIGNMENT, &version, assignments);
        self.set_routes(routes);
    }

    /// Replaces the routes only.
    pub fn set_routes(&self, routes: Vec<route::Route>) {
        let rc = routes_config(ROUTES, routes);
        self.server.set_resources(
            type_url::ROUTE_CONFIGURATION,
            &self.next_version(),
            vec![rc_any(&rc)],
        );
    }
}

/// Endpoints of `cluster`: these backends, in one locality.
pub fn assignment(cluster: &str, backends: &[&Backend]) -> Any {
    let ports: Vec<u32> = backends.iter().map(|b| b.port()).collect();
    endpoints(cluster, &ports)
}

/// Starts backends named `{prefix}-0`, `{prefix}-1`, ...
pub async fn start_backends(prefix: &str, n: usize) -> Vec<Backend> {
    let mut backends = Vec::new();
    for i in 0..n {
        backends.push(Backend::start(&format!("{prefix}-{i}")).await);
    }
    backends
}

/// Their names.
pub fn names<'a>(backends: impl IntoIterator<Item = &'a Backend>) -> BTreeSet<String> {
    backends.into_iter().map(|b| b.name().to_string()).collect()
}

/// Peers with their counts, ordered.
pub fn peers(stats: &LoadBalancerStatsResponse) -> BTreeMap<String, i32> {
    stats
        .rpcs_by_peer
        .iter()
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

/// The peers of `method`'s RPCs in a stats block.
pub fn method_peers(stats: &LoadBalancerStatsResponse, method: &str) -> BTreeMap<String, i32> {
    stats
        .rpcs_by_method
        .get(method)
        .map(|m| {
            m.rpcs_by_peer
                .iter()
                .map(|(k, v)| (k.clone(), *v))
                .collect()
        })
        .unwrap_or_default()
}

/// Polls blocks of `block` RPCs until one satisfies `done`, within `limit`; returns
/// that block. Panics with `what` and the last block at the limit.
pub async fn wait_for_block(
    client: &mut InteropClient,
    block: i32,
    limit: Duration,
    what: &str,
    mut done: impl FnMut(&LoadBalancerStatsResponse) -> bool,
) -> LoadBalancerStatsResponse {
    let deadline = Instant::now() + limit;
    loop {
        let stats = client.stats(block, Duration::from_secs(5)).await;
        if done(&stats) {
            return stats;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {limit:?}; the last {block} RPCs: {:?}, {} failed",
            peers(&stats),
            stats.num_failures
        );
    }
}

/// Waits until every one of `expected` answered at least one RPC of a block.
pub async fn wait_for_peers(
    client: &mut InteropClient,
    expected: &BTreeSet<String>,
    limit: Duration,
) {
    wait_for_block(
        client,
        50,
        limit,
        &format!("all of {expected:?} get RPCs"),
        |s| {
            expected
                .iter()
                .all(|name| s.rpcs_by_peer.get(name).copied().unwrap_or(0) > 0)
        },
    )
    .await;
}

/// Waits until a whole block of `block` RPCs succeeds on `expected` only, each of
/// them answering some.
pub async fn wait_for_only(
    client: &mut InteropClient,
    expected: &BTreeSet<String>,
    block: i32,
    limit: Duration,
) -> LoadBalancerStatsResponse {
    wait_for_block(
        client,
        block,
        limit,
        &format!("only {expected:?} get RPCs"),
        |s| {
            let got: BTreeSet<String> = s.rpcs_by_peer.keys().cloned().collect();
            s.num_failures == 0 && got == *expected
        },
    )
    .await
}

/// Per method: RPCs started, and ended by status code, between two accumulated
/// snapshots.
pub fn method_delta(before: &MethodStats, after: &MethodStats) -> (i32, BTreeMap<i32, i32>) {
    let mut results = BTreeMap::new();
    for (code, n) in &after.result {
        let delta = n - before.result.get(code).copied().unwrap_or(0);
        if delta > 0 {
            results.insert(*code, delta);
        }
    }
    (after.rpcs_started - before.rpcs_started, results)
}

/// RPCs of `method` (`UNARY_CALL`) started and not yet ended.
pub fn in_flight(
    stats: &xds_interop::pb::testing::LoadBalancerAccumulatedStatsResponse,
    method: &str,
) -> i32 {
    stats
        .stats_per_method
        .get(method)
        .map(|m| m.rpcs_started - m.result.values().sum::<i32>())
        .unwrap_or(0)
}

/// Prints a case's wall time when it ends (shown with `--nocapture`).
pub struct Timer(String, Instant);

impl Timer {
    /// Starts timing `case` run by `client`.
    pub fn start(case: &str, client: &ClientBinary) -> Timer {
        Timer(format!("{case} ({})", client.label()), Instant::now())
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        let outcome = if std::thread::panicking() {
            "FAILED"
        } else {
            "ok"
        };
        eprintln!(
            "case {}: {outcome} in {:.1} s",
            self.0,
            self.1.elapsed().as_secs_f64()
        );
    }
}

/// RPCs ended in a window, by method (`UNARY_CALL`) and status code.
pub type Window = BTreeMap<String, BTreeMap<i32, i32>>;

/// What ended during the next `length`.
pub async fn window(client: &mut InteropClient, length: Duration) -> Window {
    let before = client.accumulated().await;
    tokio::time::sleep(length).await;
    let after = client.accumulated().await;
    let mut window = Window::new();
    for (method, stats) in &after.stats_per_method {
        let empty = MethodStats::default();
        let (_, results) =
            method_delta(before.stats_per_method.get(method).unwrap_or(&empty), stats);
        window.insert(method.clone(), results);
    }
    window
}

/// Of `method`'s RPCs that ended in `window`: how many with `code`, and how many in all.
pub fn count(window: &Window, method: &str, code: tonic::Code) -> (i32, i32) {
    let results = window.get(method);
    let with = results
        .and_then(|r| r.get(&(code as i32)))
        .copied()
        .unwrap_or(0);
    (with, results.map(|r| r.values().sum()).unwrap_or(0))
}

/// Whether at least `min` of `method`'s RPCs ended in `window`, all with `code`.
pub fn all_ended_with(window: &Window, method: &str, code: tonic::Code, min: i32) -> bool {
    let (with, total) = count(window, method, code);
    total >= min && with == total
}

/// Waits for two windows of a second in a row that satisfy `done` (the first window
/// after a change may still hold RPCs sent before it).
pub async fn wait_for_windows(
    client: &mut InteropClient,
    limit: Duration,
    what: &str,
    done: impl Fn(&Window) -> bool,
) {
    let deadline = Instant::now() + limit;
    let mut in_a_row = 0;
    loop {
        let w = window(client, Duration::from_secs(1)).await;
        in_a_row = if done(&w) { in_a_row + 1 } else { 0 };
        if in_a_row == 2 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {limit:?}; the last second: {w:?}"
        );
    }
}
