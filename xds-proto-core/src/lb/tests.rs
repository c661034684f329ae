//! Unit tests of the load balancer, one concern each, driven through the public API
//! with a scripted embedder (`Net`): connections succeed or fail as the test says.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::dependency::{ClusterConfig, ClusterResolution};
use crate::resource::cluster::{
    ClusterResource, ClusterType, FailurePercentageEjection, LbPolicy, OutlierDetection,
};
use crate::resource::endpoint::{
    DropOverload, Endpoint, EndpointsResource, HealthStatus, Locality, LocalityEndpoints, Priority,
};

mod bounds;
mod custom;
mod override_host;
mod properties;
mod simulation;
mod wrr;

pub(super) fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, 1], port))
}

pub(super) fn endpoint(port: u16) -> Endpoint {
    Endpoint {
        address: addr(port),
        additional_addresses: Vec::new(),
        health_status: HealthStatus::Unknown,
        weight: 1,
        hostname: String::new(),
    }
}

pub(super) fn locality(name: &str, weight: u32, endpoints: Vec<Endpoint>) -> LocalityEndpoints {
    LocalityEndpoints {
        locality: Locality {
            region: name.into(),
            ..Locality::default()
        },
        weight,
        endpoints,
    }
}

/// An endpoint at `port` with a second address, `other` (A61).
pub(super) fn dual_endpoint(port: u16, other: u16) -> Endpoint {
    let mut e = endpoint(port);
    e.additional_addresses.push(addr(other));
    e
}

/// One priority, one locality, these endpoints.
pub(super) fn one_locality(endpoints: Vec<Endpoint>) -> Vec<Priority> {
    vec![Priority {
        localities: vec![locality("r", 1, endpoints)],
    }]
}

/// One priority, one locality, these ports.
pub(super) fn simple(ports: &[u16]) -> Vec<Priority> {
    one_locality(ports.iter().map(|p| endpoint(*p)).collect())
}

/// Calls fail on `bad` and succeed elsewhere.
fn fails_on(bad: SocketAddr) -> impl Fn(SocketAddr) -> CallOutcome + Copy {
    move |a| {
        if a == bad {
            CallOutcome::Failure
        } else {
            CallOutcome::Success
        }
    }
}

/// Cluster `c`, `pick_first` over these ports in order.
fn pick_first_cluster(net: &mut Net, ports: &[u16]) {
    let policy = LbPolicy::PickFirst {
        shuffle_address_list: false,
    };
    net.update(vec![eds(cluster_resource("c", policy), simple(ports))]);
}

pub(super) fn cluster_resource(name: &str, lb_policy: LbPolicy) -> ClusterResource {
    ClusterResource {
        name: name.into(),
        cluster_type: ClusterType::Eds { service_name: None },
        lb_policy,
        lrs_server: false,
        max_requests: 1024,
        tls: None,
        outlier_detection: None,
        override_host_status: Default::default(),
    }
}

pub(super) fn eds(resource: ClusterResource, priorities: Vec<Priority>) -> ClusterConfig {
    eds_with_drops(resource, priorities, Vec::new())
}

pub(super) fn eds_with_drops(
    resource: ClusterResource,
    priorities: Vec<Priority>,
    drop_overloads: Vec<DropOverload>,
) -> ClusterConfig {
    ClusterConfig {
        load_stats: None,
        children: ClusterResolution::Endpoints {
            service_name: resource.name.clone(),
            endpoints: Some(Arc::new(EndpointsResource {
                cluster_name: resource.name.clone(),
                priorities,
                drop_overloads,
            })),
            resolution_note: None,
        },
        cluster: Arc::new(resource),
    }
}

pub(super) type Clusters = BTreeMap<String, Result<ClusterConfig, crate::client::XdsError>>;

pub(super) fn clusters(list: Vec<ClusterConfig>) -> Clusters {
    list.into_iter()
        .map(|c| (c.cluster.name.clone(), Ok(c)))
        .collect()
}

/// A scripted embedder: answers `Connect` with CONNECTING and then READY, unless the
/// address is in `failing` (TRANSIENT_FAILURE) or in `hanging` (CONNECTING only: the
/// attempt is kept in `attempts` for the test to end).
pub(super) struct Net {
    pub(super) lb: LoadBalancer,
    pub(super) now: Instant,
    pub(super) failing: BTreeSet<SocketAddr>,
    pub(super) hanging: BTreeSet<SocketAddr>,
    pub(super) attempts: BTreeMap<SocketAddr, SubchannelId>,
    pub(super) connects: Vec<SocketAddr>,
    pub(super) disconnects: Vec<SubchannelId>,
    pub(super) idled: Vec<SocketAddr>,
    pub(super) resolves: Vec<String>,
    pub(super) picker_changes: usize,
    /// The subchannels running ORCA out-of-band reports, with their intervals.
    pub(super) load_reports: BTreeMap<SubchannelId, Duration>,
}

impl Net {
    pub(super) fn new() -> Net {
        Net {
            lb: LoadBalancer::new(LbSettings::new(7)),
            now: Instant::ZERO,
            failing: BTreeSet::new(),
            hanging: BTreeSet::new(),
            attempts: BTreeMap::new(),
            connects: Vec::new(),
            disconnects: Vec::new(),
            idled: Vec::new(),
            resolves: Vec::new(),
            picker_changes: 0,
            load_reports: BTreeMap::new(),
        }
    }

