//! One leaf (EDS or LOGICAL_DNS) cluster, gRPC's `xds_cluster_impl` and what it wraps:
//! EDS `drop_overloads` (random per million, per category in order), circuit breaking
//! (`max_requests` calls in flight, extra picks fail with UNAVAILABLE), outlier
//! detection, the priorities with failover and, per priority, the weighted localities
//! or a single endpoint policy over all of them; with weighted round robin, the
//! endpoint weights its policies share (fed by ORCA reports) and their update timer.
//!
//! The cluster holds a pool reference on every address it lists (usable endpoints of
//! every priority, and DRAINING ones when `override_host_status` allows them for A55's
//! sessions), so a subchannel lives exactly as long as some cluster names it.
//! A cluster starts (creates its first priority and connects) at its first pick, or
//! when an aggregate cluster fails over to it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use super::api::{CallToken, ConnectivityState, Pick, PickArgs, SubchannelId};
use super::layout::{Layout, LocalitySpec, PriorityChild, build_specs, draining_subchannels};
use super::outlier::{EjectionChange, OutlierDetector};
use super::policy::{Ctx, PickRng, Picked};
use super::priority::{Choice, Failover};
use super::subchannel::SubchannelPool;
use super::wrr_weights::{EndpointWeights, WrrSettings};
use crate::client::{Code, Status};
use crate::orca::OrcaLoadReport;
use crate::resource::cluster::ClusterResource;
use crate::resource::endpoint::EndpointsResource;
use crate::time::Instant;

/// Where a leaf cluster's endpoints come from.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Source {
    /// EDS: the endpoints, or why there are none.
    Eds(Result<Arc<EndpointsResource>, String>),
    /// LOGICAL_DNS: the resolved addresses, or why there are none (`Ok(empty)` before
    /// the first resolution).
    Dns(Result<Vec<SocketAddr>, String>),
}

#[derive(Debug)]
pub(super) struct LeafCluster {
    pub(super) name: Arc<str>,
    pub(super) generation: u32,
    resource: Arc<ClusterResource>,
    source: Source,
    layout: Layout,
    drops: Vec<(Arc<str>, u32)>,
    in_flight: u32,
    breaker_status: Arc<Status>,
    failure_status: Arc<Status>,
    priorities: Vec<Vec<LocalitySpec>>,
    /// Per priority, the DRAINING endpoints' subchannels kept for override hosts.
    draining: Vec<Vec<SubchannelId>>,
    children: Vec<Option<PriorityChild>>,
    failover: Failover,
    failover_timeout: Duration,
    outlier: Option<OutlierDetector>,
    /// Weighted round robin's endpoint weights, with that policy.
    weights: Option<EndpointWeights>,
    /// Every subchannel the cluster holds a reference on, sorted.
    subchannels: Vec<SubchannelId>,
    started: bool,
}

