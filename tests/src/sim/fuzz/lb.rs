//! The `lb` fuzz target: arbitrary CDS and EDS resources, built field by field from
//! the input, encoded as a control plane sends them and passed through the core's own
//! decoders and validation (a resource they reject is NACKed: the previous one stays),
//! then arbitrary subchannel states, call outcomes, picks and time into a
//! [`LoadBalancer`]. The embedder is an honest one: it reports only on connections the
//! load balancer asked for, a connection it reports READY later closes as IDLE, and it
//! forgets a subchannel it was told to disconnect.
//!
//! Checked after every step (a failure panics with the broken rule):
//! - no ring-hash ring has more entries than the ring size cap allows, and a ring built
//!   over some endpoints is never empty;
//! - the heap stays under [`LIVE_BYTES_LIMIT`] (when the binary counts allocations, as
//!   the fuzz target does with `xds_proto_testing::alloc::CountingAlloc`);
//! - a pick returns only a subchannel the embedder last reported READY, at its own
//!   address, which the current configuration lists (usable endpoints of the cluster,
//!   or of an aggregate's leaf clusters);
//! - after `handle_timeout(now)`, no timer is due at `now` or earlier (a timer that
//!   keeps itself due would spin an embedder's loop without time moving).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arbitrary::Unstructured;
use prost::Message;
use xds_proto_core::dependency::{ClusterConfig, ClusterResolution};
use xds_proto_core::lb::{
    CallOutcome, CallToken, ConnectivityState, LbAction, LbSettings, LoadBalancer, Pick, PickArgs,
    SubchannelId,
};
use xds_proto_core::lrs::ClusterLoadStats;
use xds_proto_core::pb::envoy::config::cluster::v3 as cluster_pb;
use xds_proto_core::pb::envoy::config::core::v3 as core_pb;
use xds_proto_core::pb::envoy::config::endpoint::v3 as endpoint_pb;
use xds_proto_core::pb::envoy::extensions::load_balancing_policies as lb_pb;
use xds_proto_core::pb::envoy::r#type::v3::FractionalPercent;
use xds_proto_core::pb::google::protobuf::{Any, UInt32Value, UInt64Value};
use xds_proto_core::resource::cluster::{ClusterResource, ClusterType, MAX_RING_SIZE};
use xds_proto_core::resource::endpoint::EndpointsResource;
use xds_proto_core::resource::{cluster, endpoint};
use xds_proto_core::{Instant, XdsError};
use xds_proto_testing::resources::{
    Host, Locality, aggregate_cluster, cluster_msg, load_assignment,
};

/// The heap a run may hold at the end of a step: rings are capped at 8M entries (about
/// 100 MB at the largest cap), everything else here is small.
pub const LIVE_BYTES_LIMIT: i64 = 512 << 20;

/// Steps per input.
const STEP_LIMIT: usize = 300;

/// Leaf clusters `c0`..`c2`, and `agg`, an aggregate of them.
const LEAVES: [&str; 3] = ["c0", "c1", "c2"];
const AGGREGATE: &str = "agg";

/// Runs one input. Panics when an invariant breaks.
pub fn lb(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(mut run) = Run::new(&mut u) else {
        return;
    };
    for _ in 0..STEP_LIMIT {
        if u.is_empty() || run.step(&mut u).is_err() {
            break;
        }
    }
}

/// A subchannel as the embedder knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Conn {
    /// No connection, no attempt.
    Down,
    /// An attempt the load balancer asked for; `reported` once CONNECTING was said.
    Attempt {
        reported: bool,
    },
    Ready,
}

struct Run {
    lb: LoadBalancer,
    now: Instant,
    cap: u64,
    /// What the control plane last sent that validated, per leaf cluster.
    clusters: BTreeMap<&'static str, Arc<ClusterResource>>,
    endpoints: BTreeMap<&'static str, Arc<EndpointsResource>>,
    aggregate: Option<Arc<ClusterResource>>,
    subchannels: HashMap<SubchannelId, (SocketAddr, Conn)>,
    calls: Vec<CallToken>,
}

