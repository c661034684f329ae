//! Fixtures for the config selector and dependency manager tests: builders for route
//! configurations (matchers, actions, timeouts, retry policies), listeners with inline
//! routes or an HCM `max_stream_duration`, EDS / aggregate / LOGICAL_DNS clusters,
//! deterministic random sources, and [`DmDriver`], which runs an
//! [`XdsDependencyManager`] on a [`Harness`] client against a scripted ADS server.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use xds_proto_core::XdsError;
use xds_proto_core::client::{Action, Event, Notification, StreamId};
use xds_proto_core::dependency::{XdsConfig, XdsDependencyManager};
use xds_proto_core::pb::envoy::config::cluster::v3 as cluster;
use xds_proto_core::pb::envoy::config::core::v3 as core;
use xds_proto_core::pb::envoy::config::endpoint::v3 as endpoint;
use xds_proto_core::pb::envoy::config::listener::v3 as listener;
use xds_proto_core::pb::envoy::config::route::v3 as route;
use xds_proto_core::pb::envoy::extensions::clusters::aggregate::v3 as aggregate;
use xds_proto_core::pb::envoy::extensions::filters::network::http_connection_manager::v3 as hcm;
use xds_proto_core::pb::envoy::r#type::matcher::v3 as matcher;
use xds_proto_core::pb::envoy::r#type::v3 as types;
use xds_proto_core::pb::google::protobuf::{Any, BoolValue, UInt32Value};
use xds_proto_core::resource::route::RouteConfigResource;
use xds_proto_core::resource::type_url;
use xds_proto_core::selector::RngCore;

use crate::fixtures::{any, cluster_msg, hcm_rds};
use crate::{Harness, Req, response};

const HCM_TYPE_URL: &str = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";

// ----- durations -----

