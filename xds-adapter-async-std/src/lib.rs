//! The xds-proto xDS client on async-std.
//!
//! **async-std is discontinued upstream**: its maintainers stopped development and
//! recommend [smol](https://docs.rs/smol) instead. New code should use smol (whose
//! `Async<TcpStream>` speaks the same `futures-io` traits this adapter is built on)
//! or tokio (`xds-adapter-tokio`). This crate is kept for programs that still run on
//! async-std.
//!
//! The public API is the tokio adapter's: a cloneable, `Send + Sync` [`Client`] owning
//! a driver task, typed watch streams that cancel on drop, channel events, CSDS and a
//! graceful shutdown, and a [`ClientPool`] of per-target clients (gRFC A71) whose
//! [`CsdsService`] any HTTP/2 server can serve (the tokio adapter has a ready server). tonic's gRPC client runs on the async-std executor over an
//! async-std `TcpStream` (TLS through rustls, HTTP/2 through hyper, both over
//! `futures-io`). tokio's crates may be compiled in as libraries, but no tokio runtime
//! is started or needed: the core drives every deadline through async-std's timer.
//!
//! ```no_run
//! use futures::StreamExt;
//! use xds_adapter_async_std::{Client, Lds};
//!
//! # async fn example() -> Result<(), xds_adapter_async_std::Error> {
//! let client = Client::from_bootstrap_json(r#"{
//!     "xds_servers": [{"server_uri": "127.0.0.1:18000", "channel_creds": [{"type": "insecure"}]}],
//!     "node": {"id": "my-node"}
//! }"#)?;
//! let mut listener = client.watch::<Lds>("my-listener").await?;
//! if let Some(update) = listener.next().await {
//!     println!("{update:?}");
//! }
//! client.shutdown().await;
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
//! use xds_adapter_async_std::Client;
//! use xds_adapter_async_std::xds_proto_core::selector::Seeded;
//!
//! # async fn example(client: Client, random: u64) -> Result<(), xds_adapter_async_std::Error> {
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

#![warn(missing_docs)]
#![forbid(unsafe_code)]

use std::io;
use std::sync::Arc;
use std::time::Duration;

use xds_adapter_common::BoxFuture;
pub use xds_adapter_common::exports::*;

pub mod server;
pub use server::{XdsServer, XdsServerBuilder};
use xds_proto_core::Instant;

/// The xDS client on async-std. See the crate documentation.
pub type Client = xds_adapter_common::Client<AsyncStdRuntime>;

/// Configures a [`Client`] (`Client::builder(bootstrap)...build()`) or a
/// [`ClientPool`] (`...build_pool()`).
pub type ClientBuilder = xds_adapter_common::ClientBuilder<AsyncStdRuntime>;

/// A gRPC channel to an `xds:` target for tonic (`XdsChannel::new("xds:///my-service")`):
/// see [`xds_adapter_common::XdsChannel`].
pub type XdsChannel = xds_adapter_common::XdsChannel<AsyncStdRuntime>;

/// Configures an [`XdsChannel`]: see [`xds_adapter_common::XdsChannelBuilder`].
pub type XdsChannelBuilder = xds_adapter_common::XdsChannelBuilder<AsyncStdRuntime>;

/// Per-target clients on async-std (gRFC A71): one shared [`Client`] per data-plane
/// target ([`SERVER_TARGET`] for xDS-enabled servers), all on one parsed bootstrap.
/// See [`xds_adapter_common::ClientPool`].
pub type ClientPool = xds_adapter_common::ClientPool<AsyncStdRuntime>;

/// The CSDS gRPC service of a [`ClientPool`], as a tower service over HTTP/2 requests,
/// for any HTTP/2 server that runs on async-std.
pub type CsdsService = xds_adapter_common::CsdsService<AsyncStdRuntime>;

/// The ORCA out-of-band `OpenRcaService` (gRFC A51) of a [`ServerMetricRecorder`],
/// timed on async-std: see [`xds_adapter_common::orca::OrcaService`].
pub type OrcaService = xds_adapter_common::orca::OrcaService<AsyncStdRuntime>;

/// The async-std side of the shared client: its global executor, the monotonic clock
/// and async-std's TCP.
#[derive(Clone, Debug)]
pub struct AsyncStdRuntime {
    origin: Arc<std::time::Instant>,
}

impl Default for AsyncStdRuntime {
    fn default() -> AsyncStdRuntime {
        AsyncStdRuntime {
            origin: Arc::new(std::time::Instant::now()),
        }
    }
}

impl Runtime for AsyncStdRuntime {
    type TcpStream = async_std::net::TcpStream;

    fn current() -> Result<AsyncStdRuntime, String> {
        Ok(AsyncStdRuntime::default())
    }

    fn spawn(&self, task: BoxFuture<()>) {
        async_std::task::spawn(task);
    }

    fn now(&self) -> Instant {
        let elapsed = self.origin.elapsed();
        Instant::from_nanos(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX))
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<()> {
        Box::pin(async_std::task::sleep(duration))
    }

    fn connect_tcp(&self, host: &str, port: u16) -> BoxFuture<io::Result<Self::TcpStream>> {
        let host = host.to_string();
        Box::pin(async move {
            let tcp = async_std::net::TcpStream::connect((host.as_str(), port)).await?;
            tcp.set_nodelay(true)?;
            Ok(tcp)
        })
    }
}
