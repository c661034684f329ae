//! EDS: decoding and validating `envoy.config.endpoint.v3.ClusterLoadAssignment` into a
//! compact [`EndpointsResource`], following gRPC's rules (gRFCs A27, A52, A61).
//!
//! The module owns the endpoint types: priorities (contiguous from 0), weighted
//! localities, endpoints with their addresses (IP literals; A61 additional addresses
//! included), health status and weight, and the drop-overload policy. It also owns the
//! `envoy.config.core.v3.Address` → [`SocketAddr`] conversion.

use smallvec::SmallVec;
use std::collections::HashSet;
use std::net::{SocketAddr, SocketAddrV6};

use super::DecodeError;
use super::validate::{
    FieldError, PortRange, decode_resource, fraction_per_million, required, socket_port,
};
use crate::pb::envoy::config::core::v3 as core_pb;
use crate::pb::envoy::config::endpoint::v3 as endpoint_pb;

/// A validated `ClusterLoadAssignment`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointsResource {
    /// The resource name (`cluster_name`).
    pub cluster_name: String,
    /// The priorities, index = priority (0 is the highest). Never has gaps; may be empty.
    pub priorities: Vec<Priority>,
    /// `policy.drop_overloads`, in order.
    pub drop_overloads: Vec<DropOverload>,
}

/// The localities of one priority.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Priority {
    /// The localities, in the order received; never empty, distinct, and their weights
    /// sum to at most `u32::MAX`.
    pub localities: Vec<LocalityEndpoints>,
}

/// A locality and its endpoints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalityEndpoints {
    /// The locality's identity.
    pub locality: Locality,
    /// `load_balancing_weight` (non-zero: localities without weight are dropped).
    pub weight: u32,
    /// The endpoints, in order (endpoints with an unknown health status value are
    /// dropped).
    pub endpoints: Vec<Endpoint>,
}

/// A locality's identity.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Locality {
    /// Region.
    pub region: String,
    /// Zone.
    pub zone: String,
    /// Sub-zone.
    pub sub_zone: String,
}

/// One endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The primary address.
    pub address: SocketAddr,
    /// `additional_addresses` (A61 dual-stack), in order.
    pub additional_addresses: Vec<SocketAddr>,
    /// The health status the control plane reported.
    pub health_status: HealthStatus,
    /// `load_balancing_weight` (default 1, never 0).
    pub weight: u32,
    /// `endpoint.hostname` (may be empty).
    pub hostname: String,
}

/// An endpoint's health status (`envoy.config.core.v3.HealthStatus`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HealthStatus {
    /// `UNKNOWN`: usable.
    Unknown,
    /// `HEALTHY`: usable.
    Healthy,
    /// `UNHEALTHY`.
    Unhealthy,
    /// `DRAINING`.
    Draining,
    /// `TIMEOUT`.
    Timeout,
    /// `DEGRADED`.
    Degraded,
}

impl HealthStatus {
    /// Whether gRPC sends new RPCs to an endpoint in this state (UNKNOWN or HEALTHY).
    pub fn is_usable(self) -> bool {
        matches!(self, HealthStatus::Unknown | HealthStatus::Healthy)
    }

    fn from_proto(value: i32) -> Option<HealthStatus> {
        Some(match core_pb::HealthStatus::try_from(value).ok()? {
            core_pb::HealthStatus::Unknown => HealthStatus::Unknown,
            core_pb::HealthStatus::Healthy => HealthStatus::Healthy,
            core_pb::HealthStatus::Unhealthy => HealthStatus::Unhealthy,
            core_pb::HealthStatus::Draining => HealthStatus::Draining,
            core_pb::HealthStatus::Timeout => HealthStatus::Timeout,
            core_pb::HealthStatus::Degraded => HealthStatus::Degraded,
        })
    }
}

/// A drop-overload category.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DropOverload {
    /// The category (non-empty).
    pub category: String,
    /// The drop rate in parts per million (at most 1,000,000).
    pub drop_per_million: u32,
}

/// Decodes and validates one serialized `ClusterLoadAssignment`.
///
/// Only the fields the validation reads are decoded (see `lite`); everything else
/// (metadata, health check configs, named endpoints, ...) is skipped on the wire.
pub fn decode(bytes: &[u8]) -> Result<(String, EndpointsResource), DecodeError> {
    let cla: lite::ClusterLoadAssignment = decode_resource(bytes, "ClusterLoadAssignment")?;
    let name = cla.cluster_name.clone();
    let value = parse_cluster_load_assignment(cla).map_err(|e| e.into_decode_error(&name))?;
    Ok((name, value))
}

/// The addresses seen so far in one assignment, to reject duplicates: a few in a
/// vector (most assignments hold one to a handful, and a hash set for each of 10,000
/// was an allocation and a hashing per address), many in hash sets, IPv4 ones packed in
/// a `u64`, a quarter of a `SocketAddr`.
enum AddressSet {
    /// Up to four inline: most assignments allocate nothing for the check.
    Few(SmallVec<[SocketAddr; 4]>),
    Many {
        v4: HashSet<u64, foldhash::fast::FixedState>,
        v6: HashSet<SocketAddrV6, foldhash::fast::FixedState>,
    },
}

