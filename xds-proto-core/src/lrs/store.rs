//! The load store: every cluster whose load the client reports, by LRS server, cluster
//! and EDS service name, with when each was last reported. A report snapshots and
//! resets every cluster of its server (those the server did not ask for too, so that
//! a later report never carries an older interval's counts), and forgets the clusters
//! nobody holds any more once their final counts are in it.

use std::collections::BTreeMap;
use std::time::Duration;

use super::stats::{ClusterLoadStats, ClusterSnapshot};
use crate::time::Instant;

/// One cluster's entry.
#[derive(Debug)]
struct Entry {
    stats: ClusterLoadStats,
    /// When its interval began: its last report, or its creation.
    since: Instant,
}

/// One cluster's part of a report.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ClusterReport {
    pub(crate) cluster: Box<str>,
    pub(crate) eds_service_name: Option<Box<str>>,
    pub(crate) snapshot: ClusterSnapshot,
    /// The actual interval the counts cover.
    pub(crate) interval: Duration,
}

/// A cluster's key: its name and EDS service name.
type ClusterKey = (Box<str>, Option<Box<str>>);

/// The clusters of every LRS server, by server index.
#[derive(Debug, Default)]
pub(crate) struct LoadStore {
    /// Per server: the clusters by (cluster, EDS service name).
    servers: Vec<BTreeMap<ClusterKey, Entry>>,
}

impl LoadStore {
    /// The counters of a cluster reported to `server`, created (with its interval
    /// starting at `now`) if it has none.
    pub(crate) fn get_or_create(
        &mut self,
        server: usize,
        cluster: &str,
        eds_service_name: Option<&str>,
        now: Instant,
    ) -> ClusterLoadStats {
        if self.servers.len() <= server {
            self.servers.resize_with(server + 1, BTreeMap::new);
        }
        let key = (Box::from(cluster), eds_service_name.map(Box::from));
        let entry = self.servers[server].entry(key).or_insert_with(|| Entry {
            stats: ClusterLoadStats::new(cluster, eds_service_name),
            since: now,
        });
        entry.stats.clone()
    }

    /// Whether any cluster reports to `server`.
    pub(crate) fn has_clusters(&self, server: usize) -> bool {
        self.servers.get(server).is_some_and(|c| !c.is_empty())
    }

    /// Forgets the clusters of `server` that nobody holds, unreported (no stream can
    /// take their counts).
    pub(crate) fn forget_released(&mut self, server: usize) {
        if let Some(clusters) = self.servers.get_mut(server) {
            clusters.retain(|_, e| !e.stats.is_released());
        }
    }

    /// Snapshots and resets every cluster of `server`; returns the parts of those the
    /// server `wants`, in (cluster, service) order, each with the time since its last
    /// report. Clusters nobody holds any more are forgotten after this, their last
    /// report.
    pub(crate) fn take_report(
        &mut self,
        server: usize,
        now: Instant,
        wants: impl Fn(&str) -> bool,
    ) -> Vec<ClusterReport> {
        let Some(clusters) = self.servers.get_mut(server) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        clusters.retain(|(cluster, service), entry| {
            // Read before the snapshot: a handle dropped meanwhile is reported next time.
            let released = entry.stats.is_released();
            let snapshot = entry.stats.snapshot_and_reset();
            let interval = now.saturating_duration_since(entry.since);
            entry.since = now;
            if wants(cluster) {
                out.push(ClusterReport {
                    cluster: cluster.clone(),
                    eds_service_name: service.clone(),
                    snapshot,
                    interval,
                });
            }
            !released
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::endpoint::Locality;

    #[test]
    fn reports_cover_each_cluster_since_its_last_and_forget_released_ones() {
        let mut store = LoadStore::default();
        let t0 = Instant::from_secs(10);
        let a = store.get_or_create(1, "a", None, t0);
        assert!(!store.has_clusters(0) && store.has_clusters(1));
        let b = store.get_or_create(1, "b", Some("svc"), t0 + Duration::from_secs(4));
        assert_eq!(
            store.get_or_create(1, "a", None, t0),
            a,
            "one entry per key"
        );
        a.locality(&Locality::default()).call_started();

        let report = store.take_report(1, t0 + Duration::from_secs(10), |c| c == "a");
        assert_eq!(report.len(), 1, "b is not wanted: {report:?}");
        assert_eq!(&*report[0].cluster, "a");
        assert_eq!(report[0].interval, Duration::from_secs(10));
        assert_eq!(report[0].snapshot.localities[0].issued, 1);

        drop(b);
        let report = store.take_report(1, t0 + Duration::from_secs(13), |_| true);
        let intervals: Vec<_> = report.iter().map(|r| (&*r.cluster, r.interval)).collect();
        assert_eq!(
            intervals,
            [("a", Duration::from_secs(3)), ("b", Duration::from_secs(3))],
            "b's interval restarted at the report that did not carry it"
        );
        assert_eq!(report[1].eds_service_name.as_deref(), Some("svc"));
        let report = store.take_report(1, t0 + Duration::from_secs(14), |_| true);
        assert_eq!(report.len(), 1, "b's last report has gone: {report:?}");
        drop(a);
        store.forget_released(1);
        assert!(!store.has_clusters(1));
    }
}
