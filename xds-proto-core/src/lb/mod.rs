//! Load balancing, sans-IO: from an [`XdsConfig`] to the subchannel each RPC goes to.
//!
//! [`LoadBalancer`] owns every cluster of one target and the subchannels (one per
//! address, shared by the clusters naming it). Subchannel states and call outcomes come
//! in as events, picks and connection requests go out; time and randomness are passed
//! in. Inside, gRPC's xDS policy tree: per cluster, `drop_overloads` and circuit
//! breaking (`cluster`), outlier detection (`outlier`), priorities with failover
//! (`priority`), weighted localities (`locality`) and an endpoint policy
//! (`pick_first`, `round_robin`, `ring_hash`, `least_request`, `weighted_round_robin`
//! with its weights from ORCA reports, `wrr*`, or an embedder's own, `custom`); aggregate clusters fail over between
//! their leaf clusters the same way.
//!
//! The drive loop is the client's: one mutation ([`LoadBalancer::update`],
//! [`LoadBalancer::subchannel_state`], [`LoadBalancer::call_finished`],
//! [`LoadBalancer::dns_resolved`], [`LoadBalancer::oob_report`],
//! [`LoadBalancer::handle_timeout`]), drain
//! [`LoadBalancer::poll_action`], sleep until [`LoadBalancer::poll_timeout`]; picks
//! ([`LoadBalancer::pick`]) come in between and allocate nothing.

mod aggregate;
mod api;
mod cluster;
mod custom;
mod dns;
mod endpoint_list;
mod layout;
mod least_request;
mod load_report;
mod locality;
mod oob;
mod outlier;
mod pick_first;
mod policy;
mod priority;
mod ring_hash;
mod round_robin;
mod subchannel;
mod wrr;
mod wrr_scheduler;
mod wrr_weights;

#[cfg(test)]
mod tests;

pub use api::{
    CallOutcome, CallToken, ConnectivityState, DEFAULT_FAILOVER_TIMEOUT, DEFAULT_RING_SIZE_CAP,
    LbAction, LbSettings, Pick, PickArgs, SubchannelId,
};
pub use custom::{CustomLbConfig, CustomLbPolicy, CustomPicker, CustomPolicyConfig, ReadyEndpoint};

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use rand_core::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;

use crate::DetHashMap;
use crate::client::{Code, Status, XdsError};
use crate::dependency::{ClusterConfig, ClusterResolution, XdsConfig};
use crate::orca::OrcaLoadReport;
use crate::resource::cluster::MAX_RING_SIZE;
use crate::time::Instant;
use aggregate::AggregateCluster;
use cluster::{LeafCluster, Source};
use dns::DnsResolutions;
use load_report::LoadReports;
use oob::OobSubscriptions;
use outlier::EjectionChange;
use policy::PickRng;
use subchannel::SubchannelPool;

/// What a cluster name stands for.
#[derive(Clone, Debug)]
enum Entry {
    Leaf(u32),
    Aggregate(u32),
    Failed(Arc<Status>),
}

/// The load balancer of one target: every cluster of its [`XdsConfig`], and the
/// subchannels they share.
///
/// A custom runtime drives it without tonic: give it each config, carry out its
/// actions, report what the connections do, pick per RPC and report each call's end.
///
/// ```
#[doc = include_str!("doc_example.rs")]
/// ```
#[derive(Debug)]
pub struct LoadBalancer {
    settings: LbSettings,
    pool: SubchannelPool,
    leaves: Vec<Option<LeafCluster>>,
    free_leaves: Vec<u32>,
    next_generation: u32,
    aggregates: Vec<AggregateCluster>,
    names: DetHashMap<String, Entry>,
    picker_changed: bool,
    changes: Vec<EjectionChange>,
    unknown_cluster: Arc<Status>,
    dns: DnsResolutions,
    /// The LRS counters of the leaf clusters that report their load.
    load: LoadReports,
    oob: OobSubscriptions,
}

