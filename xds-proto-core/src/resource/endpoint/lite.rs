//! Decode-only views of the EDS messages: only the fields the validation reads, by their
//! real field numbers and wire types. prost skips every other field on the wire without
//! building it (metadata, health check configs, `named_endpoints`, LEDS configs, ...).
//! Oneofs keep all their members, so that "the last member wins" behaves as in the full
//! messages; members never read decode into `Skipped`. The structs are
//! named after the Envoy messages, so decode errors name the same messages.

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
