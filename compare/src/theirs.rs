//! The child for the `xds-client` crate (0.1.0-alpha.4).
//!
//! `xds-client` leaves resource types to its user: it ships no Listener, Cluster or
//! ClusterLoadAssignment type, only the [`Resource`] trait (decode, name, validate).
//! A gRPC-like user would decode the Envoy message (with `envoy-types`, which its
//! `codegen-prost` feature is built on) and keep the validated fields a data plane
//! needs, so that is what the types here do: each decodes the whole prost message,
//! checks what gRFC A27 requires of the fields it keeps, and stores a compact value,
//! like xds-proto's built-in types (which validate more: see the README).

// The validated values hold what a data plane would read; this benchmark only holds
// them, as it does xds-proto's values.
#![allow(dead_code)]

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use envoy_types::pb::envoy::config::cluster::v3 as cluster_pb;
use envoy_types::pb::envoy::config::core::v3 as core_pb;
use envoy_types::pb::envoy::config::endpoint::v3 as endpoint_pb;
use envoy_types::pb::envoy::config::listener::v3 as listener_pb;
use envoy_types::pb::envoy::config::route::v3 as route_pb;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3 as hcm_pb;
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3 as tls_pb;
use prost::Message;
use xds_client::resource::TypeUrl;
use xds_client::{
    ClientConfig, Node, ProstCodec, Resource, ResourceEvent, ResourceWatcher, TokioRuntime,
    TonicTransportBuilder, XdsClient,
};

use crate::child::{self, ChildArgs, Mode, Progress};
use xds_proto_testing::resources::mesh::LISTENER_NAME;

/// The largest response accepted, in bytes: xds-proto's default. (`xds-client` keeps
/// tonic's 4 MiB unless told otherwise, and this workload's CDS response is ~7 MB.)
const MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;

/// Watches the workload with one task per watcher, exactly as the xds-proto child
/// does, and reports when every watcher holds its resource.
///
/// With `wildcard` (and the full workload), it first watches every cluster and every
/// endpoint set with one wildcard watch per type (name `""`), and only then the named
/// watches: with a wildcard watcher present, a new named watch no longer changes the
/// subscription, so `xds-client` sends no request for it and answers it from its
/// cache. The wildcard watchers are drained and not counted.
pub async fn run(args: ChildArgs, wildcard: bool) -> ! {
    let node = Node::new("compare", "1.0")
        .with_id("compare-xds-client")
        .with_cluster("compare");
    let config = ClientConfig::new(node, format!("http://{}", args.addr))
        // Bigger than any run's duration: a slow run must not turn into
        // does-not-exist errors.
        .with_resource_initial_timeout(Some(args.timeout));
    let transport = TonicTransportBuilder::new().with_max_decoding_message_size(MAX_RESPONSE_BYTES);
    let client = XdsClient::builder(config, transport, ProstCodec, TokioRuntime).build();

    let (listener, clusters, endpoints) = args.names();
    let progress = Arc::new(Progress::new(args.watcher_count()));
    let start = Instant::now();
    if wildcard && args.mode == Mode::Full {
        // Registered in order: the client's command channel is FIFO.
        drain(client.watch::<ClusterValue>("").await);
        drain(client.watch::<EndpointsValue>("").await);
    }
    if listener {
        spawn_watcher::<ListenerValue>(&client, LISTENER_NAME.to_string(), &progress);
    }
    for name in clusters {
        spawn_watcher::<ClusterValue>(&client, name, &progress);
    }
    for name in endpoints {
        spawn_watcher::<EndpointsValue>(&client, name, &progress);
    }
    let name = if wildcard {
        "xds-client-wildcard"
    } else {
        "xds-client"
    };
    child::finish(name, &args, &progress, start).await
}

/// Keeps a watch and drops its events as they come.
fn drain<T: Resource>(mut watcher: ResourceWatcher<T>) {
    tokio::spawn(async move { while watcher.next().await.is_some() {} });
}

/// One watcher: watch, settle on the first update, then keep the watch and drain it
/// (each event's `ProcessingDone` drops at once, so ADS flow control never waits on
/// this watcher).
fn spawn_watcher<T: Resource>(client: &XdsClient, name: String, progress: &Arc<Progress>) {
    let client = client.clone();
    let progress = progress.clone();
    tokio::spawn(async move {
        let mut watcher = client.watch::<T>(name.clone()).await;
        let mut settled = false;
        while let Some(event) = watcher.next().await {
            if settled {
                continue;
            }
            match event {
                ResourceEvent::ResourceChanged { result: Ok(_), .. } => {
                    settled = true;
                    progress.received();
                }
                ResourceEvent::ResourceChanged { result: Err(e), .. } => {
                    settled = true;
                    progress.failed(format!("{name}: {e}"));
                }
                // The cached value (none yet) stays: keep waiting.
                ResourceEvent::AmbientError { .. } => {}
            }
        }
    });
}

