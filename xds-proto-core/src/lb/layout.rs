//! How a cluster's endpoints are laid out under its LB policy. As in gRPC,
//! `round_robin` (also from the legacy `lb_policy` enum) and `wrr_locality` run the
//! endpoint policy per locality under weighted locality picking; `ring_hash`,
//! `least_request`, `pick_first`, a custom policy (A52) and a bare client-side weighted
//! round robin (A58, normally under `wrr_locality`) run one policy over every endpoint
//! of the priority, each endpoint weighted by locality weight × endpoint weight. Only
//! endpoints whose health is UNKNOWN or HEALTHY are given to the policies; DRAINING
//! ones are kept aside for A55's override host when the cluster's
//! `override_host_status` allows them ([`draining_subchannels`]).

use super::api::{ConnectivityState, SubchannelId};
use super::cluster::Source;
use super::locality::Localities;
use super::policy::{Ctx, EndpointPolicy, EndpointSpec, PickRng, Picked, PolicyKind};
use super::subchannel::SubchannelPool;
use crate::resource::cluster::{LbPolicy, MAX_CHOICE_COUNT, OverrideHostStatus};
use crate::resource::endpoint::HealthStatus;

#[derive(Clone, Debug)]
pub(super) struct Layout {
    pub(super) per_locality: bool,
    pub(super) policy: PolicyKind,
}

impl Layout {
    pub(super) fn of(policy: &LbPolicy, ring_size_cap: u64) -> Layout {
        let flat = |policy| Layout {
            per_locality: false,
            policy,
        };
        match policy {
            LbPolicy::RoundRobin => Layout {
                per_locality: true,
                policy: PolicyKind::RoundRobin,
            },
            LbPolicy::WeightedRoundRobin(_) => flat(PolicyKind::WeightedRoundRobin),
            LbPolicy::WrrLocality(child) => Layout {
                per_locality: true,
                ..Layout::of(child, ring_size_cap)
            },
            LbPolicy::RingHash {
                min_ring_size,
                max_ring_size,
            } => flat(PolicyKind::RingHash {
                min_ring_size: (*min_ring_size).min(ring_size_cap),
                max_ring_size: (*max_ring_size).min(ring_size_cap),
            }),
            // A48: decoding rejects a count below 2; one above 10 counts as 10.
            LbPolicy::LeastRequest { choice_count } => flat(PolicyKind::LeastRequest {
                choice_count: (*choice_count).clamp(2, MAX_CHOICE_COUNT),
            }),
            LbPolicy::PickFirst {
                shuffle_address_list,
            } => flat(PolicyKind::PickFirst {
                shuffle: *shuffle_address_list,
            }),
            LbPolicy::Custom(custom) => flat(PolicyKind::Custom(custom.validated().clone())),
            // A policy added to the enum later: round robin per locality.
            #[allow(unreachable_patterns)]
            _ => Layout {
                per_locality: true,
                policy: PolicyKind::RoundRobin,
            },
        }
    }
}

/// One locality's usable endpoints, with subchannel references already taken.
#[derive(Clone, Debug)]
pub(super) struct LocalitySpec {
    pub(super) weight: u32,
    pub(super) endpoints: Vec<EndpointSpec>,
}

/// Resolves the source's usable endpoints to subchannels (taking one reference per
/// address) grouped by priority and locality.
pub(super) fn build_specs(
    pool: &mut SubchannelPool,
    source: &Source,
    layout: &Layout,
) -> Vec<Vec<LocalitySpec>> {
    let mut acquire = |addresses: &mut dyn Iterator<Item = std::net::SocketAddr>| {
        addresses
            .map(|a| pool.acquire(a))
            .collect::<Vec<SubchannelId>>()
    };
    match source {
        Source::Eds(Ok(endpoints)) => endpoints
            .priorities
            .iter()
            .map(|priority| {
                priority
                    .localities
                    .iter()
                    .map(|locality| LocalitySpec {
                        weight: locality.weight,
                        endpoints: locality
                            .endpoints
                            .iter()
                            .filter(|e| e.health_status.is_usable())
                            .map(|e| EndpointSpec {
                                subchannels: acquire(
                                    &mut std::iter::once(e.address)
                                        .chain(e.additional_addresses.iter().copied()),
                                ),
                                weight: if layout.per_locality {
                                    u64::from(e.weight)
                                } else {
                                    u64::from(e.weight) * u64::from(locality.weight)
                                },
                                address: e.address,
                            })
                            .collect(),
                    })
                    .collect()
            })
            .collect(),
        Source::Dns(Ok(addresses)) if !addresses.is_empty() => vec![vec![LocalitySpec {
            weight: 1,
            endpoints: vec![EndpointSpec {
                subchannels: acquire(&mut addresses.iter().copied()),
                weight: 1,
                address: addresses[0],
            }],
        }]],
        Source::Eds(Err(_)) | Source::Dns(_) => Vec::new(),
    }
}

