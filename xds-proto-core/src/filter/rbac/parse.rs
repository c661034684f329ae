//! The RBAC protos to the policy model, validated as A41 says: CEL conditions, header
//! matchers on `grpc-` headers or `:scheme`, unknown actions and rule kinds gRPC
//! cannot evaluate are refused with the field's path; shadow rules and stats prefixes
//! are ignored; `action: LOG` validates and then enforces nothing. Nesting and the
//! number of rules are bounded, so a config's evaluation work is too.

use std::net::IpAddr;

use prost::Message;

use super::audit::{AuditCondition, AuditLoggerConfig, AuditOptions};
use super::policy::{Action, CidrRange, Permission, Policy, Principal};
use super::{RbacConfig, RbacRules};
use crate::pb::envoy::config::core::v3 as core_pb;
use crate::pb::envoy::config::rbac::v3 as rbac_pb;
use crate::pb::envoy::extensions::filters::http::rbac::v3 as filter_pb;
use crate::pb::envoy::r#type::matcher::v3 as matcher_pb;
use crate::resource::FieldError;
use crate::resource::route::{
    HeaderMatcher, StringMatcher, parse_header_matcher, parse_string_matcher,
};

/// The deepest nesting of `and`/`or`/`not` rules accepted (a top-level rule is at
/// depth 0). Evaluation recurses once per level; Istio's policies nest a few levels.
pub const MAX_RULE_DEPTH: usize = 16;

/// The most rules (every permission and principal, nested ones included) one config
/// may hold: evaluation visits each at most once per RPC.
pub const MAX_RULES: usize = 10_000;

/// The type name of the one built-in audit logger (A59).
const STDOUT_AUDIT_LOGGER: &str = "envoy.extensions.rbac.audit_loggers.stream.v3.StdoutAuditLog";

pub(super) fn rbac_filter_bytes(bytes: &[u8]) -> Result<RbacConfig, FieldError> {
    let msg = filter_pb::Rbac::decode(bytes)
        .map_err(|e| FieldError::new("", format!("can't decode RBAC: {e}")))?;
    rbac_filter(&msg)
}

pub(super) fn rbac_per_route_bytes(bytes: &[u8]) -> Result<Option<RbacConfig>, FieldError> {
    let msg = filter_pb::RbacPerRoute::decode(bytes)
        .map_err(|e| FieldError::new("", format!("can't decode RBACPerRoute: {e}")))?;
    msg.rbac
        .as_ref()
        .map(rbac_filter)
        .transpose()
        .map_err(|e| e.at("rbac"))
}

/// The HTTP filter's `RBAC`: only `rules` is supported (A41); the shadow rules and the
/// stats fields are ignored; the `matcher` tree, which would stand in for `rules`, is
/// refused rather than read as "no rules" (which would allow every RPC).
fn rbac_filter(msg: &filter_pb::Rbac) -> Result<RbacConfig, FieldError> {
    if msg.matcher.is_some() {
        return Err(FieldError::new(
            "matcher",
            "not supported (gRPC supports rules, A41)",
        ));
    }
    let Some(rules) = &msg.rules else {
        return Ok(RbacConfig { rules: None });
    };
    let rules = rbac_rules(rules).map_err(|e| e.at("rules"))?;
    Ok(RbacConfig { rules })
}

/// `envoy.config.rbac.v3.RBAC`; `None` for `action: LOG`, validated all the same.
fn rbac_rules(msg: &rbac_pb::Rbac) -> Result<Option<RbacRules>, FieldError> {
    use rbac_pb::rbac::Action as Pb;
    let action = match Pb::try_from(msg.action) {
        Ok(Pb::Allow) => Some(Action::Allow),
        Ok(Pb::Deny) => Some(Action::Deny),
        Ok(Pb::Log) => None,
        Err(_) => {
            return Err(FieldError::new(
                "action",
                format!("unknown action {}", msg.action),
            ));
        }
    };
    let mut names: Vec<&String> = msg.policies.keys().collect();
    names.sort();
    let mut budget = RuleBudget {
        remaining: MAX_RULES,
    };
    let mut policies = Vec::with_capacity(names.len().min(MAX_RULES));
    for name in names {
        let policy = policy(name, &msg.policies[name], &mut budget)
            .map_err(|e| e.at(format_args!("policies[{name:?}]")))?;
        policies.push(policy);
    }
    let audit = match &msg.audit_logging_options {
        Some(options) => audit_options(options).map_err(|e| e.at("audit_logging_options"))?,
        None => AuditOptions::default(),
    };
    Ok(action.map(|action| RbacRules {
        action,
        policies: policies.into(),
        audit,
    }))
}

