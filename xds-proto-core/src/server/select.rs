//! Filter chain selection for an accepted connection (gRFC A36), as Envoy's
//! most-specific matching: the chains that can match are narrowed stage by stage, each
//! stage keeping only the most specific survivors and never going back: destination
//! (local) IP by longest prefix (a chain without `prefix_ranges` is the least specific),
//! `transport_protocol` (`raw_buffer` before unset), source type (the connection's own
//! type before `ANY`), source IP by longest prefix, then source port (listed before
//! unlisted). No survivor means the `default_filter_chain`, or no chain at all: the
//! server closes the connection without sending a byte.

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
    let candidates: Vec<&FilterChain> = listener
        .filter_chains
        .iter()
        .filter(|c| c.filter_chain_match.can_match())
        .collect();
    most_specific(candidates, addrs).or(listener.default_filter_chain.as_deref())
}

fn most_specific(chains: Vec<&FilterChain>, addrs: ConnectionAddrs) -> Option<&FilterChain> {
    let local_ip = addrs.local.ip();
    let peer_ip = addrs.peer.ip();
    let chains = keep_best(chains, |c| {
        prefix_specificity(&c.filter_chain_match.prefix_ranges, local_ip)
    });
    let chains = keep_best(chains, |c| {
        Some(i32::from(
            c.filter_chain_match.transport_protocol == "raw_buffer",
        ))
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
        let ports = &c.filter_chain_match.source_ports;
        if ports.is_empty() {
            Some(0)
        } else {
            ports.contains(&peer_port).then_some(1)
        }
    });
    chains.into_iter().next()
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
