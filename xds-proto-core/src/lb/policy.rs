//! What every endpoint policy shares: the context they act through (subchannel states as
//! the cluster sees them, connection requests), the per-pick random stream, the
//! endpoint description they are built from, and [`EndpointPolicy`], the dispatch over
//! `pick_first`, `round_robin`, `ring_hash`, `least_request`,
//! `weighted_round_robin` and an embedder's custom policies (A52).

use std::net::SocketAddr;
use std::sync::Arc;

use super::api::{ConnectivityState, SubchannelId};
use super::custom::{Custom, CustomLbConfig};
use super::least_request::LeastRequest;
use super::outlier::OutlierDetector;
use super::pick_first::PickFirst;
use super::ring_hash::RingHash;
use super::round_robin::RoundRobin;
use super::subchannel::SubchannelPool;
use super::wrr::WeightedRoundRobin;
use super::wrr_weights::EndpointWeights;
use crate::selector::Seeded;
use crate::time::Instant;

/// What a policy acts through: the pool (states, connection requests, the load
/// balancer's seeded randomness) and the cluster's outlier detector, whose ejected
/// subchannels the policies see in TRANSIENT_FAILURE (A50), and for weighted round
/// robin the cluster's endpoint weights at `now`.
pub(super) struct Ctx<'a> {
    pub(super) pool: &'a mut SubchannelPool,
    pub(super) outlier: Option<&'a OutlierDetector>,
    pub(super) weights: Option<&'a mut EndpointWeights>,
    pub(super) now: Instant,
}

impl Ctx<'_> {
    /// The subchannel's state as this cluster sees it.
    pub(super) fn state(&self, id: SubchannelId) -> ConnectivityState {
        if self.outlier.is_some_and(|o| o.is_ejected(id)) {
            ConnectivityState::TransientFailure
        } else {
            self.pool.state(id)
        }
    }

    /// Whether the subchannel's connection attempt has run for the Happy Eyeballs
    /// delay without an outcome.
    pub(super) fn attempt_delayed(&self, id: SubchannelId) -> bool {
        self.pool.attempt_delayed(id)
    }

    pub(super) fn connect(&mut self, id: SubchannelId) {
        if !self.outlier.is_some_and(|o| o.is_ejected(id)) {
            self.pool.connect(id);
        }
    }

    pub(super) fn random(&mut self) -> u64 {
        rand_core::RngCore::next_u64(&mut self.pool.rng)
    }

    /// The weighted-round-robin weight of the endpoint `id` is selected on (0: none
    /// usable).
    pub(super) fn weight(&mut self, id: SubchannelId) -> f64 {
        let now = self.now;
        self.weights.as_mut().map_or(0.0, |w| w.weight(now, id))
    }
}

/// The random stream of one pick, grown from [`PickArgs::random`](super::PickArgs) by
/// splitmix64 steps (the selector's [`Seeded`] stream): cheap, and every use gets its
/// own well-mixed value.
pub(super) struct PickRng(Seeded);

impl PickRng {
    pub(super) fn new(seed: u64) -> PickRng {
        PickRng(Seeded(seed))
    }

    pub(super) fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// A uniform value below `n` (> 0), by multiply-shift (no division).
    pub(super) fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }
}

/// One endpoint as the policies get it: its subchannels (one per address, in order),
/// its weight, and the address ring hash keys it by.
#[derive(Clone, Debug)]
pub(super) struct EndpointSpec {
    pub(super) subchannels: Vec<SubchannelId>,
    /// Locality weight × endpoint weight when the policy is not per locality, else the
    /// endpoint weight.
    pub(super) weight: u64,
    pub(super) address: SocketAddr,
}

/// A policy's pick, before the cluster turns it into a [`Pick`](super::Pick).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Picked {
    Subchannel(SubchannelId),
    Queue,
    Fail,
}

impl Picked {
    /// What a policy without a ready endpoint answers in `state`.
    pub(super) fn not_ready(state: ConnectivityState) -> Picked {
        match state {
            ConnectivityState::TransientFailure => Picked::Fail,
            _ => Picked::Queue,
        }
    }
}

/// Which endpoint policy, with its settings.
#[derive(Clone, Debug)]
pub(super) enum PolicyKind {
    PickFirst {
        shuffle: bool,
    },
    RoundRobin,
    RingHash {
        min_ring_size: u64,
        max_ring_size: u64,
    },
    LeastRequest {
        choice_count: u32,
    },
    /// Its settings are the cluster's (its [`EndpointWeights`]).
    WeightedRoundRobin,
    /// An embedder's policy (A52), with its validated config.
    Custom(Arc<dyn CustomLbConfig>),
}