fn invalid(field: &str, reason: impl std::fmt::Display) -> xds_client::Error {
    xds_client::Error::Validation(format!("{field}: {reason}"))
}

fn is_ads_or_self(source: Option<&core_pb::ConfigSource>) -> bool {
    matches!(
        source.and_then(|s| s.config_source_specifier.as_ref()),
        Some(
            core_pb::config_source::ConfigSourceSpecifier::Ads(_)
                | core_pb::config_source::ConfigSourceSpecifier::Self_(_)
        )
    )
}

// ----- Listener -----

const HCM_TYPE_URL: &str = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";
const ROUTER_TYPE_URL: &str = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router";

/// A validated client listener: where its routes come from.
#[derive(Debug)]
pub struct ListenerValue {
    /// The listener name.
    pub name: String,
    /// RDS or inline routes.
    pub routes: RouteSource,
}

/// Where a listener's routes come from.
#[derive(Debug)]
pub enum RouteSource {
    /// An RDS resource name.
    Rds(String),
    /// The inline virtual hosts.
    Inline(Vec<VirtualHost>),
}

/// A validated virtual host.
#[derive(Debug)]
pub struct VirtualHost {
    /// Its domains (never empty).
    pub domains: Vec<String>,
    /// Its routes, in order.
    pub routes: Vec<Route>,
}

/// A validated route: a path match and its clusters.
#[derive(Debug)]
pub struct Route {
    /// The prefix or exact path matched (regexes are kept as their pattern).
    pub path: String,
    /// The clusters and their weights.
    pub clusters: Vec<(String, u32)>,
    /// `timeout`, when set.
    pub timeout: Option<Duration>,
}

impl Resource for ListenerValue {
    type Message = listener_pb::Listener;

    const TYPE_URL: TypeUrl = TypeUrl::new("type.googleapis.com/envoy.config.listener.v3.Listener");

    fn deserialize(bytes: Bytes) -> xds_client::Result<Self::Message> {
        Ok(listener_pb::Listener::decode(bytes)?)
    }

    fn name(message: &Self::Message) -> &str {
        &message.name
    }

    fn validate(message: Self::Message) -> xds_client::Result<Self> {
        let any = message
            .api_listener
            .and_then(|a| a.api_listener)
            .ok_or_else(|| invalid("api_listener", "field not present"))?;
        if any.type_url != HCM_TYPE_URL {
            return Err(invalid(
                "api_listener",
                format!("unexpected type {}", any.type_url),
            ));
        }
        let hcm = hcm_pb::HttpConnectionManager::decode(Bytes::from(any.value))?;
        let last_is_router = hcm.http_filters.last().is_some_and(|f| {
            matches!(&f.config_type,
                Some(hcm_pb::http_filter::ConfigType::TypedConfig(c)) if c.type_url == ROUTER_TYPE_URL)
        });
        if !last_is_router {
            return Err(invalid("http_filters", "the last filter is not the router"));
        }
        let routes = match hcm.route_specifier {
            Some(hcm_pb::http_connection_manager::RouteSpecifier::Rds(rds)) => {
                if !is_ads_or_self(rds.config_source.as_ref()) {
                    return Err(invalid("rds.config_source", "not ads or self"));
                }
                RouteSource::Rds(rds.route_config_name)
            }
            Some(hcm_pb::http_connection_manager::RouteSpecifier::RouteConfig(rc)) => {
                RouteSource::Inline(validate_route_config(rc)?)
            }
            _ => return Err(invalid("route_specifier", "neither rds nor route_config")),
        };
        Ok(ListenerValue {
            name: message.name,
            routes,
        })
    }
}

fn validate_route_config(rc: route_pb::RouteConfiguration) -> xds_client::Result<Vec<VirtualHost>> {
    rc.virtual_hosts
        .into_iter()
        .map(|vh| {
            if vh.domains.is_empty() {
                return Err(invalid("virtual_hosts.domains", "empty"));
            }
            let routes = vh
                .routes
                .into_iter()
                .filter_map(|r| validate_route(r).transpose())
                .collect::<xds_client::Result<Vec<Route>>>()?;
            Ok(VirtualHost {
                domains: vh.domains,
                routes,
            })
        })
        .collect()
}

