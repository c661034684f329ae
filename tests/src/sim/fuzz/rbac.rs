//! The `rbac` fuzz target: an RBAC filter config (gRFC A41) from the input, either
//! built rule by rule (nested and/or/not of every rule kind, arbitrary names, header
//! names, CIDRs, ports, regexes, audit loggers) and encoded, or the raw bytes as an
//! `RBAC` or an `RBACPerRoute`; through the core's parser; then arbitrary requests
//! (paths, headers sent once or several times, addresses, TLS with arbitrary SANs)
//! through `evaluate` and `authorize`.
//!
//! Checked (a failure panics with the broken rule):
//! - parsing never panics; an accepted config nests at most `MAX_RULE_DEPTH` levels
//!   and holds at most `MAX_RULES` rules (what bounds an evaluation's work), its
//!   policies in strictly increasing name order;
//! - a decision agrees with the action: ALLOW allows exactly when a policy matched,
//!   DENY denies exactly then; the matched policy is one of the config's; `audit` is
//!   the config's audit condition for the decision; `authorize` decides the same and
//!   calls the logger once per configured logger exactly when `audit`;
//! - a config that enforces nothing allows every request unaudited.

use std::net::{IpAddr, SocketAddr};

use arbitrary::Unstructured;
use prost::Message;
use xds_proto_core::filter::rbac::{
    Action, AuditEvent, AuditLogger, AuditLoggerConfig, ConnectionSecurity, MAX_RULE_DEPTH,
    MAX_RULES, PeerCertificate, Permission, Principal, RbacConfig, RbacPerRoute, RbacRequest,
};
use xds_proto_core::pb::envoy::config::core::v3 as core_pb;
use xds_proto_core::pb::envoy::config::rbac::v3 as rbac_pb;
use xds_proto_core::pb::envoy::config::route::v3 as route_pb;
use xds_proto_core::pb::envoy::extensions::filters::http::rbac::v3 as filter_pb;
use xds_proto_core::pb::envoy::r#type::matcher::v3 as matcher_pb;
use xds_proto_core::pb::envoy::r#type::v3::{Int32Range, Int64Range};
use xds_proto_core::pb::google::protobuf::{Any, UInt32Value};
use xds_proto_core::security::SubjectAltName;

/// Requests evaluated per config.
const REQUESTS: usize = 16;
/// Headers per request.
const HEADERS: usize = 16;
/// Rules the structured builder makes at most (the parser's bound is tested by raw
/// inputs and by `MAX_RULES` checks, not by building huge configs every run).
const BUILD_RULES: usize = 200;
/// The structured builder nests a little deeper than the parser accepts.
const BUILD_DEPTH: usize = MAX_RULE_DEPTH + 2;

const HEADER_NAMES: [&str; 12] = [
    "x-a",
    "X-A",
    ":path",
    ":authority",
    "host",
    ":method",
    "te",
    "content-type",
    "grpc-x",
    ":scheme",
    "x-b-bin",
    "connection",
];
const STDOUT: &str =
    "type.googleapis.com/envoy.extensions.rbac.audit_loggers.stream.v3.StdoutAuditLog";

/// Runs one input. Panics when an invariant breaks.
pub fn rbac(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(mode) = u.arbitrary::<u8>() else {
        return;
    };
    let parsed = match mode % 3 {
        0 => {
            let mut builder = Builder {
                u: &mut u,
                rules: 0,
            };
            let msg = builder.filter();
            RbacConfig::parse(&msg.encode_to_vec()).map(Some)
        }
        1 => RbacConfig::parse(raw(&mut u)).map(Some),
        _ => RbacPerRoute::parse(raw(&mut u)).map(|p| p.config().cloned()),
    };
    let Ok(Some(config)) = parsed else {
        return;
    };
    check_bounds(&config);
    for _ in 0..REQUESTS {
        let Ok(owned) = OwnedRequest::arbitrary(&mut u) else {
            return;
        };
        owned.with_request(|request| check_decision(&config, request));
    }
}

/// A run of bytes after its length (two bytes, little-endian).
fn raw<'a>(u: &mut Unstructured<'a>) -> &'a [u8] {
    let len = match u.bytes(2) {
        Ok(&[lo, hi]) => usize::from(u16::from_le_bytes([lo, hi])),
        _ => 0,
    };
    u.bytes(len.min(u.len())).unwrap_or_default()
}