impl LoadBalancer {
    /// An empty load balancer: every pick fails until the first [`update`](Self::update).
    /// A `ring_size_cap` out of `[1, 8M]` is brought to the nearer bound (see
    /// [`LbSettings::ring_size_cap`]).
    pub fn new(mut settings: LbSettings) -> LoadBalancer {
        let cap = settings.ring_size_cap.clamp(1, MAX_RING_SIZE);
        if cap != settings.ring_size_cap {
            tracing::warn!(
                requested = settings.ring_size_cap,
                used = cap,
                "ring_size_cap out of [1, {MAX_RING_SIZE}]"
            );
            settings.ring_size_cap = cap;
        }
        let rng = Xoshiro256PlusPlus::seed_from_u64(settings.seed);
        LoadBalancer {
            pool: SubchannelPool::new(settings.reconnect_backoff, rng),
            dns: DnsResolutions::new(settings.reconnect_backoff),
            oob: OobSubscriptions::default(),
            settings,
            leaves: Vec::new(),
            free_leaves: Vec::new(),
            next_generation: 0,
            aggregates: Vec::new(),
            names: DetHashMap::default(),
            picker_changed: false,
            changes: Vec::new(),
            unknown_cluster: Arc::new(Status::new(
                Code::UNAVAILABLE,
                "cluster not in the current xDS config",
            )),
            load: LoadReports::default(),
        }
    }

    /// The settings.
    pub fn settings(&self) -> &LbSettings {
        &self.settings
    }

    /// Takes a new config: clusters appear, change or go, endpoints change. Subchannels
    /// of addresses still in use keep their connections; calls in flight keep their
    /// tokens (a token of a cluster that is gone is still accepted).
    pub fn update(&mut self, now: Instant, config: &XdsConfig) {
        self.update_clusters(now, &config.clusters);
    }

    /// [`update`](Self::update) from the clusters alone (`XdsConfig::clusters`), for an
    /// embedder that resolves clusters without a listener.
    pub fn update_clusters(
        &mut self,
        now: Instant,
        clusters: &BTreeMap<String, Result<ClusterConfig, XdsError>>,
    ) {
        let mut names: DetHashMap<String, Entry> = DetHashMap::default();
        let mut aggregates = Vec::new();
        for (name, entry) in clusters {
            let resolved = match entry {
                Err(e) => Entry::Failed(Arc::new(e.status.clone())),
                Ok(c) => match &c.children {
                    ClusterResolution::Aggregate { leaf_clusters } => {
                        aggregates.push((name, leaf_clusters));
                        continue;
                    }
                    ClusterResolution::Endpoints {
                        endpoints,
                        resolution_note,
                        ..
                    } => {
                        let source = Source::Eds(endpoints.clone().ok_or_else(|| {
                            resolution_note
                                .clone()
                                .unwrap_or_else(|| "EDS resource unavailable".to_owned())
                        }));
                        Entry::Leaf(self.upsert_leaf(now, name, c.cluster.clone(), source))
                    }
                    ClusterResolution::LogicalDns { .. } => {
                        Entry::Leaf(self.upsert_dns_leaf(now, name, c.cluster.clone()))
                    }
                    #[allow(unreachable_patterns)]
                    _ => Entry::Failed(Arc::new(Status::new(
                        Code::UNAVAILABLE,
                        format!("cluster {name:?}: unsupported cluster type"),
                    ))),
                },
            };
            names.insert(name.clone(), resolved);
        }
        // Leaves no longer in the config go, releasing their subchannels.
        for (name, entry) in &self.names {
            if let Entry::Leaf(slot) = entry
                && !matches!(names.get(name), Some(Entry::Leaf(s)) if s == slot)
                && let Some(mut leaf) = self.leaves[*slot as usize].take()
            {
                leaf.release(now, &mut self.pool);
                self.free_leaves.push(*slot);
            }
        }
        let mut old: Vec<Option<AggregateCluster>> = std::mem::take(&mut self.aggregates)
            .into_iter()
            .map(Some)
            .collect();
        let mut previous: DetHashMap<String, AggregateCluster> = DetHashMap::default();
        for (name, entry) in self.names.drain() {
            if let Entry::Aggregate(i) = entry
                && let Some(aggregate) = old[i as usize].take()
            {
                previous.insert(name, aggregate);
            }
        }
        for (name, leaf_clusters) in aggregates {
            let slots = leaf_clusters
                .iter()
                .filter_map(|leaf| match names.get(leaf) {
                    Some(Entry::Leaf(slot)) => Some(*slot),
                    _ => None,
                })
                .collect();
            let status = Arc::new(Status::new(
                Code::UNAVAILABLE,
                format!("aggregate cluster {name:?}: no reachable leaf cluster"),
            ));
            let mut aggregate =
                AggregateCluster::new(slots, self.settings.failover_timeout, status);
            if let Some(old) = previous.remove(name.as_str()) {
                aggregate.inherit(old);
            }
            aggregate.refresh(now, &mut self.leaves, &mut self.pool);
            names.insert(name.clone(), Entry::Aggregate(self.aggregates.len() as u32));
            self.aggregates.push(aggregate);
        }
        let leaves = &self.leaves;
        self.dns.retain(|name| match names.get(name) {
            Some(Entry::Leaf(slot)) => {
                (leaves[*slot as usize].as_ref()).is_some_and(|leaf| leaf.dns_source().is_some())
            }
            _ => false,
        });
        self.names = names;
        self.update_load_reports(clusters);
        self.refresh_oob();
        self.picker_changed = true;
    }