/// A55: the subchannels of each priority's DRAINING endpoints (every address of
/// each, one reference taken per address) when `allowed` includes DRAINING, else
/// none. No endpoint policy sees them, so they are never picked but for an override
/// host and never count for failover; the cluster holds them (and keeps their
/// connections while their priority is in use) until an update drops the endpoint
/// or DRAINING from `allowed`.
pub(super) fn draining_subchannels(
    pool: &mut SubchannelPool,
    source: &Source,
    allowed: OverrideHostStatus,
) -> Vec<Vec<SubchannelId>> {
    let Source::Eds(Ok(endpoints)) = source else {
        return Vec::new();
    };
    if !allowed.contains(HealthStatus::Draining) {
        return Vec::new();
    }
    (endpoints.priorities.iter())
        .map(|priority| {
            (priority.localities.iter())
                .flat_map(|l| &l.endpoints)
                .filter(|e| e.health_status == HealthStatus::Draining)
                .flat_map(|e| {
                    std::iter::once(e.address).chain(e.additional_addresses.iter().copied())
                })
                .map(|address| pool.acquire(address))
                .collect()
        })
        .collect()
}

/// The policy of one priority.
#[derive(Debug)]
pub(super) enum PriorityChild {
    Localities(Localities),
    Flat(EndpointPolicy),
}

impl PriorityChild {
    pub(super) fn new(ctx: &mut Ctx, layout: &Layout, localities: &[LocalitySpec]) -> Self {
        if layout.per_locality {
            let children = localities
                .iter()
                .map(|l| {
                    (
                        l.weight,
                        EndpointPolicy::new(ctx, &layout.policy, &l.endpoints),
                    )
                })
                .collect();
            PriorityChild::Localities(Localities::new(children))
        } else {
            let endpoints: Vec<EndpointSpec> = localities
                .iter()
                .flat_map(|l| l.endpoints.iter().cloned())
                .collect();
            PriorityChild::Flat(EndpointPolicy::new(ctx, &layout.policy, &endpoints))
        }
    }

    /// Each ring-hash ring, as `(endpoints, entries)`.
    pub(super) fn ring_sizes(&self, out: &mut Vec<(usize, usize)>) {
        match self {
            PriorityChild::Localities(l) => {
                out.extend(l.policies().filter_map(EndpointPolicy::ring_size));
            }
            PriorityChild::Flat(p) => out.extend(p.ring_size()),
        }
    }

    pub(super) fn state(&self) -> ConnectivityState {
        match self {
            PriorityChild::Localities(l) => l.state(),
            PriorityChild::Flat(p) => p.state(),
        }
    }

    pub(super) fn on_state(&mut self, ctx: &mut Ctx, id: SubchannelId) {
        match self {
            PriorityChild::Localities(l) => l.on_state(ctx, id),
            PriorityChild::Flat(p) => p.on_state(ctx, id),
        }
    }

    /// Weighted round robin's weights may have changed.
    pub(super) fn refresh_weights(&mut self, ctx: &mut Ctx) {
        match self {
            PriorityChild::Localities(l) => l.refresh_weights(ctx),
            PriorityChild::Flat(p) => p.refresh_weights(ctx),
        }
    }

    pub(super) fn pick(&mut self, ctx: &mut Ctx, hash: Option<u64>, rng: &mut PickRng) -> Picked {
        match self {
            PriorityChild::Localities(l) => l.pick(ctx, hash, rng),
            PriorityChild::Flat(p) => p.pick(ctx, hash, rng),
        }
    }
}
