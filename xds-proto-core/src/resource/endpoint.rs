//! EDS: decoding and validating `envoy.config.endpoint.v3.ClusterLoadAssignment` into a
//! compact [`EndpointsResource`], following gRPC's rules (gRFCs A27, A52, A61).
//!
//! The module owns the endpoint types: priorities (contiguous from 0), weighted
//! localities, endpoints with their addresses (IP literals; A61 additional addresses
//! included), health status and weight, and the drop-overload policy. It also owns the
//! `envoy.config.core.v3.Address` → [`SocketAddr`] conversion.

use std::collections::{BTreeMap, HashSet};
use std::net::{SocketAddr, SocketAddrV6};

use prost::Message;

use super::DecodeError;
use super::validate::{FieldError, PortRange, decode_resource, fraction_per_million, socket_port};
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

/// The addresses seen so far in one assignment, to reject duplicates. IPv4 ones are kept
/// packed in a `u64`, a quarter of a `SocketAddr`.
struct AddressSet {
    v4: HashSet<u64, foldhash::fast::FixedState>,
    v6: HashSet<SocketAddrV6, foldhash::fast::FixedState>,
}

impl AddressSet {
    fn with_capacity(capacity: usize) -> AddressSet {
        AddressSet {
            v4: HashSet::with_capacity_and_hasher(capacity, Default::default()),
            v6: HashSet::default(),
        }
    }

    /// Adds `address`; false if it was already there.
    fn insert(&mut self, address: SocketAddr) -> bool {
        match address {
            SocketAddr::V4(a) => self
                .v4
                .insert((u64::from(a.ip().to_bits()) << 16) | u64::from(a.port())),
            SocketAddr::V6(a) => self.v6.insert(a),
        }
    }
}