impl Run {
    fn new(u: &mut Unstructured<'_>) -> arbitrary::Result<Run> {
        // Caps above 2^16 are left to the unit tests: an 8M-entry ring takes about a
        // second to build, and a run rebuilds rings at every update.
        let cap = match u.choose_index(5)? {
            0 => 0,
            1 => u.int_in_range(1..=64)?,
            2 => u.int_in_range(0..=1 << 16)?,
            _ => xds_proto_core::lb::DEFAULT_RING_SIZE_CAP,
        };
        let mut settings = LbSettings::new(u.arbitrary()?);
        settings.ring_size_cap = cap;
        let mut run = Run {
            lb: LoadBalancer::new(settings),
            now: Instant::from_secs(1),
            cap,
            clusters: BTreeMap::new(),
            endpoints: BTreeMap::new(),
            aggregate: None,
            subchannels: HashMap::new(),
            calls: Vec::new(),
        };
        for leaf in LEAVES.iter().take(u.int_in_range(1..=LEAVES.len())?) {
            run.send_cluster(u, leaf)?;
            run.send_endpoints(u, leaf)?;
        }
        if u.arbitrary()? {
            run.send_aggregate(u)?;
        }
        run.update();
        Ok(run)
    }

    fn step(&mut self, u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
        match u.choose_index(10)? {
            0 => {
                let leaf = LEAVES[u.choose_index(LEAVES.len())?];
                if u.arbitrary()? {
                    self.send_cluster(u, leaf)?;
                } else {
                    self.send_endpoints(u, leaf)?;
                }
                self.update();
            }
            1 => {
                let leaf = LEAVES[u.choose_index(LEAVES.len())?];
                self.clusters.remove(leaf);
                self.update();
            }
            2 => {
                self.send_aggregate(u)?;
                self.update();
            }
            3..=5 => self.report_state(u)?,
            6 | 7 => self.pick(u)?,
            8 => {
                if !self.calls.is_empty() {
                    let call = self.calls.swap_remove(u.choose_index(self.calls.len())?);
                    let outcome = if u.ratio(3, 4)? {
                        CallOutcome::Success
                    } else {
                        CallOutcome::Failure
                    };
                    self.lb.call_finished(self.now, call, outcome);
                }
            }
            _ => {
                let advance = if u.ratio(1, 8)? {
                    Duration::from_secs(u.int_in_range(1..=3600)?)
                } else {
                    Duration::from_millis(u.int_in_range(0..=20_000)?)
                };
                self.now += advance;
                self.run_timers();
            }
        }
        self.drain();
        self.check_rings();
        check_heap();
        Ok(())
    }

    /// Runs the timers due now; none may still be due afterwards.
    fn run_timers(&mut self) {
        if self.lb.poll_timeout().is_some_and(|at| at <= self.now) {
            self.lb.handle_timeout(self.now);
        }
        if let Some(at) = self.lb.poll_timeout() {
            assert!(
                at > self.now,
                "a timer is still due after handle_timeout({:?}): {at:?}",
                self.now
            );
        }
    }

    /// A new version of `leaf`'s cluster; kept only if it validates.
    fn send_cluster(
        &mut self,
        u: &mut Unstructured<'_>,
        leaf: &'static str,
    ) -> arbitrary::Result<()> {
        let bytes = arb_cluster(u, leaf)?.encode_to_vec();
        if let Ok((name, resource)) = cluster::decode(&bytes) {
            assert_eq!(name, leaf);
            self.clusters.insert(leaf, Arc::new(resource));
        }
        Ok(())
    }

    fn send_endpoints(
        &mut self,
        u: &mut Unstructured<'_>,
        leaf: &'static str,
    ) -> arbitrary::Result<()> {
        let bytes = arb_load_assignment(u, leaf)?.encode_to_vec();
        if let Ok((name, resource)) = endpoint::decode(&bytes) {
            assert_eq!(name, leaf);
            self.endpoints.insert(leaf, Arc::new(resource));
        }
        Ok(())
    }

