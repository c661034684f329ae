//! Outlier detection (gRFC A50) for one cluster: call outcomes counted per endpoint (A61:
//! the calls on any of an endpoint's addresses count for it, and ejecting it ejects all
//! of them) in two buckets (the interval being filled and the last complete one); every
//! `interval` the buckets swap and the success-rate and failure-percentage algorithms
//! eject outliers, within `max_ejection_percent`, with their enforcement probability; an
//! ejection lasts `base_ejection_time × multiplier` (capped by the greater of
//! `max_ejection_time` and the base) and ends at the first sweep after that; the
//! multiplier decays by one per sweep without ejection. Ejected subchannels look like
//! TRANSIENT_FAILURE to the cluster's policies.

use rand_core::RngCore;

use super::api::SubchannelId;
use crate::DetHashMap;
use crate::resource::cluster::OutlierDetection;
use crate::time::Instant;

#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    success: u32,
    failure: u32,
}

impl Counts {
    /// Counted calls; each count saturates, and their sum is taken wide.
    fn volume(self) -> u64 {
        u64::from(self.success) + u64::from(self.failure)
    }
}

/// The shortest time between sweeps: A50 allows an `interval` of 0, which would have
/// the sweep due again at the instant it ran (an embedder's timer loop would spin
/// without time moving).
const MIN_SWEEP_INTERVAL: std::time::Duration = std::time::Duration::from_millis(1);

/// The time between sweeps for this config.
fn sweep_interval(config: &OutlierDetection) -> std::time::Duration {
    config.interval.max(MIN_SWEEP_INTERVAL)
}

#[derive(Clone, Debug, Default)]
struct EndpointStats {
    current: Counts,
    last: Counts,
    ejected_at: Option<Instant>,
    multiplier: u32,
}

/// One cluster's outlier detector.
#[derive(Debug)]
pub(super) struct OutlierDetector {
    config: OutlierDetection,
    next_sweep: Instant,
    /// Per endpoint, keyed by its first address's subchannel.
    endpoints: DetHashMap<SubchannelId, EndpointStats>,
    /// An endpoint's other addresses, to the first.
    endpoint_of: DetHashMap<SubchannelId, SubchannelId>,
    /// An endpoint's first address, to the others.
    others: DetHashMap<SubchannelId, Vec<SubchannelId>>,
}

/// A subchannel whose ejection changed at a sweep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct EjectionChange {
    pub(super) subchannel: SubchannelId,
    pub(super) ejected: bool,
}

impl OutlierDetector {
    pub(super) fn new(now: Instant, config: OutlierDetection) -> OutlierDetector {
        OutlierDetector {
            next_sweep: now + sweep_interval(&config),
            config,
            endpoints: DetHashMap::default(),
            endpoint_of: DetHashMap::default(),
            others: DetHashMap::default(),
        }
    }

    /// Takes a new config: the sweep keeps its phase (the next one comes `interval`
    /// after the last, as A50 says), the counters and ejections stay.
    pub(super) fn reconfigure(&mut self, config: OutlierDetection) {
        let (old, new) = (sweep_interval(&self.config), sweep_interval(&config));
        if new != old {
            self.next_sweep = self.next_sweep - old + new;
        }
        self.config = config;
    }

