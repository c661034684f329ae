//! Load-balancer pick cost over 1,000 READY endpoints: `round_robin` (one locality, so
//! the weighted-locality step runs too), `ring_hash` (A42, a 2,000-entry ring for 1,000
//! equal weights), `least_request` (A48, two choices) and `weighted_round_robin` (A58
//! under `wrr_locality`, its stride scheduler over 1,000 endpoints weighing ten different
//! ORCA-reported weights, past their blackout); and `round_robin` on a cluster that
//! reports its load (LRS: the pick also finds the endpoint's locality counters and
//! counts the call, its end counts the outcome).
//!
//! Each measured pick is a full [`LoadBalancer::pick`]: the cluster looked up by name,
//! drops, circuit breaker, priority, locality and the endpoint policy, returning the
//! subchannel, its address and the call token. `pick + finish` adds
//! [`LoadBalancer::call_finished`], as an RPC does (for weighted round robin
//! [`LoadBalancer::call_finished_with_report`] with the call's decoded ORCA report, so
//! the weight update is measured too). The floor, measured in the same run, is the
//! least any picker does: the next element of a `Vec` of 1,000 addresses.
//!
//! Before the measurements a counting global allocator reports the allocations of
//! 100,000 picks per policy (the target is zero); the run fails if there are any.
//!
//! `wrr_scheduler_1000_endpoints` measures weighted round robin's static stride
//! scheduler alone (the core's `src/lb/wrr_scheduler.rs`, compiled into this bench) over
//! the same 1,000 weights, to show its share of a weighted round robin pick.
//!
//! Run: `cargo bench -p xds-proto-core --bench lb`.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use xds_proto_core::Instant;
use xds_proto_core::dependency::{ClusterConfig, ClusterResolution};
use xds_proto_core::lb::{
    CallOutcome, ConnectivityState, LbAction, LbSettings, LoadBalancer, Pick, PickArgs,
};
use xds_proto_core::lrs::ClusterLoadStats;
use xds_proto_core::orca::OrcaLoadReport;
use xds_proto_core::resource::{
    ClusterResource, ClusterType, Endpoint, EndpointsResource, HealthStatus, LbPolicy, Locality,
    LocalityEndpoints, Priority, WeightedRoundRobinConfig,
};
use xds_proto_testing::alloc::{self, CountingAlloc};
use xds_proto_testing::peer::SplitMix;

#[allow(dead_code)]
#[path = "../src/lb/wrr_scheduler.rs"]
mod wrr_scheduler;

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

const ENDPOINTS: u16 = 1000;
const CLUSTER: &str = "outbound|8080||svc.ns.svc.cluster.local";

fn address(i: u16) -> SocketAddr {
    SocketAddr::from(([10, (i >> 8) as u8, i as u8, 1], 8080))
}

/// When the picks are measured: weighted round robin's weights are in use by then.
const NOW: Instant = Instant::from_secs(2);

/// Endpoint `i`'s utilization: 0.1 to 1.0 by `i % 10`.
fn utilization(address: SocketAddr) -> f64 {
    let SocketAddr::V4(v4) = address else {
        unreachable!("the endpoints are IPv4")
    };
    let [_, high, low, _] = v4.ip().octets();
    0.1 + f64::from(u16::from_be_bytes([high, low]) % 10) * 0.1
}

/// An endpoint's ORCA report: 100 qps at its utilization.
fn load(address: SocketAddr) -> OrcaLoadReport {
    OrcaLoadReport {
        qps: 100.0,
        cpu_utilization: utilization(address),
        ..OrcaLoadReport::default()
    }
}