/// A route, or `None` for one gRPC ignores (a non-forwarding action).
fn validate_route(r: route_pb::Route) -> xds_client::Result<Option<Route>> {
    use route_pb::route_match::PathSpecifier;
    let path = match r.r#match.and_then(|m| m.path_specifier) {
        Some(PathSpecifier::Prefix(p)) | Some(PathSpecifier::Path(p)) => p,
        Some(PathSpecifier::SafeRegex(re)) => re.regex,
        _ => return Err(invalid("route.match", "no supported path specifier")),
    };
    let action = match r.action {
        Some(route_pb::route::Action::Route(action)) => action,
        _ => return Ok(None),
    };
    use route_pb::route_action::ClusterSpecifier;
    let clusters = match action.cluster_specifier {
        Some(ClusterSpecifier::Cluster(c)) if !c.is_empty() => vec![(c, 1)],
        Some(ClusterSpecifier::WeightedClusters(w)) => {
            let clusters: Vec<(String, u32)> = w
                .clusters
                .into_iter()
                .map(|c| (c.name, c.weight.map_or(0, |v| v.value)))
                .collect();
            if clusters.iter().map(|(_, w)| u64::from(*w)).sum::<u64>() == 0 {
                return Err(invalid("weighted_clusters", "total weight is zero"));
            }
            clusters
        }
        _ => return Err(invalid("route.route", "no supported cluster specifier")),
    };
    let timeout = action.timeout.map(|d| {
        Duration::new(
            u64::try_from(d.seconds).unwrap_or(0),
            u32::try_from(d.nanos).unwrap_or(0),
        )
    });
    Ok(Some(Route {
        path,
        clusters,
        timeout,
    }))
}

// ----- Cluster -----

/// A validated EDS cluster.
#[derive(Debug)]
pub struct ClusterValue {
    /// The cluster name.
    pub name: String,
    /// `eds_cluster_config.service_name`, when set.
    pub eds_service_name: Option<String>,
    /// `lb_policy` (ROUND_ROBIN, RING_HASH or LEAST_REQUEST).
    pub lb_policy: i32,
    /// The DEFAULT-priority circuit breaker's `max_requests` (default 1024).
    pub max_requests: u32,
    /// The upstream TLS context's SNI, when the transport socket configures TLS.
    pub tls_sni: Option<String>,
}

impl Resource for ClusterValue {
    type Message = cluster_pb::Cluster;

    const TYPE_URL: TypeUrl = TypeUrl::new("type.googleapis.com/envoy.config.cluster.v3.Cluster");

    fn deserialize(bytes: Bytes) -> xds_client::Result<Self::Message> {
        Ok(cluster_pb::Cluster::decode(bytes)?)
    }

    fn name(message: &Self::Message) -> &str {
        &message.name
    }

    fn validate(message: Self::Message) -> xds_client::Result<Self> {
        use cluster_pb::cluster::{ClusterDiscoveryType, DiscoveryType, LbPolicy};
        if message.cluster_discovery_type
            != Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32))
        {
            return Err(invalid("type", "only EDS clusters are kept here"));
        }
        let eds = message
            .eds_cluster_config
            .ok_or_else(|| invalid("eds_cluster_config", "field not present"))?;
        if !is_ads_or_self(eds.eds_config.as_ref()) {
            return Err(invalid("eds_cluster_config.eds_config", "not ads or self"));
        }
        let lb_policy = message.lb_policy;
        if ![
            LbPolicy::RoundRobin as i32,
            LbPolicy::RingHash as i32,
            LbPolicy::LeastRequest as i32,
        ]
        .contains(&lb_policy)
        {
            return Err(invalid("lb_policy", "unsupported"));
        }
        if let Some(lrs) = &message.lrs_server
            && !matches!(
                lrs.config_source_specifier,
                Some(core_pb::config_source::ConfigSourceSpecifier::Self_(_))
            )
        {
            return Err(invalid("lrs_server", "ConfigSource must specify self"));
        }
        let max_requests = message
            .circuit_breakers
            .iter()
            .flat_map(|cb| &cb.thresholds)
            .find(|t| t.priority == core_pb::RoutingPriority::Default as i32)
            .and_then(|t| t.max_requests)
            .map_or(1024, |v| v.value);
        let tls_sni = match message.transport_socket.and_then(|t| t.config_type) {
            None => None,
            Some(core_pb::transport_socket::ConfigType::TypedConfig(any)) => {
                if any.type_url
                    != "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"
                {
                    return Err(invalid("transport_socket", "not an UpstreamTlsContext"));
                }
                Some(tls_pb::UpstreamTlsContext::decode(Bytes::from(any.value))?.sni)
            }
        };
        Ok(ClusterValue {
            name: message.name,
            eds_service_name: (!eds.service_name.is_empty()).then_some(eds.service_name),
            lb_policy,
            max_requests,
            tls_sni,
        })
    }
}