fn policy(
    name: &str,
    msg: &rbac_pb::Policy,
    budget: &mut RuleBudget,
) -> Result<Policy, FieldError> {
    if msg.condition.is_some() {
        return Err(FieldError::new(
            "condition",
            "CEL conditions are not supported (A41)",
        ));
    }
    if msg.checked_condition.is_some() {
        return Err(FieldError::new(
            "checked_condition",
            "CEL conditions are not supported (A41)",
        ));
    }
    let permissions = msg
        .permissions
        .iter()
        .enumerate()
        .map(|(i, p)| permission(p, 0, budget).map_err(|e| e.at_index("permissions", i)))
        .collect::<Result<_, _>>()?;
    let principals = msg
        .principals
        .iter()
        .enumerate()
        .map(|(i, p)| principal(p, 0, budget).map_err(|e| e.at_index("principals", i)))
        .collect::<Result<_, _>>()?;
    Ok(Policy {
        name: name.to_owned(),
        permissions,
        principals,
    })
}

/// Counts rules against [`MAX_RULES`] and checks their depth against
/// [`MAX_RULE_DEPTH`], before a rule is parsed (so before its children are).
struct RuleBudget {
    remaining: usize,
}

impl RuleBudget {
    fn take(&mut self, depth: usize) -> Result<(), FieldError> {
        if depth > MAX_RULE_DEPTH {
            return Err(FieldError::new(
                "",
                format!("rules nest deeper than {MAX_RULE_DEPTH} levels"),
            ));
        }
        self.remaining = self.remaining.checked_sub(1).ok_or_else(|| {
            FieldError::new("", format!("more than {MAX_RULES} rules in one config"))
        })?;
        Ok(())
    }
}

// `metadata` is deprecated in Envoy; A41 still gives it a meaning.
#[allow(deprecated)]
fn permission(
    msg: &rbac_pb::Permission,
    depth: usize,
    budget: &mut RuleBudget,
) -> Result<Permission, FieldError> {
    use rbac_pb::permission::Rule;
    budget.take(depth)?;
    let set = |rules: &[rbac_pb::Permission], field: &str, budget: &mut RuleBudget| {
        rules
            .iter()
            .enumerate()
            .map(|(i, r)| {
                permission(r, depth + 1, budget).map_err(|e| e.at_index("rules", i).at(field))
            })
            .collect::<Result<Box<[_]>, _>>()
    };
    Ok(match &msg.rule {
        // Any value of `any` is read as set (as gRPC-Go and C-core read it).
        Some(Rule::Any(_)) => Permission::Any,
        Some(Rule::AndRules(s)) => Permission::And(set(&s.rules, "and_rules", budget)?),
        Some(Rule::OrRules(s)) => Permission::Or(set(&s.rules, "or_rules", budget)?),
        Some(Rule::NotRule(r)) => Permission::Not(Box::new(
            permission(r, depth + 1, budget).map_err(|e| e.at("not_rule"))?,
        )),
        Some(Rule::Header(h)) => Permission::Header(header(h).map_err(|e| e.at("header"))?),
        Some(Rule::UrlPath(p)) => Permission::UrlPath(url_path(p).map_err(|e| e.at("url_path"))?),
        Some(Rule::DestinationIp(c)) => {
            Permission::DestinationIp(cidr(c).map_err(|e| e.at("destination_ip"))?)
        }
        Some(Rule::DestinationPort(port)) => Permission::DestinationPort(
            u16::try_from(*port)
                .map_err(|_| FieldError::new("destination_port", format!("invalid port {port}")))?,
        ),
        Some(Rule::DestinationPortRange(r)) => {
            port_range(r.start, r.end).map_err(|e| e.at("destination_port_range"))?
        }
        Some(Rule::Metadata(_)) => Permission::Metadata,
        Some(Rule::RequestedServerName(sm)) => Permission::RequestedServerName(
            parse_string_matcher(sm).map_err(|e| e.at("requested_server_name"))?,
        ),
        Some(Rule::Matcher(_)) => return Err(unsupported("matcher")),
        Some(Rule::UriTemplate(_)) => return Err(unsupported("uri_template")),
        Some(Rule::SourcedMetadata(_)) => return Err(unsupported("sourced_metadata")),
        None => return Err(FieldError::new("", "no rule is set")),
    })
}