/// An endpoint policy over one set of endpoints (a locality, or a whole priority).
#[derive(Debug)]
pub(super) enum EndpointPolicy {
    PickFirst(PickFirst),
    RoundRobin(RoundRobin),
    RingHash(RingHash),
    LeastRequest(LeastRequest),
    WeightedRoundRobin(WeightedRoundRobin),
    Custom(Custom),
}

impl EndpointPolicy {
    pub(super) fn new(ctx: &mut Ctx, kind: &PolicyKind, endpoints: &[EndpointSpec]) -> Self {
        match kind {
            PolicyKind::PickFirst { shuffle } => {
                let shuffle = *shuffle;
                let mut addresses: Vec<SubchannelId> = endpoints
                    .iter()
                    .flat_map(|e| e.subchannels.iter().copied())
                    .collect();
                if shuffle {
                    shuffle_in_place(ctx, &mut addresses);
                }
                let mut pf = PickFirst::new(ctx, addresses);
                pf.exit_idle(ctx);
                EndpointPolicy::PickFirst(pf)
            }
            PolicyKind::RoundRobin => EndpointPolicy::RoundRobin(RoundRobin::new(ctx, endpoints)),
            PolicyKind::RingHash {
                min_ring_size,
                max_ring_size,
            } => EndpointPolicy::RingHash(RingHash::new(
                ctx,
                endpoints,
                *min_ring_size,
                *max_ring_size,
            )),
            PolicyKind::LeastRequest { choice_count } => {
                EndpointPolicy::LeastRequest(LeastRequest::new(ctx, endpoints, *choice_count))
            }
            PolicyKind::WeightedRoundRobin => {
                EndpointPolicy::WeightedRoundRobin(WeightedRoundRobin::new(ctx, endpoints))
            }
            PolicyKind::Custom(config) => {
                EndpointPolicy::Custom(Custom::new(ctx, config, endpoints))
            }
        }
    }

    /// A ring-hash policy's `(endpoints, ring entries)`.
    pub(super) fn ring_size(&self) -> Option<(usize, usize)> {
        match self {
            EndpointPolicy::RingHash(p) => Some(p.size()),
            _ => None,
        }
    }

    pub(super) fn state(&self) -> ConnectivityState {
        match self {
            EndpointPolicy::PickFirst(p) => p.state(),
            EndpointPolicy::RoundRobin(p) => p.state(),
            EndpointPolicy::RingHash(p) => p.state(),
            EndpointPolicy::LeastRequest(p) => p.state(),
            EndpointPolicy::WeightedRoundRobin(p) => p.state(),
            EndpointPolicy::Custom(p) => p.state(),
        }
    }

    /// A subchannel's state (as the cluster sees it) changed.
    pub(super) fn on_state(&mut self, ctx: &mut Ctx, id: SubchannelId) {
        match self {
            EndpointPolicy::PickFirst(p) => {
                p.on_state(ctx, id);
                // A pick_first policy whose connection closed stays IDLE until a pick.
            }
            EndpointPolicy::RoundRobin(p) => p.on_state(ctx, id),
            EndpointPolicy::RingHash(p) => p.on_state(ctx, id),
            EndpointPolicy::LeastRequest(p) => p.on_state(ctx, id),
            EndpointPolicy::WeightedRoundRobin(p) => p.on_state(ctx, id),
            EndpointPolicy::Custom(p) => p.on_state(ctx, id),
        }
    }

    /// The weights may have changed (the weight update period passed): weighted round
    /// robin rebuilds its scheduler.
    pub(super) fn refresh_weights(&mut self, ctx: &mut Ctx) {
        if let EndpointPolicy::WeightedRoundRobin(p) = self {
            p.refresh_weights(ctx);
        }
    }

    pub(super) fn pick(&mut self, ctx: &mut Ctx, hash: Option<u64>, rng: &mut PickRng) -> Picked {
        match self {
            EndpointPolicy::PickFirst(p) => p.pick(ctx),
            EndpointPolicy::RoundRobin(p) => p.pick(),
            EndpointPolicy::RingHash(p) => p.pick(ctx, hash.unwrap_or_else(|| rng.next())),
            EndpointPolicy::LeastRequest(p) => p.pick(ctx.pool, rng),
            EndpointPolicy::WeightedRoundRobin(p) => p.pick(),
            EndpointPolicy::Custom(p) => p.pick(rng),
        }
    }
}

fn shuffle_in_place(ctx: &mut Ctx, items: &mut [SubchannelId]) {
    for i in (1..items.len()).rev() {
        let j = (ctx.random() % (i as u64 + 1)) as usize;
        items.swap(i, j);
    }
}
