//! The load counters of one cluster (and EDS service name), shared between the
//! `XdsClient`, which snapshots and resets them for every report, and the load
//! balancers that count into them from the pick path.
//!
//! Counting takes no lock and allocates nothing: relaxed atomics, in entries created
//! when the configuration arrives (one per locality, one per drop category). Several
//! load balancers (one per channel of a target) may share a cluster's counters, which
//! is why they are atomics rather than plain integers under one channel's lock. A64
//! named metrics, when a call end carries them, take a short lock on the locality's
//! table of names.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::resource::endpoint::Locality;

/// The most distinct A64 named metrics one locality aggregates between two reports.
/// A name from a backend's ORCA report beyond these is not counted: the names come
/// from the backends, and each takes memory until the next report.
pub const MAX_NAMED_METRICS: usize = 64;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Reads a counter and sets it to zero.
fn take(counter: &AtomicU64) -> u64 {
    counter.swap(0, Ordering::Relaxed)
}

/// One A64 named metric of a locality: the requests that reported it and their sum.
#[derive(Clone, Debug, PartialEq)]
pub struct NamedMetric {
    /// The name, as the backend's ORCA report gave it.
    pub name: Box<str>,
    /// `num_requests_finished_with_metric`.
    pub requests: u64,
    /// `total_metric_value`: the sum of the values reported.
    pub total: f64,
}

/// The load counters of one locality of a cluster: calls issued, succeeded, failed
/// and in progress, and the A64 named metrics of the calls that ended.
///
/// The three call counters only grow (one atomic add per call start and per call
/// end); a snapshot reports what they grew by since the last one, and the calls in
/// progress are the issued ones that have not ended.
pub struct LocalityLoadStats {
    locality: Locality,
    issued: AtomicU64,
    succeeded: AtomicU64,
    errored: AtomicU64,
    /// The three counters at the last snapshot.
    reported: Mutex<[u64; 3]>,
    /// Names with their sums since the last report; a name stays (at zero) once seen,
    /// so that a backend reporting the same names allocates nothing after the first.
    named: Mutex<Vec<NamedMetric>>,
}

impl fmt::Debug for LocalityLoadStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalityLoadStats")
            .field("locality", &self.locality)
            .field("in_progress", &self.in_progress())
            .finish_non_exhaustive()
    }
}

impl LocalityLoadStats {
    fn new(locality: Locality) -> LocalityLoadStats {
        LocalityLoadStats {
            locality,
            issued: AtomicU64::new(0),
            succeeded: AtomicU64::new(0),
            errored: AtomicU64::new(0),
            reported: Mutex::new([0; 3]),
            named: Mutex::new(Vec::new()),
        }
    }

    /// The locality counted.
    pub fn locality(&self) -> &Locality {
        &self.locality
    }

    /// A call was sent to an endpoint of this locality.
    pub fn call_started(&self) {
        self.issued.fetch_add(1, Ordering::Relaxed);
    }

    /// The calls started and not ended. The ends are read first: a call ends after it
    /// starts, so a call counted ended is counted started too.
    fn in_progress(&self) -> u64 {
        let ended = self.succeeded.load(Ordering::Acquire) + self.errored.load(Ordering::Acquire);
        self.issued.load(Ordering::Acquire).saturating_sub(ended)
    }

    /// A call [`call_started`](Self::call_started) here ended: `ok` when its status was
    /// OK. `named_metrics` are the `named_metrics` of the backend's per-call ORCA
    /// report, if it sent one (A64: each name is summed and counted, per locality;
    /// names beyond [`MAX_NAMED_METRICS`] are not counted).
    pub fn call_finished<'a>(
        &self,
        ok: bool,
        named_metrics: impl IntoIterator<Item = (&'a str, f64)>,
    ) {
        let outcome = if ok { &self.succeeded } else { &self.errored };
        outcome.fetch_add(1, Ordering::Release);
        let mut metrics = named_metrics.into_iter().peekable();
        if metrics.peek().is_none() {
            return;
        }
        let mut named = lock(&self.named);
        for (name, value) in metrics {
            if let Some(m) = named.iter_mut().find(|m| &*m.name == name) {
                m.requests += 1;
                m.total += value;
            } else if named.len() < MAX_NAMED_METRICS {
                named.push(NamedMetric {
                    name: name.into(),
                    requests: 1,
                    total: value,
                });
            }
        }
    }

    /// The counts since the last snapshot (calls in progress are a level, not reset).
    fn snapshot_and_reset(&self) -> LocalitySnapshot {
        let mut named_metrics = Vec::new();
        for m in lock(&self.named).iter_mut().filter(|m| m.requests > 0) {
            named_metrics.push(m.clone());
            m.requests = 0;
            m.total = 0.0;
        }
        named_metrics.sort_by(|a, b| a.name.cmp(&b.name));
        let mut reported = lock(&self.reported);
        let ended = [&self.succeeded, &self.errored].map(|c| c.load(Ordering::Acquire));
        let now = [self.issued.load(Ordering::Acquire), ended[0], ended[1]];
        let [issued, succeeded, errored] = [0, 1, 2].map(|i| now[i].wrapping_sub(reported[i]));
        *reported = now;
        LocalitySnapshot {
            locality: self.locality.clone(),
            issued,
            succeeded,
            errored,
            in_progress: now[0].saturating_sub(now[1] + now[2]),
            named_metrics,
        }
    }
}

