//! Server listeners (gRFC A36): the `Listener` an xDS-enabled server subscribes to for
//! its listening address, validated into a [`ServerListener`].
//!
//! This module owns A36's validation: the TCP `address`, no `listener_filters`, no
//! `use_original_dst`, at least one chain that can match or a `default_filter_chain`,
//! in each chain exactly one network filter, the `HttpConnectionManager` (its HTTP
//! filters checked for the server side, routes inline or over RDS), the chain's
//! `DownstreamTlsContext` (A29), and every `FilterChainMatch` field normalized
//! ([`FilterChainMatch`]). The duplicate check is gRPC-Go's and C-core's, not A36's
//! literal text: chains that can never match are pruned first, then two chains whose
//! normalized matchers (the Cartesian product of their present fields, A36) overlap
//! NACK the listener, as does a listener left with no chain and no default chain
//! (`chain_map`). Choosing a chain for a connection is
//! [`crate::server::select_filter_chain`].

mod chain_map;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::{HttpConnectionManager, HttpSide, parse_hcm_any};
use crate::pb::envoy::config::core::v3 as core_pb;
use crate::pb::envoy::config::listener::v3 as listener_pb;
use crate::resource::DecodeContext;
use crate::resource::tls::{DOWNSTREAM_TLS_CONTEXT_TYPE, check_socket_type, parse_downstream};
use crate::resource::validate::{FieldError, PortRange, optional, socket_port, type_name};
use crate::resource::validate::{required, typed_config};
use crate::security::DownstreamTls;

/// The most normalized matchers (A36's Cartesian product over all chains) a listener
/// may expand to: the product of repeated fields from the network is bounded before
/// the duplicate check enumerates it.
pub const MAX_NORMALIZED_MATCHERS: usize = 1 << 16;

/// A validated server-side `Listener` (gRFC A36).
#[derive(Clone, Debug, PartialEq)]
pub struct ServerListener {
    /// `address.socket_address.address`, as received.
    pub address: String,
    /// `address.socket_address.port_value`.
    pub port: u16,
    /// `filter_chains`, in order.
    pub filter_chains: Vec<FilterChain>,
    /// `default_filter_chain`, when set: the chain of connections no chain matches
    /// (boxed: a listener resource stays small, whichever kind it is).
    pub default_filter_chain: Option<Box<FilterChain>>,
}

impl ServerListener {
    /// Whether the listener's address is `listening`: the same port and the same IP
    /// (compared as addresses, so `::` and `0:0::0` agree; an address that is not an
    /// IP literal never matches). A36: a server whose listener names another address
    /// does not serve.
    pub fn listens_on(&self, listening: SocketAddr) -> bool {
        self.port == listening.port()
            && self
                .address
                .parse::<IpAddr>()
                .is_ok_and(|ip| ip == listening.ip())
    }

    /// The chains in order, then the default chain.
    pub fn chains(&self) -> impl Iterator<Item = &FilterChain> {
        self.filter_chains
            .iter()
            .chain(self.default_filter_chain.as_deref())
    }

    /// The chains some connection can select (in order), then the default chain: the
    /// chains the duplicate check keeps (gRPC-Go builds and watches only these).
    pub fn selectable_chains(&self) -> impl Iterator<Item = &FilterChain> {
        // A listener built by hand may hold duplicates: then every chain counts.
        let selectable = chain_map::ChainMap::build(&self.filter_chains)
            .map(|map| map.selectable(self.filter_chains.len()))
            .unwrap_or_else(|_| vec![true; self.filter_chains.len()]);
        self.filter_chains
            .iter()
            .zip(selectable)
            .filter_map(|(chain, selectable)| selectable.then_some(chain))
            .chain(self.default_filter_chain.as_deref())
    }

    /// The RDS names the selectable chains' connection managers refer to (a chain no
    /// connection can select needs no routes), sorted, without repeats.
    pub fn rds_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self
            .selectable_chains()
            .filter_map(|c| c.http_connection_manager.route_config_name())
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }
}

