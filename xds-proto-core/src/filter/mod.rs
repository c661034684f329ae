//! HTTP filters (gRFC A39): each filter's config parsed once, when its resource is
//! decoded ([`HttpFilterConfig`] for an HCM's `http_filters`, [`FilterOverride`] for a
//! `typed_per_filter_config` entry), the overrides of a route merged as A39 says when a
//! config selector is built ([`ClientFilters`]: the most specific of weighted cluster,
//! route and virtual host wins), and per-RPC decisions handed to the runtime that
//! carries the RPC ([`RpcFilters`]). Client filters: fault injection (A33), stateful
//! session affinity (A55, A60); server filter: RBAC (A41), merged per route in
//! [`server::RouteFilters`]. `gcp_authn` (A83) is accepted and not run.

pub mod fault;
pub mod rbac;
pub mod server;
pub mod stateful_session;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::resource::listener::{
    FAULT_FILTER_TYPE_URL, GCP_AUTHN_FILTER_TYPE_URL, HttpFilter, RBAC_FILTER_TYPE_URL,
    ROUTER_FILTER_TYPE_URL, STATEFUL_SESSION_FILTER_TYPE_URL,
};
use crate::resource::route::{FilterConfigOverride, TypedConfig};
use crate::resource::validate::{FieldError, type_name};
use crate::selector::{Metadata, RandomSource};

use self::fault::{ActiveFaults, FaultConfig, InjectedFault};
use self::rbac::{RBAC_PER_ROUTE_TYPE_URL, RbacConfig, RbacPerRoute};
use self::stateful_session::{
    SessionAffinity, SessionCookie, StatefulSessionConfig, StatefulSessionOverride,
};

/// The type URL of the stateful session filter's per-route override.
pub const STATEFUL_SESSION_PER_ROUTE_TYPE_URL: &str =
    "type.googleapis.com/envoy.extensions.filters.http.stateful_session.v3.StatefulSessionPerRoute";

/// A top-level HTTP filter config (an `http_filters` entry's `typed_config`), parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HttpFilterConfig {
    /// `envoy.extensions.filters.http.router.v3.Router` (its fields are ignored, A39).
    Router,
    /// Fault injection (A33).
    Fault(Arc<FaultConfig>),
    /// Stateful session affinity (A55).
    StatefulSession(Arc<StatefulSessionConfig>),
    /// GCP authentication (A83): accepted, not run.
    GcpAuthn,
    /// RBAC (A41), a server filter.
    Rbac(Arc<RbacConfig>),
}

impl HttpFilterConfig {
    /// Parses the config of a filter type gRPC supports; `Ok(None)` for a type it does
    /// not know (the caller NACKs or skips it by `is_optional`). Errors name fields
    /// relative to the config (`typed_config`).
    pub fn parse(config: &TypedConfig) -> Result<Option<HttpFilterConfig>, FieldError> {
        let name = config.type_name();
        let parsed = if name == type_name(ROUTER_FILTER_TYPE_URL) {
            HttpFilterConfig::Router
        } else if name == type_name(GCP_AUTHN_FILTER_TYPE_URL) {
            HttpFilterConfig::GcpAuthn
        } else if name == type_name(FAULT_FILTER_TYPE_URL) {
            HttpFilterConfig::Fault(Arc::new(FaultConfig::parse(proto_bytes(config)?)?))
        } else if name == type_name(STATEFUL_SESSION_FILTER_TYPE_URL) {
            HttpFilterConfig::StatefulSession(Arc::new(StatefulSessionConfig::parse(proto_bytes(
                config,
            )?)?))
        } else if name == type_name(RBAC_FILTER_TYPE_URL) {
            HttpFilterConfig::Rbac(Arc::new(RbacConfig::parse(proto_bytes(config)?)?))
        } else {
            return Ok(None);
        };
        Ok(Some(parsed))
    }

