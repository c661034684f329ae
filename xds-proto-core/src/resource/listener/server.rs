//! Server listeners (gRFC A36): the `Listener` an xDS-enabled server subscribes to for
//! its listening address, validated into a [`ServerListener`].
//!
//! This module owns A36's validation: the TCP `address`, no `listener_filters`, no
//! `use_original_dst`, at least one filter chain or a `default_filter_chain`, in each
//! chain exactly one network filter, the `HttpConnectionManager` (its HTTP filters
//! checked for the server side, routes inline or over RDS), the chain's
//! `DownstreamTlsContext` (A29), and every `FilterChainMatch` field normalized
//! ([`FilterChainMatch`]). Matchers that depend on features gRPC lacks
//! (`destination_port`, `server_names`, a `transport_protocol` other than
//! `raw_buffer`, `application_protocols`) make their chain never match, and still take
//! part in the duplicate check, which NACKs two chains whose normalized matchers (the
//! Cartesian product of their present fields, A36) overlap. Choosing a chain for a
//! connection is [`crate::server::select_filter_chain`].

use std::collections::HashMap;
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

    /// The RDS names the chains' connection managers refer to, sorted, without repeats.
    pub fn rds_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self
            .chains()
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
    /// one never matches.
    pub destination_port: Option<u32>,
    /// `prefix_ranges`: destination (local) address ranges.
    pub prefix_ranges: Vec<CidrRange>,
    /// `source_type`.
    pub source_type: SourceType,
    /// `source_prefix_ranges`: peer address ranges.
    pub source_prefix_ranges: Vec<CidrRange>,
    /// `source_ports`: peer ports (a value above 65535 matches no connection).
    pub source_ports: Vec<u32>,
    /// `server_names`: need listener filters (TLS inspector); never match.
    pub server_names: Vec<String>,
    /// `transport_protocol`: only empty and `raw_buffer` can match.
    pub transport_protocol: String,
    /// `application_protocols`: need listener filters; never match.
    pub application_protocols: Vec<String>,
}

impl FilterChainMatch {
    /// Whether a connection can ever match: false when a field needs a feature gRPC
    /// lacks (A36: such a chain is pruned from matching, kept for the duplicate check).
    pub fn can_match(&self) -> bool {
        self.destination_port.is_none()
            && self.server_names.is_empty()
            && (self.transport_protocol.is_empty() || self.transport_protocol == "raw_buffer")
            && self.application_protocols.is_empty()
    }

    /// How many normalized matchers (A36's Cartesian product of present fields) it
    /// expands to, saturating.
    fn normalized_count(&self) -> usize {
        [
            self.prefix_ranges.len(),
            self.source_prefix_ranges.len(),
            self.source_ports.len(),
            self.server_names.len(),
            self.application_protocols.len(),
        ]
        .iter()
        .fold(1usize, |n, &len| n.saturating_mul(len.max(1)))
    }

    /// Calls `f` with each normalized matcher.
    fn for_each_normalized<'a>(&'a self, f: &mut dyn FnMut(NormalizedMatch<'a>)) {
        let opt = |v: &[CidrRange]| -> Vec<Option<CidrRange>> {
            if v.is_empty() {
                vec![None]
            } else {
                v.iter().copied().map(Some).collect()
            }
        };
        fn strings(v: &[String]) -> Vec<Option<&str>> {
            if v.is_empty() {
                vec![None]
            } else {
                v.iter().map(|s| Some(s.as_str())).collect()
            }
        }
        let ports: Vec<Option<u32>> = if self.source_ports.is_empty() {
            vec![None]
        } else {
            self.source_ports.iter().copied().map(Some).collect()
        };
        let (servers, alpns) = (
            strings(&self.server_names),
            strings(&self.application_protocols),
        );
        for destination in opt(&self.prefix_ranges) {
            for &server_name in &servers {
                for &application_protocol in &alpns {
                    for source in opt(&self.source_prefix_ranges) {
                        for &source_port in &ports {
                            f(NormalizedMatch {
                                destination_port: self.destination_port,
                                destination,
                                server_name,
                                transport_protocol: &self.transport_protocol,
                                application_protocol,
                                source_type: self.source_type,
                                source,
                                source_port,
                            });
                        }
                    }
                }
            }
        }
    }
}

/// One matcher of A36's disjunctive normal form: at most one value per field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct NormalizedMatch<'a> {
    destination_port: Option<u32>,
    destination: Option<CidrRange>,
    server_name: Option<&'a str>,
    transport_protocol: &'a str,
    application_protocol: Option<&'a str>,
    source_type: SourceType,
    source: Option<CidrRange>,
    source_port: Option<u32>,
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
    if filter_chains.is_empty() && default_filter_chain.is_none() {
        return Err(FieldError::new(
            "filter_chains",
            "no filter chain and no default_filter_chain",
        ));
    }
    check_unique_matches(&filter_chains)?;
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
        destination_port: m.destination_port.as_ref().map(|p| p.value),
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

/// A36: the most-specific match must be unique, so no normalized matcher may belong to
/// two chains (chains that can never match included). Paths are relative to the listener.
fn check_unique_matches(chains: &[FilterChain]) -> Result<(), FieldError> {
    let total = chains.iter().fold(0usize, |n, c| {
        n.saturating_add(c.filter_chain_match.normalized_count())
    });
    if total > MAX_NORMALIZED_MATCHERS {
        return Err(FieldError::new(
            "filter_chains",
            format!(
                "the filter chain matchers expand to {total} normalized matchers \
                 (at most {MAX_NORMALIZED_MATCHERS})"
            ),
        ));
    }
    let mut owners: HashMap<NormalizedMatch<'_>, usize> = HashMap::with_capacity(total);
    let mut duplicate = None;
    for (i, chain) in chains.iter().enumerate() {
        chain.filter_chain_match.for_each_normalized(&mut |m| {
            let owner = *owners.entry(m).or_insert(i);
            if owner != i && duplicate.is_none() {
                duplicate = Some((owner, i));
            }
        });
        if let Some((first, second)) = duplicate {
            return Err(FieldError::new(
                format!("filter_chains[{second}].filter_chain_match"),
                format!("duplicate matcher: overlaps filter_chains[{first}]"),
            ));
        }
    }
    Ok(())
}
