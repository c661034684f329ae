//! Routing an RPC on a server (gRFC A36): the virtual host by `:authority`, the route by
//! path and headers as on clients (A28). The RPC then goes through the chain's HTTP
//! filters, and at the end of the chain only a route with `non_forwarding_action` serves
//! it: [`RoutedRpc::finish`] says UNAVAILABLE for any other action.

use std::fmt;

use crate::resource::route::{Route, RouteAction, RouteConfigResource, VirtualHost};
use crate::selector::{Metadata, RandomSource, route_matches, select_virtual_host};

/// Why a server refuses an RPC; the RPC fails with UNAVAILABLE and this message.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RpcRefusal {
    /// The chain's RDS resource is missing, NACKed without a previous good version, or
    /// unavailable (the reason).
    NoRouteConfiguration(String),
    /// No virtual host's domains match the RPC's `:authority`.
    NoVirtualHost,
    /// A virtual host matched but none of its routes.
    NoRoute,
    /// The matched route's action is not `non_forwarding_action`.
    NotNonForwarding,
}

impl fmt::Display for RpcRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RpcRefusal::NoRouteConfiguration(reason) => {
                write!(f, "the filter chain has no route configuration: {reason}")
            }
            RpcRefusal::NoVirtualHost => {
                f.write_str("the incoming RPC did not match a configured virtual host")
            }
            RpcRefusal::NoRoute => {
                f.write_str("the incoming RPC matched a virtual host but not a route")
            }
            RpcRefusal::NotNonForwarding => f.write_str(
                "the incoming RPC matched a route that is not of action type non_forwarding_action",
            ),
        }
    }
}

impl std::error::Error for RpcRefusal {}

/// An RPC matched to its virtual host and route: what the chain's HTTP filters read
/// (their per-route overrides) before [`finish`](Self::finish) decides.
#[derive(Clone, Copy, Debug)]
pub struct RoutedRpc<'a> {
    /// The matched virtual host.
    pub virtual_host: &'a VirtualHost,
    /// The matched route.
    pub route: &'a Route,
    /// The virtual host's index in the route configuration.
    pub virtual_host_index: usize,
    /// The route's index in its virtual host.
    pub route_index: usize,
}

impl RoutedRpc<'_> {
    /// At the end of the filter chain: `Ok` serves the RPC (the route has
    /// `non_forwarding_action`), otherwise the RPC fails UNAVAILABLE.
    ///
    /// # Errors
    /// [`RpcRefusal::NotNonForwarding`].
    pub fn finish(&self) -> Result<(), RpcRefusal> {
        match self.route.action {
            RouteAction::NonForwarding => Ok(()),
            _ => Err(RpcRefusal::NotNonForwarding),
        }
    }
}

/// The virtual host and route an RPC to `authority` and `path` with `metadata` takes in
/// `routes`. `rng` draws a route's `runtime_fraction`.
///
/// # Errors
/// [`RpcRefusal::NoVirtualHost`] or [`RpcRefusal::NoRoute`]: the RPC fails UNAVAILABLE.
pub fn route_rpc<'a, M: Metadata + ?Sized, R: RandomSource + ?Sized>(
    routes: &'a RouteConfigResource,
    authority: &str,
    path: &str,
    metadata: &M,
    rng: &mut R,
) -> Result<RoutedRpc<'a>, RpcRefusal> {
    let virtual_host_index =
        select_virtual_host(&routes.virtual_hosts, authority).ok_or(RpcRefusal::NoVirtualHost)?;
    let host = &routes.virtual_hosts[virtual_host_index];
    let route_index = host
        .routes
        .iter()
        .position(|r| route_matches(&r.matcher, path, metadata, rng))
        .ok_or(RpcRefusal::NoRoute)?;
    Ok(RoutedRpc {
        virtual_host: host,
        route: &host.routes[route_index],
        virtual_host_index,
        route_index,
    })
}