fn check_bounds(config: &RbacConfig) {
    let Some(rules) = config.rules() else {
        return;
    };
    let mut count = 0;
    for policy in &rules.policies {
        for p in &policy.permissions {
            count += permission_size(p, 0);
        }
        for p in &policy.principals {
            count += principal_size(p, 0);
        }
    }
    assert!(
        count <= MAX_RULES,
        "{count} rules accepted (limit {MAX_RULES})"
    );
    assert!(
        rules.policies.windows(2).all(|w| w[0].name < w[1].name),
        "policies out of name order"
    );
}

fn permission_size(p: &Permission, depth: usize) -> usize {
    assert!(
        depth <= MAX_RULE_DEPTH,
        "a rule at depth {depth} was accepted"
    );
    1 + match p {
        Permission::And(rules) | Permission::Or(rules) => {
            rules.iter().map(|r| permission_size(r, depth + 1)).sum()
        }
        Permission::Not(rule) => permission_size(rule, depth + 1),
        _ => 0,
    }
}

fn principal_size(p: &Principal, depth: usize) -> usize {
    assert!(
        depth <= MAX_RULE_DEPTH,
        "a rule at depth {depth} was accepted"
    );
    1 + match p {
        Principal::And(ids) | Principal::Or(ids) => {
            ids.iter().map(|r| principal_size(r, depth + 1)).sum()
        }
        Principal::Not(id) => principal_size(id, depth + 1),
        _ => 0,
    }
}

/// What the audit logger was given: (authorized, matched rule) per call.
struct Recorder(Vec<(bool, String)>);

impl AuditLogger for Recorder {
    fn log(&mut self, _config: &AuditLoggerConfig, event: &AuditEvent<'_>) {
        self.0
            .push((event.authorized, event.matched_rule.to_owned()));
    }
}

fn check_decision(config: &RbacConfig, request: &RbacRequest<'_>) {
    let decision = config.evaluate(request);
    let mut logged = Recorder(Vec::new());
    assert_eq!(
        config.authorize(request, "fuzz", &mut logged),
        decision,
        "authorize and evaluate differ"
    );
    let Some(rules) = config.rules() else {
        assert!(decision.allowed && decision.matched_policy.is_none() && !decision.audit);
        assert!(logged.0.is_empty());
        return;
    };
    if let Some(name) = decision.matched_policy {
        assert!(
            rules.policies.iter().any(|p| p.name == name),
            "matched policy {name:?} is not in the config"
        );
    }
    let matched = decision.matched_policy.is_some();
    match rules.action {
        Action::Allow => assert_eq!(decision.allowed, matched, "ALLOW"),
        Action::Deny => assert_eq!(decision.allowed, !matched, "DENY"),
    }
    assert_eq!(decision.audit, rules.audit.audits(decision.allowed));
    let expected_logs = if decision.audit {
        rules.audit.loggers.len()
    } else {
        0
    };
    assert_eq!(logged.0.len(), expected_logs, "audit events");
    let event = (
        decision.allowed,
        decision.matched_policy.unwrap_or("").to_owned(),
    );
    assert!(
        logged.0.iter().all(|e| *e == event),
        "audit event {:?} for {decision:?}",
        logged.0
    );
}

/// A request with owned strings, from the input.
struct OwnedRequest {
    path: String,
    method: String,
    authority: Option<String>,
    headers: Vec<(String, String)>,
    local: SocketAddr,
    peer: SocketAddr,
    tls: Option<Option<(Vec<SubjectAltName>, String)>>,
}