    /// Tracks exactly these endpoints (each its addresses' subchannels, first one
    /// first): new ones start clean, others are forgotten (with their ejections, which
    /// the caller sees in `is_ejected` before and after). An address listed by two
    /// endpoints counts for the first.
    pub(super) fn set_endpoints<'a>(
        &mut self,
        endpoints: impl Iterator<Item = &'a [SubchannelId]>,
    ) {
        let mut next = DetHashMap::default();
        self.endpoint_of.clear();
        self.others.clear();
        for addresses in endpoints {
            let Some((&first, rest)) = addresses.split_first() else {
                continue;
            };
            if next.contains_key(&first) || self.endpoint_of.contains_key(&first) {
                continue;
            }
            let stats = self.endpoints.remove(&first).unwrap_or_default();
            next.insert(first, stats);
            let rest: Vec<SubchannelId> = (rest.iter().copied())
                .filter(|id| !next.contains_key(id) && !self.endpoint_of.contains_key(id))
                .collect();
            for id in &rest {
                self.endpoint_of.insert(*id, first);
            }
            if !rest.is_empty() {
                self.others.insert(first, rest);
            }
        }
        self.endpoints = next;
    }

    /// The key of `id`'s endpoint: its first address's subchannel.
    fn endpoint(&self, id: SubchannelId) -> SubchannelId {
        self.endpoint_of.get(&id).copied().unwrap_or(id)
    }

    pub(super) fn is_ejected(&self, id: SubchannelId) -> bool {
        self.endpoints
            .get(&self.endpoint(id))
            .is_some_and(|a| a.ejected_at.is_some())
    }

    pub(super) fn next_sweep(&self) -> Instant {
        self.next_sweep
    }

    pub(super) fn record(&mut self, id: SubchannelId, success: bool) {
        let endpoint = self.endpoint(id);
        if let Some(a) = self.endpoints.get_mut(&endpoint) {
            let count = if success {
                &mut a.current.success
            } else {
                &mut a.current.failure
            };
            *count = count.saturating_add(1);
        }
    }

    /// Runs the sweep due at `now`, if any; appends the ejections that changed, one per
    /// address of each endpoint.
    pub(super) fn sweep(
        &mut self,
        now: Instant,
        rng: &mut impl RngCore,
        changes: &mut Vec<EjectionChange>,
    ) {
        if now < self.next_sweep {
            return;
        }
        let start = changes.len();
        self.sweep_endpoints(now, rng, changes);
        for i in start..changes.len() {
            let EjectionChange {
                subchannel,
                ejected,
            } = changes[i];
            for other in self.others.get(&subchannel).into_iter().flatten() {
                changes.push(EjectionChange {
                    subchannel: *other,
                    ejected,
                });
            }
        }
    }

    fn sweep_endpoints(
        &mut self,
        now: Instant,
        rng: &mut impl RngCore,
        changes: &mut Vec<EjectionChange>,
    ) {
        self.next_sweep = now + sweep_interval(&self.config);
        for a in self.endpoints.values_mut() {
            a.last = std::mem::take(&mut a.current);
        }
        // Sorted, so that enforcement draws replay in the same order.
        let mut ids: Vec<SubchannelId> = self.endpoints.keys().copied().collect();
        ids.sort_unstable();
        self.success_rate(now, &ids, rng, changes);
        self.failure_percentage(now, &ids, rng, changes);
        let base = self.config.base_ejection_time;
        let max = self.config.max_ejection_time.max(base);
        for id in &ids {
            let a = self.endpoints.get_mut(id).expect("listed");
            match a.ejected_at {
                None => a.multiplier = a.multiplier.saturating_sub(1),
                Some(at) => {
                    let span = base.saturating_mul(a.multiplier).min(max);
                    if now >= at + span {
                        a.ejected_at = None;
                        changes.push(EjectionChange {
                            subchannel: *id,
                            ejected: false,
                        });
                    }
                }
            }
        }
    }

    fn success_rate(
        &mut self,
        now: Instant,
        ids: &[SubchannelId],
        rng: &mut impl RngCore,
        changes: &mut Vec<EjectionChange>,
    ) {
        let Some(sr) = self.config.success_rate_ejection.clone() else {
            return;
        };
        let rates: Vec<(SubchannelId, f64)> = ids
            .iter()
            .filter_map(|id| {
                let c = self.endpoints[id].last;
                (c.volume() >= u64::from(sr.request_volume) && c.volume() > 0)
                    .then(|| (*id, f64::from(c.success) / c.volume() as f64))
            })
            .collect();
        if rates.len() < sr.minimum_hosts as usize || rates.is_empty() {
            return;
        }
        let n = rates.len() as f64;
        let mean = rates.iter().map(|(_, r)| r).sum::<f64>() / n;
        let variance = rates.iter().map(|(_, r)| (r - mean).powi(2)).sum::<f64>() / n;
        let threshold = mean - variance.sqrt() * (f64::from(sr.stdev_factor) / 1000.0);
        for (id, rate) in rates {
            if rate < threshold {
                self.maybe_eject(now, id, sr.enforcement_percentage, rng, changes);
            }
        }
    }

    fn failure_percentage(
        &mut self,
        now: Instant,
        ids: &[SubchannelId],
        rng: &mut impl RngCore,
        changes: &mut Vec<EjectionChange>,
    ) {
        let Some(fp) = self.config.failure_percentage_ejection.clone() else {
            return;
        };
        let candidates: Vec<(SubchannelId, Counts)> = ids
            .iter()
            .map(|id| (*id, self.endpoints[id].last))
            .filter(|(_, c)| c.volume() >= u64::from(fp.request_volume) && c.volume() > 0)
            .collect();
        if candidates.len() < fp.minimum_hosts as usize {
            return;
        }
        for (id, c) in candidates {
            if u64::from(c.failure) * 100 > u64::from(fp.threshold) * c.volume() {
                self.maybe_eject(now, id, fp.enforcement_percentage, rng, changes);
            }
        }
    }

    fn maybe_eject(
        &mut self,
        now: Instant,
        id: SubchannelId,
        enforcement_percentage: u32,
        rng: &mut impl RngCore,
        changes: &mut Vec<EjectionChange>,
    ) {
        let ejected = self
            .endpoints
            .values()
            .filter(|a| a.ejected_at.is_some())
            .count();
        // A50: no ejection once the ejected share reaches max_ejection_percent.
        if ejected as u64 * 100
            >= u64::from(self.config.max_ejection_percent) * self.endpoints.len() as u64
        {
            return;
        }
        if rng.next_u64() % 100 >= u64::from(enforcement_percentage) {
            return;
        }
        let a = self.endpoints.get_mut(&id).expect("candidate");
        if a.ejected_at.is_some() {
            return;
        }
        a.ejected_at = Some(now);
        a.multiplier = a.multiplier.saturating_add(1);
        changes.push(EjectionChange {
            subchannel: id,
            ejected: true,
        });
    }

    #[cfg(test)]
    pub(super) fn ejected_count(&self) -> usize {
        self.endpoints
            .values()
            .filter(|a| a.ejected_at.is_some())
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::cluster::FailurePercentageEjection;
    use rand_core::SeedableRng;
    use std::time::Duration;

    /// A long `interval` lets an endpoint's counters pass `u32::MAX` calls: they
    /// overflowed (a panic in debug builds, a wrapped count and a wrong rate in
    /// release); now each saturates and their sum is taken wide.
    #[test]
    fn call_counts_saturate_instead_of_overflowing() {
        let config = OutlierDetection {
            interval: Duration::from_secs(3600),
            base_ejection_time: Duration::from_secs(30),
            max_ejection_time: Duration::from_secs(300),
            max_ejection_percent: 100,
            success_rate_ejection: None,
            failure_percentage_ejection: Some(FailurePercentageEjection {
                threshold: 40,
                enforcement_percentage: 100,
                minimum_hosts: 1,
                request_volume: u32::MAX,
            }),
        };
        let mut detector = OutlierDetector::new(Instant::ZERO, config);
        let (a, b) = (SubchannelId::new(0, 0), SubchannelId::new(1, 0));
        detector.set_endpoints([&[a][..], &[b][..]].into_iter());
        for (id, success, failure) in [(a, u32::MAX, u32::MAX), (b, u32::MAX, 0)] {
            let stats = detector.endpoints.get_mut(&id).unwrap();
            stats.current = Counts { success, failure };
        }
        detector.record(a, true);
        detector.record(a, false);
        let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(1);
        let mut changes = Vec::new();
        detector.sweep(Instant::from_secs(3600), &mut rng, &mut changes);
        // a: half of 2^33 calls failed (over 40 %); b: none did.
        assert_eq!(
            changes,
            vec![EjectionChange {
                subchannel: a,
                ejected: true
            }]
        );
    }
}