    pub(super) fn update(&mut self, list: Vec<ClusterConfig>) {
        self.lb.update_clusters(self.now, &clusters(list));
        self.settle();
    }

    /// Carries out actions until there are none.
    pub(super) fn settle(&mut self) {
        while let Some(action) = self.lb.poll_action() {
            match action {
                LbAction::Connect {
                    subchannel,
                    address,
                } => {
                    self.connects.push(address);
                    let now = self.now;
                    self.lb
                        .subchannel_state(now, subchannel, ConnectivityState::Connecting);
                    if self.hanging.contains(&address) {
                        self.attempts.insert(address, subchannel);
                        continue;
                    }
                    let result = if self.failing.contains(&address) {
                        ConnectivityState::TransientFailure
                    } else {
                        ConnectivityState::Ready
                    };
                    self.lb.subchannel_state(now, subchannel, result);
                }
                LbAction::Disconnect { subchannel } => {
                    self.load_reports.remove(&subchannel);
                    self.disconnects.push(subchannel);
                }
                LbAction::Idle { subchannel } => {
                    let address = self.lb.subchannel_address(subchannel).expect("kept");
                    self.idled.push(address);
                }
                LbAction::ResolveDns { cluster, .. } => self.resolves.push(cluster),
                LbAction::PickerChanged => self.picker_changes += 1,
                LbAction::LoadReports {
                    subchannel,
                    interval,
                } => match interval {
                    Some(interval) => {
                        self.load_reports.insert(subchannel, interval);
                    }
                    None => {
                        assert!(self.load_reports.remove(&subchannel).is_some());
                    }
                },
            }
        }
    }

    /// Ends the hanging attempt on `address` with `state`.
    pub(super) fn end_attempt(&mut self, address: SocketAddr, state: ConnectivityState) {
        let subchannel = self.attempts.remove(&address).expect("a hanging attempt");
        self.lb.subchannel_state(self.now, subchannel, state);
        self.settle();
    }

    /// Advances time to `to`, running due timers and their actions.
    pub(super) fn advance_to(&mut self, to: Instant) {
        while let Some(at) = self.lb.poll_timeout().filter(|at| *at <= to) {
            self.now = self.now.max(at);
            self.lb.handle_timeout(self.now);
            self.settle();
        }
        self.now = to;
    }

    pub(super) fn pick(&mut self, cluster: &str, random: u64) -> Pick {
        let pick = self.lb.pick(
            self.now,
            cluster,
            &PickArgs {
                hash: None,
                random,
                override_host: None,
            },
        );
        self.settle();
        pick
    }

    /// Picks `n` times (random values 0..n), finishing each call with `outcome`;
    /// counts the picked addresses.
    pub(super) fn picks(
        &mut self,
        cluster: &str,
        n: u64,
        outcome: impl Fn(SocketAddr) -> CallOutcome,
    ) -> BTreeMap<SocketAddr, u64> {
        let mut seen = BTreeMap::new();
        for i in 0..n {
            let random = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            match self.pick(cluster, random) {
                Pick::Complete { address, call, .. } => {
                    *seen.entry(address).or_default() += 1;
                    self.lb.call_finished(self.now, call, outcome(address));
                }
                other => panic!("pick {i} on {cluster}: {other:?}"),
            }
        }
        seen
    }
}

fn complete_address(pick: &Pick) -> Option<SocketAddr> {
    match pick {
        Pick::Complete { address, .. } => Some(*address),
        _ => None,
    }
}

#[test]
fn round_robin_connects_every_endpoint_and_cycles_over_them() {
    let mut net = Net::new();
    net.update(vec![eds(
        cluster_resource("c", LbPolicy::RoundRobin),
        simple(&[1, 2, 3]),
    )]);
    assert!(
        net.connects.is_empty(),
        "a cluster connects at its first pick"
    );
    assert_eq!(net.lb.cluster_state("c"), Some(ConnectivityState::Idle));
    // The first pick starts the cluster; the scripted embedder connects at once.
    let first = net.pick("c", 0);
    assert_eq!(first, Pick::Queue);
    assert_eq!(net.connects.len(), 3);
    assert_eq!(net.lb.cluster_state("c"), Some(ConnectivityState::Ready));
    let seen = net.picks("c", 300, |_| CallOutcome::Success);
    assert_eq!(seen.len(), 3);
    assert!(seen.values().all(|n| *n == 100), "{seen:?}");
}

