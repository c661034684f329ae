//! Tests of the RBAC engine: parsing and its refusals (`parse`), each rule kind
//! matched and not (`matching`), decisions, overrides and audit (`decisions`), a
//! property against a naive evaluator of the protos (`property`), and the server's
//! per-route merge and chain of RBAC filters (`server_filters`, `filter::server`).

// The deprecated Envoy fields (`source_ip`, `metadata`, the plain header matches) are
// ones A41 supports.
#![allow(deprecated)]

use std::net::SocketAddr;

use prost::Message;

use super::*;
use crate::pb::envoy::config::core::v3 as core_pb;
use crate::pb::envoy::config::rbac::v3 as rbac_pb;
use crate::pb::envoy::config::route::v3 as route_pb;
use crate::pb::envoy::extensions::filters::http::rbac::v3 as filter_pb;
use crate::pb::envoy::r#type::matcher::v3 as matcher_pb;
use crate::pb::google::protobuf as pbuf;
use crate::security::SubjectAltName;
use rbac_pb::permission::Rule;
use rbac_pb::principal::Identifier as Id;

mod decisions;
mod matching;
mod parse;
mod property;
mod server_filters;

pub(super) const ALLOW: i32 = rbac_pb::rbac::Action::Allow as i32;
pub(super) const DENY: i32 = rbac_pb::rbac::Action::Deny as i32;
pub(super) const LOG: i32 = rbac_pb::rbac::Action::Log as i32;

pub(super) fn perm(rule: Rule) -> rbac_pb::Permission {
    rbac_pb::Permission { rule: Some(rule) }
}

pub(super) fn princ(id: Id) -> rbac_pb::Principal {
    rbac_pb::Principal {
        identifier: Some(id),
    }
}

pub(super) fn any_perm() -> rbac_pb::Permission {
    perm(Rule::Any(true))
}

pub(super) fn any_princ() -> rbac_pb::Principal {
    princ(Id::Any(true))
}

pub(super) fn policy(
    permissions: Vec<rbac_pb::Permission>,
    principals: Vec<rbac_pb::Principal>,
) -> rbac_pb::Policy {
    rbac_pb::Policy {
        permissions,
        principals,
        ..Default::default()
    }
}

pub(super) fn rules(action: i32, policies: Vec<(&str, rbac_pb::Policy)>) -> rbac_pb::Rbac {
    rbac_pb::Rbac {
        action,
        policies: policies
            .into_iter()
            .map(|(n, p)| (n.to_owned(), p))
            .collect(),
        audit_logging_options: None,
    }
}

pub(super) fn filter_bytes(rules: Option<rbac_pb::Rbac>) -> Vec<u8> {
    filter_pb::Rbac {
        rules,
        ..Default::default()
    }
    .encode_to_vec()
}

/// The parsed config of a filter with these rules (panics if refused).
pub(super) fn config(rules: rbac_pb::Rbac) -> RbacConfig {
    RbacConfig::parse(&filter_bytes(Some(rules))).expect("valid config")
}

/// A config with one policy of one permission and one principal.
pub(super) fn single(
    action: i32,
    permission: rbac_pb::Permission,
    principal: rbac_pb::Principal,
) -> RbacConfig {
    config(rules(
        action,
        vec![("p", policy(vec![permission], vec![principal]))],
    ))
}

/// The error text of refusing these rules.
pub(super) fn refusal(rules: rbac_pb::Rbac) -> String {
    RbacConfig::parse(&filter_bytes(Some(rules)))
        .expect_err("refused")
        .to_string()
}

pub(super) fn exact(value: &str) -> matcher_pb::StringMatcher {
    matcher_pb::StringMatcher {
        match_pattern: Some(matcher_pb::string_matcher::MatchPattern::Exact(
            value.to_owned(),
        )),
        ignore_case: false,
    }
}