    /// The config's type URL.
    pub fn type_url(&self) -> &str {
        match self {
            HttpFilterConfig::Router => ROUTER_FILTER_TYPE_URL,
            HttpFilterConfig::Fault(_) => FAULT_FILTER_TYPE_URL,
            HttpFilterConfig::StatefulSession(_) => STATEFUL_SESSION_FILTER_TYPE_URL,
            HttpFilterConfig::GcpAuthn => GCP_AUTHN_FILTER_TYPE_URL,
            HttpFilterConfig::Rbac(_) => RBAC_FILTER_TYPE_URL,
        }
    }
}

/// A per-route override config (a `typed_per_filter_config` value, unwrapped from
/// `FilterConfig`), parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FilterOverride {
    /// An `HTTPFault`: replaces the fault filter's config.
    Fault(Arc<FaultConfig>),
    /// A `StatefulSessionPerRoute`: disables the filter or replaces its config.
    StatefulSession(StatefulSessionOverride),
    /// An `RBACPerRoute` (or a whole `RBAC` config, which replaces the filter's): a
    /// server filter's override.
    Rbac(Arc<RbacPerRoute>),
}

impl FilterOverride {
    /// Parses an override of a filter type gRPC supports; `Ok(None)` for a type it
    /// does not know. A39: the type decides the filter, whichever filter instance the
    /// key names (an RDS resource may serve clients and servers alike).
    pub fn parse(config: &TypedConfig) -> Result<Option<FilterOverride>, FieldError> {
        let name = config.type_name();
        let parsed = if name == type_name(FAULT_FILTER_TYPE_URL) {
            FilterOverride::Fault(Arc::new(FaultConfig::parse(proto_bytes(config)?)?))
        } else if name == type_name(STATEFUL_SESSION_PER_ROUTE_TYPE_URL) {
            FilterOverride::StatefulSession(StatefulSessionOverride::parse(proto_bytes(config)?)?)
        } else if name == type_name(RBAC_PER_ROUTE_TYPE_URL) {
            FilterOverride::Rbac(Arc::new(RbacPerRoute::parse(proto_bytes(config)?)?))
        } else if name == type_name(RBAC_FILTER_TYPE_URL) {
            let replacing = RbacConfig::parse(proto_bytes(config)?)?;
            FilterOverride::Rbac(Arc::new(RbacPerRoute::replacing(replacing)))
        } else {
            return Ok(None);
        };
        Ok(Some(parsed))
    }
}

/// The serialized message of a built-in filter's config: a `TypedStruct` (a JSON-like
/// `Struct`) is for third-party filters and is refused for ours.
fn proto_bytes(config: &TypedConfig) -> Result<&[u8], FieldError> {
    if config.typed_struct {
        return Err(FieldError::new(
            "",
            format!(
                "{} must be the message itself, not a TypedStruct",
                config.type_name()
            ),
        ));
    }
    Ok(&config.value)
}

/// One filter a client runs for a route, its config merged with the route's overrides.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ClientFilter {
    /// Fault injection (A33).
    Fault(Arc<FaultConfig>),
    /// Stateful session affinity (A55): its cookie.
    StatefulSession(Arc<SessionCookie>),
}

/// The filters a client runs for one route (and weighted cluster), in chain order,
/// each with its effective config: the HCM's, replaced by the most specific override
/// (weighted cluster, else route, else virtual host; A39), or left out when that
/// override disables it. Built once per selector; routes whose chain runs nothing have
/// none ([`ClientFilters::build`] returns `None`), so their RPCs pay nothing.
#[derive(Clone, Debug, PartialEq)]
pub struct ClientFilters {
    filters: Box<[ClientFilter]>,
}

/// The `typed_per_filter_config` maps that apply to one route's RPCs, most specific
/// first: the weighted cluster's (if any), the route's, the virtual host's.
pub type OverrideScopes<'a> = [Option<&'a BTreeMap<String, FilterConfigOverride>>; 3];