#[test]
fn clusters_share_one_subchannel_per_address_and_updates_keep_connections() {
    let mut net = Net::new();
    let a = eds(cluster_resource("a", LbPolicy::RoundRobin), simple(&[1, 2]));
    let b = eds(cluster_resource("b", LbPolicy::RoundRobin), simple(&[2, 3]));
    net.update(vec![a.clone(), b.clone()]);
    net.pick("a", 0);
    net.pick("b", 0);
    assert_eq!(net.connects, vec![addr(1), addr(2), addr(3)]);
    // Endpoint 3 leaves b, 4 joins: only 4 connects, only 3 disconnects.
    let b2 = eds(cluster_resource("b", LbPolicy::RoundRobin), simple(&[2, 4]));
    net.update(vec![a, b2]);
    assert_eq!(net.connects, vec![addr(1), addr(2), addr(3), addr(4)]);
    assert_eq!(net.disconnects.len(), 1);
    let seen = net.picks("b", 10, |_| CallOutcome::Success);
    assert_eq!(
        seen.keys().copied().collect::<Vec<_>>(),
        vec![addr(2), addr(4)]
    );
    // Cluster a goes: address 1 disconnects, 2 stays (b uses it).
    let b3 = eds(cluster_resource("b", LbPolicy::RoundRobin), simple(&[2, 4]));
    net.update(vec![b3]);
    assert_eq!(net.disconnects.len(), 2);
    assert_eq!(
        net.pick("a", 0),
        Pick::Fail(net.lb.unknown_cluster.clone()),
        "a cluster no longer in the config fails its picks"
    );
}

#[test]
fn only_unknown_and_healthy_endpoints_are_used() {
    let mut net = Net::new();
    let mut endpoints: Vec<Endpoint> = (1..=6).map(endpoint).collect();
    let statuses = [
        HealthStatus::Unknown,
        HealthStatus::Healthy,
        HealthStatus::Unhealthy,
        HealthStatus::Draining,
        HealthStatus::Timeout,
        HealthStatus::Degraded,
    ];
    for (e, s) in endpoints.iter_mut().zip(statuses) {
        e.health_status = s;
    }
    let priorities = vec![Priority {
        localities: vec![locality("r", 1, endpoints)],
    }];
    net.update(vec![eds(
        cluster_resource("c", LbPolicy::RoundRobin),
        priorities,
    )]);
    net.pick("c", 0);
    assert_eq!(net.connects, vec![addr(1), addr(2)]);
    let seen = net.picks("c", 10, |_| CallOutcome::Success);
    assert_eq!(
        seen.keys().copied().collect::<Vec<_>>(),
        vec![addr(1), addr(2)]
    );
}

fn two_priorities() -> Vec<Priority> {
    vec![
        Priority {
            localities: vec![locality("p0", 1, vec![endpoint(1)])],
        },
        Priority {
            localities: vec![locality("p1", 1, vec![endpoint(2)])],
        },
    ]
}

#[test]
fn a_failed_priority_fails_over_to_the_next_and_back() {
    let mut net = Net::new();
    net.failing.insert(addr(1));
    net.update(vec![eds(
        cluster_resource("c", LbPolicy::RoundRobin),
        two_priorities(),
    )]);
    net.pick("c", 0);
    // Priority 0 failed at once, so priority 1 was started and is used.
    assert_eq!(net.connects, vec![addr(1), addr(2)]);
    let cluster = |net: &Net| {
        let Some(Entry::Leaf(slot)) = net.lb.names.get("c") else {
            panic!()
        };
        net.lb.leaves[*slot as usize]
            .as_ref()
            .unwrap()
            .current_priority()
    };
    assert_eq!(cluster(&net), Some(1));
    assert_eq!(complete_address(&net.pick("c", 1)), Some(addr(2)));
    // Priority 0's backoff ends, it reconnects and succeeds: back to priority 0, and
    // priority 1's child is stopped.
    net.failing.clear();
    net.advance_to(net.now + Duration::from_secs(2));
    assert_eq!(cluster(&net), Some(0));
    assert_eq!(complete_address(&net.pick("c", 2)), Some(addr(1)));
    let Some(Entry::Leaf(slot)) = net.lb.names.get("c") else {
        panic!()
    };
    assert!(
        net.lb.leaves[*slot as usize]
            .as_ref()
            .unwrap()
            .child(1)
            .is_none()
    );
}

/// Priority 0 (address 1) fails, priority 1 (address 2) takes over, then address 1
/// comes back at its first reconnect (about 1 s): priority 1 is no longer in use.
fn failed_over_and_back() -> Net {
    let mut net = Net::new();
    net.failing.insert(addr(1));
    net.update(vec![eds(
        cluster_resource("c", LbPolicy::RoundRobin),
        two_priorities(),
    )]);
    net.pick("c", 0);
    assert_eq!(complete_address(&net.pick("c", 1)), Some(addr(2)));
    net.failing.clear();
    net.advance_to(Instant::from_secs(2));
    assert_eq!(complete_address(&net.pick("c", 2)), Some(addr(1)));
    net
}

/// After [`failed_over_and_back`]: priority 0's connection fails and stays failing.
fn priority_0_fails_again(net: &mut Net) {
    net.failing.insert(addr(1));
    let first = net.lb.pick(net.now, "c", &PickArgs::default());
    net.lb.subchannel_state(
        net.now,
        subchannel_of(&first),
        ConnectivityState::TransientFailure,
    );
    net.settle();
}

#[test]
fn a_priority_no_longer_in_use_has_its_connection_closed_after_15_minutes() {
    let mut net = failed_over_and_back();
    let back_at = net.now;
    net.advance_to(back_at + Duration::from_secs(15 * 60 - 5));
    assert!(net.idled.is_empty(), "kept for 15 minutes");
    net.advance_to(back_at + Duration::from_secs(15 * 60));
    assert_eq!(net.idled, [addr(2)]);
    assert!(net.disconnects.is_empty(), "the cluster still lists it");
    // Needed again: priority 0 fails, priority 1 connects anew.
    let connects = net.connects.len();
    priority_0_fails_again(&mut net);
    assert_eq!(net.connects[connects..], [addr(2)]);
    assert_eq!(complete_address(&net.pick("c", 3)), Some(addr(2)));
}

