//! Runtime-agnostic plumbing shared by the xds-proto adapters.
//!
//! The protocol lives in [`xds_proto_core::XdsClient`], a sans-IO state machine. This
//! crate connects it to real ADS streams without tying itself to a runtime:
//!
//! - the **drive loop** ([`Client`], `driver`): one task owns the `XdsClient`; handles
//!   send it commands through a channel; after every input it drains
//!   `poll_action()` and then sleeps until `poll_timeout()` on the runtime's timer;
//! - the **client pool** ([`ClientPool`], gRFC A71): one shared [`Client`] per
//!   data-plane target ([`SERVER_TARGET`] for xDS-enabled servers), all on one parsed
//!   bootstrap, held weakly so that an unused target's client stops;
//! - **CSDS** ([`CsdsService`]): the `ClientStatusDiscoveryService` gRPC service over a
//!   pool, one `ClientConfig` per client with `client_scope` set to its target; each
//!   driver answers for its own client, so a CSDS call never blocks a driver;
//! - the **watch streams** ([`WatchStream`], [`RawWatchStream`]): a typed
//!   `watch::<Cds>(name)` returns a `Stream` of [`WatchUpdate`]s, and dropping it
//!   cancels the watch;
//! - the **config streams** ([`ConfigStream`]): `watch_config(listener)` runs gRFC A74's
//!   dependency manager inside the driver and yields each resolved `XdsConfig` with
//!   its gRFC A31 config selector ([`ConfigUpdate`]); dropping it cancels its watches;
//! - the **ADS transport** (`transport`, `ads`): one HTTP/2 connection per server
//!   (TCP, then rustls for `tls` channel credentials, then the HTTP/2 handshake up
//!   to the server's SETTINGS),
//!   carrying `StreamAggregatedResources` (or `DeltaAggregatedResources` to a server
//!   whose bootstrap entry asks for delta) through tonic's generic client with a codec
//!   that encodes the core's `AdsRequest` or `DeltaRequest` (names shared, not copied)
//!   and hands responses over as raw bytes, so nothing is decoded twice.
//!
//! - the **`xds:///` channel** ([`XdsChannel`]): a tower service tonic's clients take
//!   as a channel; per RPC it routes with the config stream's selector (A31), applies
//!   the route's timeout and retry policy (A44), and picks an endpoint with the core's
//!   sans-IO load balancer (`xds_proto_core::lb`), over one HTTP/2 connection per
//!   endpoint in use, made as the ADS connections are (READY at the server's
//!   SETTINGS);
//! - **metrics** ([`metrics`]): the core's gRFC A78 XdsClient metrics, exported
//!   through the `metrics` facade on an interval, on demand and when a client stops;
//! - **ORCA** (gRFC A51): the channel reads per-call load reports from the
//!   `endpoint-load-metrics-bin` trailer and runs out-of-band `StreamCoreMetrics` calls
//!   when weighted round robin (A58) asks; for servers, [`orca`] has the recorders, a
//!   tower layer attaching per-call reports and the `OpenRcaService`.
//!
//! What a runtime must provide is the small [`Runtime`] trait: spawn a task, read the
//! clock, sleep, and open a TCP connection. `xds-adapter-tokio` and
//! `xds-adapter-async-std` are thin implementations of it.
//!
//! Transport events follow the core's vocabulary exactly:
//! - `StreamStarted` is reported when HTTP/2 first polls the request stream, which it
//!   does only once the stream is dispatched on an established connection (connected
//!   eagerly beforehand); response headers are not awaited, since many servers send
//!   them only with the first response;
//! - `RequestSent` is reported when tonic pulls a request from the request stream,
//!   not when the driver queues it;
//! - `ResponseReceived` carries the serialized `DiscoveryResponse` (on a delta stream
//!   the `DeltaDiscoveryResponse`) as it arrived;
//! - a failed connection attempt is a `ConnectivityFailure` with its reason, followed
//!   by `StreamClosed` (UNAVAILABLE) so that the core schedules its backoff; the end of
//!   an established stream is `StreamClosed` with the gRPC status it ended with.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod ads;
mod channel;
mod client;
mod config;
pub mod csds;
mod driver;
mod events;
pub mod exports;
mod frames;
pub mod handshake;
mod holds;
mod io;
pub mod metrics;
pub mod orca;
mod pool;
pub mod runtime;
pub mod security;
pub mod server;
mod stream_tasks;
mod tls;
pub mod transport;
mod watch;

pub use channel::{ResponseBody, XdsChannel, XdsChannelBuilder};
pub use client::{Client, ClientBuilder, Error};
pub use config::{ConfigResult, ConfigStream, ConfigUpdate};
pub use csds::CsdsService;
pub use events::{CHANNEL_EVENT_BUFFER, ChannelEventStream};
pub use events::{ChannelEvent, DeltaSent};
pub use io::HyperIo;
pub use pool::{ClientPool, SERVER_TARGET};
pub use runtime::{BoxFuture, Runtime};
pub use security::{CertificateProviders, FallbackCredentials, XdsServerCredentials};
pub use server::{XdsServer, XdsServerBuilder};
pub use transport::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_KEEPALIVE_INTERVAL, DEFAULT_KEEPALIVE_TIMEOUT,
    DEFAULT_MAX_RECEIVE_MESSAGE_SIZE, KeepaliveSettings, Target, TransportSettings,
};
pub use watch::{RawWatchStream, WatchStream, WatchUpdate};

use xds_proto_core::bootstrap::{Bootstrap, BootstrapError};

/// Loads the bootstrap the way gRPC does: the file named by `GRPC_XDS_BOOTSTRAP`,
/// else the JSON in `GRPC_XDS_BOOTSTRAP_CONFIG`.
///
/// # Errors
/// Neither variable set, an unreadable file, or an invalid bootstrap.
pub fn load_bootstrap_from_env() -> Result<Bootstrap, BootstrapError> {
    Bootstrap::from_env_with(
        |name| std::env::var(name).ok(),
        |path| std::fs::read_to_string(path),
    )
}

/// The gRPC method of the ADS stream.
pub const ADS_METHOD: &str =
    "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources";

/// The gRPC method of the delta (incremental) ADS stream, opened to a server whose
/// bootstrap entry says `"api_type": "AGGREGATED_DELTA_GRPC"`.
pub const DELTA_ADS_METHOD: &str =
    "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources";

/// The gRPC method of the LRS stream (load reporting, gRFC A27), opened on the
/// connection of the ADS stream to the same server.
pub const LRS_METHOD: &str = "/envoy.service.load_stats.v3.LoadReportingService/StreamLoadStats";