// `source_ip` and `metadata` are deprecated in Envoy; A41 still gives them a meaning.
#[allow(deprecated)]
fn principal(
    msg: &rbac_pb::Principal,
    depth: usize,
    budget: &mut RuleBudget,
) -> Result<Principal, FieldError> {
    use rbac_pb::principal::Identifier as Id;
    budget.take(depth)?;
    let set = |ids: &[rbac_pb::Principal], field: &str, budget: &mut RuleBudget| {
        ids.iter()
            .enumerate()
            .map(|(i, r)| {
                principal(r, depth + 1, budget).map_err(|e| e.at_index("ids", i).at(field))
            })
            .collect::<Result<Box<[_]>, _>>()
    };
    Ok(match &msg.identifier {
        Some(Id::Any(_)) => Principal::Any,
        Some(Id::AndIds(s)) => Principal::And(set(&s.ids, "and_ids", budget)?),
        Some(Id::OrIds(s)) => Principal::Or(set(&s.ids, "or_ids", budget)?),
        Some(Id::NotId(r)) => Principal::Not(Box::new(
            principal(r, depth + 1, budget).map_err(|e| e.at("not_id"))?,
        )),
        Some(Id::Authenticated(a)) => Principal::Authenticated(
            a.principal_name
                .as_ref()
                .map(parse_string_matcher)
                .transpose()
                .map_err(|e| e.at("authenticated.principal_name"))?,
        ),
        Some(Id::SourceIp(c)) => Principal::PeerIp(cidr(c).map_err(|e| e.at("source_ip"))?),
        Some(Id::DirectRemoteIp(c)) => {
            Principal::PeerIp(cidr(c).map_err(|e| e.at("direct_remote_ip"))?)
        }
        Some(Id::RemoteIp(c)) => Principal::PeerIp(cidr(c).map_err(|e| e.at("remote_ip"))?),
        Some(Id::Header(h)) => Principal::Header(header(h).map_err(|e| e.at("header"))?),
        Some(Id::UrlPath(p)) => Principal::UrlPath(url_path(p).map_err(|e| e.at("url_path"))?),
        Some(Id::Metadata(_)) => Principal::Metadata,
        Some(Id::FilterState(_)) => return Err(unsupported("filter_state")),
        Some(Id::SourcedMetadata(_)) => return Err(unsupported("sourced_metadata")),
        Some(Id::Custom(_)) => return Err(unsupported("custom")),
        None => return Err(FieldError::new("", "no identifier is set")),
    })
}

fn unsupported(field: &str) -> FieldError {
    FieldError::new(field, "not supported by gRPC's RBAC (A41)")
}

/// A header matcher, refused on a `grpc-` header or `:scheme` (A41).
fn header(
    msg: &crate::pb::envoy::config::route::v3::HeaderMatcher,
) -> Result<HeaderMatcher, FieldError> {
    let matcher = parse_header_matcher(msg)?;
    let name = matcher.name.as_bytes();
    if name.len() >= 5 && name[..5].eq_ignore_ascii_case(b"grpc-") {
        return Err(FieldError::new(
            "name",
            format!("{:?}: grpc- headers are not allowed (A41)", matcher.name),
        ));
    }
    if matcher.name.eq_ignore_ascii_case(":scheme") {
        return Err(FieldError::new("name", "\":scheme\" is not allowed (A41)"));
    }
    Ok(matcher)
}