    fn send_aggregate(&mut self, u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
        let mut children: Vec<&str> = Vec::new();
        for _ in 0..u.int_in_range(0..=3)? {
            children.push(LEAVES[u.choose_index(LEAVES.len())?]);
        }
        let any = aggregate_cluster(AGGREGATE, &children);
        self.aggregate = cluster::decode(&any.value).ok().map(|(_, c)| Arc::new(c));
        Ok(())
    }

    /// The config the dependency manager would build from what validated.
    fn config(&self) -> BTreeMap<String, Result<ClusterConfig, XdsError>> {
        let mut config = BTreeMap::new();
        for (name, resource) in &self.clusters {
            let endpoints = self.endpoints.get(name).cloned();
            let resolution_note = endpoints
                .is_none()
                .then(|| "no EDS resource yet".to_owned());
            let children = ClusterResolution::Endpoints {
                service_name: name.to_string(),
                endpoints,
                resolution_note,
            };
            let cluster = resource.clone();
            // Counted as the XdsClient's counters would be, so that picks and call
            // ends exercise the LRS counting too.
            let load_stats = cluster
                .lrs_server
                .then(|| ClusterLoadStats::new(name, None));
            config.insert(
                name.to_string(),
                Ok(ClusterConfig {
                    cluster,
                    children,
                    load_stats,
                }),
            );
        }
        if let Some(aggregate) = &self.aggregate {
            let ClusterType::Aggregate { clusters } = &aggregate.cluster_type else {
                unreachable!("built as an aggregate");
            };
            let mut leaf_clusters: Vec<String> = Vec::new();
            for c in clusters {
                if self.clusters.contains_key(c.as_str()) && !leaf_clusters.contains(c) {
                    leaf_clusters.push(c.clone());
                }
            }
            let children = ClusterResolution::Aggregate { leaf_clusters };
            let cluster = aggregate.clone();
            config.insert(
                AGGREGATE.to_owned(),
                Ok(ClusterConfig {
                    cluster,
                    children,
                    load_stats: None,
                }),
            );
        }
        config
    }

    fn update(&mut self) {
        let config = self.config();
        self.lb.update_clusters(self.now, &config);
    }

    /// The addresses a pick for `cluster` may return: the usable endpoints' addresses
    /// of the cluster, or of the aggregate's leaves.
    fn allowed(&self, cluster: &str) -> BTreeSet<SocketAddr> {
        let leaves: Vec<&str> = if cluster == AGGREGATE {
            match self.aggregate.as_deref().map(|a| &a.cluster_type) {
                Some(ClusterType::Aggregate { clusters }) => {
                    clusters.iter().map(String::as_str).collect()
                }
                _ => Vec::new(),
            }
        } else {
            vec![cluster]
        };
        let mut allowed = BTreeSet::new();
        for leaf in leaves {
            if !self.clusters.contains_key(leaf) {
                continue;
            }
            let Some(endpoints) = self.endpoints.get(leaf) else {
                continue;
            };
            for priority in &endpoints.priorities {
                for locality in &priority.localities {
                    for e in &locality.endpoints {
                        if e.health_status.is_usable() {
                            allowed.insert(e.address);
                            allowed.extend(e.additional_addresses.iter().copied());
                        }
                    }
                }
            }
        }
        allowed
    }

    fn pick(&mut self, u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
        let cluster = match u.choose_index(LEAVES.len() + 2)? {
            i if i < LEAVES.len() => LEAVES[i],
            i if i == LEAVES.len() => AGGREGATE,
            _ => "unknown",
        };
        let args = PickArgs {
            hash: u.arbitrary()?,
            random: u.arbitrary()?,
            override_host: None,
        };
        if let Pick::Complete {
            subchannel,
            address,
            call,
        } = self.lb.pick(self.now, cluster, &args)
        {
            let known = self.subchannels.get(&subchannel);
            assert_eq!(
                known,
                Some(&(address, Conn::Ready)),
                "pick for {cluster} returned {subchannel:?} at {address}, which is not READY \
                 there"
            );
            assert!(
                self.allowed(cluster).contains(&address),
                "pick for {cluster} returned {address}, which its config does not list"
            );
            self.calls.push(call);
        }
        Ok(())
    }