/// A load balancer with one cluster of 1,000 READY endpoints under `policy`, at
/// [`NOW`], counting its load for LRS when `lrs`; with weighted round robin every
/// endpoint has reported its load.
fn ready_lb(policy: LbPolicy, lrs: bool) -> LoadBalancer {
    let endpoints = (0..ENDPOINTS)
        .map(|i| Endpoint {
            address: address(i),
            additional_addresses: vec![],
            health_status: HealthStatus::Healthy,
            weight: 1,
            hostname: String::new(),
        })
        .collect();
    let assignment = EndpointsResource {
        cluster_name: CLUSTER.into(),
        priorities: vec![Priority {
            localities: vec![LocalityEndpoints {
                locality: Locality::default(),
                weight: 1,
                endpoints,
            }],
        }],
        drop_overloads: vec![],
    };
    let cluster = ClusterResource {
        name: CLUSTER.into(),
        cluster_type: ClusterType::Eds { service_name: None },
        lb_policy: policy,
        lrs_server: lrs,
        // Calls are left open in the pick-only measurement.
        max_requests: u32::MAX,
        tls: None,
        outlier_detection: None,
        override_host_status: Default::default(),
    };
    let config = ClusterConfig {
        cluster: Arc::new(cluster),
        children: ClusterResolution::Endpoints {
            service_name: CLUSTER.into(),
            endpoints: Some(Arc::new(assignment)),
            resolution_note: None,
        },
        load_stats: lrs.then(|| ClusterLoadStats::new(CLUSTER, None)),
    };
    let mut lb = LoadBalancer::new(LbSettings::new(1));
    let now = Instant::ZERO;
    lb.update_clusters(now, &BTreeMap::from([(CLUSTER.to_owned(), Ok(config))]));
    // Ring hash connects the endpoints picks land on: pick at fresh random points
    // until every endpoint has connected (the others connect all at the first pick).
    let mut rng = SplitMix(3);
    let mut connected = 0;
    while connected < usize::from(ENDPOINTS) {
        let args = PickArgs {
            hash: Some(rng.next_u64()),
            random: rng.next_u64(),
            override_host: None,
        };
        if let Pick::Complete { call, .. } = lb.pick(now, CLUSTER, &args) {
            lb.call_finished(now, call, CallOutcome::Success);
        }
        while let Some(action) = lb.poll_action() {
            if let LbAction::Connect { subchannel, .. } = action {
                lb.subchannel_state(now, subchannel, ConnectivityState::Ready);
                connected += 1;
            }
        }
    }
    // Weighted round robin: every endpoint reports (the scheduler picks each at least
    // once in 20,000 picks), and the weights are used from the next update on.
    for _ in 0..20 * usize::from(ENDPOINTS) {
        let args = PickArgs {
            hash: None,
            random: rng.next_u64(),
            override_host: None,
        };
        if let Pick::Complete { call, address, .. } = lb.pick(now, CLUSTER, &args) {
            let report = load(address);
            lb.call_finished_with_report(now, call, CallOutcome::Success, Some(&report));
        }
    }
    while let Some(at) = lb.poll_timeout().filter(|at| *at <= NOW) {
        lb.handle_timeout(at);
    }
    lb.handle_timeout(NOW);
    lb
}