/// One filter chain of a server listener.
#[derive(Clone, Debug, PartialEq)]
pub struct FilterChain {
    /// `name` (may be empty).
    pub name: String,
    /// `filter_chain_match`, normalized (all defaults when absent: matches everything).
    pub filter_chain_match: FilterChainMatch,
    /// The `HttpConnectionManager`, the chain's one network filter: server-side HTTP
    /// filters, routes inline or over RDS.
    pub http_connection_manager: HttpConnectionManager,
    /// The `DownstreamTlsContext` of its `transport_socket`; `None` when it has none:
    /// the server's fallback credentials apply to its connections (A29).
    pub tls: Option<DownstreamTls>,
}

/// `FilterChainMatch.source_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum SourceType {
    /// `ANY`: every connection.
    #[default]
    Any,
    /// `SAME_IP_OR_LOOPBACK`: the peer is a loopback address or the local address.
    SameIpOrLoopback,
    /// `EXTERNAL`: any other peer.
    External,
}

/// A CIDR range with its prefix length clamped to the family's width and the address's
/// bits beyond it cleared (A36's normalization).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CidrRange {
    address: IpAddr,
    prefix_len: u8,
}

impl CidrRange {
    /// `address/prefix_len`, normalized: `prefix_len` clamped to 32 (IPv4) or 128
    /// (IPv6), the host bits of `address` cleared.
    pub fn new(address: IpAddr, prefix_len: u32) -> CidrRange {
        match address {
            IpAddr::V4(v4) => {
                let len = prefix_len.min(32);
                let mask = u32::MAX.checked_shl(32 - len).unwrap_or(0);
                CidrRange {
                    address: IpAddr::V4(Ipv4Addr::from(u32::from(v4) & mask)),
                    prefix_len: len as u8,
                }
            }
            IpAddr::V6(v6) => {
                let len = prefix_len.min(128);
                let mask = u128::MAX.checked_shl(128 - len).unwrap_or(0);
                CidrRange {
                    address: IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask)),
                    prefix_len: len as u8,
                }
            }
        }
    }

    /// The network address (host bits cleared).
    pub fn address(&self) -> IpAddr {
        self.address
    }

    /// The prefix length, at most the family's width.
    pub fn prefix_len(&self) -> u8 {
        self.prefix_len
    }

    /// Whether `ip` is in the range. A range only holds addresses of its own family
    /// (`0.0.0.0/0` holds no IPv6 address); an IPv4-mapped IPv6 address counts as IPv4.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.address, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                CidrRange::new(IpAddr::V4(ip), u32::from(self.prefix_len)).address
                    == IpAddr::V4(net)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                CidrRange::new(IpAddr::V6(ip), u32::from(self.prefix_len)).address
                    == IpAddr::V6(net)
            }
            _ => false,
        }
    }
}

/// A normalized `FilterChainMatch`. Empty lists and `None` mean "not present".
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct FilterChainMatch {
    /// `destination_port`: needs `use_original_dst`, which gRPC NACKs, so a chain with
    /// one never matches. 0 counts as unset (gRPC-Go and C-core read it so).
    pub destination_port: Option<u32>,
    /// `prefix_ranges`: destination (local) address ranges.
    pub prefix_ranges: Vec<CidrRange>,
    /// `source_type`.
    pub source_type: SourceType,
    /// `source_prefix_ranges`: peer address ranges.
    pub source_prefix_ranges: Vec<CidrRange>,
    /// `source_ports`: peer ports (a value above 65535 matches no connection; 0 is
    /// gRPC's key for "any port", so `[0]` matches as an empty list does).
    pub source_ports: Vec<u32>,
    /// `server_names`: need listener filters (TLS inspector); never match.
    pub server_names: Vec<String>,
    /// `transport_protocol`: only empty and `raw_buffer` can match.
    pub transport_protocol: String,
    /// `application_protocols`: need listener filters; never match.
    pub application_protocols: Vec<String>,
}

impl FilterChainMatch {
    /// Whether a connection can match it at all: false when a field needs a feature
    /// gRPC lacks (A36's "always fail" fields). Such a chain takes no part in the
    /// duplicate check (gRPC-Go, C-core). A chain that can match may still be
    /// shadowed by a `raw_buffer` one ([`ServerListener::selectable_chains`]).
    pub fn can_match(&self) -> bool {
        self.destination_port.is_none()
            && self.server_names.is_empty()
            && (self.transport_protocol.is_empty() || self.transport_protocol == "raw_buffer")
            && self.application_protocols.is_empty()
    }