    /// The embedder reports what one of its connections did.
    fn report_state(&mut self, u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
        let mut ids: Vec<SubchannelId> = self
            .subchannels
            .iter()
            .filter(|(_, (_, conn))| *conn != Conn::Down)
            .map(|(id, _)| *id)
            .collect();
        if ids.is_empty() {
            return Ok(());
        }
        ids.sort_unstable();
        let id = ids[u.choose_index(ids.len())?];
        let entry = self.subchannels.get_mut(&id).expect("listed");
        let state = match entry.1 {
            Conn::Attempt { reported: false } if u.arbitrary()? => {
                entry.1 = Conn::Attempt { reported: true };
                ConnectivityState::Connecting
            }
            Conn::Attempt { .. } if u.arbitrary()? => {
                entry.1 = Conn::Ready;
                ConnectivityState::Ready
            }
            Conn::Attempt { .. } => {
                entry.1 = Conn::Down;
                ConnectivityState::TransientFailure
            }
            Conn::Ready => {
                entry.1 = Conn::Down;
                ConnectivityState::Idle
            }
            Conn::Down => unreachable!("filtered out"),
        };
        self.lb.subchannel_state(self.now, id, state);
        Ok(())
    }

    /// Carries out the load balancer's actions.
    fn drain(&mut self) {
        while let Some(action) = self.lb.poll_action() {
            match action {
                LbAction::Connect {
                    subchannel,
                    address,
                } => {
                    let entry = self
                        .subchannels
                        .entry(subchannel)
                        .or_insert((address, Conn::Down));
                    assert_eq!(entry.0, address, "{subchannel:?} changed address");
                    if entry.1 == Conn::Down {
                        entry.1 = Conn::Attempt { reported: false };
                    }
                }
                LbAction::Disconnect { subchannel } => {
                    self.subchannels.remove(&subchannel);
                }
                LbAction::Idle { subchannel } => {
                    if let Some(entry) = self.subchannels.get_mut(&subchannel) {
                        entry.1 = Conn::Down;
                    }
                }
                _ => {}
            }
        }
    }

    fn check_rings(&self) {
        let cap = self.cap.clamp(1, MAX_RING_SIZE) as usize;
        for (endpoints, entries) in self.lb.ring_sizes() {
            assert!(
                entries <= cap,
                "a ring of {entries} entries over {endpoints} endpoints exceeds the cap {cap}"
            );
            assert!(
                endpoints == 0 || entries > 0,
                "the ring over {endpoints} endpoints is empty (cap {})",
                self.cap
            );
        }
    }
}

fn check_heap() {
    let live = xds_proto_testing::alloc::live_bytes();
    assert!(
        live <= LIVE_BYTES_LIMIT,
        "{live} bytes live after a step (limit {LIVE_BYTES_LIMIT})"
    );
}

/// One of 16 addresses, so that endpoints of different clusters share subchannels
/// and an assignment may list an address twice (which gRPC rejects).
fn arb_host(u: &mut Unstructured<'_>) -> arbitrary::Result<Host> {
    let i = u.choose_index(16)?;
    let health = match u.choose_index(8)? {
        0 => core_pb::HealthStatus::Unhealthy,
        1 => core_pb::HealthStatus::Draining,
        2 => core_pb::HealthStatus::Healthy,
        _ => core_pb::HealthStatus::Unknown,
    };
    Ok(Host {
        address: format!("10.0.0.{}", 1 + i / 4),
        port: 80 + (i % 4) as u32,
        health,
        weight: u.arbitrary()?,
    })
}

