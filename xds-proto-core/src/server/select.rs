//! Filter chain selection for an accepted connection (gRFC A36), as Envoy's
//! most-specific matching: the chains that can match are narrowed stage by stage, each
//! stage keeping only the most specific survivors and never going back (gRPC-Go's and
//! C-core's lookup): chains with a `destination_port` dropped; destination (local) IP by
//! longest prefix (a chain without `prefix_ranges` is the least specific; chains that
//! can never match take part here); no `server_names`; `transport_protocol`
//! (`raw_buffer` before unset, nothing else); no `application_protocols`; source type
//! (the connection's own type before `ANY`); source IP by longest prefix; then source
//! port (listed before unlisted or 0). No survivor means the `default_filter_chain`,
//! or no chain at all: the server closes the connection without sending a byte.

use std::net::{IpAddr, SocketAddr};

use crate::resource::listener::{CidrRange, FilterChain, ServerListener, SourceType};

/// The two ends of an accepted connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionAddrs {
    /// The server's end (the destination of the connection).
    pub local: SocketAddr,
    /// The client's end (the source).
    pub peer: SocketAddr,
}

impl ConnectionAddrs {
    /// The connection's source type: `SAME_IP_OR_LOOPBACK` when the peer is a loopback
    /// address or the local IP, else `EXTERNAL`.
    pub fn source_type(&self) -> SourceType {
        let peer = self.peer.ip().to_canonical();
        if peer.is_loopback() || peer == self.local.ip().to_canonical() {
            SourceType::SameIpOrLoopback
        } else {
            SourceType::External
        }
    }
}

/// The filter chain of `listener` a connection between `addrs` uses: the most specific
/// matching chain, else the default chain; `None` when neither exists.
pub fn select_filter_chain(
    listener: &ServerListener,
    addrs: ConnectionAddrs,
) -> Option<&FilterChain> {
    most_specific(&listener.filter_chains, addrs).or(listener.default_filter_chain.as_deref())
}

fn most_specific(chains: &[FilterChain], addrs: ConnectionAddrs) -> Option<&FilterChain> {
    let local_ip = addrs.local.ip();
    let peer_ip = addrs.peer.ip();
    // gRPC drops a chain with a destination port before any stage.
    let chains: Vec<&FilterChain> = chains
        .iter()
        .filter(|c| c.filter_chain_match.destination_port.is_none())
        .collect();
    // Chains that can never match still win this stage (and then fail): Envoy's and
    // gRPC's order, where a more specific destination is never gone back on.
    let chains = keep_best(chains, |c| {
        prefix_specificity(&c.filter_chain_match.prefix_ranges, local_ip)
    });
    // No SNI: only chains without server names.
    let chains = keep_best(chains, |c| {
        c.filter_chain_match.server_names.is_empty().then_some(0)
    });
    // The connection's transport protocol is `raw_buffer`, preferred to unset.
    let chains = keep_best(chains, |c| {
        match c.filter_chain_match.transport_protocol.as_str() {
            "raw_buffer" => Some(1),
            "" => Some(0),
            _ => None,
        }
    });
    // No ALPN: only chains without application protocols.
    let chains = keep_best(chains, |c| {
        c.filter_chain_match
            .application_protocols
            .is_empty()
            .then_some(0)
    });
    let own_type = addrs.source_type();
    let chains = keep_best(chains, |c| match c.filter_chain_match.source_type {
        SourceType::Any => Some(0),
        t if t == own_type => Some(1),
        _ => None,
    });
    let chains = keep_best(chains, |c| {
        prefix_specificity(&c.filter_chain_match.source_prefix_ranges, peer_ip)
    });
    let peer_port = u32::from(addrs.peer.port());
    let chains = keep_best(chains, |c| {
        source_port_specificity(&c.filter_chain_match.source_ports, peer_port)
    });
    chains.into_iter().next()
}

/// How specifically `ports` hold `port`: 1 when listed, 0 when the field is unset or
/// lists 0 (gRPC's "any port"), `None` otherwise.
fn source_port_specificity(ports: &[u32], port: u32) -> Option<i32> {
    if ports.contains(&port) {
        Some(1)
    } else if ports.is_empty() || ports.contains(&0) {
        Some(0)
    } else {
        None
    }
}

/// The chains whose rank is the highest; a chain ranked `None` does not match.
fn keep_best(
    chains: Vec<&FilterChain>,
    rank: impl Fn(&FilterChain) -> Option<i32>,
) -> Vec<&FilterChain> {
    let ranked: Vec<(i32, &FilterChain)> = chains
        .into_iter()
        .filter_map(|c| rank(c).map(|r| (r, c)))
        .collect();
    let Some(best) = ranked.iter().map(|(r, _)| *r).max() else {
        return Vec::new();
    };
    ranked
        .into_iter()
        .filter(|(r, _)| *r == best)
        .map(|(_, c)| c)
        .collect()
}

/// How specifically `ranges` hold `ip`: the longest matching prefix length, `-1` when
/// the field is unset (matches everything, least specific), `None` when no range holds
/// `ip`.
fn prefix_specificity(ranges: &[CidrRange], ip: IpAddr) -> Option<i32> {
    if ranges.is_empty() {
        return Some(-1);
    }
    ranges
        .iter()
        .filter(|r| r.contains(ip))
        .map(|r| i32::from(r.prefix_len()))
        .max()
}
