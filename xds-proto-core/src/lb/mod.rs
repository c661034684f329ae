//! Load balancing, sans-IO: from an [`XdsConfig`] to the subchannel each RPC goes to.
//!
//! [`LoadBalancer`] owns every cluster of one target and the subchannels (one per
//! address, shared by the clusters naming it). Subchannel states and call outcomes come
//! in as events, picks and connection requests go out; time and randomness are passed
//! in. Inside, gRPC's xDS policy tree: per cluster, `drop_overloads` and circuit
//! breaking (`cluster`), outlier detection (`outlier`), priorities with failover
//! (`priority`), weighted localities (`locality`) and an endpoint policy
//! (`pick_first`, `round_robin`, `ring_hash`, `least_request`); aggregate clusters fail
//! over between their leaf clusters the same way.
//!
//! The drive loop is the client's: one mutation ([`LoadBalancer::update`],
//! [`LoadBalancer::subchannel_state`], [`LoadBalancer::call_finished`],
//! [`LoadBalancer::dns_resolved`], [`LoadBalancer::handle_timeout`]), drain
//! [`LoadBalancer::poll_action`], sleep until [`LoadBalancer::poll_timeout`]; picks
//! ([`LoadBalancer::pick`]) come in between and allocate nothing.

mod api;

pub use api::{
    CallOutcome, CallToken, ConnectivityState, DEFAULT_FAILOVER_TIMEOUT, DEFAULT_RING_SIZE_CAP,
    LbAction, LbSettings, Pick, PickArgs, SubchannelId,
};

use std::collections::VecDeque;
use std::net::SocketAddr;

use crate::client::Status;
use crate::dependency::XdsConfig;
use crate::time::Instant;

/// The load balancer of one target: every cluster of its [`XdsConfig`], and the
/// subchannels they share.
#[derive(Debug)]
pub struct LoadBalancer {
    settings: LbSettings,
    actions: VecDeque<LbAction>,
}

impl LoadBalancer {
    /// An empty load balancer: every pick fails until the first [`update`](Self::update).
    pub fn new(settings: LbSettings) -> LoadBalancer {
        LoadBalancer {
            settings,
            actions: VecDeque::new(),
        }
    }

    /// The settings.
    pub fn settings(&self) -> &LbSettings {
        &self.settings
    }

    /// Takes a new config: clusters appear, change or go, endpoints change. Subchannels
    /// of addresses still in use keep their connections.
    pub fn update(&mut self, now: Instant, config: &XdsConfig) {
        let _ = (now, config);
    }

    /// Picks the subchannel for one RPC routed to `cluster` (a cluster of the config:
    /// what the config selector chose). Allocates nothing.
    pub fn pick(&mut self, now: Instant, cluster: &str, args: &PickArgs) -> Pick {
        let _ = (now, cluster, args);
        Pick::Queue
    }

    /// Reports a subchannel's new connectivity state.
    pub fn subchannel_state(
        &mut self,
        now: Instant,
        subchannel: SubchannelId,
        state: ConnectivityState,
    ) {
        let _ = (now, subchannel, state);
    }

    /// Reports the end of a call a pick started: releases its circuit-breaker slot and
    /// least-request count, and counts its outcome for outlier detection.
    pub fn call_finished(&mut self, now: Instant, call: CallToken, outcome: CallOutcome) {
        let _ = (now, call, outcome);
    }

    /// Reports the addresses a LOGICAL_DNS cluster's host resolved to (or why it did
    /// not), after [`LbAction::ResolveDns`].
    pub fn dns_resolved(
        &mut self,
        now: Instant,
        cluster: &str,
        result: Result<Vec<SocketAddr>, Status>,
    ) {
        let _ = (now, cluster, result);
    }

    /// Runs the timers due at `now` (failover, reconnect backoff, outlier detection).
    /// Early calls are no-ops.
    pub fn handle_timeout(&mut self, now: Instant) {
        let _ = now;
    }

    /// The next thing to do, if any.
    pub fn poll_action(&mut self) -> Option<LbAction> {
        self.actions.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) should next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    /// A cluster's aggregate connectivity state, `None` for a cluster not in the config.
    pub fn cluster_state(&self, cluster: &str) -> Option<ConnectivityState> {
        let _ = cluster;
        None
    }

    /// A subchannel's address, while it exists.
    pub fn subchannel_address(&self, subchannel: SubchannelId) -> Option<SocketAddr> {
        let _ = subchannel;
        None
    }
}

/// The A76 request hash of a header value (XXH64, seed 0), for
/// [`PickArgs::hash`] when a ring-hash cluster hashes a request header.
pub fn hash_header_value(value: &[u8]) -> u64 {
    xxhash_rust::xxh64::xxh64(value, 0)
}