/// Up to this many addresses, a linear search beats hashing.
const FEW_ADDRESSES: usize = 16;

impl AddressSet {
    fn with_capacity(capacity: usize) -> AddressSet {
        if capacity <= FEW_ADDRESSES {
            return AddressSet::Few(SmallVec::with_capacity(capacity));
        }
        AddressSet::Many {
            v4: HashSet::with_capacity_and_hasher(capacity, Default::default()),
            v6: HashSet::default(),
        }
    }

    /// Adds `address`; false if it was already there.
    fn insert(&mut self, address: SocketAddr) -> bool {
        match self {
            AddressSet::Few(seen) if seen.len() < 2 * FEW_ADDRESSES => {
                if seen.contains(&address) {
                    return false;
                }
                seen.push(address);
                true
            }
            AddressSet::Few(seen) => {
                // More additional addresses than expected: switch to the sets.
                let mut many = AddressSet::with_capacity(4 * FEW_ADDRESSES);
                for a in seen.drain(..) {
                    many.insert(a);
                }
                *self = many;
                self.insert(address)
            }
            AddressSet::Many { v4, v6 } => match address {
                SocketAddr::V4(a) => {
                    v4.insert((u64::from(a.ip().to_bits()) << 16) | u64::from(a.port()))
                }
                SocketAddr::V6(a) => v6.insert(a),
            },
        }
    }
}

fn parse_cluster_load_assignment(
    cla: lite::ClusterLoadAssignment,
) -> Result<EndpointsResource, FieldError> {
    // The localities with their priorities, in the order received; grouped by priority
    // once all are in (a huge priority value costs nothing). Both checks are linear: a
    // scan of the localities so far per locality, or an insertion per new priority into
    // a sorted list, made a large assignment quadratic (40,000 localities took minutes).
    let mut parsed: Vec<(u32, LocalityEndpoints)> = Vec::with_capacity(cla.endpoints.len());
    let mut seen = LocalitySet::default();
    let total: usize = cla.endpoints.iter().map(|l| l.endpoints.len()).sum();
    let mut addresses = AddressSet::with_capacity(total);
    for (i, lle) in cla.endpoints.into_iter().enumerate() {
        let at = |e: FieldError| e.at_index("endpoints", i);
        let priority = lle.priority;
        let Some(locality) = parse_locality(lle, &mut addresses).map_err(at)? else {
            continue;
        };
        if !seen.insert(&parsed, priority, &locality.locality) {
            let l = &locality.locality;
            return Err(at(FieldError::new(
                "locality",
                format!(
                    "duplicate locality {{region={:?}, zone={:?}, sub_zone={:?}}} in priority {}",
                    l.region, l.zone, l.sub_zone, priority
                ),
            )));
        }
        parsed.push((priority, locality));
    }
    // Stable: a priority's localities keep the order received.
    parsed.sort_by_key(|(priority, _)| *priority);
    let mut parsed = parsed.into_iter().peekable();
    let mut priorities = Vec::new();
    while let Some((priority, first)) = parsed.next() {
        let expected = priorities.len();
        if usize::try_from(priority).ok() != Some(expected) {
            return Err(FieldError::new(
                "endpoints",
                format!(
                    "priorities are not contiguous: priority {expected} is missing but \
                     priority {priority} is set"
                ),
            ));
        }
        let mut localities = vec![first];
        while let Some((_, next)) = parsed.next_if(|(p, _)| *p == priority) {
            localities.push(next);
        }
        let total = localities
            .iter()
            .fold(0u64, |sum, l| sum.saturating_add(u64::from(l.weight)));
        if total > u64::from(u32::MAX) {
            return Err(FieldError::new(
                "endpoints",
                format!(
                    "sum of locality weights for priority {priority} ({total}) exceeds {}",
                    u32::MAX
                ),
            ));
        }
        priorities.push(Priority { localities });
    }
    let drops = cla.policy.map(|p| p.drop_overloads).unwrap_or_default();
    let mut drop_overloads = Vec::with_capacity(drops.len());
    for (i, drop) in drops.into_iter().enumerate() {
        drop_overloads
            .push(parse_drop_overload(drop).map_err(|e| e.at_index("policy.drop_overloads", i))?);
    }
    Ok(EndpointsResource {
        cluster_name: cla.cluster_name,
        priorities,
        drop_overloads,
    })
}

/// The (priority, locality) pairs of an assignment so far, to reject duplicates in
/// constant time: by hash, to their positions in the list being built.
#[derive(Default)]
struct LocalitySet(crate::DetHashMap<u64, SmallVec<[u32; 1]>>);