#[test]
fn a_priority_used_again_within_15_minutes_keeps_its_connection() {
    let mut net = failed_over_and_back();
    net.advance_to(net.now + Duration::from_secs(10 * 60));
    // Priority 0 fails for good: priority 1, idle for 10 minutes, is used again.
    priority_0_fails_again(&mut net);
    assert_eq!(complete_address(&net.pick("c", 3)), Some(addr(2)));
    net.advance_to(net.now + Duration::from_secs(60 * 60));
    assert!(net.idled.is_empty(), "{:?}", net.idled);
}

#[test]
fn a_priority_still_connecting_after_the_failover_timeout_hands_over() {
    let mut lb = LoadBalancer::new(LbSettings::new(1));
    lb.update_clusters(
        Instant::ZERO,
        &clusters(vec![eds(
            cluster_resource("c", LbPolicy::RoundRobin),
            two_priorities(),
        )]),
    );
    let args = PickArgs::default();
    assert_eq!(lb.pick(Instant::ZERO, "c", &args), Pick::Queue);
    let mut connects = Vec::new();
    while let Some(action) = lb.poll_action() {
        if let LbAction::Connect {
            subchannel,
            address,
        } = action
        {
            connects.push(address);
            lb.subchannel_state(Instant::ZERO, subchannel, ConnectivityState::Connecting);
        }
    }
    assert_eq!(connects, vec![addr(1)], "priority 1 waits for the timeout");
    // The connection attempt delay comes first: the endpoint has no other address.
    assert_eq!(lb.poll_timeout(), Some(Instant::from_millis(250)));
    lb.handle_timeout(Instant::from_millis(250));
    assert!(lb.poll_action().is_none(), "no other address to try");
    assert_eq!(lb.poll_timeout(), Some(Instant::from_secs(10)));
    lb.handle_timeout(Instant::from_secs(9));
    assert!(lb.poll_action().is_none(), "an early timeout is a no-op");
    lb.handle_timeout(Instant::from_secs(10));
    let mut second = None;
    while let Some(action) = lb.poll_action() {
        if let LbAction::Connect {
            subchannel,
            address,
        } = action
        {
            second = Some((subchannel, address));
        }
    }
    let (subchannel, address) = second.expect("priority 1 started");
    assert_eq!(address, addr(2));
    lb.subchannel_state(Instant::from_secs(10), subchannel, ConnectivityState::Ready);
    assert_eq!(
        complete_address(&lb.pick(Instant::from_secs(10), "c", &args)),
        Some(addr(2))
    );
}

#[test]
fn drop_overloads_drop_their_share_per_category() {
    let mut net = Net::new();
    let drops = vec![
        DropOverload {
            category: "lb".into(),
            drop_per_million: 250_000,
        },
        DropOverload {
            category: "throttle".into(),
            drop_per_million: 0,
        },
    ];
    net.update(vec![eds_with_drops(
        cluster_resource("c", LbPolicy::RoundRobin),
        simple(&[1]),
        drops,
    )]);
    net.pick("c", 0);
    let mut dropped = 0;
    for i in 0..20_000u64 {
        match net.pick("c", i.wrapping_mul(0x2545_f491_4f6c_dd1d)) {
            Pick::Drop { category } => {
                assert_eq!(&*category, "lb");
                dropped += 1;
            }
            Pick::Complete { call, .. } => {
                net.lb.call_finished(net.now, call, CallOutcome::Success)
            }
            other => panic!("{other:?}"),
        }
    }
    assert!((4_500..5_500).contains(&dropped), "{dropped}");
}

#[test]
fn the_circuit_breaker_fails_calls_beyond_max_requests_until_one_finishes() {
    let mut net = Net::new();
    let mut resource = cluster_resource("c", LbPolicy::RoundRobin);
    resource.max_requests = 2;
    net.update(vec![eds(resource, simple(&[1, 2]))]);
    net.pick("c", 0);
    let Pick::Complete { call: first, .. } = net.pick("c", 1) else {
        panic!()
    };
    assert!(matches!(net.pick("c", 2), Pick::Complete { .. }));
    let Pick::Fail(status) = net.pick("c", 3) else {
        panic!("the third call in flight is refused")
    };
    assert_eq!(status.code, Code::UNAVAILABLE);
    assert!(
        status.message.contains("max_requests (2)"),
        "{}",
        status.message
    );
    net.lb.call_finished(net.now, first, CallOutcome::Success);
    assert!(matches!(net.pick("c", 4), Pick::Complete { .. }));
}

#[test]
fn pick_first_uses_the_first_address_that_connects() {
    let mut net = Net::new();
    net.failing.insert(addr(1));
    pick_first_cluster(&mut net, &[1, 2, 3]);
    net.pick("c", 0);
    assert_eq!(net.connects, vec![addr(1), addr(2)], "3 is never tried");
    let seen = net.picks("c", 20, |_| CallOutcome::Success);
    assert_eq!(seen, BTreeMap::from([(addr(2), 20)]));
}