impl OwnedRequest {
    fn arbitrary(u: &mut Unstructured<'_>) -> arbitrary::Result<OwnedRequest> {
        let mut headers = Vec::new();
        for _ in 0..u.int_in_range(0..=HEADERS)? {
            let name = if u.arbitrary()? {
                (*u.choose(&HEADER_NAMES)?).to_owned()
            } else {
                short(u)?
            };
            headers.push((name, short(u)?));
        }
        let tls = match u.int_in_range(0..=2u8)? {
            0 => None,
            1 => Some(None),
            _ => {
                let mut sans = Vec::new();
                for _ in 0..u.int_in_range(0..=4)? {
                    sans.push(match u.int_in_range(0..=2u8)? {
                        0 => SubjectAltName::Uri(short(u)?),
                        1 => SubjectAltName::Dns(short(u)?),
                        _ => SubjectAltName::Ip(ip(u)?),
                    });
                }
                Some(Some((sans, short(u)?)))
            }
        };
        Ok(OwnedRequest {
            path: short(u)?,
            method: if u.arbitrary()? {
                "POST".into()
            } else {
                short(u)?
            },
            authority: if u.arbitrary()? {
                Some(short(u)?)
            } else {
                None
            },
            headers,
            local: SocketAddr::new(ip(u)?, u.arbitrary()?),
            peer: SocketAddr::new(ip(u)?, u.arbitrary()?),
            tls,
        })
    }

    fn with_request(&self, f: impl FnOnce(&RbacRequest<'_>)) {
        let security = match &self.tls {
            None => ConnectionSecurity::Plaintext,
            Some(None) => ConnectionSecurity::Tls(None),
            Some(Some((sans, subject))) => {
                ConnectionSecurity::Tls(Some(PeerCertificate { sans, subject }))
            }
        };
        f(&RbacRequest {
            path: &self.path,
            method: &self.method,
            authority: self.authority.as_deref(),
            headers: &self.headers,
            local_addr: self.local,
            peer_addr: self.peer,
            security,
        });
    }
}

/// A string of at most 24 bytes of the input (lossily UTF-8).
fn short(u: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    let len = u.int_in_range(0..=24)?;
    Ok(String::from_utf8_lossy(u.bytes(len)?).into_owned())
}

fn ip(u: &mut Unstructured<'_>) -> arbitrary::Result<IpAddr> {
    Ok(match u.int_in_range(0..=2u8)? {
        0 => IpAddr::from(u.arbitrary::<[u8; 4]>()?),
        1 => IpAddr::from(u.arbitrary::<[u8; 4]>()?).to_canonical(),
        _ => IpAddr::from(u.arbitrary::<[u8; 16]>()?),
    })
}

/// Builds RBAC protos from the input, a rule budget at a time.
struct Builder<'u, 'a> {
    u: &'u mut Unstructured<'a>,
    rules: usize,
}

impl Builder<'_, '_> {
    fn pick(&mut self, n: u8) -> u8 {
        self.u.int_in_range(0..=n.saturating_sub(1)).unwrap_or(0)
    }

    fn flag(&mut self) -> bool {
        self.u.arbitrary().unwrap_or(false)
    }

    fn text(&mut self) -> String {
        short(self.u).unwrap_or_default()
    }

    fn filter(&mut self) -> filter_pb::Rbac {
        let rules = self.flag().then(|| self.rules());
        filter_pb::Rbac {
            rules,
            matcher: (self.pick(16) == 0).then(Default::default),
            shadow_rules: self.flag().then(|| self.rules()),
            ..Default::default()
        }
    }

    fn rules(&mut self) -> rbac_pb::Rbac {
        let mut policies = std::collections::HashMap::new();
        for _ in 0..self.pick(5) {
            let name = self.text();
            let policy = rbac_pb::Policy {
                permissions: (0..self.pick(4)).map(|_| self.permission(0)).collect(),
                principals: (0..self.pick(4)).map(|_| self.principal(0)).collect(),
                condition: (self.pick(16) == 0).then(Default::default),
                ..Default::default()
            };
            policies.insert(name, policy);
        }
        let audit_logging_options = self.flag().then(|| rbac_pb::rbac::AuditLoggingOptions {
            audit_condition: i32::from(self.pick(5)),
            logger_configs: (0..self.pick(3)).map(|_| self.logger()).collect(),
        });
        rbac_pb::Rbac {
            action: i32::from(self.pick(4)),
            policies,
            audit_logging_options,
        }
    }

    fn logger(&mut self) -> rbac_pb::rbac::audit_logging_options::AuditLoggerConfig {
        let type_url = if self.flag() {
            STDOUT.to_owned()
        } else {
            self.text()
        };
        let value = if self.pick(4) == 0 {
            self.text().into_bytes()
        } else {
            Vec::new()
        };
        rbac_pb::rbac::audit_logging_options::AuditLoggerConfig {
            audit_logger: (self.pick(8) != 0).then(|| core_pb::TypedExtensionConfig {
                name: self.text(),
                typed_config: Some(Any {
                    type_url,
                    value: value.into(),
                }),
            }),
            is_optional: self.flag(),
        }
    }

