//! The xds-proto xDS client on tokio.
//!
//! A [`Client`] is a cloneable, `Send + Sync` handle to a driver task that owns the
//! sans-IO core ([`xds_proto_core::XdsClient`]). Watches are typed streams:
//!
//! ```no_run
//! use futures::StreamExt;
//! use xds_adapter_tokio::{Cds, Client, WatchUpdate};
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let client = Client::from_bootstrap_json(r#"{
//!     "xds_servers": [{"server_uri": "127.0.0.1:18000", "channel_creds": [{"type": "insecure"}]}],
//!     "node": {"id": "my-node"}
//! }"#)?;
//! let mut clusters = client.watch::<Cds>("my-cluster").await?;
//! while let Some(update) = clusters.next().await {
//!     match update {
//!         WatchUpdate::Changed(Ok(cluster)) => println!("cluster: {cluster:?}"),
//!         WatchUpdate::Changed(Err(e)) => println!("cluster unusable: {e}"),
//!         WatchUpdate::AmbientError(e) => println!("still using the last cluster: {e}"),
//!     }
//! }
//! client.shutdown().await;
//! # Ok(())
//! # }
//! ```
//!
//! Dropping a watch stream cancels the watch. One HTTP/2 connection per xDS server
//! carries the ADS stream (`StreamAggregatedResources`) through tonic; `tls` channel
//! credentials use rustls with the CA, certificate and key files the bootstrap names
//! (the system roots when it names no CA). Timers use `tokio::time`, so tests can run
//! the client with a paused clock. Logs and spans go through `tracing`: the
//! `xds_ads_stream` span carries the server and stream, `xds_watch` the type and
//! resource.
//!
//! **Per-target clients and CSDS (gRFC A71).** A [`ClientPool`] hands out one shared
//! [`Client`] per data-plane target ([`SERVER_TARGET`] for xDS-enabled servers), so
//! that fallback to a lower-priority server for one target never changes what another
//! target uses; every client of a pool shares its one parsed bootstrap. [`CsdsServer`]
//! serves the pool's `envoy.service.status.v3.ClientStatusDiscoveryService` over gRPC
//! (`FetchClientStatus` and `StreamClientStatus`), one `ClientConfig` per client with
//! `client_scope` set to its target:
//!
//! ```no_run
//! use xds_adapter_tokio::{Cds, ClientPool, CsdsServer};
//!
//! # async fn example(bootstrap_json: &str) -> Result<(), Box<dyn std::error::Error>> {
//! let pool = ClientPool::from_bootstrap_json(bootstrap_json)?;
//! let client = pool.get_or_create("xds:///my-service");
//! let _clusters = client.watch::<Cds>("my-cluster").await?;
//! let csds = CsdsServer::serve(pool.clone(), "127.0.0.1:0").await?;
//! println!("CSDS on {}", csds.local_addr());
//! # Ok(())
//! # }
//! ```
//!
//! **Resolved configurations (gRFC A74, A31).** [`Client::watch_config`] follows a
//! target from its listener through its route configuration and clusters (aggregate
//! ones included) to their endpoints, inside the client's driver, and yields one
//! consistent [`XdsConfig`] at a time with the [`ConfigSelector`] that routes RPCs by
//! it. A pick's [`Selection`] holds its cluster: a cluster the routes drop stays watched
//! and in the config until the last RPC using it lets go (A31's two-step removal), and
//! [`ConfigStream::hold_cluster`] holds one outside the routes. A slow reader gets the
//! newest config; dropping the stream cancels its watches.
//!
//! ```no_run
//! use futures::StreamExt;
//! use xds_adapter_tokio::Client;
//! use xds_adapter_tokio::xds_proto_core::selector::Seeded;
//!
//! # async fn example(client: Client, random: u64) -> Result<(), xds_adapter_tokio::Error> {
//! let mut configs = client.watch_config("my-service.example.com").await?;
//! while let Some(update) = configs.next().await {
//!     let update = match update {
//!         Ok(update) => update,
//!         Err(e) => {
//!             println!("RPCs fail: {e}");
//!             continue;
//!         }
//!     };
//!     println!("{} clusters", update.config.clusters.len());
//!     let headers = [("x-user", "alice")];
//!     match update.selector.select("/pkg.Service/Method", &headers, &mut Seeded(random)) {
//!         // Keep `pick` until the RPC is committed: it holds the cluster.
//!         Ok(pick) => println!("route {} → {:?}", pick.route_index(), pick.cluster()),
//!         Err(status) => println!("the RPC fails: {status}"),
//!     }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! **`xds:///` channels for tonic.** [`XdsChannel`] is a channel to an `xds:` target
//! that tonic's clients take like any other: it follows the target's configuration
//! through the pool's client for the target, routes each RPC by its path and headers
//! (A31), applies the route's timeout and retry policy (A44), and load-balances over
//! the cluster's endpoints with the core's sans-IO balancer (one HTTP/2 connection per
//! endpoint in use). `XdsChannel::new(target)` uses the process's default pool (the
//! bootstrap from `GRPC_XDS_BOOTSTRAP`); the builder takes a pool or a client:
//!
//! ```no_run
//! use xds_adapter_tokio::{ClientPool, XdsChannel};
//! use xds_test_server::echo::{call_echo, echo_request};
//!
//! # async fn example(pool: ClientPool) -> Result<(), Box<dyn std::error::Error>> {
//! let channel = XdsChannel::builder("xds:///echo.example.com").pool(&pool).build()?;
//! // A generated client takes it as it is: `EchoClient::new(channel.clone())`.
//! let reply = call_echo(channel.clone(), echo_request("hello")).await?;
//! println!("answered by {}", reply.backend);
//! # Ok(())
//! # }
//! ```
//!
//! **Metrics (gRFC A78).** Every client exports the XdsClient metrics
//! (`grpc.xds_client.connected`, `server_failure`, `resource_updates_valid`,
//! `resource_updates_invalid` and `resources`, see [`metrics`]) through the
//! [`metrics`](https://docs.rs/metrics) facade: every 5 s
//! ([`ClientBuilder::metrics_interval`](xds_adapter_common::ClientBuilder::metrics_interval)),
//! once when it stops, and on [`Client::export_metrics`](xds_adapter_common::Client::export_metrics).
//! The `grpc.target` label is the client's pool target ([`SERVER_TARGET`] for
//! servers), or [`ClientBuilder::target`](xds_adapter_common::ClientBuilder::target)'s
//! for a client built alone. Nothing is recorded until the application installs a
//! recorder, for example Prometheus's through `metrics-exporter-prometheus`, before it
//! builds clients:
//!
//! ```ignore
//! metrics_exporter_prometheus::PrometheusBuilder::new()
//!     .with_http_listener(([127, 0, 0, 1], 9464))
//!     .install()?; // serves /metrics; dots in names become underscores
//! let pool = ClientPool::from_bootstrap_json(bootstrap_json)?;
//! ```
//!
//! All protocol decisions are the core's; the drive loop, the watch streams and the
//! transport are shared with the async-std adapter through `xds-adapter-common`.
//! This crate only supplies [`TokioRuntime`]: spawning, the clock, sleeping and TCP.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod csds;
pub mod server;

use std::io;
use std::sync::Arc;
use std::time::Duration;

pub use csds::{CSDS_SHUTDOWN_GRACE, CsdsServer};
pub use server::{XdsServer, XdsServerBuilder};
use tokio_util::compat::{Compat, TokioAsyncReadCompatExt};
use xds_adapter_common::BoxFuture;
pub use xds_adapter_common::csds::{
    CSDS_SERVICE_NAME, FETCH_CLIENT_STATUS_METHOD, STREAM_CLIENT_STATUS_METHOD,
};
pub use xds_adapter_common::exports::*;
use xds_proto_core::Instant;

/// The xDS client on tokio. See the crate documentation.
pub type Client = xds_adapter_common::Client<TokioRuntime>;

/// Configures a [`Client`] (`Client::builder(bootstrap)...build()`) or a
/// [`ClientPool`] (`...build_pool()`).
pub type ClientBuilder = xds_adapter_common::ClientBuilder<TokioRuntime>;

/// A gRPC channel to an `xds:` target for tonic (`XdsChannel::new("xds:///my-service")`):
/// see [`xds_adapter_common::XdsChannel`].
pub type XdsChannel = xds_adapter_common::XdsChannel<TokioRuntime>;

/// Configures an [`XdsChannel`]: see [`xds_adapter_common::XdsChannelBuilder`].
pub type XdsChannelBuilder = xds_adapter_common::XdsChannelBuilder<TokioRuntime>;

/// Per-target clients on tokio (gRFC A71): see [`xds_adapter_common::ClientPool`].
pub type ClientPool = xds_adapter_common::ClientPool<TokioRuntime>;

/// The CSDS gRPC service of a [`ClientPool`], as a tower service (to add to a tonic
/// router); [`CsdsServer`] serves it on its own listener.
pub type CsdsService = xds_adapter_common::CsdsService<TokioRuntime>;

/// The ORCA out-of-band `OpenRcaService` (gRFC A51) of a [`ServerMetricRecorder`],
/// timed on tokio: see [`xds_adapter_common::orca::OrcaService`].
pub type OrcaService = xds_adapter_common::orca::OrcaService<TokioRuntime>;

/// The tokio side of the shared client: a runtime handle and the clock origin.
#[derive(Clone, Debug)]
pub struct TokioRuntime {
    handle: tokio::runtime::Handle,
    origin: Arc<tokio::time::Instant>,
}

impl TokioRuntime {
    /// Runs on this runtime. The clock origin is taken now, so call it from inside the
    /// runtime when its clock is paused.
    pub fn new(handle: tokio::runtime::Handle) -> TokioRuntime {
        TokioRuntime {
            handle,
            origin: Arc::new(tokio::time::Instant::now()),
        }
    }
}

impl Runtime for TokioRuntime {
    type TcpStream = Compat<tokio::net::TcpStream>;

    fn current() -> Result<TokioRuntime, String> {
        tokio::runtime::Handle::try_current()
            .map(TokioRuntime::new)
            .map_err(|e| format!("the tokio xDS client must be built inside a tokio runtime ({e})"))
    }

    fn spawn(&self, task: BoxFuture<()>) {
        self.handle.spawn(task);
    }

    fn now(&self) -> Instant {
        let elapsed = tokio::time::Instant::now().saturating_duration_since(*self.origin);
        Instant::from_nanos(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX))
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<()> {
        Box::pin(tokio::time::sleep(duration))
    }

    fn connect_tcp(&self, host: &str, port: u16) -> BoxFuture<io::Result<Self::TcpStream>> {
        let host = host.to_string();
        Box::pin(async move {
            let tcp = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
            tcp.set_nodelay(true)?;
            Ok(tcp.compat())
        })
    }
}