    /// How many normalized matchers (A36's Cartesian product of present fields) the
    /// duplicate check enumerates for it, saturating: the product of the destination
    /// prefixes, source prefixes and source ports when it can match, else its
    /// destination prefixes (the fields it cannot match with are never expanded).
    fn normalized_count(&self) -> usize {
        let destinations = self.prefix_ranges.len().max(1);
        if !self.can_match() {
            return destinations;
        }
        [self.source_prefix_ranges.len(), self.source_ports.len()]
            .iter()
            .fold(destinations, |n, &len| n.saturating_mul(len.max(1)))
    }
}

/// Validates a listener with an `address` as a server listener. Paths are relative to
/// the listener.
pub(super) fn parse_server_listener(
    context: &DecodeContext<'_>,
    listener: &listener_pb::Listener,
) -> Result<ServerListener, FieldError> {
    let address = required(listener.address.as_ref(), "address")?;
    let (address, port) = parse_server_address(address).map_err(|e| e.at("address"))?;
    if !listener.listener_filters.is_empty() {
        return Err(FieldError::new("listener_filters", "must be empty"));
    }
    if listener.use_original_dst.as_ref().is_some_and(|b| b.value) {
        return Err(FieldError::new("use_original_dst", "must not be true"));
    }
    let filter_chains = listener
        .filter_chains
        .iter()
        .enumerate()
        .map(|(i, fc)| parse_filter_chain(context, fc).map_err(|e| e.at_index("filter_chains", i)))
        .collect::<Result<Vec<_>, _>>()?;
    let default_filter_chain = optional(
        listener.default_filter_chain.as_ref(),
        "default_filter_chain",
        |fc| parse_filter_chain(context, fc).map(Box::new),
    )?;
    let map = chain_map::ChainMap::build(&filter_chains)?;
    if map.is_empty() && default_filter_chain.is_none() {
        // gRPC-Go's text: chains that can never match count as none.
        return Err(FieldError::new(
            "filter_chains",
            "no supported filter chains and no default filter chain",
        ));
    }
    Ok(ServerListener {
        address,
        port,
        filter_chains,
        default_filter_chain,
    })
}

fn parse_server_address(address: &core_pb::Address) -> Result<(String, u16), FieldError> {
    use core_pb::address::Address;
    let Some(Address::SocketAddress(sa)) = &address.address else {
        return Err(FieldError::missing("socket_address"));
    };
    if sa.protocol != core_pb::socket_address::Protocol::Tcp as i32 {
        return Err(FieldError::new("socket_address.protocol", "must be TCP"));
    }
    let port = socket_port(sa.port_specifier.as_ref().into(), PortRange::Any)
        .map_err(|e| e.at("socket_address"))?;
    Ok((sa.address.clone(), port))
}

/// One filter chain. Paths are relative to the chain.
fn parse_filter_chain(
    context: &DecodeContext<'_>,
    fc: &listener_pb::FilterChain,
) -> Result<FilterChain, FieldError> {
    let filter_chain_match = optional(
        fc.filter_chain_match.as_ref(),
        "filter_chain_match",
        parse_filter_chain_match,
    )?
    .unwrap_or_default();
    let http_connection_manager =
        parse_network_filters(&fc.filters).map_err(|e| e.at("filters"))?;
    let tls = optional(fc.transport_socket.as_ref(), "transport_socket", |ts| {
        use core_pb::transport_socket::ConfigType;
        let Some(ConfigType::TypedConfig(any)) = &ts.config_type else {
            return Err(FieldError::missing("typed_config"));
        };
        check_socket_type(&any.type_url, &any.value, DOWNSTREAM_TLS_CONTEXT_TYPE)
            .map_err(|e| e.at("typed_config"))?;
        parse_downstream(context, &any.value).map_err(|e| e.at("typed_config.value"))
    })?;
    Ok(FilterChain {
        name: fc.name.clone(),
        filter_chain_match,
        http_connection_manager,
        tls,
    })
}

