//! Audit logging for RBAC decisions (gRFC A59) as a hook: when an RBAC config's
//! `audit_condition` holds for a decision, the core builds an [`AuditEvent`] and hands
//! it, once per configured logger, to the embedder's [`AuditLogger`]. The core decides
//! when and with what; it never prints (the stdout logger's line is built by
//! [`AuditEvent::stdout_line`] for the adapter to write, with the adapter's clock).

use std::fmt::Write as _;

/// `RBAC.AuditLoggingOptions.AuditCondition`: which decisions are audited. Deny and
/// allow are decisions, not actions (A59): an ALLOW engine that matches nothing denies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AuditCondition {
    /// Never audit.
    #[default]
    None,
    /// Audit denied RPCs.
    OnDeny,
    /// Audit allowed RPCs.
    OnAllow,
    /// Audit every RPC.
    OnDenyAndAllow,
}

impl AuditCondition {
    /// Whether a decision that `authorized` (or not) is audited.
    pub fn holds_for(self, authorized: bool) -> bool {
        match self {
            AuditCondition::None => false,
            AuditCondition::OnDeny => !authorized,
            AuditCondition::OnAllow => authorized,
            AuditCondition::OnDenyAndAllow => true,
        }
    }
}

/// One supported audit logger of `RBAC.AuditLoggingOptions.logger_configs` (unsupported
/// optional ones are dropped at parse time, A59).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AuditLoggerConfig {
    /// `envoy.extensions.rbac.audit_loggers.stream.v3.StdoutAuditLog`: one JSON line
    /// per event on stdout ([`AuditEvent::stdout_line`]).
    Stdout {
        /// The `TypedExtensionConfig`'s name.
        name: String,
    },
}

/// The audit options of one RBAC config.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuditOptions {
    /// When to audit.
    pub condition: AuditCondition,
    /// The loggers every audited decision goes to, in order.
    pub loggers: Box<[AuditLoggerConfig]>,
}

impl AuditOptions {
    /// Whether a decision that `authorized` (or not) reaches any logger. A condition
    /// without loggers, or loggers without a condition, audit nothing (A59: valid).
    pub fn audits(&self, authorized: bool) -> bool {
        !self.loggers.is_empty() && self.condition.holds_for(authorized)
    }
}

/// What an audit logger learns about one decision (A59's audit context).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuditEvent<'a> {
    /// The authorization policy's name: what the embedder passed (A59: not applicable
    /// to xDS, where gRPC-Go passes `""`; C-core passes the filter instance's name).
    pub policy_name: &'a str,
    /// The matched policy of the RBAC config; empty when none matched.
    pub matched_rule: &'a str,
    /// The peer's identity: its certificate's first URI SAN (what gRPC-Go reports, and
    /// C-core's SPIFFE ID), or empty.
    pub principal: &'a str,
    /// The RPC's method, `/package.Service/Method`.
    pub rpc_method: &'a str,
    /// Whether the RBAC config allowed the RPC.
    pub authorized: bool,
}

impl AuditEvent<'_> {
    /// The stdout logger's line (A59), without a newline:
    /// `{"grpc_audit_log":{"timestamp":…,"rpc_method":…,"principal":…,"policy_name":…,
    /// "matched_rule":…,"authorized":…}}`. `timestamp` is the caller's RFC 3339 time
    /// of the event (the core has no clock).
    pub fn stdout_line(&self, timestamp: &str) -> String {
        let mut line = String::with_capacity(160);
        line.push_str("{\"grpc_audit_log\":{");
        for (key, value) in [
            ("timestamp", timestamp),
            ("rpc_method", self.rpc_method),
            ("principal", self.principal),
            ("policy_name", self.policy_name),
            ("matched_rule", self.matched_rule),
        ] {
            let value = serde_json::Value::from(value);
            let _ = write!(line, "\"{key}\":{value},");
        }
        let _ = write!(line, "\"authorized\":{}}}}}", self.authorized);
        line
    }
}

/// The embedder's audit logging. Called synchronously on the RPC's path, so an
/// implementation must not block (A59); it gets each configured logger's config with
/// the event and writes it however that logger type says.
pub trait AuditLogger {
    /// Logs `event` for the configured logger `config`.
    fn log(&mut self, config: &AuditLoggerConfig, event: &AuditEvent<'_>);
}

/// An [`AuditLogger`] that keeps nothing: for callers that only want the decision.
impl AuditLogger for () {
    fn log(&mut self, _config: &AuditLoggerConfig, _event: &AuditEvent<'_>) {}
}