/// What one locality counted over a report's interval.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LocalitySnapshot {
    /// The locality.
    pub locality: Locality,
    /// `total_issued_requests`.
    pub issued: u64,
    /// `total_successful_requests`.
    pub succeeded: u64,
    /// `total_error_requests`.
    pub errored: u64,
    /// `total_requests_in_progress`, at the snapshot.
    pub in_progress: u64,
    /// The A64 named metrics reported since the last snapshot, by name.
    pub named_metrics: Vec<NamedMetric>,
}

impl LocalitySnapshot {
    fn is_zero(&self) -> bool {
        self.issued == 0
            && self.succeeded == 0
            && self.errored == 0
            && self.in_progress == 0
            && self.named_metrics.is_empty()
    }
}

/// A drop category's counter, created with the cluster's `drop_overloads`, so that
/// counting a drop looks nothing up.
#[derive(Clone, Debug)]
pub struct DropCounter(Arc<AtomicU64>);

impl DropCounter {
    /// Counts one RPC dropped in this category.
    pub fn add(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// What one cluster counted over a report's interval.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterSnapshot {
    /// The localities, by locality.
    pub localities: Vec<LocalitySnapshot>,
    /// The drop categories that dropped RPCs, with how many, by category.
    pub drops: Vec<(Arc<str>, u64)>,
    /// RPCs dropped without a category (the circuit breaker's).
    pub uncategorized_drops: u64,
}

impl ClusterSnapshot {
    /// Nothing was counted and nothing is in progress.
    pub fn is_zero(&self) -> bool {
        self.uncategorized_drops == 0
            && self.drops.is_empty()
            && self.localities.iter().all(LocalitySnapshot::is_zero)
    }

    /// Every drop: the categorized ones and the uncategorized.
    pub fn total_dropped(&self) -> u64 {
        (self.drops.iter().map(|(_, n)| *n)).fold(self.uncategorized_drops, u64::saturating_add)
    }
}

struct ClusterInner {
    cluster: Arc<str>,
    eds_service_name: Option<Arc<str>>,
    uncategorized_drops: AtomicU64,
    categories: Mutex<Vec<(Arc<str>, DropCounter)>>,
    localities: Mutex<Vec<Arc<LocalityLoadStats>>>,
}

/// The load counters of one cluster and EDS service name, reported to one LRS server:
/// what gRPC's `xds_cluster_impl` counts. A shared handle, cheap to clone; the
/// `XdsClient` hands it out (see `XdsClient::cluster_load_stats`), the dependency
/// manager puts it in the cluster's config, and the load balancer counts into it.
/// While any clone of it (or of one of its localities' counters) is held, the cluster
/// is in use and its load is reported; after the last one is dropped, its final
/// counts go into the next report and the cluster leaves the reports.
#[derive(Clone)]
pub struct ClusterLoadStats(Arc<ClusterInner>);

impl fmt::Debug for ClusterLoadStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterLoadStats")
            .field("cluster", &self.0.cluster)
            .field("eds_service_name", &self.0.eds_service_name)
            .finish_non_exhaustive()
    }
}