#[test]
fn pick_first_starts_the_next_address_once_an_attempt_has_run_250_ms() {
    let mut net = Net::new();
    net.hanging.insert(addr(1));
    pick_first_cluster(&mut net, &[1, 2, 3]);
    assert_eq!(net.pick("c", 0), Pick::Queue);
    assert_eq!(net.lb.poll_timeout(), Some(Instant::from_millis(250)));
    net.advance_to(Instant::from_millis(249));
    assert_eq!(net.connects, vec![addr(1)]);
    // Happy Eyeballs (A61): 2 starts beside 1, connects, and wins.
    net.advance_to(Instant::from_millis(250));
    assert_eq!(net.connects, vec![addr(1), addr(2)], "3 is never tried");
    assert_eq!(complete_address(&net.pick("c", 1)), Some(addr(2)));
    // 1 fails late: nothing changes.
    net.end_attempt(addr(1), ConnectivityState::TransientFailure);
    assert_eq!(net.lb.cluster_state("c"), Some(ConnectivityState::Ready));
    let seen = net.picks("c", 10, |_| CallOutcome::Success);
    assert_eq!(seen, BTreeMap::from([(addr(2), 10)]));
}

#[test]
fn pick_first_fails_a_pass_only_once_no_attempt_is_still_connecting() {
    for first_ends in [
        ConnectivityState::Ready,
        ConnectivityState::TransientFailure,
    ] {
        let mut net = Net::new();
        net.hanging.insert(addr(1));
        net.failing.insert(addr(2));
        pick_first_cluster(&mut net, &[1, 2]);
        net.pick("c", 0);
        net.advance_to(Instant::from_millis(250));
        // 2 fails at once; 1 is still connecting, so the pass goes on.
        assert_eq!(net.connects, vec![addr(1), addr(2)]);
        assert_eq!(
            net.lb.cluster_state("c"),
            Some(ConnectivityState::Connecting)
        );
        assert_eq!(net.pick("c", 1), Pick::Queue);
        net.end_attempt(addr(1), first_ends);
        match first_ends {
            ConnectivityState::Ready => {
                assert_eq!(complete_address(&net.pick("c", 2)), Some(addr(1)))
            }
            _ => assert_eq!(
                net.lb.cluster_state("c"),
                Some(ConnectivityState::TransientFailure),
                "every address failed"
            ),
        }
    }
}

#[test]
fn an_attempt_that_ends_within_the_delay_leaves_no_timer_behind() {
    let mut net = Net::new();
    pick_first_cluster(&mut net, &[1, 2]);
    net.pick("c", 0);
    assert_eq!(net.connects, vec![addr(1)]);
    assert_eq!(
        net.lb.poll_timeout(),
        None,
        "READY at once: no attempt delay left"
    );
}

#[test]
fn an_endpoint_tries_its_next_address_once_an_attempt_has_run_250_ms() {
    let mut net = Net::new();
    net.hanging.insert(addr(1));
    let priorities = one_locality(vec![dual_endpoint(1, 2), endpoint(3)]);
    net.update(vec![eds(
        cluster_resource("c", LbPolicy::RoundRobin),
        priorities,
    )]);
    net.pick("c", 0);
    assert_eq!(net.connects, vec![addr(1), addr(3)]);
    net.advance_to(Instant::from_millis(250));
    assert_eq!(net.connects, vec![addr(1), addr(3), addr(2)]);
    let seen = net.picks("c", 10, |_| CallOutcome::Success);
    assert_eq!(seen, BTreeMap::from([(addr(2), 5), (addr(3), 5)]));
}

#[test]
fn pick_first_goes_idle_when_its_connection_closes_and_reconnects_on_a_pick() {
    let mut net = Net::new();
    pick_first_cluster(&mut net, &[1, 2]);
    let Pick::Complete { subchannel, .. } = ({
        net.pick("c", 0);
        net.pick("c", 1)
    }) else {
        panic!()
    };
    net.lb
        .subchannel_state(net.now, subchannel, ConnectivityState::Idle);
    net.settle();
    assert_eq!(net.lb.cluster_state("c"), Some(ConnectivityState::Idle));
    assert_eq!(net.connects.len(), 1);
    assert_eq!(net.pick("c", 2), Pick::Queue);
    assert_eq!(net.connects, vec![addr(1), addr(1)]);
    assert_eq!(complete_address(&net.pick("c", 3)), Some(addr(1)));
}

#[test]
fn failed_subchannels_back_off_then_reconnect() {
    let mut net = Net::new();
    net.failing.insert(addr(1));
    net.update(vec![eds(
        cluster_resource("c", LbPolicy::RoundRobin),
        simple(&[1, 2]),
    )]);
    net.pick("c", 0);
    assert_eq!(net.connects, vec![addr(1), addr(2)]);
    // gRPC's backoff: the first retry comes after 1 s ± 20 %.
    let retry = net.lb.poll_timeout().expect("a retry is scheduled");
    assert!(
        (Instant::from_millis(800)..=Instant::from_millis(1200)).contains(&retry),
        "{retry}"
    );
    net.advance_to(retry);
    assert_eq!(net.connects, vec![addr(1), addr(2), addr(1)]);
    // Failing again: the next delay grows by 1.6.
    let second = net.lb.poll_timeout().unwrap();
    assert!(
        second - retry >= Duration::from_millis(1280),
        "{second} {retry}"
    );
}

