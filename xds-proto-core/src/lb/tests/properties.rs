//! Property tests against simple reference models: locality weights give pick
//! frequencies, the ring gives each endpoint its weight's share and a hash goes to the
//! first entry at or after it, and ejections follow A50's rules counted by hand.

use quickcheck::{QuickCheck, TestResult};

use super::*;
use crate::lb::outlier::{EjectionChange, OutlierDetector};
use crate::lb::policy::EndpointSpec;
use crate::lb::ring_hash::build_ring;
use crate::resource::cluster::SuccessRateEjection;
use rand_core::SeedableRng;

fn qc(tests: u64) -> QuickCheck {
    QuickCheck::new().tests(tests).max_tests(tests * 10)
}

#[test]
fn locality_weights_give_pick_frequencies() {
    fn prop(weights: Vec<u8>) -> TestResult {
        let weights: Vec<u32> = weights
            .iter()
            .take(5)
            .map(|w| u32::from(*w % 10) + 1)
            .collect();
        if weights.len() < 2 {
            return TestResult::discard();
        }
        let localities = weights
            .iter()
            .enumerate()
            .map(|(i, w)| locality(&format!("l{i}"), *w, vec![endpoint(i as u16 + 1)]))
            .collect();
        let mut net = Net::new();
        net.update(vec![eds(
            cluster_resource("c", LbPolicy::RoundRobin),
            vec![Priority { localities }],
        )]);
        net.pick("c", 0);
        const N: u64 = 20_000;
        let seen = net.picks("c", N, |_| CallOutcome::Success);
        let total: u32 = weights.iter().sum();
        let ok = weights.iter().enumerate().all(|(i, w)| {
            let expected = f64::from(*w) / f64::from(total);
            let got = seen.get(&addr(i as u16 + 1)).copied().unwrap_or(0) as f64 / N as f64;
            (got - expected).abs() < 0.02
        });
        TestResult::from_bool(ok)
    }
    qc(30).quickcheck(prop as fn(Vec<u8>) -> TestResult);
}

fn specs(weights: &[u32]) -> Vec<EndpointSpec> {
    weights
        .iter()
        .enumerate()
        .map(|(i, w)| EndpointSpec {
            subchannels: Vec::new(),
            weight: u64::from(*w),
            address: addr(i as u16 + 1),
        })
        .collect()
}

#[test]
fn the_ring_gives_each_endpoint_its_weights_share() {
    fn prop(weights: Vec<u8>, min_ring: u16) -> TestResult {
        let weights: Vec<u32> = weights
            .iter()
            .take(8)
            .map(|w| u32::from(*w % 20) + 1)
            .collect();
        if weights.is_empty() {
            return TestResult::discard();
        }
        let min_size = u64::from(min_ring % 2048) + 1;
        let max_size = 4096;
        let ring = build_ring(&specs(&weights), min_size, max_size);
        let total: u32 = weights.iter().sum();
        let min_share = f64::from(*weights.iter().min().unwrap()) / f64::from(total);
        let scale = ((min_share * min_size as f64).ceil() / min_share).min(max_size as f64);
        let sorted = ring.windows(2).all(|w| w[0].hash <= w[1].hash);
        let shares = weights.iter().enumerate().all(|(i, w)| {
            let count = ring.iter().filter(|e| e.endpoint == i as u32).count() as f64;
            (count - scale * f64::from(*w) / f64::from(total)).abs() <= 1.0 + 1e-9
        });
        let size = ring.len() as u64;
        TestResult::from_bool(
            sorted && shares && size >= min_size.min(max_size) && size <= max_size + 1,
        )
    }
    qc(200).quickcheck(prop as fn(Vec<u8>, u16) -> TestResult);
}

#[test]
fn a_hash_goes_to_the_first_ring_entry_at_or_after_it() {
    let mut net = Net::new();
    let policy = LbPolicy::RingHash {
        min_ring_size: 256,
        max_ring_size: 1024,
    };
    let ports = [1, 2, 3, 4, 5];
    net.update(vec![eds(cluster_resource("c", policy), simple(&ports))]);
    let ring = build_ring(&specs(&[1; 5]), 256, 1024);
    // Connect every endpoint first: pick each endpoint's first ring hash.
    for e in 0..5u32 {
        let hash = ring.iter().find(|r| r.endpoint == e).unwrap().hash;
        let args = PickArgs {
            hash: Some(hash),
            random: 0,
            override_host: None,
        };
        net.lb.pick(net.now, "c", &args);
        net.settle();
    }
    assert_eq!(net.connects.len(), 5);
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(3);
    for _ in 0..2000 {
        let hash = rand_core::RngCore::next_u64(&mut rng);
        let owner = ring
            .iter()
            .find(|r| r.hash >= hash)
            .unwrap_or(&ring[0])
            .endpoint;
        let args = PickArgs {
            hash: Some(hash),
            random: 0,
            override_host: None,
        };
        let pick = net.lb.pick(net.now, "c", &args);
        let Pick::Complete { address, call, .. } = pick else {
            panic!("all endpoints are ready: {pick:?}")
        };
        net.lb.call_finished(net.now, call, CallOutcome::Success);
        assert_eq!(address, addr(ports[owner as usize]), "hash {hash:#x}");
    }
}