/// Two handles are equal when they are the same counters.
impl PartialEq for ClusterLoadStats {
    fn eq(&self, other: &ClusterLoadStats) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl ClusterLoadStats {
    /// Counters no client reports: the `XdsClient` makes its own (see
    /// `XdsClient::cluster_load_stats`); this is for an embedder that runs the load
    /// balancer without it and reads the counters itself, and for tests.
    pub fn new(cluster: &str, eds_service_name: Option<&str>) -> ClusterLoadStats {
        ClusterLoadStats(Arc::new(ClusterInner {
            cluster: Arc::from(cluster),
            eds_service_name: eds_service_name.map(Arc::from),
            uncategorized_drops: AtomicU64::new(0),
            categories: Mutex::new(Vec::new()),
            localities: Mutex::new(Vec::new()),
        }))
    }

    /// The cluster name.
    pub fn cluster(&self) -> &str {
        &self.0.cluster
    }

    /// The EDS service name, when the cluster sets one.
    pub fn eds_service_name(&self) -> Option<&str> {
        self.0.eds_service_name.as_deref()
    }

    /// The counters of one locality, created on first use. Call it when the endpoints
    /// arrive, not per pick: it takes a lock and may allocate.
    pub fn locality(&self, locality: &Locality) -> Arc<LocalityLoadStats> {
        let mut localities = lock(&self.0.localities);
        if let Some(l) = localities.iter().find(|l| l.locality == *locality) {
            return l.clone();
        }
        let created = Arc::new(LocalityLoadStats::new(locality.clone()));
        localities.push(created.clone());
        created
    }

    /// The counter of one drop category, created on first use (when the endpoints and
    /// their `drop_overloads` arrive).
    pub fn drop_counter(&self, category: &str) -> DropCounter {
        let mut categories = lock(&self.0.categories);
        if let Some((_, counter)) = categories.iter().find(|(c, _)| &**c == category) {
            return counter.clone();
        }
        let counter = DropCounter(Arc::new(AtomicU64::new(0)));
        categories.push((Arc::from(category), counter.clone()));
        counter
    }

    /// Counts one RPC dropped without a category (gRPC counts the circuit breaker's
    /// rejections so).
    pub fn add_uncategorized_drop(&self) {
        self.0.uncategorized_drops.fetch_add(1, Ordering::Relaxed);
    }

    /// Takes the counts since the last snapshot, by locality and category.
    pub fn snapshot_and_reset(&self) -> ClusterSnapshot {
        let mut localities: Vec<LocalitySnapshot> = (lock(&self.0.localities).iter())
            .map(|l| l.snapshot_and_reset())
            .collect();
        localities.sort_by(|a, b| a.locality.cmp(&b.locality));
        let mut drops: Vec<(Arc<str>, u64)> = (lock(&self.0.categories).iter())
            .map(|(category, counter)| (category.clone(), take(&counter.0)))
            .filter(|(_, n)| *n > 0)
            .collect();
        drops.sort();
        ClusterSnapshot {
            localities,
            drops,
            uncategorized_drops: take(&self.0.uncategorized_drops),
        }
    }

    /// Whether nothing but the client's own store holds these counters: no config, no
    /// load balancer and no call in flight.
    pub(crate) fn is_released(&self) -> bool {
        Arc::strong_count(&self.0) == 1
            && lock(&self.0.localities)
                .iter()
                .all(|l| Arc::strong_count(l) == 1)
            && lock(&self.0.categories)
                .iter()
                .all(|(_, c)| Arc::strong_count(&c.0) == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn locality(zone: &str) -> Locality {
        Locality {
            region: "r".into(),
            zone: zone.into(),
            sub_zone: String::new(),
        }
    }

    #[test]
    fn a_snapshot_takes_the_counts_and_keeps_calls_in_progress() {
        let stats = ClusterLoadStats::new("c", Some("svc"));
        let a = stats.locality(&locality("a"));
        assert!(Arc::ptr_eq(&a, &stats.locality(&locality("a"))));
        let b = stats.locality(&locality("b"));
        for _ in 0..3 {
            a.call_started();
        }
        a.call_finished(true, []);
        a.call_finished(false, [("cpu", 0.5), ("mem", 2.0)]);
        b.call_started();
        b.call_finished(true, [("cpu", 0.25)]);
        stats.drop_counter("lb").add();
        stats.drop_counter("lb").add();
        stats.drop_counter("never");
        stats.add_uncategorized_drop();

        let snap = stats.snapshot_and_reset();
        let metric = |name: &str, requests, total| NamedMetric {
            name: name.into(),
            requests,
            total,
        };
        assert_eq!(
            snap.localities,
            vec![
                LocalitySnapshot {
                    locality: locality("a"),
                    issued: 3,
                    succeeded: 1,
                    errored: 1,
                    in_progress: 1,
                    named_metrics: vec![metric("cpu", 1, 0.5), metric("mem", 1, 2.0)],
                },
                LocalitySnapshot {
                    locality: locality("b"),
                    issued: 1,
                    succeeded: 1,
                    errored: 0,
                    in_progress: 0,
                    named_metrics: vec![metric("cpu", 1, 0.25)],
                },
            ]
        );
        assert_eq!(snap.drops, vec![(Arc::from("lb"), 2)]);
        assert_eq!((snap.uncategorized_drops, snap.total_dropped()), (1, 3));

        // The next interval starts from zero, but the call still in flight stays.
        let next = stats.snapshot_and_reset();
        assert!(!next.is_zero(), "a call is still in progress");
        assert_eq!(next.localities[0].in_progress, 1);
        assert_eq!(next.localities[0].issued, 0);
        assert!(next.localities[0].named_metrics.is_empty());
        a.call_finished(true, []);
        stats.snapshot_and_reset();
        assert!(stats.snapshot_and_reset().is_zero());
    }

    #[test]
    fn named_metrics_are_bounded_per_locality() {
        let stats = ClusterLoadStats::new("c", None);
        let a = stats.locality(&locality("a"));
        let names: Vec<String> = (0..2 * MAX_NAMED_METRICS)
            .map(|i| format!("m{i}"))
            .collect();
        a.call_started();
        a.call_finished(true, names.iter().map(|n| (n.as_str(), 1.0)));
        let snap = stats.snapshot_and_reset();
        assert_eq!(snap.localities[0].named_metrics.len(), MAX_NAMED_METRICS);
    }

    #[test]
    fn counters_are_released_when_only_the_store_holds_them() {
        let stats = ClusterLoadStats::new("c", None);
        let held = stats.clone();
        assert!(!stats.is_released());
        let a = held.locality(&locality("a"));
        drop(held);
        assert!(!stats.is_released(), "a call in flight holds its locality");
        drop(a);
        let drops = stats.drop_counter("x");
        assert!(!stats.is_released());
        drop(drops);
        assert!(stats.is_released());
    }
}