    /// Whether a rule at `depth` may have children.
    fn nests(&mut self, depth: usize) -> bool {
        depth < BUILD_DEPTH && self.rules < BUILD_RULES && self.pick(3) == 0
    }

    fn string_matcher(&mut self) -> matcher_pb::StringMatcher {
        use matcher_pb::string_matcher::MatchPattern as P;
        let value = self.text();
        let pattern = match self.pick(6) {
            0 => P::Exact(value),
            1 => P::Prefix(value),
            2 => P::Suffix(value),
            3 => P::Contains(value),
            4 => P::SafeRegex(matcher_pb::RegexMatcher {
                regex: value,
                ..Default::default()
            }),
            _ => P::Custom(Default::default()),
        };
        matcher_pb::StringMatcher {
            match_pattern: Some(pattern),
            ignore_case: self.flag(),
        }
    }

    #[allow(deprecated)]
    fn header(&mut self) -> route_pb::HeaderMatcher {
        use route_pb::header_matcher::HeaderMatchSpecifier as S;
        let name = if self.flag() {
            (*self.u.choose(&HEADER_NAMES).unwrap_or(&"x-a")).to_owned()
        } else {
            self.text()
        };
        let spec = match self.pick(5) {
            0 => S::ExactMatch(self.text()),
            1 => S::PresentMatch(self.flag()),
            2 => S::RangeMatch(Int64Range {
                start: self.u.arbitrary().unwrap_or(0),
                end: self.u.arbitrary().unwrap_or(0),
            }),
            3 => S::StringMatch(self.string_matcher()),
            _ => S::SuffixMatch(self.text()),
        };
        route_pb::HeaderMatcher {
            name,
            invert_match: self.flag(),
            header_match_specifier: Some(spec),
            ..Default::default()
        }
    }

    fn cidr(&mut self) -> core_pb::CidrRange {
        let address_prefix = match self.pick(3) {
            0 => self.text(),
            _ => ip(self.u).map(|a| a.to_string()).unwrap_or_default(),
        };
        core_pb::CidrRange {
            address_prefix,
            prefix_len: self.flag().then(|| UInt32Value {
                value: u32::from(self.u.arbitrary::<u8>().unwrap_or(0)),
            }),
        }
    }

    fn url_path(&mut self) -> matcher_pb::PathMatcher {
        matcher_pb::PathMatcher {
            rule: (self.pick(8) != 0)
                .then(|| matcher_pb::path_matcher::Rule::Path(self.string_matcher())),
        }
    }

    #[allow(deprecated)]
    fn permission(&mut self, depth: usize) -> rbac_pb::Permission {
        use rbac_pb::permission::{Rule as R, Set};
        self.rules += 1;
        let rule = if self.nests(depth) {
            match self.pick(3) {
                0 => R::AndRules(Set {
                    rules: (0..self.pick(4))
                        .map(|_| self.permission(depth + 1))
                        .collect(),
                }),
                1 => R::OrRules(Set {
                    rules: (0..self.pick(4))
                        .map(|_| self.permission(depth + 1))
                        .collect(),
                }),
                _ => R::NotRule(Box::new(self.permission(depth + 1))),
            }
        } else {
            match self.pick(11) {
                0 => R::Any(self.flag()),
                1 => R::Header(self.header()),
                2 => R::UrlPath(self.url_path()),
                3 => R::DestinationIp(self.cidr()),
                4 => R::DestinationPort(
                    u32::from(self.u.arbitrary::<u16>().unwrap_or(0)) + u32::from(self.pick(2)),
                ),
                5 => R::DestinationPortRange(Int32Range {
                    start: self.u.arbitrary().unwrap_or(0),
                    end: self.u.arbitrary().unwrap_or(0),
                }),
                6 => R::Metadata(Default::default()),
                7 => R::RequestedServerName(self.string_matcher()),
                8 => R::UriTemplate(Default::default()),
                _ => R::Any(true),
            }
        };
        rbac_pb::Permission {
            rule: (self.pick(32) != 0).then_some(rule),
        }
    }