// ----- ClusterLoadAssignment -----

/// A validated endpoint set.
#[derive(Debug)]
pub struct EndpointsValue {
    /// `cluster_name`.
    pub cluster_name: String,
    /// The localities of each priority (index = priority, no gaps).
    pub priorities: Vec<Vec<LocalityEndpoints>>,
}

/// A locality and its endpoints.
#[derive(Debug)]
pub struct LocalityEndpoints {
    /// (region, zone, sub_zone).
    pub locality: (String, String, String),
    /// The locality weight (non-zero).
    pub weight: u32,
    /// The endpoints.
    pub endpoints: Vec<EndpointValue>,
}

/// One endpoint.
#[derive(Debug)]
pub struct EndpointValue {
    /// The address.
    pub address: SocketAddr,
    /// `health_status`.
    pub health_status: i32,
    /// `load_balancing_weight` (default 1).
    pub weight: u32,
}

impl Resource for EndpointsValue {
    type Message = endpoint_pb::ClusterLoadAssignment;

    const TYPE_URL: TypeUrl =
        TypeUrl::new("type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment");

    const ALL_RESOURCES_REQUIRED_IN_SOTW: bool = false;

    fn deserialize(bytes: Bytes) -> xds_client::Result<Self::Message> {
        Ok(endpoint_pb::ClusterLoadAssignment::decode(bytes)?)
    }

    fn name(message: &Self::Message) -> &str {
        &message.cluster_name
    }

    fn validate(message: Self::Message) -> xds_client::Result<Self> {
        let mut priorities: Vec<Vec<LocalityEndpoints>> = Vec::new();
        for l in message.endpoints {
            let weight = l.load_balancing_weight.map_or(0, |w| w.value);
            if weight == 0 {
                continue; // gRPC ignores localities without a weight
            }
            let endpoints = l
                .lb_endpoints
                .into_iter()
                .map(validate_endpoint)
                .collect::<xds_client::Result<Vec<_>>>()?;
            let locality = l.locality.unwrap_or_default();
            let priority = l.priority as usize;
            if priorities.len() <= priority {
                priorities.resize_with(priority + 1, Vec::new);
            }
            priorities[priority].push(LocalityEndpoints {
                locality: (locality.region, locality.zone, locality.sub_zone),
                weight,
                endpoints,
            });
        }
        if priorities.iter().any(Vec::is_empty) {
            return Err(invalid("endpoints", "priorities have a gap"));
        }
        Ok(EndpointsValue {
            cluster_name: message.cluster_name,
            priorities,
        })
    }
}

fn validate_endpoint(e: endpoint_pb::LbEndpoint) -> xds_client::Result<EndpointValue> {
    use core_pb::address::Address;
    use core_pb::socket_address::PortSpecifier;
    let Some(endpoint_pb::lb_endpoint::HostIdentifier::Endpoint(endpoint)) = e.host_identifier
    else {
        return Err(invalid("lb_endpoint", "no endpoint"));
    };
    let Some(Address::SocketAddress(sa)) = endpoint.address.and_then(|a| a.address) else {
        return Err(invalid("endpoint.address", "no socket address"));
    };
    let ip: IpAddr = sa
        .address
        .parse()
        .map_err(|e| invalid("endpoint.address", e))?;
    let port = match sa.port_specifier {
        Some(PortSpecifier::PortValue(p)) => {
            u16::try_from(p).map_err(|_| invalid("port_value", "above 65535"))?
        }
        _ => return Err(invalid("port_specifier", "no port_value")),
    };
    let weight = e.load_balancing_weight.map_or(1, |w| w.value);
    if weight == 0 {
        return Err(invalid("load_balancing_weight", "zero"));
    }
    Ok(EndpointValue {
        address: SocketAddr::new(ip, port),
        health_status: e.health_status,
        weight,
    })
}