fn parse_cluster_load_assignment(
    cla: lite::ClusterLoadAssignment,
) -> Result<EndpointsResource, FieldError> {
    // Localities by priority; a map, so that a huge priority value costs nothing.
    let mut by_priority: BTreeMap<u32, Vec<LocalityEndpoints>> = BTreeMap::new();
    let total: usize = cla.endpoints.iter().map(|l| l.endpoints.len()).sum();
    let mut addresses = AddressSet::with_capacity(total);
    for (i, lle) in cla.endpoints.into_iter().enumerate() {
        let at = |e: FieldError| e.at_index("endpoints", i);
        let priority = lle.priority;
        let Some(parsed) = parse_locality(lle, &mut addresses).map_err(at)? else {
            continue;
        };
        let localities = by_priority.entry(priority).or_default();
        if localities.iter().any(|l| l.locality == parsed.locality) {
            let l = &parsed.locality;
            return Err(at(FieldError::new(
                "locality",
                format!(
                    "duplicate locality {{region={:?}, zone={:?}, sub_zone={:?}}} in priority {}",
                    l.region, l.zone, l.sub_zone, priority
                ),
            )));
        }
        localities.push(parsed);
    }
    let mut priorities = Vec::with_capacity(by_priority.len());
    for (expected, (priority, localities)) in by_priority.into_iter().enumerate() {
        if usize::try_from(priority).ok() != Some(expected) {
            return Err(FieldError::new(
                "endpoints",
                format!(
                    "priorities are not contiguous: priority {expected} is missing but \
                     priority {priority} is set"
                ),
            ));
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

/// Validates one locality; `Ok(None)` for a locality without weight (gRPC ignores it).
fn parse_locality(
    lle: lite::LocalityLbEndpoints,
    addresses: &mut AddressSet,
) -> Result<Option<LocalityEndpoints>, FieldError> {
    let weight = lle.load_balancing_weight.as_ref().map_or(0, |w| w.value);
    if weight == 0 {
        return Ok(None);
    }
    let Some(locality) = lle.locality else {
        return Err(FieldError::new("locality", "field not present"));
    };
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
        None => return Err(FieldError::new("endpoint", "field not present")),
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
    let Some(percentage) = &drop.drop_percentage else {
        return Err(FieldError::new("drop_percentage", "field not present"));
    };
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
        return Err(FieldError::new("", "field not present"));
    };
    let Some(Address::SocketAddress(sa)) = &address.address else {
        return Err(FieldError::new("socket_address", "field not present"));
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

/// Decode-only views of the EDS messages: only the fields the validation reads, by their
/// real field numbers and wire types. prost skips every other field on the wire without
/// building it (metadata, health check configs, `named_endpoints`, LEDS configs, ...).
/// Oneofs keep all their members, so that "the last member wins" behaves as in the full
/// messages; members never read decode into `Skipped`. The structs are
/// named after the Envoy messages, so decode errors name the same messages.
mod lite {
    use std::net::{IpAddr, Ipv4Addr};

    use bytes::{Buf, BufMut};
    use prost::encoding::{self, DecodeContext, WireType};

    use super::FieldError;
    use crate::pb::envoy::config::core::v3::Locality;
    use crate::pb::envoy::config::endpoint::v3::cluster_load_assignment::policy::DropOverload;
    use crate::pb::google::protobuf::UInt32Value;

    /// A message whose fields are never read: prost checks its framing and skips them.
    #[derive(Clone, Copy, PartialEq, prost::Message)]
    pub struct Skipped {}

    /// `envoy.config.endpoint.v3.ClusterLoadAssignment`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ClusterLoadAssignment {
        #[prost(string, tag = "1")]
        pub cluster_name: String,
        #[prost(message, repeated, tag = "2")]
        pub endpoints: Vec<LocalityLbEndpoints>,
        #[prost(message, optional, tag = "4")]
        pub policy: Option<Policy>,
    }

    /// `envoy.config.endpoint.v3.ClusterLoadAssignment.Policy`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Policy {
        #[prost(message, repeated, tag = "2")]
        pub drop_overloads: Vec<DropOverload>,
    }

    /// `envoy.config.endpoint.v3.LocalityLbEndpoints`, its `lb_endpoints` validated one
    /// by one as they are decoded, so that the decoded form of a large locality is never
    /// held. Each element of a repeated message field is a complete message, so
    /// validating it at once gives what validating it after the whole decode would; a
    /// decode error anywhere still fails the decode. Decode-only: encoding writes the
    /// locality, weight and priority, not the endpoints.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct LocalityLbEndpoints {
        pub locality: Option<Locality>,
        pub load_balancing_weight: Option<UInt32Value>,
        pub priority: u32,
        /// The valid endpoints of `lb_endpoints` in order, up to the first invalid one.
        pub endpoints: Vec<super::Endpoint>,
        /// The indices in `lb_endpoints` of the endpoints skipped (unknown health
        /// status), ascending.
        pub skipped: Vec<usize>,
        /// The first invalid endpoint: its index in `lb_endpoints` and what is wrong.
        pub error: Option<(usize, FieldError)>,
        /// How many `lb_endpoints` were decoded.
        pub count: usize,
    }

    impl prost::Message for LocalityLbEndpoints {
        fn encode_raw(&self, buf: &mut impl BufMut) {
            if let Some(locality) = &self.locality {
                encoding::message::encode(1, locality, buf);
            }
            if let Some(weight) = &self.load_balancing_weight {
                encoding::message::encode(3, weight, buf);
            }
            if self.priority != 0 {
                encoding::uint32::encode(5, &self.priority, buf);
            }
        }

        fn merge_field(
            &mut self,
            tag: u32,
            wire_type: WireType,
            buf: &mut impl Buf,
            ctx: DecodeContext,
        ) -> Result<(), prost::DecodeError> {
            const NAME: &str = "LocalityLbEndpoints";
            let at = |field| {
                move |mut e: prost::DecodeError| {
                    e.push(NAME, field);
                    e
                }
            };
            match tag {
                1 => encoding::message::merge(
                    wire_type,
                    self.locality.get_or_insert_with(Default::default),
                    buf,
                    ctx,
                )
                .map_err(at("locality")),
                2 => {
                    let mut lb = LbEndpoint::default();
                    encoding::message::merge(wire_type, &mut lb, buf, ctx)
                        .map_err(at("lb_endpoints"))?;
                    let index = self.count;
                    self.count += 1;
                    if self.error.is_none() {
                        match super::parse_lb_endpoint(lb) {
                            Ok(Some(endpoint)) => self.endpoints.push(endpoint),
                            Ok(None) => self.skipped.push(index),
                            Err(e) => self.error = Some((index, e)),
                        }
                    }
                    Ok(())
                }
                3 => encoding::message::merge(
                    wire_type,
                    self.load_balancing_weight
                        .get_or_insert_with(Default::default),
                    buf,
                    ctx,
                )
                .map_err(at("load_balancing_weight")),
                5 => encoding::uint32::merge(wire_type, &mut self.priority, buf, ctx)
                    .map_err(at("priority")),
                _ => encoding::skip_field(wire_type, tag, buf, ctx),
            }
        }

        fn encoded_len(&self) -> usize {
            self.locality
                .as_ref()
                .map_or(0, |l| encoding::message::encoded_len(1, l))
                + self
                    .load_balancing_weight
                    .as_ref()
                    .map_or(0, |w| encoding::message::encoded_len(3, w))
                + if self.priority != 0 {
                    encoding::uint32::encoded_len(5, &self.priority)
                } else {
                    0
                }
        }

        fn clear(&mut self) {
            *self = LocalityLbEndpoints::default();
        }
    }

    /// `envoy.config.endpoint.v3.LbEndpoint`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LbEndpoint {
        #[prost(oneof = "lb_endpoint::HostIdentifier", tags = "1, 5")]
        pub host_identifier: Option<lb_endpoint::HostIdentifier>,
        /// `envoy.config.core.v3.HealthStatus`.
        #[prost(int32, tag = "2")]
        pub health_status: i32,
        #[prost(message, optional, tag = "4")]
        pub load_balancing_weight: Option<UInt32Value>,
    }

    /// Oneofs of [`LbEndpoint`].
    pub mod lb_endpoint {
        /// `host_identifier`.
        #[derive(Clone, PartialEq, prost::Oneof)]
        pub enum HostIdentifier {
            #[prost(message, tag = "1")]
            Endpoint(super::Endpoint),
            #[prost(string, tag = "5")]
            EndpointName(String),
        }
    }

    /// `envoy.config.endpoint.v3.Endpoint`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Endpoint {
        #[prost(message, optional, tag = "1")]
        pub address: Option<Address>,
        #[prost(string, tag = "3")]
        pub hostname: String,
        #[prost(message, repeated, tag = "4")]
        pub additional_addresses: Vec<AdditionalAddress>,
    }

    /// `envoy.config.endpoint.v3.Endpoint.AdditionalAddress`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct AdditionalAddress {
        #[prost(message, optional, tag = "1")]
        pub address: Option<Address>,
    }

    /// `envoy.config.core.v3.Address`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Address {
        #[prost(oneof = "address::Address", tags = "1, 2, 3")]
        pub address: Option<address::Address>,
    }

    /// Oneofs of [`Address`].
    pub mod address {
        /// `address`.
        #[allow(clippy::enum_variant_names)] // the Envoy oneof members' names
        #[derive(Clone, PartialEq, prost::Oneof)]
        pub enum Address {
            #[prost(message, tag = "1")]
            SocketAddress(super::SocketAddress),
            #[prost(message, tag = "2")]
            Pipe(super::Skipped),
            #[prost(message, tag = "3")]
            EnvoyInternalAddress(super::Skipped),
        }
    }

    /// `envoy.config.core.v3.SocketAddress`, its `address` parsed as it is decoded,
    /// straight from the wire bytes: no `String` is built for an IP literal.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct SocketAddress {
        pub address: AddressText,
        pub port_specifier: Option<socket_address::PortSpecifier>,
    }

    /// A decoded `SocketAddress.address`.
    #[derive(Clone, Debug, PartialEq)]
    pub enum AddressText {
        /// An IP literal.
        Ip(IpAddr),
        /// Anything else (kept to be reported).
        Other(String),
    }

    impl Default for AddressText {
        fn default() -> AddressText {
            AddressText::Other(String::new())
        }
    }

    /// An IPv4 literal in its plain form: four decimal octets of one to three digits,
    /// without leading zeros. `str::parse` accepts every such literal with the same
    /// value (and rejects nothing else this accepts), so this is only a faster path to
    /// it for the common case; anything else is left to `str::parse`.
    pub(super) fn plain_ipv4(bytes: &[u8]) -> Option<Ipv4Addr> {
        let mut octets = [0u8; 4];
        let mut parts = bytes.split(|&b| b == b'.');
        for octet in &mut octets {
            let part = parts.next()?;
            if part.is_empty()
                || part.len() > 3
                || (part.len() > 1 && part[0] == b'0')
                || !part.iter().all(u8::is_ascii_digit)
            {
                return None;
            }
            let value = part.iter().fold(0u16, |v, &d| v * 10 + u16::from(d - b'0'));
            *octet = u8::try_from(value).ok()?;
        }
        if parts.next().is_some() {
            return None;
        }
        Some(Ipv4Addr::from(octets))
    }

    impl AddressText {
        fn new(text: &str) -> AddressText {
            match text.parse() {
                Ok(ip) => AddressText::Ip(ip),
                Err(_) => AddressText::Other(text.to_owned()),
            }
        }
    }

    impl prost::Message for SocketAddress {
        fn encode_raw(&self, buf: &mut impl BufMut) {
            let text = match &self.address {
                AddressText::Ip(ip) => ip.to_string(),
                AddressText::Other(s) => s.clone(),
            };
            if !text.is_empty() {
                encoding::string::encode(2, &text, buf);
            }
            if let Some(port) = &self.port_specifier {
                port.encode(buf);
            }
        }

        fn merge_field(
            &mut self,
            tag: u32,
            wire_type: WireType,
            buf: &mut impl Buf,
            ctx: DecodeContext,
        ) -> Result<(), prost::DecodeError> {
            const NAME: &str = "SocketAddress";
            match tag {
                2 => {
                    // Fast path: a short, complete, UTF-8 value in the current chunk
                    // (always, for a resource decoded from a slice). Anything else goes
                    // through prost's own string decoding, for its exact errors.
                    let chunk = buf.chunk();
                    if wire_type == WireType::LengthDelimited
                        && let Some(&len) = chunk.first()
                        && len < 0x80
                        && let Some(bytes) = chunk.get(1..1 + usize::from(len))
                    {
                        let parsed = match plain_ipv4(bytes) {
                            Some(ip) => Some(AddressText::Ip(IpAddr::V4(ip))),
                            None => std::str::from_utf8(bytes).ok().map(AddressText::new),
                        };
                        if let Some(address) = parsed {
                            self.address = address;
                            buf.advance(1 + usize::from(len));
                            return Ok(());
                        }
                    }
                    let mut text = String::new();
                    encoding::string::merge(wire_type, &mut text, buf, ctx).map_err(|mut e| {
                        e.push(NAME, "address");
                        e
                    })?;
                    self.address = AddressText::new(&text);
                    Ok(())
                }
                3 | 4 => socket_address::PortSpecifier::merge(
                    &mut self.port_specifier,
                    tag,
                    wire_type,
                    buf,
                    ctx,
                )
                .map_err(|mut e| {
                    e.push(NAME, "port_specifier");
                    e
                }),
                _ => encoding::skip_field(wire_type, tag, buf, ctx),
            }
        }

        fn encoded_len(&self) -> usize {
            let text_len = match &self.address {
                AddressText::Ip(ip) => ip.to_string().len(),
                AddressText::Other(s) => s.len(),
            };
            let address = if text_len == 0 {
                0
            } else {
                encoding::key_len(2) + encoding::encoded_len_varint(text_len as u64) + text_len
            };
            address + self.port_specifier.as_ref().map_or(0, |p| p.encoded_len())
        }

        fn clear(&mut self) {
            *self = SocketAddress::default();
        }
    }

    /// Oneofs of [`SocketAddress`].
    pub mod socket_address {
        /// `port_specifier`.
        #[derive(Clone, PartialEq, prost::Oneof)]
        pub enum PortSpecifier {
            #[prost(uint32, tag = "3")]
            PortValue(u32),
            #[prost(string, tag = "4")]
            NamedPort(String),
        }

        impl From<Option<&PortSpecifier>> for crate::resource::validate::PortSpecifier {
            fn from(port: Option<&PortSpecifier>) -> Self {
                match port {
                    Some(PortSpecifier::PortValue(port)) => Self::Value(*port),
                    Some(PortSpecifier::NamedPort(_)) => Self::Named,
                    None => Self::Unset,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::envoy::r#type::v3 as type_pb;
    use crate::pb::google::protobuf as pbuf;
    use core_pb::socket_address::PortSpecifier;
    use endpoint_pb::cluster_load_assignment::{Policy, policy::DropOverload as DropPb};

    fn address(host: &str, port: Option<PortSpecifier>) -> core_pb::Address {
        core_pb::Address {
            address: Some(core_pb::address::Address::SocketAddress(
                core_pb::SocketAddress {
                    address: host.to_owned(),
                    port_specifier: port,
                    ..Default::default()
                },
            )),
        }
    }

    fn lb_endpoint(host: &str, port: u32) -> endpoint_pb::LbEndpoint {
        endpoint_pb::LbEndpoint {
            host_identifier: Some(endpoint_pb::lb_endpoint::HostIdentifier::Endpoint(
                endpoint_pb::Endpoint {
                    address: Some(address(host, Some(PortSpecifier::PortValue(port)))),
                    ..Default::default()
                },
            )),
            ..Default::default()
        }
    }

    fn locality(
        zone: &str,
        weight: Option<u32>,
        priority: u32,
        endpoints: Vec<endpoint_pb::LbEndpoint>,
    ) -> endpoint_pb::LocalityLbEndpoints {
        endpoint_pb::LocalityLbEndpoints {
            locality: Some(core_pb::Locality {
                region: "r".to_owned(),
                zone: zone.to_owned(),
                sub_zone: String::new(),
            }),
            lb_endpoints: endpoints,
            load_balancing_weight: weight.map(|value| pbuf::UInt32Value { value }),
            priority,
            ..Default::default()
        }
    }

    fn cla(endpoints: Vec<endpoint_pb::LocalityLbEndpoints>) -> endpoint_pb::ClusterLoadAssignment {
        endpoint_pb::ClusterLoadAssignment {
            cluster_name: "eds".to_owned(),
            endpoints,
            ..Default::default()
        }
    }

    fn decode_cla(
        c: &endpoint_pb::ClusterLoadAssignment,
    ) -> Result<EndpointsResource, DecodeError> {
        decode(&c.encode_to_vec()).map(|(name, value)| {
            assert_eq!(name, c.cluster_name);
            value
        })
    }

    fn err(c: &endpoint_pb::ClusterLoadAssignment) -> String {
        let e = decode_cla(c).expect_err("expected an error");
        assert_eq!(e.name.as_deref(), Some("eds"));
        e.message
    }

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn full_assignment() {
        let mut ep = lb_endpoint("10.0.0.1", 80);
        ep.health_status = core_pb::HealthStatus::Draining as i32;
        ep.load_balancing_weight = Some(pbuf::UInt32Value { value: 7 });
        if let Some(endpoint_pb::lb_endpoint::HostIdentifier::Endpoint(e)) = &mut ep.host_identifier
        {
            e.hostname = "host-1".to_owned();
            e.additional_addresses = vec![endpoint_pb::endpoint::AdditionalAddress {
                address: Some(address("::1", Some(PortSpecifier::PortValue(80)))),
            }];
        }
        let mut c = cla(vec![
            locality("z1", Some(2), 1, vec![lb_endpoint("10.0.0.2", 81)]),
            locality("z0", Some(3), 0, vec![ep]),
            locality("skipped", None, 0, vec![lb_endpoint("10.0.0.9", 1)]),
            locality("zero", Some(0), 5, vec![]),
        ]);
        c.policy = Some(Policy {
            drop_overloads: vec![DropPb {
                category: "lb".to_owned(),
                drop_percentage: Some(type_pb::FractionalPercent {
                    numerator: 3,
                    denominator: type_pb::fractional_percent::DenominatorType::Hundred as i32,
                }),
            }],
            ..Default::default()
        });
        let loc = |zone: &str| Locality {
            region: "r".to_owned(),
            zone: zone.to_owned(),
            sub_zone: String::new(),
        };
        assert_eq!(
            decode_cla(&c).unwrap(),
            EndpointsResource {
                cluster_name: "eds".to_owned(),
                priorities: vec![
                    Priority {
                        localities: vec![LocalityEndpoints {
                            locality: loc("z0"),
                            weight: 3,
                            endpoints: vec![Endpoint {
                                address: addr("10.0.0.1:80"),
                                additional_addresses: vec![addr("[::1]:80")],
                                health_status: HealthStatus::Draining,
                                weight: 7,
                                hostname: "host-1".to_owned(),
                            }],
                        }],
                    },
                    Priority {
                        localities: vec![LocalityEndpoints {
                            locality: loc("z1"),
                            weight: 2,
                            endpoints: vec![Endpoint {
                                address: addr("10.0.0.2:81"),
                                additional_addresses: vec![],
                                health_status: HealthStatus::Unknown,
                                weight: 1,
                                hostname: String::new(),
                            }],
                        }],
                    },
                ],
                drop_overloads: vec![DropOverload {
                    category: "lb".to_owned(),
                    drop_per_million: 30_000,
                }],
            }
        );
    }

    #[test]
    fn mutated_bytes_never_panic() {
        let c = cla(vec![
            locality("a", Some(1), 0, vec![lb_endpoint("10.0.0.1", 80)]),
            locality("b", Some(2), 1, vec![lb_endpoint("::1", 443)]),
        ]);
        crate::resource::validate::for_each_mutation(&c.encode_to_vec(), |b| {
            let _ = decode(b);
        });
    }

    #[test]
    fn garbage_and_truncated_bytes_are_unnamed_errors() {
        let e = decode(&[0x12, 0x05, 0x01]).unwrap_err();
        assert_eq!(e.name, None);
        assert!(
            e.message
                .starts_with("failed to decode ClusterLoadAssignment: "),
            "{e}"
        );
        let full = cla(vec![locality(
            "z",
            Some(1),
            0,
            vec![lb_endpoint("10.0.0.1", 80)],
        )])
        .encode_to_vec();
        for len in 0..full.len() {
            if let Err(e) = decode(&full[..len]) {
                assert!(matches!(e.name.as_deref(), None | Some("" | "eds")), "{e}");
            }
        }
    }

    #[test]
    fn empty_assignment_is_valid() {
        let out = decode_cla(&cla(vec![])).unwrap();
        assert!(out.priorities.is_empty());
    }

    #[test]
    fn health_statuses() {
        use core_pb::HealthStatus as H;
        for (proto, status) in [
            (H::Unknown, HealthStatus::Unknown),
            (H::Healthy, HealthStatus::Healthy),
            (H::Unhealthy, HealthStatus::Unhealthy),
            (H::Draining, HealthStatus::Draining),
            (H::Timeout, HealthStatus::Timeout),
            (H::Degraded, HealthStatus::Degraded),
        ] {
            let mut ep = lb_endpoint("10.0.0.1", 80);
            ep.health_status = proto as i32;
            let out = decode_cla(&cla(vec![locality("z", Some(1), 0, vec![ep])])).unwrap();
            assert_eq!(
                out.priorities[0].localities[0].endpoints[0].health_status,
                status
            );
        }
        assert!(HealthStatus::Healthy.is_usable());
        assert!(!HealthStatus::Draining.is_usable());
        // An unknown enum value: the endpoint is dropped.
        let mut ep = lb_endpoint("10.0.0.1", 80);
        ep.health_status = 42;
        let out = decode_cla(&cla(vec![locality("z", Some(1), 0, vec![ep])])).unwrap();
        assert!(out.priorities[0].localities[0].endpoints.is_empty());
    }

    #[test]
    fn locality_errors() {
        let mut no_locality = locality("z", Some(1), 0, vec![]);
        no_locality.locality = None;
        assert_eq!(
            err(&cla(vec![no_locality])),
            "endpoints[0].locality: field not present"
        );
        assert_eq!(
            err(&cla(vec![
                locality("a", Some(1), 0, vec![]),
                locality("a", Some(1), 0, vec![]),
            ])),
            "endpoints[1].locality: duplicate locality {region=\"r\", zone=\"a\", sub_zone=\"\"} \
             in priority 0"
        );
        // The same locality in two priorities is fine.
        assert!(
            decode_cla(&cla(vec![
                locality("a", Some(1), 0, vec![]),
                locality("a", Some(1), 1, vec![]),
            ]))
            .is_ok()
        );
    }

    #[test]
    fn priorities_must_be_contiguous() {
        assert_eq!(
            err(&cla(vec![
                locality("a", Some(1), 0, vec![]),
                locality("b", Some(1), 2, vec![]),
            ])),
            "endpoints: priorities are not contiguous: priority 1 is missing but priority 2 is \
             set"
        );
        assert_eq!(
            err(&cla(vec![locality("a", Some(1), u32::MAX, vec![])])),
            "endpoints: priorities are not contiguous: priority 0 is missing but priority \
             4294967295 is set"
        );
        // A gap left by a zero-weight locality counts as missing.
        assert_eq!(
            err(&cla(vec![
                locality("a", Some(0), 0, vec![]),
                locality("b", Some(1), 1, vec![]),
            ])),
            "endpoints: priorities are not contiguous: priority 0 is missing but priority 1 is \
             set"
        );
    }

    #[test]
    fn locality_weight_sum_must_fit_u32() {
        assert_eq!(
            err(&cla(vec![
                locality("a", Some(u32::MAX), 0, vec![]),
                locality("b", Some(1), 0, vec![]),
            ])),
            "endpoints: sum of locality weights for priority 0 (4294967296) exceeds 4294967295"
        );
        assert!(
            decode_cla(&cla(vec![
                locality("a", Some(u32::MAX), 0, vec![]),
                locality("b", Some(1), 1, vec![]),
            ]))
            .is_ok()
        );
    }

    #[test]
    fn endpoint_errors() {
        let p = "endpoints[0].lb_endpoints[0]";
        let with_addr = |a: Option<core_pb::Address>| endpoint_pb::LbEndpoint {
            host_identifier: Some(endpoint_pb::lb_endpoint::HostIdentifier::Endpoint(
                endpoint_pb::Endpoint {
                    address: a,
                    ..Default::default()
                },
            )),
            ..Default::default()
        };
        let mut zero_weight = lb_endpoint("10.0.0.1", 80);
        zero_weight.load_balancing_weight = Some(pbuf::UInt32Value { value: 0 });
        let cases = [
            (
                zero_weight,
                format!("{p}.load_balancing_weight: must be greater than 0"),
            ),
            (
                endpoint_pb::LbEndpoint::default(),
                format!("{p}.endpoint: field not present"),
            ),
            (
                endpoint_pb::LbEndpoint {
                    host_identifier: Some(endpoint_pb::lb_endpoint::HostIdentifier::EndpointName(
                        "n".to_owned(),
                    )),
                    ..Default::default()
                },
                format!("{p}.endpoint_name: not supported"),
            ),
            (
                with_addr(None),
                format!("{p}.endpoint.address: field not present"),
            ),
            (
                with_addr(Some(core_pb::Address {
                    address: Some(core_pb::address::Address::Pipe(Default::default())),
                })),
                format!("{p}.endpoint.address.socket_address: field not present"),
            ),
            (
                with_addr(Some(address("10.0.0.1", None))),
                format!("{p}.endpoint.address.socket_address.port_value: field not present"),
            ),
            (
                with_addr(Some(address(
                    "10.0.0.1",
                    Some(PortSpecifier::NamedPort("http".to_owned())),
                ))),
                format!(
                    "{p}.endpoint.address.socket_address.named_port: not supported (use \
                     port_value)"
                ),
            ),
            (
                lb_endpoint("10.0.0.1", 65_536),
                format!("{p}.endpoint.address.socket_address.port_value: invalid port 65536"),
            ),
            (
                lb_endpoint("example.com", 80),
                format!(
                    "{p}.endpoint.address.socket_address.address: \"example.com\" is not an IP \
                     address"
                ),
            ),
        ];
        for (ep, msg) in cases {
            assert_eq!(err(&cla(vec![locality("z", Some(1), 0, vec![ep])])), msg);
        }
        let mut bad_additional = lb_endpoint("10.0.0.1", 80);
        if let Some(endpoint_pb::lb_endpoint::HostIdentifier::Endpoint(e)) =
            &mut bad_additional.host_identifier
        {
            e.additional_addresses =
                vec![endpoint_pb::endpoint::AdditionalAddress { address: None }];
        }
        assert_eq!(
            err(&cla(vec![locality("z", Some(1), 0, vec![bad_additional])])),
            format!("{p}.endpoint.additional_addresses[0].address: field not present")
        );
    }

    #[test]
    fn duplicate_addresses_are_rejected() {
        assert_eq!(
            err(&cla(vec![
                locality("a", Some(1), 0, vec![lb_endpoint("10.0.0.1", 80)]),
                locality("b", Some(1), 1, vec![lb_endpoint("10.0.0.1", 80)]),
            ])),
            "endpoints[1].lb_endpoints[0]: duplicate endpoint address 10.0.0.1:80"
        );
        let mut ep = lb_endpoint("10.0.0.1", 80);
        if let Some(endpoint_pb::lb_endpoint::HostIdentifier::Endpoint(e)) = &mut ep.host_identifier
        {
            e.additional_addresses = vec![endpoint_pb::endpoint::AdditionalAddress {
                address: Some(address("10.0.0.1", Some(PortSpecifier::PortValue(80)))),
            }];
        }
        assert_eq!(
            err(&cla(vec![locality("a", Some(1), 0, vec![ep])])),
            "endpoints[0].lb_endpoints[0]: duplicate endpoint address 10.0.0.1:80"
        );
    }

    #[test]
    fn drop_overloads() {
        use type_pb::fractional_percent::DenominatorType as D;
        let with_drops = |drops: Vec<DropPb>| endpoint_pb::ClusterLoadAssignment {
            policy: Some(Policy {
                drop_overloads: drops,
                ..Default::default()
            }),
            ..cla(vec![])
        };
        let drop = |category: &str, numerator: u32, denominator: i32| DropPb {
            category: category.to_owned(),
            drop_percentage: Some(type_pb::FractionalPercent {
                numerator,
                denominator,
            }),
        };
        let out = decode_cla(&with_drops(vec![
            drop("a", 5, D::TenThousand as i32),
            drop("b", 2_000_000, D::Million as i32),
            drop("c", 150, D::Hundred as i32),
        ]))
        .unwrap();
        let rates: Vec<(&str, u32)> = out
            .drop_overloads
            .iter()
            .map(|d| (d.category.as_str(), d.drop_per_million))
            .collect();
        assert_eq!(rates, vec![("a", 500), ("b", 1_000_000), ("c", 1_000_000)]);

        assert_eq!(
            err(&with_drops(vec![drop("", 1, 0)])),
            "policy.drop_overloads[0].category: must be non-empty"
        );
        assert_eq!(
            err(&with_drops(vec![DropPb {
                category: "x".to_owned(),
                drop_percentage: None,
            }])),
            "policy.drop_overloads[0].drop_percentage: field not present"
        );
        assert_eq!(
            err(&with_drops(vec![drop("ok", 1, 0), drop("x", 1, 3)])),
            "policy.drop_overloads[1].drop_percentage.denominator: unknown denominator type 3"
        );
    }

    #[test]
    fn unread_fields_do_not_change_the_result() {
        use endpoint_pb::lb_endpoint::HostIdentifier;
        let mut ep = lb_endpoint("10.0.0.1", 80);
        ep.metadata = Some(core_pb::Metadata {
            filter_metadata: [("istio".to_owned(), pbuf::Struct::default())]
                .into_iter()
                .collect(),
            ..Default::default()
        });
        if let Some(HostIdentifier::Endpoint(e)) = &mut ep.host_identifier {
            e.health_check_config = Some(endpoint_pb::endpoint::HealthCheckConfig {
                port_value: 9,
                hostname: "hc".to_owned(),
                ..Default::default()
            });
            e.observability_name = "obs".to_owned();
        }
        let mut rich = cla(vec![locality("z", Some(1), 0, vec![ep])]);
        rich.endpoints[0].metadata = Some(Default::default());
        rich.endpoints[0].proximity = Some(pbuf::UInt32Value { value: 3 });
        rich.named_endpoints
            .insert("n".to_owned(), endpoint_pb::Endpoint::default());
        rich.policy = Some(Policy {
            overprovisioning_factor: Some(pbuf::UInt32Value { value: 140 }),
            ..Default::default()
        });
        let plain = cla(vec![locality(
            "z",
            Some(1),
            0,
            vec![lb_endpoint("10.0.0.1", 80)],
        )]);
        assert_eq!(decode_cla(&rich).unwrap(), decode_cla(&plain).unwrap());
    }

    #[test]
    fn endpoint_errors_keep_their_order_and_indices() {
        let a = || lb_endpoint("10.0.0.1", 80);
        let bad = || lb_endpoint("example.com", 80);
        let unknown = || {
            let mut ep = lb_endpoint("10.0.0.9", 80);
            ep.health_status = 42;
            ep
        };
        let one = |eps| cla(vec![locality("z", Some(1), 0, eps)]);
        // Skipped endpoints still count in the indices.
        assert_eq!(
            err(&one(vec![unknown(), a(), unknown(), a()])),
            "endpoints[0].lb_endpoints[3]: duplicate endpoint address 10.0.0.1:80"
        );
        // The first problem in order wins: a duplicate before an invalid endpoint, an
        // invalid endpoint before a duplicate.
        assert_eq!(
            err(&one(vec![a(), a(), bad()])),
            "endpoints[0].lb_endpoints[1]: duplicate endpoint address 10.0.0.1:80"
        );
        assert_eq!(
            err(&one(vec![a(), bad(), a()])),
            "endpoints[0].lb_endpoints[1].endpoint.address.socket_address.address: \
             \"example.com\" is not an IP address"
        );
        // A locality without weight is ignored, invalid endpoints included; its
        // addresses do not count as seen.
        let out = decode_cla(&cla(vec![
            locality("z", Some(0), 0, vec![bad(), a()]),
            locality("y", Some(1), 0, vec![a()]),
        ]))
        .unwrap();
        assert_eq!(out.endpoint_count(), 1);
        // The same address and port in IPv4 and IPv4-mapped IPv6 form are distinct.
        assert!(decode_cla(&one(vec![a(), lb_endpoint("::ffff:10.0.0.1", 80)])).is_ok());
    }

    #[test]
    fn addresses_are_parsed_from_the_wire_bytes() {
        let out = decode_cla(&cla(vec![locality(
            "z",
            Some(1),
            0,
            vec![lb_endpoint("2001:db8::1", 443)],
        )]))
        .unwrap();
        assert_eq!(
            out.priorities[0].localities[0].endpoints[0].address,
            addr("[2001:db8::1]:443")
        );
        // A long value takes prost's own string decoding.
        let long = "h".repeat(300);
        assert_eq!(
            err(&cla(vec![locality(
                "z",
                Some(1),
                0,
                vec![lb_endpoint(&long, 80)]
            )])),
            format!(
                "endpoints[0].lb_endpoints[0].endpoint.address.socket_address.address: \
                 {long:?} is not an IP address"
            )
        );
        // Bytes that are not UTF-8 fail the decode, as in any string field, short or long.
        for host in [
            "10.0.0.1".to_owned(),
            format!("10.0.0.1{}", " ".repeat(200)),
        ] {
            let bytes = cla(vec![locality(
                "z",
                Some(1),
                0,
                vec![lb_endpoint(&host, 80)],
            )])
            .encode_to_vec();
            let at = bytes.windows(8).position(|w| w == b"10.0.0.1").unwrap();
            let mut bad = bytes.clone();
            bad[at] = 0xff;
            let e = decode(&bad).unwrap_err();
            assert_eq!(e.name, None);
            assert!(
                e.message
                    .starts_with("failed to decode ClusterLoadAssignment: ")
                    && e.message.contains("UTF-8"),
                "{e}"
            );
        }
    }

    #[test]
    fn plain_ipv4_agrees_with_std() {
        for text in [
            "0.0.0.0",
            "10.0.0.1",
            "255.255.255.255",
            "1.2.3.4",
            "192.168.001.1",
            "01.2.3.4",
            "256.1.1.1",
            "1.2.3",
            "1.2.3.4.5",
            "1..3.4",
            "1.2.3.",
            ".1.2.3",
            "1.2.3.4 ",
            "+1.2.3.4",
            "1234.1.1.1",
            "",
            "::1",
            "::ffff:1.2.3.4",
        ] {
            let fast = lite::plain_ipv4(text.as_bytes());
            let std = text.parse::<std::net::Ipv4Addr>().ok();
            assert!(fast.is_none() || fast == std, "{text}: {fast:?} vs {std:?}");
            if text.split('.').all(|p| p.len() <= 3) {
                // Every plain literal std accepts is taken by the fast path too.
                assert_eq!(fast, std, "{text}");
            }
        }
    }
}