#[test]
fn ring_hash_sends_one_hash_to_one_endpoint_and_connects_lazily() {
    let mut net = Net::new();
    let policy = LbPolicy::RingHash {
        min_ring_size: 1024,
        max_ring_size: 8 * 1024 * 1024,
    };
    net.update(vec![eds(
        cluster_resource("c", policy),
        simple(&[1, 2, 3, 4]),
    )]);
    let args = |hash| PickArgs {
        hash: Some(hash),
        random: 0,
        override_host: None,
    };
    // Nothing connects until a pick lands: that endpoint only.
    let pick = net.lb.pick(net.now, "c", &args(42));
    assert_eq!(pick, Pick::Queue);
    net.settle();
    assert_eq!(net.connects.len(), 1);
    let first = complete_address(&net.lb.pick(net.now, "c", &args(42))).unwrap();
    assert_eq!(first, net.connects[0]);
    for _ in 0..10 {
        assert_eq!(
            complete_address(&net.lb.pick(net.now, "c", &args(42))),
            Some(first)
        );
    }
}

#[test]
fn ring_hash_skips_a_failed_endpoint_to_the_next_on_the_ring() {
    let mut net = Net::new();
    let policy = LbPolicy::RingHash {
        min_ring_size: 64,
        max_ring_size: 64,
    };
    net.update(vec![eds(cluster_resource("c", policy), simple(&[1, 2, 3]))]);
    let args = PickArgs {
        hash: Some(7),
        random: 0,
        override_host: None,
    };
    net.lb.pick(net.now, "c", &args);
    net.settle();
    let first = net.connects[0];
    net.failing.insert(first);
    // The chosen endpoint's connection drops and reconnecting fails.
    let Some(Pick::Complete { subchannel, .. }) = Some(net.lb.pick(net.now, "c", &args)) else {
        panic!()
    };
    net.lb
        .subchannel_state(net.now, subchannel, ConnectivityState::Idle);
    net.settle();
    net.lb.pick(net.now, "c", &args); // reconnects, fails
    net.settle();
    net.lb.pick(net.now, "c", &args); // the next endpoint connects
    net.settle();
    let next = complete_address(&net.lb.pick(net.now, "c", &args)).expect("next endpoint");
    assert_ne!(next, first);
}

#[test]
fn least_request_prefers_the_endpoint_with_fewer_calls_in_flight() {
    let mut net = Net::new();
    let policy = LbPolicy::LeastRequest { choice_count: 2 };
    net.update(vec![eds(cluster_resource("c", policy), simple(&[1, 2]))]);
    net.pick("c", 0);
    // Keep every call open: with two endpoints and two samples, the loads can differ
    // by at most a few calls.
    let mut load: BTreeMap<SocketAddr, i64> = BTreeMap::new();
    for i in 0..1000u64 {
        let address = complete_address(&net.pick("c", i.wrapping_mul(0x9e37_79b9))).unwrap();
        *load.entry(address).or_default() += 1;
    }
    let difference = (load[&addr(1)] - load[&addr(2)]).abs();
    assert!(difference <= 10, "{load:?}");
}

fn failure_percentage(max_ejection_percent: u32) -> OutlierDetection {
    OutlierDetection {
        interval: Duration::from_secs(10),
        base_ejection_time: Duration::from_secs(30),
        max_ejection_time: Duration::from_secs(300),
        max_ejection_percent,
        success_rate_ejection: None,
        failure_percentage_ejection: Some(FailurePercentageEjection {
            threshold: 50,
            enforcement_percentage: 100,
            minimum_hosts: 3,
            request_volume: 10,
        }),
    }
}

#[test]
fn outlier_detection_ejects_a_failing_endpoint_for_the_base_ejection_time() {
    let mut net = Net::new();
    let mut resource = cluster_resource("c", LbPolicy::RoundRobin);
    resource.outlier_detection = Some(failure_percentage(50));
    net.update(vec![eds(resource, simple(&[1, 2, 3, 4]))]);
    net.pick("c", 0);
    let bad = addr(3);
    let outcome = fails_on(bad);
    net.picks("c", 400, outcome);
    net.advance_to(Instant::from_secs(10));
    let seen = net.picks("c", 300, outcome);
    assert!(!seen.contains_key(&bad), "ejected: {seen:?}");
    // Unejected at the first sweep 30 s after the ejection.
    net.advance_to(Instant::from_secs(35));
    assert!(
        !net.picks("c", 30, |_| CallOutcome::Success)
            .contains_key(&bad)
    );
    net.advance_to(Instant::from_secs(40));
    assert!(
        net.picks("c", 30, |_| CallOutcome::Success)
            .contains_key(&bad)
    );
}