/// The policies measured, by name, and whether the cluster reports its load.
fn policies() -> [(&'static str, LbPolicy, bool); 5] {
    [
        ("round_robin", LbPolicy::RoundRobin, false),
        ("round_robin+lrs", LbPolicy::RoundRobin, true),
        (
            "ring_hash",
            LbPolicy::RingHash {
                min_ring_size: 1024,
                max_ring_size: 8 * 1024 * 1024,
            },
            false,
        ),
        (
            "least_request",
            LbPolicy::LeastRequest { choice_count: 2 },
            false,
        ),
        (
            "weighted_round_robin",
            LbPolicy::WrrLocality(Box::new(LbPolicy::WeightedRoundRobin(
                WeightedRoundRobinConfig {
                    blackout_period: Duration::ZERO,
                    ..WeightedRoundRobinConfig::default()
                },
            ))),
            false,
        ),
    ]
}

/// Ends a call as an RPC through the channel does: with its ORCA report when the
/// call wants it.
fn finish(lb: &mut LoadBalancer, call: xds_proto_core::lb::CallToken, report: &OrcaLoadReport) {
    let report = call.wants_load_report().then_some(report);
    lb.call_finished_with_report(NOW, call, CallOutcome::Success, report);
}

fn report_allocations() {
    for (name, policy, lrs) in policies() {
        let mut lb = ready_lb(policy, lrs);
        let mut rng = SplitMix(11);
        let report = load(address(0));
        let before = alloc::allocations();
        for _ in 0..100_000 {
            let args = PickArgs {
                hash: Some(rng.next_u64()),
                random: rng.next_u64(),
                override_host: None,
            };
            if let Pick::Complete { call, .. } = lb.pick(NOW, CLUSTER, &args) {
                finish(&mut lb, call, &report);
            }
        }
        let allocations = alloc::allocations() - before;
        println!("lb {name}: allocations per 100,000 picks (with call_finished): {allocations}");
        assert_eq!(allocations, 0, "{name} picks allocate");
    }
    // The weighted round robin measured is weighted: an endpoint at utilization 0.1
    // gets ten times the picks of one at 1.0.
    let mut lb = ready_lb(policies()[4].1.clone(), false);
    let (mut light, mut heavy) = (0u64, 0u64);
    for i in 0..100_000 {
        let args = PickArgs {
            hash: None,
            random: i,
            override_host: None,
        };
        if let Pick::Complete { address, call, .. } = lb.pick(NOW, CLUSTER, &args) {
            let u = utilization(address);
            light += u64::from(u < 0.15);
            heavy += u64::from(u > 0.95);
            lb.call_finished(NOW, call, CallOutcome::Success);
        }
    }
    let ratio = light as f64 / heavy as f64;
    println!("lb weighted_round_robin: picks at utilization 0.1 / at 1.0 = {ratio:.2}");
    assert!((9.5..10.5).contains(&ratio), "weights not in use: {ratio}");
}

fn bench(c: &mut Criterion) {
    report_allocations();
    let mut group = c.benchmark_group("lb_pick_1000_endpoints");
    group.throughput(Throughput::Elements(1));
    group.measurement_time(Duration::from_secs(3));
    group.warm_up_time(Duration::from_secs(1));
    let addresses: Vec<SocketAddr> = (0..ENDPOINTS).map(address).collect();
    let mut next = 0usize;
    group.bench_function("floor_vec_cycle", |b| {
        b.iter(|| {
            next += 1;
            if next == addresses.len() {
                next = 0;
            }
            black_box(addresses[next])
        })
    });
    for (name, policy, lrs) in policies() {
        let mut lb = ready_lb(policy, lrs);
        let mut rng = SplitMix(5);
        group.bench_function(format!("{name}/pick"), |b| {
            b.iter(|| {
                let args = PickArgs {
                    hash: Some(rng.next_u64()),
                    random: rng.next_u64(),
                    override_host: None,
                };
                black_box(lb.pick(NOW, black_box(CLUSTER), &args))
            })
        });
        let (_, policy, lrs) = policies().into_iter().find(|p| p.0 == name).unwrap();
        let mut lb = ready_lb(policy, lrs);
        let report = load(address(0));
        group.bench_function(format!("{name}/pick+finish"), |b| {
            b.iter(|| {
                let args = PickArgs {
                    hash: Some(rng.next_u64()),
                    random: rng.next_u64(),
                    override_host: None,
                };
                if let Pick::Complete { call, .. } = lb.pick(NOW, CLUSTER, &args) {
                    finish(&mut lb, call, &report);
                }
            })
        });
    }
    group.finish();
}

/// The stride scheduler alone: a pick over the 1,000 endpoints' weights (100 qps at
/// utilizations 0.1 to 1.0).
fn bench_scheduler(c: &mut Criterion) {
    let weights: Vec<f64> = (0..ENDPOINTS)
        .map(|i| 100.0 / utilization(address(i)))
        .collect();
    let mut rng = SplitMix(7);
    let mut scheduler = wrr_scheduler::StrideScheduler::default();
    scheduler.rebuild(&weights, || rng.next_u64());
    let mut group = c.benchmark_group("wrr_scheduler_1000_endpoints");
    group.throughput(Throughput::Elements(1));
    group.measurement_time(Duration::from_secs(3));
    group.warm_up_time(Duration::from_secs(1));
    group.bench_function("stride/pick", |b| b.iter(|| black_box(scheduler.pick())));
    group.finish();
}

criterion_group!(benches, bench, bench_scheduler);
criterion_main!(benches);