/// A `google.protobuf.Duration`.
pub fn pb_duration(d: Duration) -> xds_proto_core::pb::google::protobuf::Duration {
    xds_proto_core::pb::google::protobuf::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

/// A raw `google.protobuf.Duration` (may be negative or out of range).
pub fn raw_duration(seconds: i64, nanos: i32) -> xds_proto_core::pb::google::protobuf::Duration {
    xds_proto_core::pb::google::protobuf::Duration { seconds, nanos }
}

// ----- route matchers -----

/// Matches paths starting with `p`.
pub fn prefix(p: &str) -> route::RouteMatch {
    route::RouteMatch {
        path_specifier: Some(route::route_match::PathSpecifier::Prefix(p.to_string())),
        ..Default::default()
    }
}

/// Matches the path `p` exactly.
pub fn path(p: &str) -> route::RouteMatch {
    route::RouteMatch {
        path_specifier: Some(route::route_match::PathSpecifier::Path(p.to_string())),
        ..Default::default()
    }
}

/// Matches paths that fully match the regex `r`.
pub fn regex(r: &str) -> route::RouteMatch {
    route::RouteMatch {
        path_specifier: Some(route::route_match::PathSpecifier::SafeRegex(
            matcher::RegexMatcher {
                regex: r.to_string(),
                ..Default::default()
            },
        )),
        ..Default::default()
    }
}

/// The same matcher with `case_sensitive` set.
pub fn case_sensitive(mut m: route::RouteMatch, value: bool) -> route::RouteMatch {
    m.case_sensitive = Some(BoolValue { value });
    m
}

/// The same matcher with one more header matcher.
pub fn with_header(mut m: route::RouteMatch, h: route::HeaderMatcher) -> route::RouteMatch {
    m.headers.push(h);
    m
}

/// The same matcher with a runtime fraction of `per_million` / 1,000,000.
pub fn with_fraction(mut m: route::RouteMatch, per_million: u32) -> route::RouteMatch {
    m.runtime_fraction = Some(core::RuntimeFractionalPercent {
        default_value: Some(types::FractionalPercent {
            numerator: per_million,
            denominator: types::fractional_percent::DenominatorType::Million as i32,
        }),
        runtime_key: String::new(),
    });
    m
}

/// A header matcher.
pub fn header(
    name: &str,
    spec: route::header_matcher::HeaderMatchSpecifier,
    invert: bool,
) -> route::HeaderMatcher {
    #[allow(deprecated)]
    route::HeaderMatcher {
        name: name.to_string(),
        header_match_specifier: Some(spec),
        invert_match: invert,
        ..Default::default()
    }
}

/// A `string_match` specifier.
pub fn string_match(
    pattern: matcher::string_matcher::MatchPattern,
    ignore_case: bool,
) -> route::header_matcher::HeaderMatchSpecifier {
    route::header_matcher::HeaderMatchSpecifier::StringMatch(matcher::StringMatcher {
        match_pattern: Some(pattern),
        ignore_case,
    })
}

/// A `RegexMatcher`.
pub fn regex_matcher(r: &str) -> matcher::RegexMatcher {
    matcher::RegexMatcher {
        regex: r.to_string(),
        ..Default::default()
    }
}

/// An `Int64Range`.
pub fn range(start: i64, end: i64) -> types::Int64Range {
    types::Int64Range { start, end }
}

// ----- route actions -----

/// A route action sending to one cluster.
pub fn cluster_action(name: &str) -> route::RouteAction {
    route::RouteAction {
        cluster_specifier: Some(route::route_action::ClusterSpecifier::Cluster(
            name.to_string(),
        )),
        ..Default::default()
    }
}

/// A route action splitting over weighted clusters.
pub fn weighted_action(clusters: &[(&str, u32)]) -> route::RouteAction {
    route::RouteAction {
        cluster_specifier: Some(route::route_action::ClusterSpecifier::WeightedClusters(
            route::WeightedCluster {
                clusters: clusters
                    .iter()
                    .map(|(name, weight)| route::weighted_cluster::ClusterWeight {
                        name: name.to_string(),
                        weight: Some(UInt32Value { value: *weight }),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            },
        )),
        ..Default::default()
    }
}

/// A route action naming a cluster specifier plugin.
pub fn plugin_action(plugin: &str) -> route::RouteAction {
    route::RouteAction {
        cluster_specifier: Some(
            route::route_action::ClusterSpecifier::ClusterSpecifierPlugin(plugin.to_string()),
        ),
        ..Default::default()
    }
}

/// The action with `max_stream_duration` settings (A31).
pub fn with_stream_duration(
    mut action: route::RouteAction,
    max_stream_duration: Option<Duration>,
    grpc_timeout_header_max: Option<Duration>,
) -> route::RouteAction {
    action.max_stream_duration = Some(route::route_action::MaxStreamDuration {
        max_stream_duration: max_stream_duration.map(pb_duration),
        grpc_timeout_header_max: grpc_timeout_header_max.map(pb_duration),
        grpc_timeout_header_offset: None,
    });
    action
}

/// The action with a retry policy.
pub fn with_retry(
    mut action: route::RouteAction,
    policy: route::RetryPolicy,
) -> route::RouteAction {
    action.retry_policy = Some(policy);
    action
}

/// A route forwarding with `action`.
pub fn forward(m: route::RouteMatch, action: route::RouteAction) -> route::Route {
    route::Route {
        r#match: Some(m),
        action: Some(route::route::Action::Route(action)),
        ..Default::default()
    }
}

/// A route sending what `m` matches to `cluster_name`.
pub fn to_cluster(m: route::RouteMatch, cluster_name: &str) -> route::Route {
    forward(m, cluster_action(cluster_name))
}

/// A route with a `non_forwarding_action` (servers only).
pub fn non_forwarding(m: route::RouteMatch) -> route::Route {
    route::Route {
        r#match: Some(m),
        action: Some(route::route::Action::NonForwardingAction(
            route::NonForwardingAction {},
        )),
        ..Default::default()
    }
}

/// A route with a `redirect` action (unsupported by gRPC clients).
pub fn redirect(m: route::RouteMatch) -> route::Route {
    route::Route {
        r#match: Some(m),
        action: Some(route::route::Action::Redirect(
            route::RedirectAction::default(),
        )),
        ..Default::default()
    }
}

// ----- virtual hosts and route configurations -----

/// A virtual host.
pub fn vhost(name: &str, domains: &[&str], routes: Vec<route::Route>) -> route::VirtualHost {
    route::VirtualHost {
        name: name.to_string(),
        domains: domains.iter().map(|d| d.to_string()).collect(),
        routes,
        ..Default::default()
    }
}

/// A route configuration.
pub fn route_config_of(name: &str, vhosts: Vec<route::VirtualHost>) -> route::RouteConfiguration {
    route::RouteConfiguration {
        name: name.to_string(),
        virtual_hosts: vhosts,
        ..Default::default()
    }
}

/// A route configuration with one `*` virtual host holding `routes`.
pub fn routes_config(name: &str, routes: Vec<route::Route>) -> route::RouteConfiguration {
    route_config_of(name, vec![vhost("vh", &["*"], routes)])
}

/// A route configuration as an `Any`.
pub fn rc_any(rc: &route::RouteConfiguration) -> Any {
    any(type_url::ROUTE_CONFIGURATION, rc)
}

/// Decodes a route configuration with the core's RDS decoder.
pub fn decode_rc(rc: &route::RouteConfiguration) -> Result<RouteConfigResource, String> {
    xds_proto_core::resource::route::decode(&rc.encode_to_vec())
        .map(|(_, v)| v)
        .map_err(|e| e.message)
}

/// The RLS cluster specifier plugin (with an empty config) named `name`.
pub fn rls_plugin(name: &str) -> route::ClusterSpecifierPlugin {
    route::ClusterSpecifierPlugin {
        extension: Some(core::TypedExtensionConfig {
            name: name.to_string(),
            typed_config: Some(Any {
                type_url: "type.googleapis.com/grpc.lookup.v1.RouteLookupClusterSpecifier"
                    .to_string(),
                value: Bytes::from_static(b"\x0a\x00"),
            }),
        }),
        is_optional: false,
    }
}

// ----- listeners -----

/// An HCM with these routes (inline or RDS) and an optional `max_stream_duration`.
pub fn hcm_with(
    routes: hcm::http_connection_manager::RouteSpecifier,
    max_stream_duration: Option<Duration>,
) -> hcm::HttpConnectionManager {
    hcm::HttpConnectionManager {
        route_specifier: Some(routes),
        common_http_protocol_options: max_stream_duration.map(|d| core::HttpProtocolOptions {
            max_stream_duration: Some(pb_duration(d)),
            ..Default::default()
        }),
        ..hcm_rds("unused")
    }
}

/// A client listener over an HCM.
pub fn listener_of(name: &str, manager: &hcm::HttpConnectionManager) -> Any {
    any(
        type_url::LISTENER,
        &listener::Listener {
            name: name.to_string(),
            api_listener: Some(listener::ApiListener {
                api_listener: Some(any(HCM_TYPE_URL, manager)),
            }),
            ..Default::default()
        },
    )
}

/// A client listener with its route configuration inline.
pub fn listener_inline(
    name: &str,
    rc: route::RouteConfiguration,
    max_stream_duration: Option<Duration>,
) -> Any {
    listener_of(
        name,
        &hcm_with(
            hcm::http_connection_manager::RouteSpecifier::RouteConfig(rc),
            max_stream_duration,
        ),
    )
}

/// A client listener on RDS with an HCM `max_stream_duration`.
pub fn listener_rds(name: &str, rds: &str, max_stream_duration: Option<Duration>) -> Any {
    let mut manager = hcm_rds(rds);
    manager.common_http_protocol_options = max_stream_duration.map(|d| core::HttpProtocolOptions {
        max_stream_duration: Some(pb_duration(d)),
        ..Default::default()
    });
    listener_of(name, &manager)
}

/// A server listener (an address, no api_listener).
pub fn server_listener(name: &str) -> Any {
    any(
        type_url::LISTENER,
        &listener::Listener {
            name: name.to_string(),
            address: Some(core::Address {
                address: Some(core::address::Address::SocketAddress(core::SocketAddress {
                    address: "0.0.0.0".to_string(),
                    port_specifier: Some(core::socket_address::PortSpecifier::PortValue(8080)),
                    ..Default::default()
                })),
            }),
            ..Default::default()
        },
    )
}

// ----- clusters -----

/// An EDS cluster, with `eds_service_name` when given.
pub fn eds_cluster(name: &str, service_name: Option<&str>) -> Any {
    let mut c = cluster_msg(name, 1024);
    if let Some(eds) = &mut c.eds_cluster_config {
        eds.service_name = service_name.unwrap_or_default().to_string();
    }
    any(type_url::CLUSTER, &c)
}

/// An aggregate cluster over `children`, in priority order.
pub fn aggregate_cluster(name: &str, children: &[&str]) -> Any {
    let config = aggregate::ClusterConfig {
        clusters: children.iter().map(|c| c.to_string()).collect(),
    };
    let c = cluster::Cluster {
        name: name.to_string(),
        cluster_discovery_type: Some(cluster::cluster::ClusterDiscoveryType::ClusterType(
            cluster::cluster::CustomClusterType {
                name: "envoy.clusters.aggregate".to_string(),
                typed_config: Some(any(
                    "type.googleapis.com/envoy.extensions.clusters.aggregate.v3.ClusterConfig",
                    &config,
                )),
            },
        )),
        ..Default::default()
    };
    any(type_url::CLUSTER, &c)
}

/// A LOGICAL_DNS cluster for `host:port`.
pub fn logical_dns_cluster(name: &str, host: &str, port: u32) -> Any {
    let c = cluster::Cluster {
        name: name.to_string(),
        cluster_discovery_type: Some(cluster::cluster::ClusterDiscoveryType::Type(
            cluster::cluster::DiscoveryType::LogicalDns as i32,
        )),
        load_assignment: Some(endpoint::ClusterLoadAssignment {
            cluster_name: name.to_string(),
            endpoints: vec![endpoint::LocalityLbEndpoints {
                lb_endpoints: vec![endpoint::LbEndpoint {
                    host_identifier: Some(endpoint::lb_endpoint::HostIdentifier::Endpoint(
                        endpoint::Endpoint {
                            address: Some(core::Address {
                                address: Some(core::address::Address::SocketAddress(
                                    core::SocketAddress {
                                        address: host.to_string(),
                                        port_specifier: Some(
                                            core::socket_address::PortSpecifier::PortValue(port),
                                        ),
                                        ..Default::default()
                                    },
                                )),
                            }),
                            ..Default::default()
                        },
                    )),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    any(type_url::CLUSTER, &c)
}

// ----- random sources -----

/// SplitMix64: a tiny seeded generator for tests that need many draws.
#[derive(Clone, Debug)]
pub struct SplitMix(pub u64);

impl RngCore for SplitMix {
    fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for chunk in dest.chunks_mut(8) {
            let bytes = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }
}

/// A random source that returns scripted `u32` values, then panics; it counts draws.
#[derive(Clone, Debug, Default)]
pub struct Scripted {
    values: VecDeque<u32>,
    /// How many values were drawn.
    pub drawn: usize,
}

impl Scripted {
    /// A source returning `values` in order.
    pub fn new(values: &[u32]) -> Scripted {
        Scripted {
            values: values.iter().copied().collect(),
            drawn: 0,
        }
    }

    /// The `u32` that makes `runtime_fraction` draw `per_million` exactly (the selector
    /// maps `x` to `x * 1_000_000 >> 32`).
    pub fn fraction_value(per_million: u32) -> u32 {
        let v = (u64::from(per_million) << 32).div_ceil(1_000_000);
        u32::try_from(v).unwrap_or(u32::MAX)
    }
}

impl RngCore for Scripted {
    fn next_u32(&mut self) -> u32 {
        self.drawn += 1;
        self.values
            .pop_front()
            .expect("the test scripted no more random values")
    }

    fn next_u64(&mut self) -> u64 {
        u64::from(self.next_u32())
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for b in dest {
            *b = self.next_u32() as u8;
        }
    }
}

// ----- the dependency manager on a scripted server -----

/// Runs an [`XdsDependencyManager`] on a [`Harness`] client whose ADS server is the test:
/// streams start and requests are sent at once, every request is recorded, the
/// manager's notifications go to it, the others are kept in `others`, and its updates
/// are collected in `updates`.
pub struct DmDriver {
    /// The harness (client and virtual time).
    pub h: Harness,
    /// The manager under test.
    pub dm: XdsDependencyManager,
    /// The current ADS stream.
    pub stream: Option<StreamId>,
    /// Every request sent, in order.
    pub requests: Vec<Req>,
    /// The names of the latest request of each type.
    pub subscribed: BTreeMap<String, Vec<String>>,
    /// Notifications for watchers that are not the manager's.
    pub others: Vec<Notification>,
    /// The manager's updates, in order.
    pub updates: Vec<Result<Arc<XdsConfig>, XdsError>>,
    nonce: u64,
}

impl DmDriver {
    /// A manager for `listener_name` and `authority`, started.
    pub fn new(listener_name: &str, authority: &str) -> DmDriver {
        let mut d = DmDriver {
            h: Harness::new(),
            dm: XdsDependencyManager::new(listener_name, authority),
            stream: None,
            requests: Vec::new(),
            subscribed: BTreeMap::new(),
            others: Vec::new(),
            updates: Vec::new(),
            nonce: 0,
        };
        d.dm.start(&mut d.h.client)
            .expect("listener watch accepted");
        d.pump();
        d
    }

    fn dispatch(&mut self, action: Action) {
        let now = self.h.now;
        match action {
            Action::StartStream { stream, .. } => {
                self.stream = Some(stream);
                self.h
                    .client
                    .handle_event(now, Event::StreamStarted { stream });
            }
            Action::SendRequest { stream, request } => {
                let req = Req::of(&request);
                self.subscribed
                    .insert(req.type_url.clone(), req.names.clone());
                self.requests.push(req);
                self.h
                    .client
                    .handle_event(now, Event::RequestSent { stream });
            }
            Action::Notify(n) => {
                if !self.dm.handle_notification(&mut self.h.client, &n) {
                    self.others.push(n);
                }
            }
            Action::CloseStream { .. } | Action::DropChannel { .. } => {}
            other => panic!("unexpected action {other:?}"),
        }
    }

    /// Delivers every pending action (the harness's first, then the client's) until
    /// none is left, and collects the manager's updates.
    pub fn pump(&mut self) {
        let mut queue: VecDeque<Action> = self.h.take().into();
        while let Some(action) = queue.pop_front().or_else(|| self.h.client.poll_action()) {
            self.dispatch(action);
        }
        while let Some(update) = self.dm.poll_update() {
            self.updates.push(update);
        }
    }

    /// The server sends a SotW response of `type_url` with these resources.
    pub fn respond(&mut self, type_url: &str, version: &str, resources: Vec<Any>) {
        let stream = self.stream.expect("a stream is open");
        self.nonce += 1;
        let bytes = Bytes::from(
            response(type_url, version, &format!("n{}", self.nonce), resources).encode_to_vec(),
        );
        let now = self.h.now;
        self.h
            .client
            .handle_event(now, Event::ResponseReceived { stream, bytes });
        self.pump();
    }

    /// Advances virtual time, firing timers.
    pub fn advance(&mut self, by: Duration) {
        self.h.advance(by);
        self.pump();
    }

    /// The names currently subscribed for `type_url` (from the latest request).
    pub fn names(&self, type_url: &str) -> Vec<String> {
        self.subscribed.get(type_url).cloned().unwrap_or_default()
    }

    /// Takes the updates collected so far.
    pub fn take_updates(&mut self) -> Vec<Result<Arc<XdsConfig>, XdsError>> {
        std::mem::take(&mut self.updates)
    }

    /// The one update collected since the last call, which must be a config.
    pub fn expect_config(&mut self) -> Arc<XdsConfig> {
        let mut updates = self.take_updates();
        assert_eq!(
            updates.len(),
            1,
            "expected exactly one update, got {updates:?}"
        );
        match updates.pop() {
            Some(Ok(config)) => config,
            other => panic!("expected a config, got {other:?}"),
        }
    }

    /// The one update collected since the last call, which must be an error.
    pub fn expect_error(&mut self) -> XdsError {
        let mut updates = self.take_updates();
        assert_eq!(
            updates.len(),
            1,
            "expected exactly one update, got {updates:?}"
        );
        match updates.pop() {
            Some(Err(e)) => e,
            other => panic!("expected an error, got {other:?}"),
        }
    }

    /// No update may have been collected.
    pub fn expect_no_update(&mut self) {
        let updates = self.take_updates();
        assert!(updates.is_empty(), "expected no update, got {updates:?}");
    }
}