#[test]
fn outlier_detection_counts_and_ejects_an_endpoint_with_all_its_addresses() {
    let mut net = Net::new();
    let mut resource = cluster_resource("c", LbPolicy::RoundRobin);
    resource.outlier_detection = Some(failure_percentage(50));
    // Endpoint 1 has a second address, 11 (A61): its calls count for the endpoint.
    let endpoints = vec![dual_endpoint(1, 11), endpoint(2), endpoint(3), endpoint(4)];
    net.update(vec![eds(resource, one_locality(endpoints))]);
    net.pick("c", 0);
    let outcome = fails_on(addr(1));
    net.picks("c", 400, outcome);
    net.advance_to(Instant::from_secs(10));
    // Ejected, the endpoint's other address is no way around it: 11 is not used.
    let seen = net.picks("c", 300, outcome);
    assert_eq!(
        seen.keys().copied().collect::<Vec<_>>(),
        [addr(2), addr(3), addr(4)],
        "{seen:?}"
    );
    assert!(
        net.connects.iter().all(|a| *a != addr(11)),
        "{:?}",
        net.connects
    );
}

#[test]
fn outlier_detection_ejects_no_more_than_max_ejection_percent() {
    let mut net = Net::new();
    let mut resource = cluster_resource("c", LbPolicy::RoundRobin);
    resource.outlier_detection = Some(failure_percentage(25));
    net.update(vec![eds(resource, simple(&[1, 2, 3, 4]))]);
    net.pick("c", 0);
    net.picks("c", 400, |_| CallOutcome::Failure);
    net.advance_to(Instant::from_secs(10));
    let seen = net.picks("c", 300, |_| CallOutcome::Success);
    assert_eq!(seen.len(), 3, "one of four ejected: {seen:?}");
}

#[test]
fn an_aggregate_cluster_fails_over_between_its_leaf_clusters() {
    let mut net = Net::new();
    net.failing.insert(addr(1));
    let primary = eds(
        cluster_resource("primary", LbPolicy::RoundRobin),
        simple(&[1]),
    );
    let secondary = eds(
        cluster_resource("secondary", LbPolicy::RoundRobin),
        simple(&[2]),
    );
    let mut aggregate = cluster_resource("agg", LbPolicy::RoundRobin);
    aggregate.cluster_type = ClusterType::Aggregate {
        clusters: vec!["primary".into(), "secondary".into()],
    };
    let agg = ClusterConfig {
        load_stats: None,
        cluster: Arc::new(aggregate),
        children: ClusterResolution::Aggregate {
            leaf_clusters: vec!["primary".into(), "secondary".into()],
        },
    };
    net.update(vec![primary, secondary, agg]);
    assert_eq!(net.lb.cluster_state("agg"), Some(ConnectivityState::Idle));
    net.pick("agg", 0);
    assert_eq!(net.connects, vec![addr(1), addr(2)]);
    assert_eq!(complete_address(&net.pick("agg", 1)), Some(addr(2)));
    net.failing.clear();
    net.advance_to(Instant::from_secs(2));
    assert_eq!(complete_address(&net.pick("agg", 2)), Some(addr(1)));
}

#[test]
fn weighted_localities_share_picks_by_weight() {
    let mut net = Net::new();
    let priorities = vec![Priority {
        localities: vec![
            locality("a", 1, vec![endpoint(1)]),
            locality("b", 3, vec![endpoint(2)]),
        ],
    }];
    net.update(vec![eds(
        cluster_resource("c", LbPolicy::RoundRobin),
        priorities,
    )]);
    net.pick("c", 0);
    let seen = net.picks("c", 40_000, |_| CallOutcome::Success);
    let share = seen[&addr(2)] as f64 / 40_000.0;
    assert!((0.73..0.77).contains(&share), "{seen:?}");
}

#[test]
fn a_failed_cluster_and_an_eds_error_fail_picks_with_their_reason() {
    let mut net = Net::new();
    let mut list = clusters(vec![]);
    list.insert(
        "bad".into(),
        Err(crate::client::XdsError {
            kind: crate::client::ErrorKind::Invalid,
            status: Status::new(Code::UNAVAILABLE, "cluster \"bad\": invalid"),
        }),
    );
    let resource = cluster_resource("no-eds", LbPolicy::RoundRobin);
    list.insert(
        "no-eds".into(),
        Ok(ClusterConfig {
            load_stats: None,
            cluster: Arc::new(resource),
            children: ClusterResolution::Endpoints {
                service_name: "no-eds".into(),
                endpoints: None,
                resolution_note: Some("EDS resource \"no-eds\" does not exist".into()),
            },
        }),
    );
    net.lb.update_clusters(net.now, &list);
    let Pick::Fail(status) = net.pick("bad", 0) else {
        panic!()
    };
    assert_eq!(status.message, "cluster \"bad\": invalid");
    let Pick::Fail(status) = net.pick("no-eds", 0) else {
        panic!()
    };
    assert!(
        status.message.contains("does not exist"),
        "{}",
        status.message
    );
    assert_eq!(status.code, Code::UNAVAILABLE);
}

