//! The gRFC A78 XdsClient metrics, as the core keeps them.
//!
//! The core counts (server failures, valid and invalid resource updates) and knows the
//! state behind the gauges (connected servers, resources by cache state); it exports
//! nothing. [`XdsClient::metrics`](crate::XdsClient::metrics) returns a snapshot with
//! the A78 names, label values and totals; an adapter adds the `grpc.target` label (the
//! client's target, [`SERVER_TARGET`](crate::pool::SERVER_TARGET) for servers) and hands
//! the figures to a metrics facade. Counters are totals since the client was created, so
//! an exporter sets them absolutely instead of adding deltas.

use std::sync::Arc;

/// Metric names (gRFC A78).
pub mod names {
    /// Gauge: whether the client has a working ADS stream to the server (A57: 0 after a
    /// connectivity failure or a stream that ended without a response, 1 from the first
    /// response on a stream).
    pub const CONNECTED: &str = "grpc.xds_client.connected";
    /// Counter: the server went from healthy to unhealthy.
    pub const SERVER_FAILURE: &str = "grpc.xds_client.server_failure";
    /// Counter: resources received that were valid (also when unchanged).
    pub const RESOURCE_UPDATES_VALID: &str = "grpc.xds_client.resource_updates_valid";
    /// Counter: resources received that were invalid.
    pub const RESOURCE_UPDATES_INVALID: &str = "grpc.xds_client.resource_updates_invalid";
    /// Gauge: the number of resources, by authority, type and cache state.
    pub const RESOURCES: &str = "grpc.xds_client.resources";
}

/// Label keys (gRFC A78).
pub mod labels {
    /// The data-plane target of the client (`#server` for xDS-enabled servers).
    pub const TARGET: &str = "grpc.target";
    /// The xDS server's URI.
    pub const SERVER: &str = "grpc.xds.server";
    /// The xDS authority; [`OLD_STYLE_AUTHORITY`](super::OLD_STYLE_AUTHORITY) for
    /// names that are not `xdstp://`.
    pub const AUTHORITY: &str = "grpc.xds.authority";
    /// The resource type, e.g. `envoy.config.listener.v3.Listener`.
    pub const RESOURCE_TYPE: &str = "grpc.xds.resource_type";
    /// The resource's [`CacheState`](super::CacheState).
    pub const CACHE_STATE: &str = "grpc.xds.cache_state";
}

/// The `grpc.xds.authority` value of resources with old-style (non-`xdstp`) names, as
/// gRPC C-core reports it.
pub const OLD_STYLE_AUTHORITY: &str = "#old";

/// The `grpc.xds.cache_state` of a resource (A78, with A88's `received_error` values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum CacheState {
    /// Subscribed; nothing received yet.
    Requested,
    /// Known not to exist, nothing cached.
    DoesNotExist,
    /// The server no longer sends it, and the cached value is kept.
    DoesNotExistButCached,
    /// Received and valid.
    Acked,
    /// The last copy received was invalid, and nothing is cached.
    Nacked,
    /// The last copy received was invalid; the cached value is the last good one.
    NackedButCached,
    /// The server reported an error for it (TP3), nothing cached.
    ReceivedError,
    /// The server reported an error for it; the cached value is kept.
    ReceivedErrorButCached,
    /// The does-not-exist timer fired on a server with `resource_timer_is_transient_error`.
    Timeout,
}

impl CacheState {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheState::Requested => "requested",
            CacheState::DoesNotExist => "does_not_exist",
            CacheState::DoesNotExistButCached => "does_not_exist_but_cached",
            CacheState::Acked => "acked",
            CacheState::Nacked => "nacked",
            CacheState::NackedButCached => "nacked_but_cached",
            CacheState::ReceivedError => "received_error",
            CacheState::ReceivedErrorButCached => "received_error_but_cached",
            CacheState::Timeout => "timeout",
        }
    }
}

/// The figures of one xDS server the client has used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerMetrics {
    /// `grpc.xds.server`: the server's URI.
    pub server: Arc<str>,
    /// `grpc.xds_client.connected`.
    pub connected: bool,
    /// `grpc.xds_client.server_failure`, total.
    pub failures: u64,
    /// Resource updates from this server, by type (types with none are left out).
    pub updates: Vec<TypeUpdates>,
}

/// `grpc.xds_client.resource_updates_valid` and `_invalid` of one server and type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypeUpdates {
    /// `grpc.xds.resource_type`.
    pub resource_type: &'static str,
    /// Valid resources received, total.
    pub valid: u64,
    /// Invalid resources received, total.
    pub invalid: u64,
}

/// One `grpc.xds_client.resources` gauge value.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ResourceCount {
    /// `grpc.xds.authority`.
    pub authority: String,
    /// `grpc.xds.resource_type`.
    pub resource_type: &'static str,
    /// `grpc.xds.cache_state`.
    pub cache_state: CacheState,
    /// How many resources are in that state.
    pub count: u64,
}

/// A snapshot of one client's A78 metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct XdsClientMetrics {
    /// Per server, in the order the client first used them.
    pub servers: Vec<ServerMetrics>,
    /// The resources gauge, sorted by authority, type and state; states with no
    /// resource are left out.
    pub resources: Vec<ResourceCount>,
}

impl XdsClientMetrics {
    /// The figures of the server with this URI.
    pub fn server(&self, uri: &str) -> Option<&ServerMetrics> {
        self.servers.iter().find(|s| &*s.server == uri)
    }

    /// The resources gauge for one authority, type (as a label value) and state; 0 when
    /// absent.
    pub fn resource_count(&self, authority: &str, resource_type: &str, state: CacheState) -> u64 {
        self.resources
            .iter()
            .find(|r| {
                r.authority == authority
                    && r.resource_type == resource_type
                    && r.cache_state == state
            })
            .map_or(0, |r| r.count)
    }
}

impl ServerMetrics {
    /// The updates of one type (as a label value): `(valid, invalid)`, zeros when none.
    pub fn updates_of(&self, resource_type: &str) -> (u64, u64) {
        self.updates
            .iter()
            .find(|u| u.resource_type == resource_type)
            .map_or((0, 0), |u| (u.valid, u.invalid))
    }
}

/// The `grpc.xds.resource_type` value of a type URL: the message name without the
/// `type.googleapis.com/` prefix, as gRPC C-core reports it.
pub fn resource_type_label(type_url: &str) -> &str {
    type_url.rsplit('/').next().unwrap_or(type_url)
}