/// `envoy.type.matcher.v3.PathMatcher`: its one rule, a string matcher on the path.
fn url_path(msg: &matcher_pb::PathMatcher) -> Result<StringMatcher, FieldError> {
    use matcher_pb::path_matcher::Rule;
    match &msg.rule {
        Some(Rule::Path(sm)) => parse_string_matcher(sm).map_err(|e| e.at("path")),
        None => Err(FieldError::missing("path")),
    }
}

/// `envoy.config.core.v3.CidrRange`; an unset `prefix_len` is 0.
fn cidr(msg: &core_pb::CidrRange) -> Result<CidrRange, FieldError> {
    let address: IpAddr = msg.address_prefix.parse().map_err(|_| {
        FieldError::new(
            "address_prefix",
            format!("{:?} is not an IP address", msg.address_prefix),
        )
    })?;
    let prefix_len = msg.prefix_len.as_ref().map_or(0, |l| l.value);
    CidrRange::new(address, prefix_len).ok_or_else(|| {
        FieldError::new(
            "prefix_len",
            format!("{prefix_len} is longer than the address {address}"),
        )
    })
}

/// `destination_port_range`, `[start, end)`, with Envoy's bounds.
fn port_range(start: i32, end: i32) -> Result<Permission, FieldError> {
    let in_bounds = |v: i32| u32::try_from(v).ok().filter(|v| *v <= 65_536);
    let (Some(start), Some(end)) = (in_bounds(start), in_bounds(end)) else {
        return Err(FieldError::new(
            "",
            format!("[{start}, {end}) is out of the port range [0, 65536]"),
        ));
    };
    if start >= end {
        return Err(FieldError::new(
            "",
            format!("start {start} must be less than end {end}"),
        ));
    }
    Ok(Permission::DestinationPortRange { start, end })
}

/// `AuditLoggingOptions` (A59): the condition, and the loggers gRPC has; an unknown
/// logger type is refused unless `is_optional`, then dropped.
fn audit_options(msg: &rbac_pb::rbac::AuditLoggingOptions) -> Result<AuditOptions, FieldError> {
    use rbac_pb::rbac::audit_logging_options::AuditCondition as Pb;
    let condition = match Pb::try_from(msg.audit_condition) {
        Ok(Pb::None) => AuditCondition::None,
        Ok(Pb::OnDeny) => AuditCondition::OnDeny,
        Ok(Pb::OnAllow) => AuditCondition::OnAllow,
        Ok(Pb::OnDenyAndAllow) => AuditCondition::OnDenyAndAllow,
        Err(_) => {
            return Err(FieldError::new(
                "audit_condition",
                format!("unknown audit condition {}", msg.audit_condition),
            ));
        }
    };
    let mut loggers = Vec::new();
    for (i, config) in msg.logger_configs.iter().enumerate() {
        let logger = audit_logger(config).map_err(|e| e.at_index("logger_configs", i))?;
        loggers.extend(logger);
    }
    Ok(AuditOptions {
        condition,
        loggers: loggers.into(),
    })
}

fn audit_logger(
    msg: &rbac_pb::rbac::audit_logging_options::AuditLoggerConfig,
) -> Result<Option<AuditLoggerConfig>, FieldError> {
    let extension: &core_pb::TypedExtensionConfig = msg
        .audit_logger
        .as_ref()
        .ok_or_else(|| FieldError::missing("audit_logger"))?;
    let any = extension
        .typed_config
        .as_ref()
        .ok_or_else(|| FieldError::missing("audit_logger.typed_config"))?;
    let type_name = any.type_url.rsplit('/').next().unwrap_or_default();
    if type_name == STDOUT_AUDIT_LOGGER {
        use crate::pb::envoy::extensions::rbac::audit_loggers::stream::v3::StdoutAuditLog;
        StdoutAuditLog::decode(&any.value[..]).map_err(|e| {
            FieldError::new(
                "audit_logger.typed_config.value",
                format!("can't decode StdoutAuditLog: {e}"),
            )
        })?;
        return Ok(Some(AuditLoggerConfig::Stdout {
            name: extension.name.clone(),
        }));
    }
    if msg.is_optional {
        return Ok(None);
    }
    Err(FieldError::new(
        "audit_logger.typed_config",
        format!(
            "unsupported audit logger type {:?} (and not is_optional)",
            any.type_url
        ),
    ))
}