/// The override of the filter named `name` in the most specific scope that has one
/// (A39), for client and server chains alike.
pub(crate) fn most_specific<'a>(
    scopes: &OverrideScopes<'a>,
    name: &str,
) -> Option<&'a FilterConfigOverride> {
    scopes.iter().flatten().find_map(|scope| scope.get(name))
}

impl ClientFilters {
    /// The chain `http_filters` runs under `scopes`; `None` when it runs nothing (only
    /// the router, `gcp_authn`, or every filter disabled).
    pub fn build(
        http_filters: &[HttpFilter],
        scopes: OverrideScopes<'_>,
    ) -> Option<Arc<ClientFilters>> {
        let filters: Vec<ClientFilter> = http_filters
            .iter()
            .filter_map(|filter| effective(filter, most_specific(&scopes, &filter.name)))
            .collect();
        (!filters.is_empty()).then(|| {
            Arc::new(ClientFilters {
                filters: filters.into_boxed_slice(),
            })
        })
    }

    /// The filters, in chain order.
    pub fn filters(&self) -> &[ClientFilter] {
        &self.filters
    }

    /// Runs the chain for one RPC: its method `path`, its `metadata` (request
    /// headers) and the caller's random source, faults counted in `active_faults` (one
    /// per process, A33).
    pub fn on_rpc<'a, M, R>(
        &self,
        path: &str,
        metadata: &M,
        rng: &mut R,
        active_faults: &'a ActiveFaults,
    ) -> RpcFilters<'a>
    where
        M: Metadata + ?Sized,
        R: RandomSource + ?Sized,
    {
        let mut out = RpcFilters::default();
        for filter in self.filters.iter() {
            match filter {
                ClientFilter::Fault(config) => {
                    if let Some(fault) = config.decide(metadata, rng, active_faults) {
                        match &mut out.fault {
                            Some(earlier) => earlier.merge(fault),
                            None => out.fault = Some(fault),
                        }
                    }
                }
                // The first session filter whose cookie path matches decides.
                ClientFilter::StatefulSession(cookie) if out.session.is_none() => {
                    out.session = cookie.session(path, metadata);
                }
                ClientFilter::StatefulSession(_) => {}
            }
        }
        out
    }
}

/// The client filter for `filter` under its most specific override; `None` when the
/// filter runs nothing on clients or the override disables it.
fn effective(
    filter: &HttpFilter,
    most_specific: Option<&FilterConfigOverride>,
) -> Option<ClientFilter> {
    if most_specific.is_some_and(|o| o.disabled) {
        return None;
    }
    let override_config = most_specific.and_then(|o| o.config.as_ref());
    match (&filter.config, override_config) {
        (HttpFilterConfig::Fault(_), Some(FilterOverride::Fault(over))) => {
            Some(ClientFilter::Fault(over.clone()))
        }
        (HttpFilterConfig::Fault(top), _) => Some(ClientFilter::Fault(top.clone())),
        (HttpFilterConfig::StatefulSession(top), over) => {
            let config = match over {
                Some(FilterOverride::StatefulSession(StatefulSessionOverride::Disabled)) => {
                    return None;
                }
                Some(FilterOverride::StatefulSession(StatefulSessionOverride::Config(c))) => c,
                _ => top,
            };
            config.cookie.clone().map(ClientFilter::StatefulSession)
        }
        _ => None,
    }
}

/// What a client's filters decided for one RPC. The default (no filter acted) is what
/// a route without filters gets; it holds nothing and costs nothing.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct RpcFilters<'a> {
    /// Fault injection: delay, then abort; holds the RPC's place in the process's
    /// active faults until dropped.
    pub fault: Option<InjectedFault<'a>>,
    /// Stateful session affinity: the host (and cluster) the RPC's cookie asks for,
    /// and the response's cookie.
    pub session: Option<SessionAffinity>,
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod session_tests;