    /// Resolves the LRS counters of the config's leaf clusters (see `load_report`).
    fn update_load_reports(
        &mut self,
        clusters: &BTreeMap<String, Result<ClusterConfig, XdsError>>,
    ) {
        let names = &self.names;
        let leaves = clusters
            .iter()
            .filter_map(|(name, entry)| match (names.get(name), entry) {
                (Some(Entry::Leaf(slot)), Ok(config)) => Some((*slot, config)),
                _ => None,
            });
        self.load.update(leaves);
    }

    /// Tells the embedder which subchannels now run out-of-band load reports.
    fn refresh_oob(&mut self) {
        let leaves = self.leaves.iter().flatten();
        self.oob.refresh(leaves, &mut self.pool);
    }

    fn upsert_leaf(
        &mut self,
        now: Instant,
        name: &str,
        resource: Arc<crate::resource::cluster::ClusterResource>,
        source: Source,
    ) -> u32 {
        let cap = self.settings.ring_size_cap;
        if let Some(Entry::Leaf(slot)) = self.names.get(name)
            && let Some(leaf) = &mut self.leaves[*slot as usize]
        {
            leaf.update(now, &mut self.pool, resource, source, cap);
            return *slot;
        }
        let generation = self.next_generation;
        self.next_generation = self.next_generation.wrapping_add(1);
        let leaf = LeafCluster::new(
            now,
            &mut self.pool,
            name,
            generation,
            resource,
            source,
            self.settings.failover_timeout,
            cap,
        );
        match self.free_leaves.pop() {
            Some(slot) => {
                self.leaves[slot as usize] = Some(leaf);
                slot
            }
            None => {
                self.leaves.push(Some(leaf));
                (self.leaves.len() - 1) as u32
            }
        }
    }

    /// A LOGICAL_DNS leaf keeps its resolved addresses while host and port stay; a new
    /// one (or a new host) asks the embedder to resolve.
    fn upsert_dns_leaf(
        &mut self,
        now: Instant,
        name: &str,
        resource: Arc<crate::resource::cluster::ClusterResource>,
    ) -> u32 {
        use crate::resource::cluster::ClusterType;
        let target = |r: &crate::resource::cluster::ClusterResource| match &r.cluster_type {
            ClusterType::LogicalDns { host, port } => Some((host.clone(), *port)),
            _ => None,
        };
        let kept = match self.names.get(name) {
            Some(Entry::Leaf(slot)) => self.leaves[*slot as usize]
                .as_ref()
                .filter(|leaf| target(leaf.resource()) == target(&resource))
                .and_then(|leaf| leaf.dns_source().cloned()),
            _ => None,
        };
        let resolve = kept.is_none();
        let source = kept.unwrap_or(Source::Dns(Ok(Vec::new())));
        let (host, port) = target(&resource).unwrap_or_default();
        let slot = self.upsert_leaf(now, name, resource, source);
        if resolve {
            self.dns
                .start(now, name, host, port, &mut self.pool.actions);
        }
        slot
    }
    /// Picks the subchannel for one RPC routed to `cluster` (a cluster of the config:
    /// what the config selector chose). Allocates nothing. The cluster starts
    /// connecting at its first pick, which then usually queues.
    pub fn pick(&mut self, now: Instant, cluster: &str, args: &PickArgs) -> Pick {
        let mut rng = PickRng::new(args.random);
        let slot = match self.names.get(cluster) {
            None => return Pick::Fail(self.unknown_cluster.clone()),
            Some(Entry::Failed(status)) => return Pick::Fail(status.clone()),
            Some(Entry::Leaf(slot)) => *slot,
            Some(Entry::Aggregate(i)) => {
                let aggregate = &mut self.aggregates[*i as usize];
                if !aggregate.is_started() {
                    aggregate.start(now, &mut self.leaves, &mut self.pool);
                    self.picker_changed = true;
                }
                match aggregate.current_leaf() {
                    Some(slot) => slot,
                    None => return Pick::Fail(aggregate.failure_status.clone()),
                }
            }
        };
        let Some(leaf) = &mut self.leaves[slot as usize] else {
            return Pick::Fail(self.unknown_cluster.clone());
        };
        let was_started = leaf.is_started();
        let mut pick = leaf.pick(now, &mut self.pool, slot, args, &mut rng);
        (self.load).count_pick(slot, &mut pick, |status| leaf.is_breaker_status(status));
        if !was_started {
            self.refresh_aggregates(now);
        }
        pick
    }