#[test]
fn a_logical_dns_cluster_asks_for_resolution_and_uses_the_addresses() {
    let mut net = Net::new();
    let mut resource = cluster_resource("dns", LbPolicy::RoundRobin);
    resource.cluster_type = ClusterType::LogicalDns {
        host: "svc.example".into(),
        port: 443,
    };
    let config = ClusterConfig {
        load_stats: None,
        cluster: Arc::new(resource),
        children: ClusterResolution::LogicalDns {
            host: "svc.example".into(),
            port: 443,
        },
    };
    net.update(vec![config.clone()]);
    assert_eq!(net.resolves, vec!["dns".to_owned()]);
    assert_eq!(
        net.pick("dns", 0),
        Pick::Queue,
        "picks wait for the resolution"
    );
    assert_eq!(
        net.lb.cluster_state("dns"),
        Some(ConnectivityState::Connecting)
    );
    net.lb
        .dns_resolved(net.now, "dns", Ok(vec![addr(1), addr(2)]));
    net.settle();
    net.pick("dns", 0);
    // One endpoint with both addresses: the first connects and takes every pick.
    assert_eq!(net.connects, vec![addr(1)]);
    assert_eq!(complete_address(&net.pick("dns", 1)), Some(addr(1)));
    // The same config again does not resolve again.
    net.update(vec![config]);
    assert_eq!(net.resolves.len(), 1);
    assert_eq!(complete_address(&net.pick("dns", 2)), Some(addr(1)));
}

fn dns_cluster() -> ClusterConfig {
    let mut resource = cluster_resource("dns", LbPolicy::RoundRobin);
    resource.cluster_type = ClusterType::LogicalDns {
        host: "svc.example".into(),
        port: 443,
    };
    ClusterConfig {
        load_stats: None,
        cluster: Arc::new(resource),
        children: ClusterResolution::LogicalDns {
            host: "svc.example".into(),
            port: 443,
        },
    }
}

fn subchannel_of(pick: &Pick) -> SubchannelId {
    match pick {
        Pick::Complete { subchannel, .. } => *subchannel,
        other => panic!("no subchannel: {other:?}"),
    }
}

#[test]
fn a_logical_dns_cluster_resolves_again_when_its_connection_closes_at_most_every_30_s() {
    let mut net = Net::new();
    net.update(vec![dns_cluster()]);
    net.lb.dns_resolved(net.now, "dns", Ok(vec![addr(1)]));
    net.settle();
    net.pick("dns", 0);
    let first = subchannel_of(&net.pick("dns", 1));
    assert_eq!(net.lb.poll_timeout(), None, "READY: nothing to resolve");
    // 5 s in, the connection closes: resolved again, but not before 30 s after the
    // last resolution.
    net.advance_to(Instant::from_secs(5));
    net.lb
        .subchannel_state(net.now, first, ConnectivityState::Idle);
    net.settle();
    assert_eq!(net.resolves.len(), 1);
    assert_eq!(net.lb.poll_timeout(), Some(Instant::from_secs(30)));
    net.advance_to(Instant::from_secs(30));
    assert_eq!(net.resolves, ["dns", "dns"]);
    // The host moved: the new address is used.
    net.lb.dns_resolved(net.now, "dns", Ok(vec![addr(2)]));
    net.settle();
    net.pick("dns", 2);
    let second = subchannel_of(&net.pick("dns", 3));
    assert_eq!(net.lb.subchannel_address(second), Some(addr(2)));
    // More than 30 s after the last resolution, a closed connection resolves at once.
    net.advance_to(Instant::from_secs(61));
    net.lb
        .subchannel_state(net.now, second, ConnectivityState::TransientFailure);
    net.settle();
    assert_eq!(net.resolves.len(), 3);
}

#[test]
fn a_failed_resolution_is_retried_with_backoff() {
    let mut net = Net::new();
    net.update(vec![dns_cluster()]);
    let no_host = || Err(Status::new(Code::UNAVAILABLE, "no such host"));
    net.lb.dns_resolved(net.now, "dns", no_host());
    net.settle();
    let retry = net.lb.poll_timeout().expect("a retry");
    assert!(
        (Instant::from_millis(800)..=Instant::from_millis(1200)).contains(&retry),
        "{retry}"
    );
    net.advance_to(retry);
    assert_eq!(net.resolves.len(), 2);
    net.lb.dns_resolved(net.now, "dns", no_host());
    net.settle();
    let again = net.lb.poll_timeout().expect("another retry");
    let delay = again.saturating_duration_since(retry);
    assert!(
        (Duration::from_millis(1280)..=Duration::from_millis(1920)).contains(&delay),
        "{delay:?}"
    );
    net.advance_to(again);
    net.lb.dns_resolved(net.now, "dns", Ok(vec![addr(1)]));
    net.settle();
    assert_eq!(net.resolves.len(), 3);
    assert_eq!(net.lb.poll_timeout(), None, "resolved: no retry left");
    // The cluster leaves the config: nothing more is asked for it.
    net.update(vec![]);
    assert_eq!(net.lb.poll_timeout(), None);
}

#[test]
fn an_endpoint_with_additional_addresses_falls_back_to_them() {
    let mut net = Net::new();
    net.failing.insert(addr(1));
    let priorities = one_locality(vec![dual_endpoint(1, 11)]);
    net.update(vec![eds(
        cluster_resource("c", LbPolicy::RoundRobin),
        priorities,
    )]);
    net.pick("c", 0);
    assert_eq!(net.connects, vec![addr(1), addr(11)]);
    assert_eq!(complete_address(&net.pick("c", 1)), Some(addr(11)));
}

#[test]
fn the_request_hash_of_a_header_is_xxh64_with_seed_zero() {
    // XXH64("", 0) and XXH64("abc", 0), the reference values.
    assert_eq!(hash_header_value(b""), 0xef46_db37_51d8_e999);
    assert_eq!(hash_header_value(b"abc"), 0x44bc_2cf5_ad77_0999);
}