/// A50 by hand: which of `counts` (successes, failures) one sweep ejects, in
/// subchannel order, with enforcement at 100 %.
fn reference_ejections(counts: &[(u32, u32)], config: &OutlierDetection) -> BTreeSet<usize> {
    let n = counts.len();
    let mut ejected = BTreeSet::new();
    let try_eject = |i: usize, ejected: &mut BTreeSet<usize>| {
        if (ejected.len() * 100) < config.max_ejection_percent as usize * n {
            ejected.insert(i);
        }
    };
    if let Some(sr) = &config.success_rate_ejection {
        let rates: Vec<(usize, f64)> = counts
            .iter()
            .enumerate()
            .filter(|(_, (s, f))| s + f >= sr.request_volume && s + f > 0)
            .map(|(i, (s, f))| (i, f64::from(*s) / f64::from(s + f)))
            .collect();
        if !rates.is_empty() && rates.len() >= sr.minimum_hosts as usize {
            let mean = rates.iter().map(|r| r.1).sum::<f64>() / rates.len() as f64;
            let var = rates.iter().map(|r| (r.1 - mean).powi(2)).sum::<f64>() / rates.len() as f64;
            let threshold = mean - var.sqrt() * f64::from(sr.stdev_factor) / 1000.0;
            for (i, rate) in rates {
                if rate < threshold && !ejected.contains(&i) {
                    try_eject(i, &mut ejected);
                }
            }
        }
    }
    if let Some(fp) = &config.failure_percentage_ejection {
        let candidates: Vec<usize> = (0..n)
            .filter(|i| {
                let (s, f) = counts[*i];
                s + f >= fp.request_volume && s + f > 0
            })
            .collect();
        if candidates.len() >= fp.minimum_hosts as usize {
            for i in candidates {
                let (s, f) = counts[i];
                if f * 100 > fp.threshold * (s + f) && !ejected.contains(&i) {
                    try_eject(i, &mut ejected);
                }
            }
        }
    }
    ejected
}

#[test]
fn ejections_follow_the_reference_model() {
    fn prop(counts: Vec<(u8, u8)>, knobs: (u8, u8, u8, u8), success_rate: bool) -> TestResult {
        let counts: Vec<(u32, u32)> = counts
            .iter()
            .take(12)
            .map(|(s, f)| (u32::from(*s), u32::from(*f)))
            .collect();
        if counts.is_empty() {
            return TestResult::discard();
        }
        let (max_percent, threshold, volume, hosts) = knobs;
        let config = OutlierDetection {
            interval: Duration::from_secs(10),
            base_ejection_time: Duration::from_secs(30),
            max_ejection_time: Duration::from_secs(300),
            max_ejection_percent: u32::from(max_percent % 101),
            success_rate_ejection: success_rate.then(|| SuccessRateEjection {
                stdev_factor: u32::from(threshold) * 10,
                enforcement_percentage: 100,
                minimum_hosts: u32::from(hosts % 6),
                request_volume: u32::from(volume % 100),
            }),
            failure_percentage_ejection: Some(FailurePercentageEjection {
                threshold: u32::from(threshold % 101),
                enforcement_percentage: 100,
                minimum_hosts: u32::from(hosts % 6),
                request_volume: u32::from(volume % 100),
            }),
        };
        let ids: Vec<SubchannelId> = (0..counts.len() as u32)
            .map(|i| SubchannelId::new(i, 0))
            .collect();
        let mut detector = OutlierDetector::new(Instant::ZERO, config.clone());
        detector.set_endpoints(ids.iter().map(std::slice::from_ref));
        for (id, (s, f)) in ids.iter().zip(&counts) {
            (0..*s).for_each(|_| detector.record(*id, true));
            (0..*f).for_each(|_| detector.record(*id, false));
        }
        let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(1);
        let mut changes: Vec<EjectionChange> = Vec::new();
        detector.sweep(Instant::from_secs(10), &mut rng, &mut changes);
        let got: BTreeSet<usize> = changes
            .iter()
            .filter(|c| c.ejected)
            .map(|c| c.subchannel.index())
            .collect();
        let expected = reference_ejections(&counts, &config);
        TestResult::from_bool(got == expected && detector.ejected_count() == expected.len())
    }
    qc(500).quickcheck(prop as fn(Vec<(u8, u8)>, (u8, u8, u8, u8), bool) -> TestResult);
}