pub(super) fn prefix(value: &str) -> matcher_pb::StringMatcher {
    matcher_pb::StringMatcher {
        match_pattern: Some(matcher_pb::string_matcher::MatchPattern::Prefix(
            value.to_owned(),
        )),
        ignore_case: false,
    }
}

pub(super) fn header(
    name: &str,
    spec: route_pb::header_matcher::HeaderMatchSpecifier,
) -> route_pb::HeaderMatcher {
    route_pb::HeaderMatcher {
        name: name.to_owned(),
        header_match_specifier: Some(spec),
        ..Default::default()
    }
}

pub(super) fn header_exact(name: &str, value: &str) -> route_pb::HeaderMatcher {
    header(
        name,
        route_pb::header_matcher::HeaderMatchSpecifier::ExactMatch(value.to_owned()),
    )
}

pub(super) fn url_path(matcher: matcher_pb::StringMatcher) -> matcher_pb::PathMatcher {
    matcher_pb::PathMatcher {
        rule: Some(matcher_pb::path_matcher::Rule::Path(matcher)),
    }
}

pub(super) fn cidr(address: &str, len: Option<u32>) -> core_pb::CidrRange {
    core_pb::CidrRange {
        address_prefix: address.to_owned(),
        prefix_len: len.map(|value| pbuf::UInt32Value { value }),
    }
}

/// An owned request; [`Req::view`] is the engine's borrowed [`RbacRequest`].
#[derive(Clone, Debug)]
pub(super) struct Req {
    pub path: String,
    pub method: String,
    pub authority: Option<String>,
    pub headers: Vec<(String, String)>,
    pub local: SocketAddr,
    pub peer: SocketAddr,
    /// `None`: plaintext; `Some(None)`: TLS without a client certificate.
    pub tls: Option<Option<(Vec<SubjectAltName>, String)>>,
}

impl Default for Req {
    fn default() -> Req {
        Req {
            path: "/pkg.Svc/Method".to_owned(),
            method: "POST".to_owned(),
            authority: Some("svc.example.com".to_owned()),
            headers: vec![("content-type".to_owned(), "application/grpc".to_owned())],
            local: "10.0.0.1:8080".parse().unwrap(),
            peer: "192.168.1.7:40000".parse().unwrap(),
            tls: None,
        }
    }
}

impl Req {
    pub(super) fn path(path: &str) -> Req {
        Req {
            path: path.to_owned(),
            ..Req::default()
        }
    }

    pub(super) fn header(mut self, name: &str, value: &str) -> Req {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    pub(super) fn cert(mut self, sans: Vec<SubjectAltName>, subject: &str) -> Req {
        self.tls = Some(Some((sans, subject.to_owned())));
        self
    }

    pub(super) fn view(&self) -> RbacRequest<'_> {
        RbacRequest {
            path: &self.path,
            method: &self.method,
            authority: self.authority.as_deref(),
            headers: &self.headers,
            local_addr: self.local,
            peer_addr: self.peer,
            security: match &self.tls {
                None => ConnectionSecurity::Plaintext,
                Some(None) => ConnectionSecurity::Tls(None),
                Some(Some((sans, subject))) => {
                    ConnectionSecurity::Tls(Some(PeerCertificate { sans, subject }))
                }
            },
        }
    }
}

/// Whether `config` allows `req`.
pub(super) fn allows(config: &RbacConfig, req: &Req) -> bool {
    config.evaluate(&req.view()).allowed
}

/// Whether a permission matches `req` (an ALLOW policy of it and `any` principal).
pub(super) fn permission_matches(permission: rbac_pb::Permission, req: &Req) -> bool {
    allows(&single(ALLOW, permission, any_princ()), req)
}

/// Whether a principal matches `req` (an ALLOW policy of `any` permission and it).
pub(super) fn principal_matches(principal: rbac_pb::Principal, req: &Req) -> bool {
    allows(&single(ALLOW, any_perm(), principal), req)
}
