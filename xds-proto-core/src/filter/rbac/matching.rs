//! Matching an RPC against the policy model: [`RbacRequest`] is what a server knows
//! about the RPC and its connection, and `RequestView` answers each rule kind the way
//! A41 maps Envoy's attributes onto gRPC (headers as received, with pseudo-headers and
//! without hop-by-hop ones; the local and peer addresses; the peer certificate's
//! identity). Recursion follows the rules' nesting, which parsing bounds.

use std::net::SocketAddr;

use super::policy::{Permission, Policy, Principal};
use crate::resource::route::{HeaderMatcher, StringMatcher};
use crate::security::SubjectAltName;
use crate::selector::{Metadata, header_value_matches, string_matches};

/// What a server knows about one RPC, for RBAC. Every string is borrowed: building a
/// request and evaluating it allocate nothing, except one buffer when a header
/// matcher meets a header sent several times (its values are joined).
#[derive(Clone, Copy)]
pub struct RbacRequest<'a> {
    /// The RPC's path, `/package.Service/Method` (`url_path`, `:path`).
    pub path: &'a str,
    /// `:method` as received (gRPC servers accept only `POST`).
    pub method: &'a str,
    /// The request's single authority: `:authority`, or `Host` renamed when
    /// `:authority` is absent (A41 requires the transport to refuse requests with
    /// several). Policies naming `host` see it too.
    pub authority: Option<&'a str>,
    /// The request's other headers as received, binary (`-bin`) values in their base64
    /// wire form, `content-type` as the client sent it. Pseudo-headers here are
    /// ignored (the fields above are used), and so are `te` and the other
    /// connection-specific headers (A41: hop-by-hop headers are never present).
    pub headers: &'a dyn Metadata,
    /// The connection's local address (`destination_ip`, `destination_port`).
    pub local_addr: SocketAddr,
    /// The connection's peer address (`source_ip`, `direct_remote_ip`, `remote_ip`).
    pub peer_addr: SocketAddr,
    /// Whether the connection is TLS, and the peer's certificate.
    pub security: ConnectionSecurity<'a>,
}

/// The transport security of the RPC's connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectionSecurity<'a> {
    /// No TLS: `authenticated` never matches.
    Plaintext,
    /// TLS, with the client's certificate if it sent one.
    Tls(Option<PeerCertificate<'a>>),
}

/// The identity in the peer's leaf certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerCertificate<'a> {
    /// Its subject alternative names, in certificate order (only URI and DNS names are
    /// read).
    pub sans: &'a [SubjectAltName],
    /// Its subject's distinguished name as an RFC 2253 string.
    pub subject: &'a str,
}

impl<'a> PeerCertificate<'a> {
    fn uri_sans(self) -> impl Iterator<Item = &'a str> {
        self.sans.iter().filter_map(|san| match san {
            SubjectAltName::Uri(uri) => Some(uri.as_str()),
            _ => None,
        })
    }

    fn dns_sans(self) -> impl Iterator<Item = &'a str> {
        self.sans.iter().filter_map(|san| match san {
            SubjectAltName::Dns(dns) => Some(dns.as_str()),
            _ => None,
        })
    }

    /// A41's `principal_name` check: the URI SANs, then the DNS SANs, then the subject.
    /// Like Envoy (which A41 says to follow), C-core and gRPC-Go, each kind is tried in
    /// turn whether or not the earlier kinds were present.
    fn identity_matches(self, matcher: &StringMatcher) -> bool {
        self.uri_sans().any(|uri| string_matches(matcher, uri))
            || self.dns_sans().any(|dns| string_matches(matcher, dns))
            || string_matches(matcher, self.subject)
    }
}

impl<'a> RbacRequest<'a> {
    /// A plaintext `POST` to `path` without an authority; set the other fields as the
    /// connection has them.
    pub fn new(
        path: &'a str,
        headers: &'a dyn Metadata,
        local_addr: SocketAddr,
        peer_addr: SocketAddr,
    ) -> RbacRequest<'a> {
        RbacRequest {
            path,
            method: "POST",
            authority: None,
            headers,
            local_addr,
            peer_addr,
            security: ConnectionSecurity::Plaintext,
        }
    }

    /// The peer's identity for audit logs (A59): the first URI SAN of its certificate,
    /// as gRPC-Go reports it; empty without one.
    pub fn principal(&self) -> &'a str {
        match self.security {
            ConnectionSecurity::Tls(Some(cert)) => cert.uri_sans().next().unwrap_or(""),
            _ => "",
        }
    }
}

