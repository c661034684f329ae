//! Load-balancer pick cost over 1,000 READY endpoints: `round_robin` (one locality, so
//! the weighted-locality step runs too), `ring_hash` (A42, a 2,000-entry ring for 1,000
//! equal weights) and `least_request` (A48, two choices); and `round_robin` on a cluster
//! that reports its load (LRS: the pick also finds the endpoint's locality counters and
//! counts the call, its end counts the outcome).
//!
//! Each measured pick is a full [`LoadBalancer::pick`]: the cluster looked up by name,
//! drops, circuit breaker, priority, locality and the endpoint policy, returning the
//! subchannel, its address and the call token. `pick + finish` adds
//! [`LoadBalancer::call_finished`], as an RPC does. The floor, measured in the same run,
//! is the least any picker does: the next element of a `Vec` of 1,000 addresses.
//!
//! Before the measurements a counting global allocator reports the allocations of
//! 100,000 picks per policy (the target is zero); the run fails if there are any.
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
use xds_proto_core::resource::{
    ClusterResource, ClusterType, Endpoint, EndpointsResource, HealthStatus, LbPolicy, Locality,
    LocalityEndpoints, Priority,
};
use xds_proto_testing::alloc::{self, CountingAlloc};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

const ENDPOINTS: u16 = 1000;
const CLUSTER: &str = "outbound|8080||svc.ns.svc.cluster.local";

fn address(i: u16) -> SocketAddr {
    SocketAddr::from(([10, (i >> 8) as u8, i as u8, 1], 8080))
}

/// A load balancer with one cluster of 1,000 READY endpoints under `policy`, counting
/// its load for LRS when `lrs`.
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
    };
    let config = ClusterConfig {
        load_stats: lrs.then(|| ClusterLoadStats::new(CLUSTER, None)),
        cluster: Arc::new(cluster),
        children: ClusterResolution::Endpoints {
            service_name: CLUSTER.into(),
            endpoints: Some(Arc::new(assignment)),
            resolution_note: None,
        },
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
            hash: Some(rng.next()),
            random: rng.next(),
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
    lb
}

/// The runtime's random numbers: splitmix64.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// The policies measured, by name, and whether the cluster reports its load.
fn policies() -> [(&'static str, LbPolicy, bool); 4] {
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
    ]
}

fn report_allocations() {
    for (name, policy, lrs) in policies() {
        let mut lb = ready_lb(policy, lrs);
        let mut rng = SplitMix(11);
        let before = alloc::allocations();
        for _ in 0..100_000 {
            let args = PickArgs {
                hash: Some(rng.next()),
                random: rng.next(),
            };
            if let Pick::Complete { call, .. } = lb.pick(Instant::ZERO, CLUSTER, &args) {
                lb.call_finished(Instant::ZERO, call, CallOutcome::Success);
            }
        }
        let allocations = alloc::allocations() - before;
        println!("lb {name}: allocations per 100,000 picks (with call_finished): {allocations}");
        assert_eq!(allocations, 0, "{name} picks allocate");
    }
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
        let mut lb = ready_lb(policy.clone(), lrs);
        let mut rng = SplitMix(5);
        group.bench_function(format!("{name}/pick"), |b| {
            b.iter(|| {
                let args = PickArgs {
                    hash: Some(rng.next()),
                    random: rng.next(),
                };
                black_box(lb.pick(Instant::ZERO, black_box(CLUSTER), &args))
            })
        });
        let mut lb = ready_lb(policy, lrs);
        group.bench_function(format!("{name}/pick+finish"), |b| {
            b.iter(|| {
                let args = PickArgs {
                    hash: Some(rng.next()),
                    random: rng.next(),
                };
                if let Pick::Complete { call, .. } = lb.pick(Instant::ZERO, CLUSTER, &args) {
                    lb.call_finished(Instant::ZERO, call, CallOutcome::Success);
                }
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