impl LocalitySet {
    /// Adds the pair that is about to be pushed at `parsed.len()`; false if `parsed`
    /// already holds it.
    fn insert(
        &mut self,
        parsed: &[(u32, LocalityEndpoints)],
        priority: u32,
        locality: &Locality,
    ) -> bool {
        use std::hash::BuildHasher;
        let key = foldhash::fast::FixedState::default().hash_one((priority, locality));
        let positions = self.0.entry(key).or_default();
        let duplicate = positions.iter().any(|&j| {
            let (p, l) = &parsed[j as usize];
            *p == priority && l.locality == *locality
        });
        if !duplicate {
            positions.push(parsed.len() as u32);
        }
        !duplicate
    }
}

/// Validates one locality; `Ok(None)` for a locality without weight (gRPC ignores it).
fn parse_locality(
    lle: lite::LocalityLbEndpoints,
    addresses: &mut AddressSet,
) -> Result<Option<LocalityEndpoints>, FieldError> {
    let weight = lle.load_balancing_weight.as_ref().map_or(0, |w| w.value);
    if weight == 0 {
        return Ok(None);
    }
    let locality = lle
        .locality
        .ok_or_else(|| FieldError::missing("locality"))?;
    // The endpoints were validated one by one as they were decoded; what is left is the
    // duplicate check, in order, up to the first invalid endpoint.
    let mut skipped = lle.skipped.iter().copied().peekable();
    let mut i = 0; // the index in `lb_endpoints` of the next valid endpoint
    for endpoint in &lle.endpoints {
        while skipped.next_if_eq(&i).is_some() {
            i += 1;
        }
        for address in std::iter::once(&endpoint.address).chain(&endpoint.additional_addresses) {
            if !addresses.insert(*address) {
                return Err(
                    FieldError::new("", format!("duplicate endpoint address {address}"))
                        .at_index("lb_endpoints", i),
                );
            }
        }
        i += 1;
    }
    if let Some((i, e)) = lle.error {
        return Err(e.at_index("lb_endpoints", i));
    }
    Ok(Some(LocalityEndpoints {
        locality: Locality {
            region: locality.region,
            zone: locality.zone,
            sub_zone: locality.sub_zone,
        },
        weight,
        endpoints: lle.endpoints,
    }))
}

/// Validates one endpoint; `Ok(None)` for an unknown health status value (skipped).
fn parse_lb_endpoint(lb: lite::LbEndpoint) -> Result<Option<Endpoint>, FieldError> {
    use lite::lb_endpoint::HostIdentifier;
    let Some(health_status) = HealthStatus::from_proto(lb.health_status) else {
        return Ok(None);
    };
    let weight = lb.load_balancing_weight.as_ref().map_or(1, |w| w.value);
    if weight == 0 {
        return Err(FieldError::new(
            "load_balancing_weight",
            "must be greater than 0",
        ));
    }
    let endpoint = match lb.host_identifier {
        Some(HostIdentifier::Endpoint(endpoint)) => endpoint,
        Some(HostIdentifier::EndpointName(_)) => {
            return Err(FieldError::new("endpoint_name", "not supported"));
        }
        None => return Err(FieldError::missing("endpoint")),
    };
    let address = socket_addr(endpoint.address.as_ref()).map_err(|e| e.at("endpoint.address"))?;
    let mut additional_addresses = Vec::with_capacity(endpoint.additional_addresses.len());
    for (i, additional) in endpoint.additional_addresses.iter().enumerate() {
        additional_addresses.push(
            socket_addr(additional.address.as_ref())
                .map_err(|e| e.at(format_args!("endpoint.additional_addresses[{i}].address")))?,
        );
    }
    Ok(Some(Endpoint {
        address,
        additional_addresses,
        health_status,
        weight,
        hostname: endpoint.hostname,
    }))
}

fn parse_drop_overload(
    drop: endpoint_pb::cluster_load_assignment::policy::DropOverload,
) -> Result<DropOverload, FieldError> {
    if drop.category.is_empty() {
        return Err(FieldError::new("category", "must be non-empty"));
    }
    let percentage = required(drop.drop_percentage.as_ref(), "drop_percentage")?;
    Ok(DropOverload {
        drop_per_million: fraction_per_million(percentage).map_err(|e| e.at("drop_percentage"))?,
        category: drop.category,
    })
}

/// Converts an `Address` that must be a `socket_address` with an IP literal and a
/// `port_value` of at most 65535. Error paths are relative to the `Address`.
fn socket_addr(address: Option<&lite::Address>) -> Result<SocketAddr, FieldError> {
    use lite::address::Address;
    let Some(address) = address else {
        return Err(FieldError::missing(""));
    };
    let Some(Address::SocketAddress(sa)) = &address.address else {
        return Err(FieldError::missing("socket_address"));
    };
    let port = socket_port(sa.port_specifier.as_ref().into(), PortRange::Any)
        .map_err(|e| e.at("socket_address"))?;
    let ip = match &sa.address {
        lite::AddressText::Ip(ip) => *ip,
        lite::AddressText::Other(text) => {
            return Err(FieldError::new(
                "socket_address.address",
                format!("{text:?} is not an IP address"),
            ));
        }
    };
    Ok(SocketAddr::new(ip, port))
}

/// Decode-only views of the messages: only the fields the validation reads.
mod lite;

#[cfg(test)]
mod tests;