/// Headers A41 says are never present: `te` and the connection-specific headers HTTP/2
/// forbids (RFC 7540 §8.1.2.2), which a transport should have refused anyway.
const HOP_BY_HOP: [&str; 6] = [
    "te",
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
];

/// One evaluation's view of a request: the request, and the buffer multi-valued
/// headers are joined in (reused across lookups).
pub(super) struct RequestView<'r, 'a> {
    request: &'r RbacRequest<'a>,
    joined: String,
}

impl<'r, 'a> RequestView<'r, 'a> {
    pub(super) fn new(request: &'r RbacRequest<'a>) -> Self {
        RequestView {
            request,
            joined: String::new(),
        }
    }

    /// The first policy that matches, in the order given.
    pub(super) fn first_match<'p>(&mut self, policies: &'p [Policy]) -> Option<&'p Policy> {
        policies.iter().find(|policy| self.policy(policy))
    }

    fn policy(&mut self, policy: &Policy) -> bool {
        policy.permissions.iter().any(|p| self.permission(p))
            && policy.principals.iter().any(|p| self.principal(p))
    }

    fn permission(&mut self, rule: &Permission) -> bool {
        let request = self.request;
        match rule {
            Permission::Any => true,
            Permission::And(rules) => rules.iter().all(|r| self.permission(r)),
            Permission::Or(rules) => rules.iter().any(|r| self.permission(r)),
            Permission::Not(rule) => !self.permission(rule),
            Permission::Header(matcher) => self.header(matcher),
            Permission::UrlPath(matcher) => string_matches(matcher, request.path),
            Permission::DestinationIp(range) => range.contains(request.local_addr.ip()),
            Permission::DestinationPort(port) => request.local_addr.port() == *port,
            Permission::DestinationPortRange { start, end } => {
                (*start..*end).contains(&u32::from(request.local_addr.port()))
            }
            Permission::Metadata => false,
            Permission::RequestedServerName(matcher) => string_matches(matcher, ""),
        }
    }

    fn principal(&mut self, rule: &Principal) -> bool {
        let request = self.request;
        match rule {
            Principal::Any => true,
            Principal::And(rules) => rules.iter().all(|r| self.principal(r)),
            Principal::Or(rules) => rules.iter().any(|r| self.principal(r)),
            Principal::Not(rule) => !self.principal(rule),
            Principal::Authenticated(name) => match (request.security, name) {
                (ConnectionSecurity::Plaintext, _) => false,
                (ConnectionSecurity::Tls(_), None) => true,
                (ConnectionSecurity::Tls(Some(cert)), Some(name)) => cert.identity_matches(name),
                // A41: without a client certificate, "" is the identity.
                (ConnectionSecurity::Tls(None), Some(name)) => string_matches(name, ""),
            },
            Principal::PeerIp(range) => range.contains(request.peer_addr.ip()),
            Principal::Header(matcher) => self.header(matcher),
            Principal::UrlPath(matcher) => string_matches(matcher, request.path),
            Principal::Metadata => false,
        }
    }

    fn header(&mut self, matcher: &HeaderMatcher) -> bool {
        let value = self.header_value(&matcher.name);
        header_value_matches(matcher, value)
    }

    /// The value of header `name` as A41 has RBAC see it: pseudo-headers from the
    /// request's fields (`host` is `:authority`), hop-by-hop headers absent, others
    /// from the metadata with several values joined by `,`.
    fn header_value(&mut self, name: &str) -> Option<&str> {
        let request = self.request;
        let is = |known: &str| name.eq_ignore_ascii_case(known);
        if is(":authority") || is("host") {
            return request.authority;
        }
        if is(":path") {
            return Some(request.path);
        }
        if is(":method") {
            return Some(request.method);
        }
        if name.starts_with(':') || HOP_BY_HOP.iter().any(|h| is(h)) {
            return None;
        }
        let mut first: Option<&'a str> = None;
        let mut count = 0usize;
        let joined = &mut self.joined;
        joined.clear();
        request.headers.for_each_value(name, &mut |value| {
            match count {
                0 => first = Some(value),
                _ => {
                    if count == 1 {
                        let first = first.unwrap_or_default();
                        joined.reserve(first.len() + 1 + value.len());
                        joined.push_str(first);
                    }
                    joined.push(',');
                    joined.push_str(value);
                }
            }
            count += 1;
        });
        if count > 1 { Some(&self.joined) } else { first }
    }
}