    /// Reports a subchannel's new connectivity state (see [`LbAction::Connect`]).
    pub fn subchannel_state(
        &mut self,
        now: Instant,
        subchannel: SubchannelId,
        state: ConnectivityState,
    ) {
        if self.pool.set_state(now, subchannel, state).is_some() {
            self.propagate(now, subchannel);
        }
    }

    /// Reports the end of a call a pick started: releases its circuit-breaker slot and
    /// least-request count, and counts its outcome for outlier detection.
    pub fn call_finished(&mut self, now: Instant, call: CallToken, outcome: CallOutcome) {
        self.call_finished_with_report(now, call, outcome, None);
    }

    /// [`call_finished`](Self::call_finished) with the call's ORCA per-call report, if
    /// it carried one (A51: the `endpoint-load-metrics-bin` trailer, decoded with
    /// [`OrcaLoadReport::decode`]; only wanted when
    /// [`CallToken::wants_load_report`]): weighted round robin weighs the endpoint by it.
    pub fn call_finished_with_report(
        &mut self,
        now: Instant,
        call: CallToken,
        outcome: CallOutcome,
        report: Option<&OrcaLoadReport>,
    ) {
        let named_metrics = report.into_iter().flat_map(|r| {
            r.named_metrics
                .iter()
                .map(|(name, value)| (name.as_str(), *value))
        });
        (self.load).call_finished(call.load, outcome == CallOutcome::Success, named_metrics);
        self.pool.call_finished(call.subchannel);
        if let Some(Some(leaf)) = self.leaves.get_mut(call.cluster as usize)
            && leaf.generation == call.cluster_generation
        {
            leaf.call_finished(call.subchannel, outcome == CallOutcome::Success);
            if let Some(report) = report {
                leaf.call_report(now, call.subchannel, report);
            }
        }
    }

    /// Reports an ORCA out-of-band load report received on `subchannel`'s
    /// `StreamCoreMetrics` call (see [`LbAction::LoadReports`]): the clusters reading
    /// out-of-band reports weigh the endpoint by it.
    pub fn oob_report(&mut self, now: Instant, subchannel: SubchannelId, report: &OrcaLoadReport) {
        for leaf in self.leaves.iter_mut().flatten() {
            if leaf.subchannels().binary_search(&subchannel).is_ok() {
                leaf.oob_report(now, subchannel, report);
            }
        }
    }

    /// Reports the addresses a LOGICAL_DNS cluster's host resolved to (or why it did
    /// not), after [`LbAction::ResolveDns`]. Ignored for any other cluster.
    pub fn dns_resolved(
        &mut self,
        now: Instant,
        cluster: &str,
        result: Result<Vec<SocketAddr>, Status>,
    ) {
        let Some(Entry::Leaf(slot)) = self.names.get(cluster) else {
            return;
        };
        let Some(leaf) = &mut self.leaves[*slot as usize] else {
            return;
        };
        if leaf.dns_source().is_none() {
            return;
        }
        self.dns
            .resolved(now, cluster, result.is_ok(), &mut self.pool.rng);
        let source = Source::Dns(result.map_err(|status| status.message));
        leaf.set_source(now, &mut self.pool, source, self.settings.ring_size_cap);
        self.refresh_aggregates(now);
        self.refresh_oob();
        self.picker_changed = true;
    }