impl LeafCluster {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        now: Instant,
        pool: &mut SubchannelPool,
        name: &str,
        generation: u32,
        resource: Arc<ClusterResource>,
        source: Source,
        failover_timeout: Duration,
        ring_size_cap: u64,
    ) -> LeafCluster {
        let mut cluster = LeafCluster {
            name: name.into(),
            generation,
            layout: Layout::of(&resource.lb_policy, ring_size_cap),
            breaker_status: Arc::new(Status::new(Code::UNAVAILABLE, "")),
            failure_status: Arc::new(Status::new(Code::UNAVAILABLE, "")),
            resource: resource.clone(),
            source: Source::Dns(Ok(Vec::new())),
            drops: Vec::new(),
            in_flight: 0,
            priorities: Vec::new(),
            draining: Vec::new(),
            children: Vec::new(),
            failover: Failover::new(0, failover_timeout),
            failover_timeout,
            outlier: None,
            weights: None,
            subchannels: Vec::new(),
            started: false,
        };
        cluster.update(now, pool, resource, source, ring_size_cap);
        cluster
    }

    /// Takes the cluster's new resource and endpoints; a no-op when neither changed.
    pub(super) fn update(
        &mut self,
        now: Instant,
        pool: &mut SubchannelPool,
        resource: Arc<ClusterResource>,
        source: Source,
        ring_size_cap: u64,
    ) {
        if !self.priorities.is_empty() || !self.subchannels.is_empty() {
            let same_resource = Arc::ptr_eq(&resource, &self.resource) || resource == self.resource;
            if same_resource && source == self.source {
                return;
            }
        }
        let name = &self.name;
        self.breaker_status = Arc::new(Status::new(
            Code::UNAVAILABLE,
            format!(
                "cluster {name:?}: circuit breaker open: max_requests ({}) calls in flight",
                resource.max_requests
            ),
        ));
        let why = match &source {
            Source::Eds(Err(note)) | Source::Dns(Err(note)) => note.clone(),
            Source::Eds(Ok(e)) if e.priorities.is_empty() => "no endpoints".to_owned(),
            Source::Dns(Ok(a)) if a.is_empty() => "no addresses resolved yet".to_owned(),
            _ => "no reachable endpoints".to_owned(),
        };
        self.failure_status = Arc::new(Status::new(
            Code::UNAVAILABLE,
            format!("cluster {name:?}: {why}"),
        ));
        self.drops = match &source {
            Source::Eds(Ok(e)) => e
                .drop_overloads
                .iter()
                .map(|d| (Arc::from(d.category.as_str()), d.drop_per_million))
                .collect(),
            _ => Vec::new(),
        };
        self.layout = Layout::of(&resource.lb_policy, ring_size_cap);
        self.stop_children_from(now, pool, 0);
        // New references first, so that addresses still listed keep their subchannel.
        let old = std::mem::take(&mut self.subchannels);
        self.priorities = build_specs(pool, &source, &self.layout);
        self.draining = draining_subchannels(pool, &source, resource.override_host_status);
        self.subchannels = (self.priorities.iter().flatten())
            .flat_map(|l| &l.endpoints)
            .flat_map(|e| e.subchannels.iter().copied())
            .chain(self.draining.iter().flatten().copied())
            .collect();
        self.subchannels.sort_unstable();
        for id in old {
            pool.release(id);
        }
        self.outlier = match (self.outlier.take(), resource.outlier_detection.clone()) {
            (_, None) => None,
            (Some(mut o), Some(config)) => {
                o.reconfigure(config);
                Some(o)
            }
            (None, Some(config)) => Some(OutlierDetector::new(now, config)),
        };
        if let Some(o) = &mut self.outlier {
            let endpoints = (self.priorities.iter().flatten())
                .flat_map(|l| &l.endpoints)
                .map(|e| e.subchannels.as_slice());
            o.set_endpoints(endpoints);
        }
        self.update_weights(now, &resource);
        self.resource = resource;
        self.source = source;
        self.children = (0..self.priorities.len()).map(|_| None).collect();
        self.failover = Failover::new(self.priorities.len(), self.failover_timeout);
        if self.started {
            self.choose(now, pool);
        }
    }

    /// Keeps the endpoint weights of weighted round robin (a new store when the policy
    /// becomes it, none when it is another) for the new endpoints.
    fn update_weights(&mut self, now: Instant, resource: &ClusterResource) {
        self.weights = match (self.weights.take(), WrrSettings::of(&resource.lb_policy)) {
            (_, None) => None,
            (Some(mut weights), Some(settings)) => {
                weights.reconfigure(now, settings);
                Some(weights)
            }
            (None, Some(settings)) => Some(EndpointWeights::new(now, settings)),
        };
        if let Some(weights) = &mut self.weights {
            let endpoints = (self.priorities.iter().flatten())
                .flat_map(|l| &l.endpoints)
                .map(|e| e.subchannels.as_slice());
            weights.set_endpoints(endpoints);
        }
    }

    /// Releases every subchannel reference (the cluster is going away).
    pub(super) fn release(&mut self, now: Instant, pool: &mut SubchannelPool) {
        self.stop_children_from(now, pool, 0);
        self.children.clear();
        for id in self.subchannels.drain(..) {
            pool.release(id);
        }
    }

    /// Takes new endpoints for the same resource (a DNS resolution).
    pub(super) fn set_source(
        &mut self,
        now: Instant,
        pool: &mut SubchannelPool,
        source: Source,
        ring_size_cap: u64,
    ) {
        let resource = self.resource.clone();
        self.update(now, pool, resource, source, ring_size_cap);
    }

    pub(super) fn resource(&self) -> &ClusterResource {
        &self.resource
    }

    pub(super) fn dns_source(&self) -> Option<&Source> {
        matches!(self.source, Source::Dns(_)).then_some(&self.source)
    }

    pub(super) fn is_started(&self) -> bool {
        self.started
    }

    /// Starts the cluster: its first priority is created and connects.
    pub(super) fn start(&mut self, now: Instant, pool: &mut SubchannelPool) {
        if !self.started {
            self.started = true;
            self.choose(now, pool);
        }
    }

    /// The state aggregate clusters and `cluster_state` see.
    pub(super) fn state(&self) -> ConnectivityState {
        if !self.started {
            ConnectivityState::Idle
        } else if self.awaits_resolution() {
            ConnectivityState::Connecting
        } else {
            self.failover.state()
        }
    }

    /// A LOGICAL_DNS cluster before its first resolution: picks wait, as in gRPC.
    fn awaits_resolution(&self) -> bool {
        matches!(&self.source, Source::Dns(Ok(addresses)) if addresses.is_empty())
    }

    fn ctx<'a>(
        now: Instant,
        pool: &'a mut SubchannelPool,
        outlier: &'a Option<OutlierDetector>,
        weights: &'a mut Option<EndpointWeights>,
    ) -> Ctx<'a> {
        Ctx {
            pool,
            outlier: outlier.as_ref(),
            weights: weights.as_mut(),
            now,
        }
    }

    /// Runs failover until it settles: children are started as it reaches them and the
    /// ones below the chosen priority are stopped.
    fn choose(&mut self, now: Instant, pool: &mut SubchannelPool) {
        loop {
            match self.failover.choose() {
                Choice::Start(i) => {
                    self.set_active(now, pool, i, true);
                    let mut ctx = Self::ctx(now, pool, &self.outlier, &mut self.weights);
                    let child = PriorityChild::new(&mut ctx, &self.layout, &self.priorities[i]);
                    self.failover.started(now, i, child.state());
                    self.children[i] = Some(child);
                }
                Choice::Use(i) => return self.stop_children_from(now, pool, i + 1),
                Choice::None => return,
            }
        }
    }

    /// Stops the started priorities from `first` on: below the one in use, or all of
    /// them (from 0) when the priorities are rebuilt or the cluster goes.
    fn stop_children_from(&mut self, now: Instant, pool: &mut SubchannelPool, first: usize) {
        for j in first..self.children.len() {
            if self.children[j].take().is_some() {
                self.failover.stopped(j);
                self.set_active(now, pool, j, false);
            }
        }
    }

    /// Tells the pool that priority `i` started or stopped using its subchannels (its
    /// DRAINING ones too, which A55 keeps connected for sessions): one no started
    /// priority uses keeps its connection for the retention time only.
    fn set_active(&self, now: Instant, pool: &mut SubchannelPool, i: usize, active: bool) {
        let ids = (self.priorities[i].iter())
            .flat_map(|l| &l.endpoints)
            .flat_map(|e| e.subchannels.iter().copied())
            .chain(self.draining.get(i).into_iter().flatten().copied());
        for id in ids {
            if active {
                pool.activate(id);
            } else {
                pool.deactivate(now, id);
            }
        }
    }

    /// A subchannel's effective state changed; true if the cluster uses it.
    pub(super) fn on_subchannel(
        &mut self,
        now: Instant,
        pool: &mut SubchannelPool,
        id: SubchannelId,
    ) -> bool {
        if self.subchannels.binary_search(&id).is_err() {
            return false;
        }
        if let Some(weights) = &mut self.weights
            && pool.state(id) == ConnectivityState::Ready
        {
            weights.became_ready(id);
        }
        let mut ctx = Self::ctx(now, pool, &self.outlier, &mut self.weights);
        for (i, child) in self.children.iter_mut().enumerate() {
            if let Some(child) = child {
                child.on_state(&mut ctx, id);
                self.failover.child_state(now, i, child.state());
            }
        }
        if self.started {
            self.choose(now, pool);
        }
        true
    }

    pub(super) fn next_deadline(&self) -> Option<Instant> {
        let sweep = self.outlier.as_ref().map(OutlierDetector::next_sweep);
        let weights = (self.weights.as_ref())
            .filter(|_| self.started)
            .map(EndpointWeights::next_update);
        [self.failover.next_deadline(), sweep, weights]
            .into_iter()
            .flatten()
            .min()
    }

    /// Runs the failover timers and the outlier sweep due at `now`; true if anything
    /// changed.
    pub(super) fn handle_timeout(
        &mut self,
        now: Instant,
        pool: &mut SubchannelPool,
        changes: &mut Vec<EjectionChange>,
    ) -> bool {
        let mut changed = self.failover.handle_timeout(now);
        if self.started
            && let Some(weights) = &mut self.weights
            && weights.update_due(now)
        {
            let mut ctx = Self::ctx(now, pool, &self.outlier, &mut self.weights);
            for child in self.children.iter_mut().flatten() {
                child.refresh_weights(&mut ctx);
            }
        }
        if let Some(outlier) = &mut self.outlier {
            changes.clear();
            outlier.sweep(now, &mut pool.rng, changes);
            for change in changes.iter() {
                changed = true;
                tracing::debug!(
                    cluster = %self.name,
                    address = ?pool.address(change.subchannel),
                    ejected = change.ejected,
                    "outlier detection"
                );
                let mut ctx = Self::ctx(now, pool, &self.outlier, &mut self.weights);
                for child in self.children.iter_mut().flatten() {
                    child.on_state(&mut ctx, change.subchannel);
                }
            }
            for (i, child) in self.children.iter().enumerate() {
                if let Some(child) = child {
                    self.failover.child_state(now, i, child.state());
                }
            }
        }
        if changed && self.started {
            self.choose(now, pool);
        }
        changed
    }

    /// The cluster_impl picker: drops, then the circuit breaker, then the priority in
    /// use. Allocates nothing.
    pub(super) fn pick(
        &mut self,
        now: Instant,
        pool: &mut SubchannelPool,
        slot: u32,
        args: &PickArgs,
        rng: &mut PickRng,
    ) -> Pick {
        if !self.started {
            self.start(now, pool);
        }
        for (category, per_million) in &self.drops {
            if rng.below(1_000_000) < u64::from(*per_million) {
                return Pick::Drop {
                    category: category.clone(),
                };
            }
        }
        if self.in_flight >= self.resource.max_requests {
            return Pick::Fail(self.breaker_status.clone());
        }
        let current = self.failover.current();
        let overridden = match (args.override_host, current) {
            (Some(host), Some(priority)) => self.override_host(pool, priority, host),
            _ => None,
        };
        let Some(child) = current.and_then(|i| self.children[i].as_mut()) else {
            if self.awaits_resolution() {
                return Pick::Queue;
            }
            return Pick::Fail(self.failure_status.clone());
        };
        let mut ctx = Ctx {
            pool,
            outlier: self.outlier.as_ref(),
            weights: self.weights.as_mut(),
            now,
        };
        let picked = match overridden {
            Some(picked) => picked,
            None => child.pick(&mut ctx, args.hash, rng),
        };
        match picked {
            Picked::Subchannel(subchannel) => {
                let Some(address) = ctx.pool.call_started(subchannel) else {
                    return Pick::Fail(self.failure_status.clone());
                };
                self.in_flight += 1;
                Pick::Complete {
                    subchannel,
                    address,
                    call: CallToken {
                        cluster: slot,
                        cluster_generation: self.generation,
                        subchannel,
                        load: super::load_report::LoadSlot::NONE,
                        wants_load_report: (self.weights.as_ref())
                            .is_some_and(EndpointWeights::reads_call_reports),
                    },
                }
            }
            Picked::Queue => Pick::Queue,
            Picked::Fail => Pick::Fail(self.failure_status.clone()),
        }
    }

    /// A55's override host: when `host` is an endpoint (or one of its addresses) of
    /// the priority in use, with a health status the cluster's `override_host_status`
    /// allows, and the cluster holds its subchannel (a DRAINING endpoint's only when
    /// that status allows DRAINING): that subchannel when READY; queue
    /// while it connects (an IDLE one is asked to connect first). `None`: the policy
    /// picks as usual (the host is unknown, disallowed, or in TRANSIENT_FAILURE).
    fn override_host(
        &self,
        pool: &mut SubchannelPool,
        priority: usize,
        host: SocketAddr,
    ) -> Option<Picked> {
        let Source::Eds(Ok(endpoints)) = &self.source else {
            return None;
        };
        let allowed = self.resource.override_host_status;
        let listed = endpoints
            .priorities
            .get(priority)?
            .localities
            .iter()
            .flat_map(|l| &l.endpoints)
            .any(|e| {
                allowed.contains(e.health_status)
                    && (e.address == host || e.additional_addresses.contains(&host))
            });
        if !listed {
            return None;
        }
        let id = pool.find(host)?;
        if self.subchannels.binary_search(&id).is_err() {
            return None;
        }
        match pool.state(id) {
            ConnectivityState::Ready => Some(Picked::Subchannel(id)),
            ConnectivityState::Idle => {
                pool.connect(id);
                Some(Picked::Queue)
            }
            ConnectivityState::Connecting => Some(Picked::Queue),
            ConnectivityState::TransientFailure => None,
        }
    }

    /// Whether a failed pick is the circuit breaker's (LRS counts it as a drop).
    pub(super) fn is_breaker_status(&self, status: &Arc<Status>) -> bool {
        Arc::ptr_eq(status, &self.breaker_status)
    }

    /// A call this cluster started ended.
    pub(super) fn call_finished(&mut self, subchannel: SubchannelId, success: bool) {
        self.in_flight = self.in_flight.saturating_sub(1);
        if let Some(outlier) = &mut self.outlier {
            outlier.record(subchannel, success);
        }
    }

    /// A per-call ORCA report of a call this cluster started, on `subchannel`: weighted
    /// round robin takes it, unless it reads out-of-band reports (A58).
    pub(super) fn call_report(
        &mut self,
        now: Instant,
        subchannel: SubchannelId,
        report: &OrcaLoadReport,
    ) {
        if let Some(weights) = &mut self.weights
            && weights.reads_call_reports()
        {
            weights.report(now, subchannel, report);
        }
    }

    /// An out-of-band ORCA report from `subchannel`: weighted round robin reading them
    /// takes it.
    pub(super) fn oob_report(
        &mut self,
        now: Instant,
        subchannel: SubchannelId,
        report: &OrcaLoadReport,
    ) {
        if let Some(weights) = &mut self.weights
            && !weights.reads_call_reports()
        {
            weights.report(now, subchannel, report);
        }
    }

    /// The out-of-band reporting interval the cluster wants from each of its
    /// subchannels, if it wants reports (weighted round robin's
    /// `enable_oob_load_report`).
    pub(super) fn oob_interval(&self) -> Option<std::time::Duration> {
        self.weights.as_ref()?.settings().oob_interval
    }

    /// Every subchannel the cluster holds, sorted.
    pub(super) fn subchannels(&self) -> &[SubchannelId] {
        &self.subchannels
    }

    #[cfg(test)]
    pub(super) fn in_flight(&self) -> u32 {
        self.in_flight
    }

    #[cfg(test)]
    pub(super) fn outlier(&self) -> Option<&OutlierDetector> {
        self.outlier.as_ref()
    }

    #[cfg(test)]
    pub(super) fn current_priority(&self) -> Option<usize> {
        self.failover.current()
    }

    /// Each ring-hash ring of the started priorities, as `(endpoints, entries)`.
    pub(super) fn ring_sizes(&self, out: &mut Vec<(usize, usize)>) {
        for child in self.children.iter().flatten() {
            child.ring_sizes(out);
        }
    }

    #[cfg(test)]
    pub(super) fn child(&self, priority: usize) -> Option<&PriorityChild> {
        self.children.get(priority).and_then(Option::as_ref)
    }
}
