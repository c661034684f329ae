//! The demo: with no xDS server given, the CLI starts the loopback management server on
//! 127.0.0.1 serving `xds_test_server::demo`'s mesh plus two clusters that go wrong
//! (`beta` gets a TP3 resource error; `legacy`, routed later, is never served), then
//! plays a timeline of changes and failures against it. Beside that mesh it serves
//! `echo.demo.example.com`, split 80/20 between two clusters of echo backends on
//! loopback: at the end the CLI sends RPCs through an `xds:///` channel and prints the
//! split it saw.

use std::sync::Arc;
use std::time::Duration;

use xds_adapter_tokio::xds_proto_core::Code;
use xds_adapter_tokio::xds_proto_core::pb::envoy::config::core::v3::HealthStatus;
use xds_adapter_tokio::xds_proto_core::pb::google::protobuf::Any;
use xds_adapter_tokio::xds_proto_core::resource::type_url;
use xds_adapter_tokio::{ClientPool, XdsChannel};
use xds_test_server::demo::EchoFleet;
use xds_test_server::echo::{call_echo, echo_request};
use xds_test_server::resources::{self, PrefixRoute};
use xds_test_server::{LoopbackServer, demo};

use crate::{START, stamp};

const LDS: &str = type_url::LISTENER;
const RDS: &str = type_url::ROUTE_CONFIGURATION;
const CDS: &str = type_url::CLUSTER;
const EDS: &str = type_url::CLUSTER_LOAD_ASSIGNMENT;

/// The demo's routes: `/legacy` (when `legacy`) to a cluster that is never served,
/// `/beta` to a cluster the server reports an error for, `/api` split between api-v1
/// and api-v2, and everything else to web.
fn routes(api_v2_weight: u32, legacy: bool) -> Any {
    let mut routes = Vec::new();
    if legacy {
        routes.push(PrefixRoute::cluster("/legacy", "legacy"));
    }
    routes.push(PrefixRoute::cluster("/beta", "beta"));
    routes.extend(demo::routes(api_v2_weight));
    resources::route_config_with(demo::ROUTE_CONFIG, &[demo::LISTENER], &routes)
}

fn note(text: &str) {
    say!("{} ── demo server: {text}", stamp());
}

/// The demo's control plane and its echo backends.
pub(crate) struct Demo {
    pub(crate) server: LoopbackServer,
    fleet: EchoFleet,
}

impl Demo {
    /// Serves `resources` of a type, with the echo fleet's beside them.
    fn set(&self, type_url: &str, version: &str, mut resources: Vec<Any>) {
        resources.extend(self.fleet.resources(type_url));
        self.server.set_resources(type_url, version, resources);
    }
}

/// Starts the demo server with the mesh's first versions.
pub(crate) fn start_server() -> Arc<Demo> {
    let demo = Demo {
        server: LoopbackServer::start(),
        fleet: EchoFleet::start(),
    };
    demo.set(LDS, "1", vec![demo::listener()]);
    demo.set(RDS, "1", vec![routes(10, false)]);
    demo.set(CDS, "1", demo::clusters());
    demo.server.set_resource_errors(
        CDS,
        "1",
        vec![resources::resource_error(
            "beta",
            Code::PERMISSION_DENIED,
            "cluster beta is not visible to this node",
        )],
    );
    demo.set(EDS, "1", demo::all_endpoints(1));
    Arc::new(demo)
}

/// Sends RPCs to the echo target through an `xds:///` channel (the ten lines of the
/// README) and prints how they split over clusters and backends.
pub(crate) async fn send_rpcs(demo: &Demo, pool: &ClientPool) {
    const RPCS: u32 = 1_000;
    let channel = match XdsChannel::builder(demo::ECHO_TARGET).pool(pool).build() {
        Ok(channel) => channel,
        Err(e) => return say!("{} cannot open {}: {e}", stamp(), demo::ECHO_TARGET),
    };
    let mut seen = std::collections::BTreeMap::<String, u32>::new();
    let mut failed = 0;
    for i in 0..RPCS {
        match call_echo(channel.clone(), echo_request(&format!("hello {i}"))).await {
            Ok(reply) => *seen.entry(reply.backend).or_default() += 1,
            Err(_) => failed += 1,
        }
    }
    say!(
        "{} sent {RPCS} RPCs through {} (route: {})",
        stamp(),
        demo::ECHO_TARGET,
        (demo::ECHO_SPLIT.iter())
            .map(|(c, w)| format!("{c} {w}%"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for (cluster, _) in demo::ECHO_SPLIT {
        let backends: Vec<(&String, &u32)> = (seen.iter())
            .filter(|(b, _)| demo.fleet.cluster_of(b) == Some(cluster))
            .collect();
        let total: u32 = backends.iter().map(|(_, n)| **n).sum();
        let per_backend: Vec<String> = backends.iter().map(|(b, n)| format!("{b} {n}")).collect();
        say!(
            "    {cluster:<8} {:>5.1}%  ({total} RPCs: {})",
            f64::from(total) * 100.0 / f64::from(RPCS),
            per_backend.join(", ")
        );
    }
    if failed > 0 {
        say!("    failed   {failed}");
    }
}

/// Plays the timeline. A configuration is emitted only once every cluster it routes
/// to has arrived or failed (gRFC A74), so `legacy` holds back the routes that add it
/// until the 3 s does-not-exist timer gives up on it.
pub(crate) async fn run_script(demo: Arc<Demo>) {
    let server = &demo.server;
    let sleep_until = |secs: f64| {
        let start = *START.get_or_init(tokio::time::Instant::now);
        tokio::time::sleep_until(start + Duration::from_secs_f64(secs))
    };
    sleep_until(1.5).await;
    note("EDS v2: web scales to 4 endpoints, one UNHEALTHY");
    demo.set(EDS, "2", demo::all_endpoints(2));
    sleep_until(2.5).await;
    note("RDS v2 routes /legacy to cluster legacy, which it never serves");
    demo.set(RDS, "2", vec![routes(10, true)]);
    sleep_until(4.0).await;
    note("CDS v2: api-v2 becomes STATIC (invalid for gRPC)");
    let mut clusters = vec![
        resources::cluster("web"),
        resources::cluster("api-v1"),
        resources::invalid_cluster("api-v2"),
    ];
    demo.set(CDS, "2", clusters.clone());
    sleep_until(6.0).await;
    note("CDS v3 fixes api-v2; RDS v3 shifts /api to 50% api-v2");
    clusters[2] = resources::cluster_with("api-v2", 2048);
    demo.set(CDS, "3", clusters);
    demo.set(RDS, "3", vec![routes(50, true)]);
    sleep_until(7.0).await;
    note("crashing (down for 2 s)");
    server.stop().await;
    sleep_until(9.0).await;
    note("back on the same port");
    server.restart();
    sleep_until(10.5).await;
    note("EDS v3: api-v1 drained endpoint removed");
    let mut eds = demo::all_endpoints(2);
    eds[1] = resources::endpoints_with(
        "api-v1",
        &[resources::Locality::new(
            "eu-west",
            "eu-west-1a",
            vec![resources::Host {
                address: "10.0.3.10".into(),
                port: 9090,
                health: HealthStatus::Healthy,
                weight: Some(1),
            }],
        )],
    );
    demo.set(EDS, "3", eds);
}