    #[allow(deprecated)]
    fn principal(&mut self, depth: usize) -> rbac_pb::Principal {
        use rbac_pb::principal::{Authenticated, Identifier as I, Set};
        self.rules += 1;
        let id = if self.nests(depth) {
            match self.pick(3) {
                0 => I::AndIds(Set {
                    ids: (0..self.pick(4))
                        .map(|_| self.principal(depth + 1))
                        .collect(),
                }),
                1 => I::OrIds(Set {
                    ids: (0..self.pick(4))
                        .map(|_| self.principal(depth + 1))
                        .collect(),
                }),
                _ => I::NotId(Box::new(self.principal(depth + 1))),
            }
        } else {
            match self.pick(10) {
                0 => I::Any(true),
                1 => I::Authenticated(Authenticated {
                    principal_name: self.flag().then(|| self.string_matcher()),
                }),
                2 => I::SourceIp(self.cidr()),
                3 => I::DirectRemoteIp(self.cidr()),
                4 => I::RemoteIp(self.cidr()),
                5 => I::Header(self.header()),
                6 => I::UrlPath(self.url_path()),
                7 => I::Metadata(Default::default()),
                8 => I::FilterState(Default::default()),
                _ => I::Any(true),
            }
        };
        rbac_pb::Principal {
            identifier: (self.pick(32) != 0).then_some(id),
        }
    }
}

/// Seed inputs: each mode with a small config and requests to evaluate.
pub fn seeds() -> Vec<Vec<u8>> {
    let any_perm = rbac_pb::Permission {
        rule: Some(rbac_pb::permission::Rule::Any(true)),
    };
    let uri_principal = rbac_pb::Principal {
        identifier: Some(rbac_pb::principal::Identifier::Authenticated(
            rbac_pb::principal::Authenticated {
                principal_name: Some(matcher_pb::StringMatcher {
                    match_pattern: Some(matcher_pb::string_matcher::MatchPattern::Prefix(
                        "spiffe://".into(),
                    )),
                    ignore_case: false,
                }),
            },
        )),
    };
    let rules = rbac_pb::Rbac {
        action: 0,
        policies: [(
            "mesh".to_owned(),
            rbac_pb::Policy {
                permissions: vec![any_perm],
                principals: vec![uri_principal],
                ..Default::default()
            },
        )]
        .into(),
        audit_logging_options: Some(rbac_pb::rbac::AuditLoggingOptions {
            audit_condition: 3,
            logger_configs: vec![rbac_pb::rbac::audit_logging_options::AuditLoggerConfig {
                audit_logger: Some(core_pb::TypedExtensionConfig {
                    name: "stdout".into(),
                    typed_config: Some(Any {
                        type_url: STDOUT.into(),
                        value: Default::default(),
                    }),
                }),
                is_optional: false,
            }],
        }),
    };
    let filter = filter_pb::Rbac {
        rules: Some(rules),
        ..Default::default()
    };
    let per_route = filter_pb::RbacPerRoute {
        rbac: Some(filter.clone()),
    };
    let requests: Vec<u8> = (0..=255u8).cycle().take(600).collect();
    let framed = |mode: u8, bytes: Vec<u8>| {
        let mut out = vec![mode];
        out.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
        out.extend(bytes);
        out.extend(&requests);
        out
    };
    let mut structured = vec![0u8];
    structured.extend((0..1024u32).map(|i| (i * 37 % 251) as u8));
    vec![
        framed(1, filter.encode_to_vec()),
        framed(2, per_route.encode_to_vec()),
        structured,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The framed seeds hold configs the parser accepts, so fuzzing starts from inputs
    /// that reach the engine.
    #[test]
    fn framed_seeds_parse() {
        let seeds = seeds();
        let mut u = Unstructured::new(&seeds[0][1..]);
        let config = RbacConfig::parse(raw(&mut u)).expect("the RBAC seed parses");
        assert_eq!(config.rules().map(|r| r.policies.len()), Some(1));
        let mut u = Unstructured::new(&seeds[1][1..]);
        let per_route = RbacPerRoute::parse(raw(&mut u)).expect("the RBACPerRoute seed parses");
        assert!(per_route.config().is_some());
        for seed in seeds {
            rbac(&seed);
        }
    }
}
