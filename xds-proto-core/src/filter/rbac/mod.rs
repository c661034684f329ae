//! The RBAC HTTP filter of gRFC A41, a server filter, as a pure engine: its config
//! (`envoy.extensions.filters.http.rbac.v3.RBAC`) and per-route override
//! (`RBACPerRoute`) parsed and validated once ([`RbacConfig::parse`],
//! [`RbacPerRoute::parse`]), then each RPC, described by an [`RbacRequest`], evaluated
//! to allow or deny with the matched policy ([`RbacConfig::evaluate`]), and audited
//! through the embedder's [`AuditLogger`] as A59 says ([`RbacConfig::authorize`]).
//!
//! - `policy`: the validated model (policies, permissions, principals);
//! - `parse`: the proto to the model, with A41's refusals and this crate's bounds;
//! - `matching`: the request and how each rule kind matches it;
//! - `audit`: A59's audit condition, loggers and event.

mod audit;
mod matching;
mod parse;
mod policy;

#[cfg(test)]
mod tests;

pub use audit::{AuditCondition, AuditEvent, AuditLogger, AuditLoggerConfig, AuditOptions};
pub use matching::{ConnectionSecurity, PeerCertificate, RbacRequest};
pub use parse::{MAX_RULE_DEPTH, MAX_RULES};
pub use policy::{Action, CidrRange, Permission, Policy, Principal};

use crate::resource::FieldError;

/// The type URL of the top-level config.
pub const RBAC_TYPE_URL: &str = "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC";

/// The type URL of the per-route override.
pub const RBAC_PER_ROUTE_TYPE_URL: &str =
    "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBACPerRoute";

/// A validated RBAC filter config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RbacConfig {
    /// `None` when the filter enforces nothing: `rules` absent (Envoy: "no enforcing
    /// RBAC policy will be applied") or `action: LOG` (A41: ignored, as if RBAC was not
    /// configured; nor is anything audited).
    rules: Option<RbacRules>,
}

/// An enforcing engine: the action and the policies, in name order (the order they
/// are tried in, as C-core's sorted map; the first match names the decision).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RbacRules {
    /// What a match means.
    pub action: Action,
    /// The policies, sorted by name.
    pub policies: Box<[Policy]>,
    /// A59's audit options.
    pub audit: AuditOptions,
}

/// The outcome of evaluating one RPC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RbacDecision<'c> {
    /// Whether the RPC may proceed (otherwise it fails with PERMISSION_DENIED).
    pub allowed: bool,
    /// The policy that decided, if one matched.
    pub matched_policy: Option<&'c str>,
    /// Whether A59's audit condition holds for this decision and a logger is
    /// configured.
    pub audit: bool,
}

impl RbacDecision<'_> {
    /// The PERMISSION_DENIED status message of a denied RPC (gRPC-Go's words), `None`
    /// when allowed.
    pub fn denial_message(&self) -> Option<String> {
        match (self.allowed, self.matched_policy) {
            (true, _) => None,
            (false, Some(policy)) => Some(format!("incoming RPC matched a deny policy {policy:?}")),
            (false, None) => Some("incoming RPC did not match an allow policy".to_owned()),
        }
    }
}

impl RbacConfig {
    /// Parses and validates an `envoy.extensions.filters.http.rbac.v3.RBAC` (an `Any`'s
    /// value). Error paths are relative to that message.
    pub fn parse(bytes: &[u8]) -> Result<RbacConfig, FieldError> {
        parse::rbac_filter_bytes(bytes)
    }

    /// The enforcing engine; `None` when the filter lets every RPC through unaudited.
    pub fn rules(&self) -> Option<&RbacRules> {
        self.rules.as_ref()
    }

    /// This config with the route's override applied (A39: the most specific
    /// `typed_per_filter_config` entry replaces it): `None` when the filter is
    /// disabled for the route (an `RBACPerRoute` without `rbac`, A41), so the server
    /// skips it.
    pub fn for_route<'c>(&'c self, per_route: Option<&'c RbacPerRoute>) -> Option<&'c RbacConfig> {
        match per_route {
            None => Some(self),
            Some(per_route) => per_route.rbac.as_ref(),
        }
    }

    /// Evaluates one RPC: ALLOW allows it when a policy matches, DENY denies it when
    /// one does; policies are tried in name order and the first match decides.
    pub fn evaluate<'c>(&'c self, request: &RbacRequest<'_>) -> RbacDecision<'c> {
        let Some(rules) = &self.rules else {
            return RbacDecision {
                allowed: true,
                matched_policy: None,
                audit: false,
            };
        };
        let matched = matching::RequestView::new(request).first_match(&rules.policies);
        let allowed = match rules.action {
            Action::Allow => matched.is_some(),
            Action::Deny => matched.is_none(),
        };
        RbacDecision {
            allowed,
            matched_policy: matched.map(|p| p.name.as_str()),
            audit: rules.audit.audits(allowed),
        }
    }

    /// [`evaluate`](Self::evaluate), then, when the decision is audited, one
    /// [`AuditEvent`] per configured logger to `logger`. `policy_name` is the event's
    /// policy name (see [`AuditEvent::policy_name`]).
    pub fn authorize<'c>(
        &'c self,
        request: &RbacRequest<'_>,
        policy_name: &str,
        logger: &mut dyn AuditLogger,
    ) -> RbacDecision<'c> {
        let decision = self.evaluate(request);
        if let (true, Some(rules)) = (decision.audit, &self.rules) {
            let event = AuditEvent {
                policy_name,
                matched_rule: decision.matched_policy.unwrap_or(""),
                principal: request.principal(),
                rpc_method: request.path,
                authorized: decision.allowed,
            };
            for config in &rules.audit.loggers {
                logger.log(config, &event);
            }
        }
        decision
    }
}

/// A validated `RBACPerRoute`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RbacPerRoute {
    /// The route's config; `None` disables the filter for the route (A41).
    rbac: Option<RbacConfig>,
}

impl RbacPerRoute {
    /// Parses and validates an `envoy.extensions.filters.http.rbac.v3.RBACPerRoute`.
    /// Error paths are relative to that message (`rbac.rules...`).
    pub fn parse(bytes: &[u8]) -> Result<RbacPerRoute, FieldError> {
        parse::rbac_per_route_bytes(bytes).map(|rbac| RbacPerRoute { rbac })
    }

    /// An override that replaces the filter's config with `config` (a whole `RBAC`
    /// message given as a route's override, A39).
    pub fn replacing(config: RbacConfig) -> RbacPerRoute {
        RbacPerRoute { rbac: Some(config) }
    }

    /// The route's config; `None` when the override disables the filter.
    pub fn config(&self) -> Option<&RbacConfig> {
        self.rbac.as_ref()
    }
}
