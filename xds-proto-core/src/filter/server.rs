//! Server HTTP filters (A39 on xDS-enabled servers, A36): the filters a server runs for
//! each route of a filter chain, their overrides merged as A39 says (route, else
//! virtual host, else the filter's top-level config) once, when the chain's route
//! configuration is applied ([`RouteFilters::build`]), and the per-RPC decision
//! ([`ServerFilters::authorize`]). RBAC (A41) is the one server filter gRPC runs; a
//! route whose chain enforces nothing has no [`ServerFilters`], so its RPCs pay nothing.

use std::sync::Arc;

use super::rbac::{AuditLogger, RbacConfig, RbacPerRoute, RbacRequest};
use super::{FilterOverride, HttpFilterConfig, OverrideScopes, most_specific};
use crate::resource::listener::HttpFilter;
use crate::resource::route::{FilterConfigOverride, RouteConfigResource};

/// One filter a server runs for a route, with its effective config.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServerFilter {
    /// RBAC (A41).
    Rbac(RbacFilter),
}

/// An RBAC filter instance with the config that applies to one route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RbacFilter {
    /// The filter instance name (the audit event's policy name, as C-core).
    name: Arc<str>,
    config: EffectiveRbac,
}

/// Where a route's RBAC config comes from: shared, never copied per route.
#[derive(Clone, Debug, PartialEq, Eq)]
enum EffectiveRbac {
    /// The HCM's `http_filters` entry.
    Filter(Arc<RbacConfig>),
    /// The most specific `RBACPerRoute` (one with `rbac`).
    Route(Arc<RbacPerRoute>),
}

impl RbacFilter {
    /// The filter instance name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The config the route's RPCs are evaluated against.
    pub fn config(&self) -> &RbacConfig {
        match &self.config {
            EffectiveRbac::Filter(config) => config,
            EffectiveRbac::Route(per_route) => per_route
                .config()
                .expect("a disabling RBACPerRoute is never kept"),
        }
    }
}

/// The server filters of one route, in chain order; at least one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerFilters {
    filters: Box<[ServerFilter]>,
}

impl ServerFilters {
    /// The filters `http_filters` runs under `scopes` (`scopes[0]`, a weighted
    /// cluster's, is for clients and normally `None` here); `None` when the chain
    /// enforces nothing for the route (no RBAC filter, each disabled by an override, or
    /// one whose config enforces nothing: no `rules`, or `LOG`).
    pub fn build(
        http_filters: &[HttpFilter],
        scopes: OverrideScopes<'_>,
    ) -> Option<Arc<ServerFilters>> {
        let filters: Vec<ServerFilter> = http_filters
            .iter()
            .filter_map(|filter| effective(filter, most_specific(&scopes, &filter.name)))
            .collect();
        (!filters.is_empty()).then(|| {
            Arc::new(ServerFilters {
                filters: filters.into_boxed_slice(),
            })
        })
    }

    /// The filters, in chain order.
    pub fn filters(&self) -> &[ServerFilter] {
        &self.filters
    }

    /// Runs the filters on one RPC in chain order, the first refusal deciding; audited
    /// decisions go to `logger` (A59).
    ///
    /// # Errors
    /// The PERMISSION_DENIED message of a refused RPC
    /// ([`RbacDecision::denial_message`](super::rbac::RbacDecision::denial_message)).
    pub fn authorize(
        &self,
        request: &RbacRequest<'_>,
        logger: &mut dyn AuditLogger,
    ) -> Result<(), String> {
        for filter in self.filters.iter() {
            match filter {
                ServerFilter::Rbac(rbac) => {
                    let decision = rbac.config().authorize(request, rbac.name(), logger);
                    if let Some(message) = decision.denial_message() {
                        return Err(message);
                    }
                }
            }
        }
        Ok(())
    }
}

/// The server filter for `filter` under its most specific override; `None` when it
/// runs nothing on servers for the route.
fn effective(
    filter: &HttpFilter,
    most_specific: Option<&FilterConfigOverride>,
) -> Option<ServerFilter> {
    let HttpFilterConfig::Rbac(top) = &filter.config else {
        return None;
    };
    if most_specific.is_some_and(|o| o.disabled) {
        return None;
    }
    let config = match most_specific.and_then(|o| o.config.as_ref()) {
        // An RBACPerRoute without `rbac` disables the filter for the route (A41).
        Some(FilterOverride::Rbac(per_route)) => {
            per_route.config()?;
            EffectiveRbac::Route(per_route.clone())
        }
        _ => EffectiveRbac::Filter(top.clone()),
    };
    let rbac = RbacFilter {
        name: filter.name.as_str().into(),
        config,
    };
    // A config that enforces nothing audits nothing either: skip it.
    rbac.config().rules()?;
    Some(ServerFilter::Rbac(rbac))
}

/// The server filters of every route of one route configuration under one chain's
/// `http_filters`, by virtual host and route index (as [`route_rpc`] reports them).
/// Built once per applied route configuration.
///
/// [`route_rpc`]: crate::server::route_rpc
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RouteFilters {
    /// Empty when the chain has no server filter.
    by_host: Box<[HostFilters]>,
}

/// The server filters of one virtual host's routes, by route index.
type HostFilters = Box<[Option<Arc<ServerFilters>>]>;

impl RouteFilters {
    /// The filters `http_filters` runs for each route of `routes`.
    pub fn build(http_filters: &[HttpFilter], routes: &RouteConfigResource) -> RouteFilters {
        let has_server_filter = http_filters
            .iter()
            .any(|f| matches!(f.config, HttpFilterConfig::Rbac(_)));
        if !has_server_filter {
            return RouteFilters::default();
        }
        let by_host = routes
            .virtual_hosts
            .iter()
            .map(|host| {
                host.routes
                    .iter()
                    .map(|route| {
                        let scopes = [
                            None,
                            Some(&route.typed_per_filter_config),
                            Some(&host.typed_per_filter_config),
                        ];
                        ServerFilters::build(http_filters, scopes)
                    })
                    .collect()
            })
            .collect();
        RouteFilters { by_host }
    }

    /// The filters of route `route` of virtual host `virtual_host`; `None` when it
    /// runs none.
    pub fn for_route(&self, virtual_host: usize, route: usize) -> Option<&ServerFilters> {
        self.by_host.get(virtual_host)?.get(route)?.as_deref()
    }
}