/// A chain's network filters: names unique and non-empty, each type supported (only the
/// `HttpConnectionManager`), exactly one `HttpConnectionManager`, last. Paths are
/// relative to `filters`.
fn parse_network_filters(
    filters: &[listener_pb::Filter],
) -> Result<HttpConnectionManager, FieldError> {
    use listener_pb::filter::ConfigType;
    let hcm_type = type_name(super::HTTP_CONNECTION_MANAGER_TYPE_URL);
    let mut names = std::collections::BTreeSet::new();
    let mut manager = None;
    for (i, filter) in filters.iter().enumerate() {
        let at = |e: FieldError| e.at(format_args!("[{i}]"));
        if filter.name.is_empty() {
            return Err(at(FieldError::new("name", "must be non-empty")));
        }
        if !names.insert(filter.name.as_str()) {
            return Err(at(FieldError::new(
                "name",
                format!("duplicate network filter name {:?}", filter.name),
            )));
        }
        let any = match &filter.config_type {
            Some(ConfigType::TypedConfig(any)) => any,
            Some(ConfigType::ConfigDiscovery(_)) => {
                return Err(at(FieldError::new(
                    "config_discovery",
                    "filter config discovery (ECDS) is not supported",
                )));
            }
            None => return Err(at(FieldError::missing("typed_config"))),
        };
        let config = typed_config(any).map_err(|e| at(e.at("typed_config")))?;
        if config.type_name() != hcm_type {
            return Err(at(FieldError::new(
                "typed_config",
                format!("unsupported network filter type {:?}", config.type_url),
            )));
        }
        if config.typed_struct {
            return Err(at(FieldError::new(
                "typed_config",
                "an HttpConnectionManager in a TypedStruct is not supported",
            )));
        }
        if manager.is_some() {
            return Err(at(FieldError::new(
                "",
                "more than one HttpConnectionManager in the chain",
            )));
        }
        manager = Some(parse_hcm_any(any, HttpSide::Server).map_err(|e| at(e.at("typed_config")))?);
    }
    manager.ok_or_else(|| {
        FieldError::new(
            "",
            "expected exactly one network filter, the HttpConnectionManager",
        )
    })
}

/// A `FilterChainMatch`, normalized. Paths are relative to it.
fn parse_filter_chain_match(
    m: &listener_pb::FilterChainMatch,
) -> Result<FilterChainMatch, FieldError> {
    use listener_pb::filter_chain_match::ConnectionSourceType;
    let source_type = match ConnectionSourceType::try_from(m.source_type) {
        Ok(ConnectionSourceType::Any) => SourceType::Any,
        Ok(ConnectionSourceType::SameIpOrLoopback) => SourceType::SameIpOrLoopback,
        Ok(ConnectionSourceType::External) => SourceType::External,
        Err(_) => {
            return Err(FieldError::new(
                "source_type",
                format!("unknown source type {}", m.source_type),
            ));
        }
    };
    Ok(FilterChainMatch {
        destination_port: m
            .destination_port
            .as_ref()
            .map(|p| p.value)
            .filter(|&p| p != 0),
        prefix_ranges: parse_cidrs(&m.prefix_ranges, "prefix_ranges")?,
        source_type,
        source_prefix_ranges: parse_cidrs(&m.source_prefix_ranges, "source_prefix_ranges")?,
        source_ports: m.source_ports.clone(),
        server_names: m.server_names.clone(),
        transport_protocol: m.transport_protocol.clone(),
        application_protocols: m.application_protocols.clone(),
    })
}

fn parse_cidrs(ranges: &[core_pb::CidrRange], field: &str) -> Result<Vec<CidrRange>, FieldError> {
    ranges
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let address = r.address_prefix.parse::<IpAddr>().map_err(|_| {
                FieldError::new(
                    "address_prefix",
                    format!("not an IP address: {:?}", r.address_prefix),
                )
                .at_index(field, i)
            })?;
            Ok(CidrRange::new(
                address,
                r.prefix_len.as_ref().map_or(0, |l| l.value),
            ))
        })
        .collect()
}
