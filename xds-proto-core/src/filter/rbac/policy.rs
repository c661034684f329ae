//! The validated policy model of an RBAC config (A41): what a policy's permissions and
//! principals can say once the proto is parsed, with every rule gRPC cannot support
//! already refused. Matching lives in `matching.rs`, parsing in `parse.rs`.

use std::net::IpAddr;

use crate::resource::route::{HeaderMatcher, StringMatcher};

/// What the engine does with an RPC a policy matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Only RPCs some policy matches are allowed.
    Allow,
    /// RPCs some policy matches are denied; the rest are allowed.
    Deny,
}

/// One named policy: it matches an RPC when at least one permission and at least one
/// principal match (Envoy's `Policy`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    /// The policy's key in `RBAC.policies` (the "matched rule" of A59).
    pub name: String,
    /// What the RPC does; at least one must match.
    pub permissions: Box<[Permission]>,
    /// Who sends it; at least one must match.
    pub principals: Box<[Principal]>,
}

/// A rule on the action (`envoy.config.rbac.v3.Permission`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Permission {
    /// `any`.
    Any,
    /// `and_rules`: every rule matches.
    And(Box<[Permission]>),
    /// `or_rules`: some rule matches.
    Or(Box<[Permission]>),
    /// `not_rule`.
    Not(Box<Permission>),
    /// `header`, with A41's view of the request's headers.
    Header(HeaderMatcher),
    /// `url_path`: the RPC's path, `/service/method`.
    UrlPath(StringMatcher),
    /// `destination_ip`: the connection's local address.
    DestinationIp(CidrRange),
    /// `destination_port`: the connection's local port.
    DestinationPort(u16),
    /// `destination_port_range`: the local port in `[start, end)`.
    DestinationPortRange {
        /// Inclusive, at most 65535.
        start: u32,
        /// Exclusive, greater than `start`, at most 65536.
        end: u32,
    },
    /// `metadata`: Envoy metadata, which gRPC holds empty, so it never matches (A41).
    Metadata,
    /// `requested_server_name`: gRPC's is always the empty string (A41).
    RequestedServerName(StringMatcher),
}

/// A rule on the peer (`envoy.config.rbac.v3.Principal`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Principal {
    /// `any`.
    Any,
    /// `and_ids`: every rule matches.
    And(Box<[Principal]>),
    /// `or_ids`: some rule matches.
    Or(Box<[Principal]>),
    /// `not_id`.
    Not(Box<Principal>),
    /// `authenticated`: a TLS connection; with a `principal_name`, the peer
    /// certificate's identity matches it (A41's order: URI SANs, DNS SANs, subject).
    Authenticated(Option<StringMatcher>),
    /// `source_ip`, `direct_remote_ip` and `remote_ip`: all the connection's peer
    /// address while gRPC supports neither PROXY protocol nor `xff_num_trusted_hops`
    /// (A41).
    PeerIp(CidrRange),
    /// `header`, as in [`Permission::Header`].
    Header(HeaderMatcher),
    /// `url_path`, as in [`Permission::UrlPath`].
    UrlPath(StringMatcher),
    /// `metadata`: never matches, as in [`Permission::Metadata`].
    Metadata,
}

/// An address prefix (`envoy.config.core.v3.CidrRange`), its address already masked
/// to `prefix_len` bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CidrRange {
    address: IpAddr,
    prefix_len: u8,
}

impl CidrRange {
    /// The range of `prefix_len` leading bits of `address`; `None` when `prefix_len`
    /// exceeds the address's width (32 or 128). An IPv4-mapped IPv6 range of at least
    /// 96 bits is kept as the IPv4 range it is (peers are compared the same way).
    pub fn new(address: IpAddr, prefix_len: u32) -> Option<CidrRange> {
        let (address, prefix_len) = match address.to_canonical() {
            IpAddr::V4(v4) if address.is_ipv6() && prefix_len >= 96 => {
                (IpAddr::V4(v4), prefix_len - 96)
            }
            _ => (address, prefix_len),
        };
        let width = match address {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        };
        let prefix_len = u8::try_from(prefix_len).ok().filter(|l| *l <= width)?;
        Some(CidrRange {
            address: mask(address, prefix_len),
            prefix_len,
        })
    }

    /// The masked address.
    pub fn address(&self) -> IpAddr {
        self.address
    }

    /// The prefix length in bits.
    pub fn prefix_len(&self) -> u8 {
        self.prefix_len
    }

    /// Whether `ip` is in the range. An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`, how
    /// a dual-stack socket reports an IPv4 peer) counts as its IPv4 address, as C-core
    /// and gRPC-Go compare it; otherwise the families must agree.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        match (self.address, ip) {
            (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_)) => {
                mask(ip, self.prefix_len) == self.address
            }
            _ => false,
        }
    }
}

/// `ip` with all but its `prefix_len` leading bits cleared (`prefix_len` at most the
/// width of `ip`).
fn mask(ip: IpAddr, prefix_len: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let bits = u32::from(v4);
            let kept = u32::MAX
                .checked_shl(32 - u32::from(prefix_len))
                .unwrap_or(0);
            IpAddr::V4((bits & kept).into())
        }
        IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            let kept = u128::MAX
                .checked_shl(128 - u32::from(prefix_len))
                .unwrap_or(0);
            IpAddr::V6((bits & kept).into())
        }
    }
}
