//! The small mesh the `xds` CLI's demo serves: one client listener, a route
//! configuration with a prefix route and a weighted split, and three EDS clusters
//! whose endpoints carry health and weights.

use xds_proto_core::pb::envoy::config::core::v3::HealthStatus;
use xds_proto_core::pb::google::protobuf::Any;

use crate::resources::{self, Host, Locality, PrefixRoute};

/// The listener the demo client follows.
pub const LISTENER: &str = "demo.example.com";
/// The route configuration the listener names.
pub const ROUTE_CONFIG: &str = "demo-routes";
/// The clusters of the mesh.
pub const CLUSTERS: [&str; 3] = ["web", "api-v1", "api-v2"];

fn host(address: &str, port: u32, health: HealthStatus, weight: u32) -> Host {
    Host {
        address: address.to_string(),
        port,
        health,
        weight: Some(weight),
    }
}

/// The demo's listener.
pub fn listener() -> Any {
    resources::listener(LISTENER, ROUTE_CONFIG)
}

/// The demo's routes: `/api` split between api-v1 and api-v2 by `api_v2_weight`
/// (out of 100), and everything else to web.
pub fn routes(api_v2_weight: u32) -> Vec<PrefixRoute> {
    vec![
        PrefixRoute::weighted(
            "/api",
            &[("api-v1", 100 - api_v2_weight), ("api-v2", api_v2_weight)],
        ),
        PrefixRoute::cluster("/", "web"),
    ]
}

/// The demo's route configuration: [`routes`] for the listener's domain and its
/// subdomains.
pub fn route_config(api_v2_weight: u32) -> Any {
    resources::route_config_with(
        ROUTE_CONFIG,
        &[LISTENER, "*.demo.example.com"],
        &routes(api_v2_weight),
    )
}

/// The demo's three clusters.
pub fn clusters() -> Vec<Any> {
    CLUSTERS.iter().map(|c| resources::cluster(c)).collect()
}

/// The endpoints of one cluster; `generation` 2 scales web up and marks one of its
/// endpoints unhealthy.
pub fn endpoints(cluster: &str, generation: u32) -> Any {
    let web_1b = || {
        Locality::new(
            "eu-west",
            "eu-west-1b",
            vec![host("10.0.2.10", 8080, HealthStatus::Healthy, 10)],
        )
    };
    let web_1a = |second: HealthStatus, scaled: bool| {
        let mut hosts = vec![
            host("10.0.1.10", 8080, HealthStatus::Healthy, 10),
            host("10.0.1.11", 8080, second, 10),
        ];
        if scaled {
            hosts.push(host("10.0.1.12", 8080, HealthStatus::Healthy, 20));
        }
        Locality {
            weight: 2,
            ..Locality::new("eu-west", "eu-west-1a", hosts)
        }
    };
    let localities = match cluster {
        "web" if generation >= 2 => vec![web_1a(HealthStatus::Unhealthy, true), web_1b()],
        "web" => vec![web_1a(HealthStatus::Healthy, false), web_1b()],
        "api-v1" => vec![Locality::new(
            "eu-west",
            "eu-west-1a",
            vec![
                host("10.0.3.10", 9090, HealthStatus::Healthy, 1),
                host("10.0.3.11", 9090, HealthStatus::Draining, 1),
            ],
        )],
        _ => vec![Locality::new(
            "eu-west",
            "eu-west-1b",
            vec![host("10.0.4.10", 9090, HealthStatus::Healthy, 1)],
        )],
    };
    resources::endpoints_with(cluster, &localities)
}

/// The endpoints of every cluster at `generation`.
pub fn all_endpoints(generation: u32) -> Vec<Any> {
    CLUSTERS.iter().map(|c| endpoints(c, generation)).collect()
}

/// The data-plane part of the demo: RPCs to [`ECHO_TARGET`] go through an `xds:///`
/// channel to echo backends on loopback, split by the route between two clusters.
pub const ECHO_TARGET: &str = "xds:///echo.demo.example.com";
/// The listener [`ECHO_TARGET`] names.
pub const ECHO_LISTENER: &str = "echo.demo.example.com";
/// Its route configuration.
pub const ECHO_ROUTES: &str = "echo-routes";
/// The echo clusters and their route weights (out of 100).
pub const ECHO_SPLIT: [(&str, u32); 2] = [("echo-v1", 80), ("echo-v2", 20)];

/// The demo's echo backends: two for `echo-v1`, one for `echo-v2`.
#[derive(Debug)]
pub struct EchoFleet {
    /// `(cluster, backend)` pairs.
    pub backends: Vec<(&'static str, crate::echo::EchoBackend)>,
}

impl EchoFleet {
    /// Starts the backends on 127.0.0.1.
    pub fn start() -> EchoFleet {
        let backends = [
            ("echo-v1", "echo-v1-a"),
            ("echo-v1", "echo-v1-b"),
            ("echo-v2", "echo-v2-a"),
        ]
        .into_iter()
        .map(|(cluster, name)| (cluster, crate::echo::EchoBackend::start(name)))
        .collect();
        EchoFleet { backends }
    }

    /// The fleet's resources of one type, to serve beside the rest of the mesh.
    pub fn resources(&self, type_url: &str) -> Vec<Any> {
        use xds_proto_core::resource::type_url as t;
        match type_url {
            t::LISTENER => vec![resources::listener(ECHO_LISTENER, ECHO_ROUTES)],
            t::ROUTE_CONFIGURATION => vec![resources::route_config_with(
                ECHO_ROUTES,
                &[ECHO_LISTENER],
                &[PrefixRoute::weighted("/", &ECHO_SPLIT)],
            )],
            t::CLUSTER => ECHO_SPLIT
                .iter()
                .map(|(c, _)| resources::cluster(c))
                .collect(),
            t::CLUSTER_LOAD_ASSIGNMENT => ECHO_SPLIT
                .iter()
                .map(|(cluster, _)| {
                    let ports: Vec<u32> = (self.backends.iter())
                        .filter(|(c, _)| c == cluster)
                        .map(|(_, b)| u32::from(b.port()))
                        .collect();
                    resources::endpoints(cluster, &ports)
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The cluster of the backend named `backend`.
    pub fn cluster_of(&self, backend: &str) -> Option<&'static str> {
        (self.backends.iter())
            .find(|(_, b)| b.name() == backend)
            .map(|(c, _)| *c)
    }
}