fn arb_load_assignment(
    u: &mut Unstructured<'_>,
    name: &str,
) -> arbitrary::Result<endpoint_pb::ClusterLoadAssignment> {
    let mut localities = Vec::new();
    for l in 0..u.int_in_range(0..=3)? {
        let mut hosts = Vec::new();
        for _ in 0..u.int_in_range(0..=4)? {
            hosts.push(arb_host(u)?);
        }
        let mut locality = Locality::new(&format!("r{l}"), "z", hosts);
        locality.weight = u.arbitrary()?;
        locality.priority = u.int_in_range(0..=2)?;
        localities.push(locality);
    }
    let mut cla = load_assignment(name, &localities);
    if u.ratio(1, 4)? {
        let mut drops = Vec::new();
        for i in 0..u.int_in_range(1..=2)? {
            drops.push(endpoint_pb::cluster_load_assignment::policy::DropOverload {
                category: format!("d{i}"),
                drop_percentage: Some(FractionalPercent {
                    numerator: u.arbitrary()?,
                    denominator: u.int_in_range(0..=3)?,
                }),
            });
        }
        cla.policy = Some(endpoint_pb::cluster_load_assignment::Policy {
            drop_overloads: drops,
            ..Default::default()
        });
    }
    Ok(cla)
}

/// A ring size: mostly in gRPC's range, sometimes anything.
fn arb_ring_size(u: &mut Unstructured<'_>) -> arbitrary::Result<Option<UInt64Value>> {
    Ok(match u.choose_index(4)? {
        0 => None,
        1 => Some(u.arbitrary()?),
        _ => Some(u.int_in_range(0..=MAX_RING_SIZE + 1)?),
    }
    .map(|value| UInt64Value { value }))
}

fn arb_u32_value(u: &mut Unstructured<'_>) -> arbitrary::Result<Option<UInt32Value>> {
    Ok(u.arbitrary::<Option<u32>>()?
        .map(|value| UInt32Value { value }))
}

fn typed(type_name: &str, message: &impl Message) -> cluster_pb::load_balancing_policy::Policy {
    cluster_pb::load_balancing_policy::Policy {
        typed_extension_config: Some(core_pb::TypedExtensionConfig {
            name: type_name.to_owned(),
            typed_config: Some(Any {
                type_url: format!("type.googleapis.com/{type_name}"),
                value: message.encode_to_vec().into(),
            }),
        }),
    }
}

/// One `load_balancing_policy` entry (A52): ring hash, least request, round robin,
/// pick first, or `wrr_locality` around one of those.
fn arb_policy(
    u: &mut Unstructured<'_>,
    depth: usize,
) -> arbitrary::Result<cluster_pb::load_balancing_policy::Policy> {
    const PREFIX: &str = "envoy.extensions.load_balancing_policies";
    Ok(match u.choose_index(if depth == 0 { 5 } else { 4 })? {
        0 => typed(
            &format!("{PREFIX}.ring_hash.v3.RingHash"),
            &lb_pb::ring_hash::v3::RingHash {
                hash_function: u.int_in_range(0..=2)?,
                minimum_ring_size: arb_ring_size(u)?,
                maximum_ring_size: arb_ring_size(u)?,
                ..Default::default()
            },
        ),
        1 => typed(
            &format!("{PREFIX}.least_request.v3.LeastRequest"),
            &lb_pb::least_request::v3::LeastRequest {
                choice_count: arb_u32_value(u)?,
                ..Default::default()
            },
        ),
        2 => typed(
            &format!("{PREFIX}.round_robin.v3.RoundRobin"),
            &lb_pb::round_robin::v3::RoundRobin::default(),
        ),
        3 => typed(
            &format!("{PREFIX}.pick_first.v3.PickFirst"),
            &lb_pb::pick_first::v3::PickFirst {
                shuffle_address_list: u.arbitrary()?,
            },
        ),
        _ => typed(
            &format!("{PREFIX}.wrr_locality.v3.WrrLocality"),
            &lb_pb::wrr_locality::v3::WrrLocality {
                endpoint_picking_policy: Some(cluster_pb::LoadBalancingPolicy {
                    policies: vec![arb_policy(u, depth + 1)?],
                }),
            },
        ),
    })
}

