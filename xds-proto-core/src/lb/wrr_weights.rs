//! Weighted round robin's endpoint weights (A58), one store per cluster, so that they
//! outlive the cluster's policies (rebuilt at every EDS update) as gRPC C-core keeps
//! them in a map by address beside its subchannel lists.
//!
//! An endpoint's weight is `qps / (utilization + eps / qps * error_utilization_penalty)`
//! from its latest ORCA report (per call, or out of band when the config says so), with
//! `application_utilization` preferred to `cpu_utilization`; a report without both a
//! utilization and a qps is ignored. A weight is usable once the endpoint has reported
//! for `blackout_period` without a gap of `weight_expiration_period` (a gap starts the
//! blackout again), and stale after such a gap; an unusable weight is 0, which the
//! scheduler replaces by the mean. An endpoint that becomes READY starts from nothing,
//! as in gRPC-Go. The schedulers are rebuilt from these weights every
//! `weight_update_period` (at least 100 ms, A58): the store owns that timer too.

use std::time::Duration;

use super::api::SubchannelId;
use crate::DetHashMap;
use crate::orca::OrcaLoadReport;
use crate::resource::cluster::LbPolicy;
use crate::time::Instant;

/// The shortest `weight_update_period` (A58: shorter ones are raised to it).
pub(super) const MIN_WEIGHT_UPDATE_PERIOD: Duration = Duration::from_millis(100);

/// A cluster's `ClientSideWeightedRoundRobin` settings, as the load balancer uses them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct WrrSettings {
    pub(super) blackout: Duration,
    pub(super) expiration: Duration,
    pub(super) update_period: Duration,
    pub(super) error_penalty: f64,
    /// The out-of-band reporting interval when `enable_oob_load_report` is set (then
    /// per-call reports are not read, A58).
    pub(super) oob_interval: Option<Duration>,
}

impl WrrSettings {
    /// The settings of `policy`'s weighted round robin (bare or under `wrr_locality`).
    pub(super) fn of(policy: &LbPolicy) -> Option<WrrSettings> {
        match policy {
            LbPolicy::WrrLocality(child) => WrrSettings::of(child),
            LbPolicy::WeightedRoundRobin(c) => Some(WrrSettings {
                blackout: c.blackout_period,
                expiration: c.weight_expiration_period,
                update_period: c.weight_update_period.max(MIN_WEIGHT_UPDATE_PERIOD),
                error_penalty: f64::from(c.error_utilization_penalty),
                oob_interval: c.enable_oob_load_report.then_some(c.oob_reporting_period),
            }),
            _ => None,
        }
    }
}

/// One endpoint's weight, A58's three values (kept from its first counted report on).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Record {
    weight: f64,
    /// Since when it has reported without a stale gap; `None` after a gap, until the
    /// next report.
    non_empty_since: Option<Instant>,
    last_updated: Instant,
}

/// The weights of one cluster's endpoints, keyed by each endpoint's first address's
/// subchannel; a report on any of an endpoint's addresses counts for the endpoint.
#[derive(Debug)]
pub(super) struct EndpointWeights {
    settings: WrrSettings,
    records: DetHashMap<SubchannelId, Record>,
    endpoint_of: DetHashMap<SubchannelId, SubchannelId>,
    next_update: Instant,
}

impl EndpointWeights {
    pub(super) fn new(now: Instant, settings: WrrSettings) -> EndpointWeights {
        EndpointWeights {
            settings,
            records: DetHashMap::default(),
            endpoint_of: DetHashMap::default(),
            next_update: now + settings.update_period,
        }
    }

    /// Takes the cluster's new settings; a new update period restarts its timer.
    pub(super) fn reconfigure(&mut self, now: Instant, settings: WrrSettings) {
        if settings.update_period != self.settings.update_period {
            self.next_update = now + settings.update_period;
        }
        self.settings = settings;
    }

    pub(super) fn settings(&self) -> &WrrSettings {
        &self.settings
    }

    /// Whether calls' per-call reports are wanted (not with out-of-band reporting).
    pub(super) fn reads_call_reports(&self) -> bool {
        self.settings.oob_interval.is_none()
    }

    /// The cluster's endpoints, each as its addresses' subchannels: endpoints still
    /// listed keep their weights, the others are forgotten.
    pub(super) fn set_endpoints<'a>(
        &mut self,
        endpoints: impl Iterator<Item = &'a [SubchannelId]>,
    ) {
        self.endpoint_of.clear();
        for subchannels in endpoints {
            let Some(&key) = subchannels.first() else {
                continue;
            };
            for id in subchannels {
                self.endpoint_of.entry(*id).or_insert(key);
            }
        }
        let endpoint_of = &self.endpoint_of;
        self.records
            .retain(|key, _| endpoint_of.get(key) == Some(key));
    }

    /// A58's `UpdateWeight`: takes a report from `subchannel`. Returns whether it
    /// counted (from an endpoint of the cluster, with a utilization and a qps).
    pub(super) fn report(
        &mut self,
        now: Instant,
        subchannel: SubchannelId,
        report: &OrcaLoadReport,
    ) -> bool {
        let Some(&key) = self.endpoint_of.get(&subchannel) else {
            return false;
        };
        let qps = report.qps;
        let mut utilization = report.wrr_utilization();
        // Written so that NaN (from a report built by hand) fails every test.
        if !(qps > 0.0 && utilization > 0.0 && report.eps >= 0.0) {
            return false;
        }
        // The error rate counts only with a penalty (A58), so 0 × ∞ never happens.
        if self.settings.error_penalty > 0.0 {
            utilization += report.eps / qps * self.settings.error_penalty;
        }
        let weight = qps / utilization;
        if weight.is_nan() || weight <= 0.0 {
            return false;
        }
        let record = self.records.entry(key).or_insert(Record {
            weight,
            non_empty_since: None,
            last_updated: now,
        });
        record.weight = weight.min(f64::MAX);
        record.non_empty_since.get_or_insert(now);
        record.last_updated = now;
        true
    }

    /// The endpoint of `subchannel` became READY: its weight starts again from its
    /// next report, after a new blackout.
    pub(super) fn became_ready(&mut self, subchannel: SubchannelId) {
        if let Some(key) = self.endpoint_of.get(&subchannel) {
            self.records.remove(key);
        }
    }

    /// A58's `GetWeight`: the weight of `subchannel`'s endpoint at `now`, 0 when it has
    /// none usable (never reported, within the blackout, or stale; staleness starts
    /// the blackout again).
    pub(super) fn weight(&mut self, now: Instant, subchannel: SubchannelId) -> f64 {
        let settings = self.settings;
        let Some(record) =
            (self.endpoint_of.get(&subchannel)).and_then(|k| self.records.get_mut(k))
        else {
            return 0.0;
        };
        if now - record.last_updated >= settings.expiration {
            record.non_empty_since = None;
            return 0.0;
        }
        let blacked_out = record
            .non_empty_since
            .is_none_or(|since| now - since < settings.blackout);
        if !settings.blackout.is_zero() && blacked_out {
            return 0.0;
        }
        record.weight
    }

    /// When the schedulers are next rebuilt.
    pub(super) fn next_update(&self) -> Instant {
        self.next_update
    }

    /// Whether the schedulers are due for a rebuild at `now`; if so, the next one is
    /// one period from now.
    pub(super) fn update_due(&mut self, now: Instant) -> bool {
        if now < self.next_update {
            return false;
        }
        self.next_update = now + self.settings.update_period;
        true
    }
}