    /// Runs the timers due at `now` (reconnect backoff, connection attempt delay,
    /// retention of unused connections, DNS re-resolution, failover, outlier
    /// detection, weighted round robin's weight updates).
    /// Early calls are no-ops.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(id) = self.pool.pop_retry(now) {
            self.propagate(now, id);
        }
        self.dns.handle_timeout(now, &mut self.pool.actions);
        while let Some(idled) = self.pool.pop_idle(now) {
            if let Some(id) = idled {
                self.propagate(now, id);
            }
        }
        while let Some(id) = self.pool.pop_attempt_delay(now) {
            // `pick_first` starts its next address beside the one still connecting: a
            // new attempt, no new state, so the picker stays.
            for leaf in self.leaves.iter_mut().flatten() {
                leaf.on_subchannel(now, &mut self.pool, id);
            }
        }
        let mut changed = false;
        for leaf in self.leaves.iter_mut().flatten() {
            if leaf.next_deadline().is_some_and(|at| at <= now) {
                changed |= leaf.handle_timeout(now, &mut self.pool, &mut self.changes);
            }
        }
        for aggregate in &mut self.aggregates {
            changed |= aggregate.handle_timeout(now);
        }
        if changed {
            self.refresh_aggregates(now);
            self.picker_changed = true;
        }
    }

    /// The next thing to do, if any.
    pub fn poll_action(&mut self) -> Option<LbAction> {
        if let Some(action) = self.pool.actions.pop_front() {
            return Some(action);
        }
        std::mem::take(&mut self.picker_changed).then_some(LbAction::PickerChanged)
    }

    /// When [`handle_timeout`](Self::handle_timeout) should next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let leaves = self
            .leaves
            .iter()
            .flatten()
            .filter_map(LeafCluster::next_deadline);
        let aggregates = self
            .aggregates
            .iter()
            .filter_map(AggregateCluster::next_deadline);
        self.pool
            .next_timer()
            .into_iter()
            .chain(self.dns.next_deadline())
            .chain(leaves)
            .chain(aggregates)
            .min()
    }

    /// A cluster's connectivity state (IDLE until its first pick), `None` for a
    /// cluster not in the config.
    pub fn cluster_state(&self, cluster: &str) -> Option<ConnectivityState> {
        Some(match self.names.get(cluster)? {
            Entry::Leaf(slot) => self.leaves[*slot as usize].as_ref()?.state(),
            Entry::Aggregate(i) => self.aggregates[*i as usize].state(),
            Entry::Failed(_) => ConnectivityState::TransientFailure,
        })
    }

    /// Every ring-hash ring the started priorities hold, as `(endpoints, entries)`: for
    /// fuzzing and tests, which check the ring size bounds. Allocates.
    #[doc(hidden)]
    pub fn ring_sizes(&self) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for leaf in self.leaves.iter().flatten() {
            leaf.ring_sizes(&mut out);
        }
        out
    }

    /// A subchannel's address, while it exists.
    pub fn subchannel_address(&self, subchannel: SubchannelId) -> Option<SocketAddr> {
        self.pool.address(subchannel)
    }

    /// A subchannel's state changed as the clusters see it: every leaf using it
    /// updates, then the aggregates.
    fn propagate(&mut self, now: Instant, id: SubchannelId) {
        let mut used = false;
        for leaf in self.leaves.iter_mut().flatten() {
            if leaf.on_subchannel(now, &mut self.pool, id) {
                used = true;
                // A LOGICAL_DNS cluster's connection failed or closed: its host may
                // have moved (gRPC's policies ask for re-resolution then).
                let lost = matches!(
                    self.pool.state(id),
                    ConnectivityState::TransientFailure | ConnectivityState::Idle
                );
                if lost && leaf.dns_source().is_some() {
                    let actions = &mut self.pool.actions;
                    self.dns.connection_lost(now, &leaf.name, actions);
                }
            }
        }
        if used {
            self.refresh_aggregates(now);
            self.picker_changed = true;
        }
    }

    fn refresh_aggregates(&mut self, now: Instant) {
        for aggregate in &mut self.aggregates {
            aggregate.refresh(now, &mut self.leaves, &mut self.pool);
        }
    }
}

/// The A76 request hash of a header value (XXH64, seed 0), for
/// [`PickArgs::hash`] when a ring-hash cluster hashes a request header.
pub fn hash_header_value(value: &[u8]) -> u64 {
    xxhash_rust::xxh64::xxh64(value, 0)
}