/// The LB policy: the legacy enum with its config, or a one-entry policy list.
fn arb_lb_policy(u: &mut Unstructured<'_>, c: &mut cluster_pb::Cluster) -> arbitrary::Result<()> {
    use cluster_pb::cluster::{LbConfig, LbPolicy, LeastRequestLbConfig, RingHashLbConfig};
    match u.choose_index(4)? {
        0 => c.lb_policy = LbPolicy::RoundRobin as i32,
        1 => {
            c.lb_policy = LbPolicy::RingHash as i32;
            if u.arbitrary()? {
                c.lb_config = Some(LbConfig::RingHashLbConfig(RingHashLbConfig {
                    minimum_ring_size: arb_ring_size(u)?,
                    hash_function: u.int_in_range(0..=1)?,
                    maximum_ring_size: arb_ring_size(u)?,
                }));
            }
        }
        2 => {
            c.lb_policy = LbPolicy::LeastRequest as i32;
            if u.arbitrary()? {
                c.lb_config = Some(LbConfig::LeastRequestLbConfig(LeastRequestLbConfig {
                    choice_count: arb_u32_value(u)?,
                    ..Default::default()
                }));
            }
        }
        _ => {
            c.load_balancing_policy = Some(cluster_pb::LoadBalancingPolicy {
                policies: vec![arb_policy(u, 0)?],
            })
        }
    }
    Ok(())
}

fn arb_duration(
    u: &mut Unstructured<'_>,
) -> arbitrary::Result<Option<xds_proto_core::pb::google::protobuf::Duration>> {
    Ok(match u.choose_index(4)? {
        0 => None,
        1 => Some(xds_proto_core::pb::google::protobuf::Duration {
            seconds: u.arbitrary()?,
            nanos: u.arbitrary()?,
        }),
        _ => Some(xds_proto_core::pb::google::protobuf::Duration {
            seconds: u.int_in_range(0..=60)?,
            nanos: u.int_in_range(0..=999_999_999)?,
        }),
    })
}

/// A percentage: mostly at most 100, sometimes anything.
fn arb_percent(u: &mut Unstructured<'_>) -> arbitrary::Result<Option<UInt32Value>> {
    Ok(match u.choose_index(4)? {
        0 => None,
        1 => Some(u.arbitrary()?),
        _ => Some(u.int_in_range(0..=101)?),
    }
    .map(|value| UInt32Value { value }))
}

fn arb_outlier_detection(
    u: &mut Unstructured<'_>,
) -> arbitrary::Result<cluster_pb::OutlierDetection> {
    Ok(cluster_pb::OutlierDetection {
        interval: arb_duration(u)?,
        base_ejection_time: arb_duration(u)?,
        max_ejection_time: arb_duration(u)?,
        max_ejection_percent: arb_percent(u)?,
        enforcing_success_rate: arb_percent(u)?,
        success_rate_minimum_hosts: arb_u32_value(u)?,
        success_rate_request_volume: arb_u32_value(u)?,
        success_rate_stdev_factor: arb_u32_value(u)?,
        failure_percentage_threshold: arb_percent(u)?,
        enforcing_failure_percentage: arb_percent(u)?,
        failure_percentage_minimum_hosts: arb_u32_value(u)?,
        failure_percentage_request_volume: arb_u32_value(u)?,
        ..Default::default()
    })
}

fn arb_cluster(u: &mut Unstructured<'_>, name: &str) -> arbitrary::Result<cluster_pb::Cluster> {
    let mut c = cluster_msg(name, if u.arbitrary()? { u.arbitrary()? } else { 1024 });
    arb_lb_policy(u, &mut c)?;
    if u.arbitrary()? {
        c.outlier_detection = Some(arb_outlier_detection(u)?);
    }
    if u.arbitrary()? {
        c.lrs_server = Some(xds_proto_testing::resources::self_config_source());
    }
    Ok(c)
}
