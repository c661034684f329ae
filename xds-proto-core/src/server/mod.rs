//! xDS-enabled servers (gRFC A36), sans-IO: the Listener a server subscribes to
//! ([`server_listener_name`]), the filter chain each accepted connection gets
//! ([`select_filter_chain`]), the route each RPC takes ([`route_rpc`]) and the serving
//! mode a runtime observes ([`ServingState`]). The listener itself is validated in
//! `resource/listener/server.rs`. Tests: `tests/tests/server.rs`.

mod name;
mod routing;
mod select;
mod serving;

pub use name::{ListenerNameError, listener_name_from_template, server_listener_name};
pub use routing::{RoutedRpc, RpcRefusal, route_rpc};
pub use select::{ConnectionAddrs, select_filter_chain};
pub use serving::{ServingConfig, ServingEvent, ServingMode, ServingState};
