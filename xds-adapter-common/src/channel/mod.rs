//! `xds:///` channels for tonic: [`XdsChannel`], a tower service of HTTP requests that
//! tonic's generated and generic clients take wherever they take a channel.
//!
//! A channel follows its target's resolved configuration through the shared
//! per-target [`Client`] (gRFC A74 config stream, A31 selector) and runs the core's
//! sans-IO load balancer on it. The parts:
//! - `balancer`: the shared state behind one lock (the core's `LoadBalancer`, the
//!   current selector, the subchannels' connections, queued picks, the seeded RNG);
//! - `subchannel`: one HTTP/2 connection per endpoint the balancer asks for, READY
//!   once the server's SETTINGS arrive, IDLE again at its GOAWAY or close;
//! - `call`: one RPC (route, deadline, picks, retries) and `retry` its A44 policy;
//! - `body`: the replayable request body and the response body that reports the
//!   call's end; `wire`: `grpc-timeout`, statuses and Trailers-Only responses;
//! - this module: the public handle, its builder and the driver task, which reads the
//!   config stream and runs the balancer's timers.

mod balancer;
mod body;
mod call;
mod connections;
mod orca;
mod retry;
mod security;
mod subchannel;
mod wire;

use std::any::{Any, TypeId};
use std::convert::Infallible;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::channel::mpsc::{self, UnboundedReceiver};
use futures::channel::oneshot;
use futures::{FutureExt, StreamExt};
use xds_proto_core::Instant;
use xds_proto_core::lb::{DEFAULT_FAILOVER_TIMEOUT, LbSettings, LoadBalancer};

pub use body::ResponseBody;

use self::balancer::{DriverEvent, Shared};
use self::security::EndpointCredentials;
use crate::client::{Client, Error};
use crate::pool::ClientPool;
use crate::runtime::{BoxFuture, Runtime};
use crate::security::{CertificateProviders, FallbackCredentials};
use crate::transport::TransportSettings;

/// Settings of one channel.
#[derive(Clone, Debug)]
pub(crate) struct ChannelSettings {
    pub(crate) wait_for_ready: bool,
    pub(crate) transport: TransportSettings,
    /// The channel's identity for `channel_id` hash policies (A42).
    pub(crate) channel_id: u64,
    /// How endpoints are dialled.
    pub(crate) credentials: EndpointCredentials,
}

/// A gRPC channel to an `xds:` target, for tonic. Cheap to clone (one reference
/// count); every clone is the same channel. The adapters name it for their runtime
/// (`xds_adapter_tokio::XdsChannel`), with an example.
///
/// It is a `tower::Service<http::Request<tonic::body::Body>>` whose responses carry a
/// [`ResponseBody`]: what tonic's generated clients (`MyClient::new(channel)`) and
/// its generic `tonic::client::Grpc` take. RPCs the channel ends itself (no route, a
/// failed pick, the deadline) get a Trailers-Only response with their status, so its
/// service error never occurs.
///
/// Per RPC it routes by the target's route configuration (A31: path and headers pick
/// the route and the cluster), applies the route's timeout capped by the
/// application's `grpc-timeout` as the deadline (DEADLINE_EXCEEDED when it passes),
/// retries by the route's retry policy (A44), retries transparently (A6, with or
/// without a policy, counted as no attempt) an attempt that never left the client and,
/// once, one the server refused unprocessed (REFUSED_STREAM, or above a GOAWAY's last
/// stream id), and picks an endpoint with the cluster's
/// load-balancing policy (the core's [`LoadBalancer`]: priorities, localities,
/// `round_robin`, `ring_hash`, `least_request`, `pick_first`, outlier detection,
/// circuit breaking). An RPC waits while no configuration has arrived or no endpoint
/// is ready (bounded by its deadline); a pick that fails ends the RPC with
/// UNAVAILABLE unless the channel is [`wait_for_ready`](XdsChannelBuilder::wait_for_ready).
/// One HTTP/2 connection is kept per endpoint in use; an endpoint is READY once its
/// server's HTTP/2 SETTINGS have arrived (one that accepts TCP and never speaks HTTP/2
/// stays CONNECTING until the connect timeout), and a connection the server retires
/// with GOAWAY takes no new RPCs (those on it finish). New configurations take effect
/// for new RPCs; RPCs in flight finish on what they picked, and their clusters stay
/// until they end.
///
/// **Credentials.** By default every endpoint is dialled in plaintext (h2c), whatever
/// the clusters' `transport_socket` says. With
/// [`xds_credentials`](XdsChannelBuilder::xds_credentials) (gRPC's `XdsCredentials`,
/// gRFC A29) an endpoint of a cluster with an `UpstreamTlsContext` is dialled with
/// rustls: the server's chain verified against the roots of the bootstrap's certificate
/// provider, then its SANs against the cluster's matchers (or A101's SNI), the
/// provider's identity presented for mTLS; other clusters use the fallback. A failed
/// handshake makes the RPC fail UNAVAILABLE with the cause ("certificate SANs do not
/// match", "unknown issuer", "certificate expired", ...). The channel's `Debug` shows
/// which credentials it has.
///
/// The channel stops (its driver ends, its connections close once idle) when its last
/// clone is dropped.
pub struct XdsChannel<R> {
    inner: Arc<ChannelInner<R>>,
}

struct ChannelInner<R> {
    shared: Arc<Shared<R>>,
    target: Arc<str>,
    authority: Arc<str>,
    /// Dropped with the last clone: the driver stops.
    _stop: oneshot::Sender<()>,
}

impl<R> Clone for XdsChannel<R> {
    fn clone(&self) -> Self {
        XdsChannel {
            inner: self.inner.clone(),
        }
    }
}

impl<R> fmt::Debug for XdsChannel<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("XdsChannel")
            .field("target", &self.inner.target)
            .field("credentials", &self.inner.shared.settings.credentials)
            .finish_non_exhaustive()
    }
}

impl<R: Runtime> XdsChannel<R> {
    /// A channel to `target` (`xds:///name` or `xds://authority/name`) on the process's
    /// default [`ClientPool`] (its bootstrap from `GRPC_XDS_BOOTSTRAP` or
    /// `GRPC_XDS_BOOTSTRAP_CONFIG`, loaded on first use; its clients run on the runtime
    /// of that first use), through the target's shared client.
    ///
    /// # Errors
    /// No bootstrap, an invalid one, a target that names no listener (A47), or no
    /// runtime.
    pub fn new(target: &str) -> Result<XdsChannel<R>, Error> {
        XdsChannel::builder(target).build()
    }

    /// A builder for a channel to `target`.
    pub fn builder(target: &str) -> XdsChannelBuilder<R> {
        XdsChannelBuilder {
            target: target.to_owned(),
            source: Source::DefaultPool,
            runtime: None,
            seed: None,
            filter_seed: None,
            wait_for_ready: false,
            transport: TransportSettings::endpoint_defaults(),
            failover_timeout: DEFAULT_FAILOVER_TIMEOUT,
            xds_credentials: None,
        }
    }

    /// The target.
    pub fn target(&self) -> &str {
        &self.inner.target
    }
}

/// Where a channel's xDS client comes from.
enum Source<R> {
    DefaultPool,
    Pool(ClientPool<R>),
    Client(Client<R>),
}

/// Configures an [`XdsChannel`].
pub struct XdsChannelBuilder<R> {
    target: String,
    source: Source<R>,
    runtime: Option<R>,
    seed: Option<u64>,
    filter_seed: Option<u64>,
    wait_for_ready: bool,
    transport: TransportSettings,
    failover_timeout: Duration,
    /// With xDS credentials: the fallback, and the providers if given.
    xds_credentials: Option<(FallbackCredentials, Option<CertificateProviders>)>,
}

impl<R> fmt::Debug for XdsChannelBuilder<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("XdsChannelBuilder")
            .field("target", &self.target)
            .field("seed", &self.seed)
            .field("filter_seed", &self.filter_seed)
            .field("wait_for_ready", &self.wait_for_ready)
            .field("transport", &self.transport)
            .field("failover_timeout", &self.failover_timeout)
            .field("xds_credentials", &self.xds_credentials)
            .finish_non_exhaustive()
    }
}

impl<R: Runtime> XdsChannelBuilder<R> {
    /// Uses the target's shared client from `pool` (gRFC A71: one client per target).
    pub fn pool(mut self, pool: &ClientPool<R>) -> Self {
        self.source = Source::Pool(pool.clone());
        self
    }

    /// Uses this client (its bootstrap's listener name templates name the listener).
    pub fn client(mut self, client: Client<R>) -> Self {
        self.source = Source::Client(client);
        self
    }

    /// Runs on this runtime (default: the calling context's).
    pub fn runtime(mut self, runtime: R) -> Self {
        self.runtime = Some(runtime);
        self
    }

    /// Seeds the channel's randomness (weighted-cluster and endpoint picks, retry
    /// jitter, the balancer's own draws): the same seed replays the same choices.
    /// Default: a random seed.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Seeds the HTTP filters' per-RPC draws (A39: fault percentages, A33) on a stream
    /// of their own, the core's [`Seeded`](xds_proto_core::selector::Seeded) from this
    /// number: the `n`th RPC that draws takes the stream's next numbers whatever the
    /// picks and retries drew, so a test can count its faults exactly. Default:
    /// derived from the [`seed`](Self::seed).
    pub fn filter_seed(mut self, seed: u64) -> Self {
        self.filter_seed = Some(seed);
        self
    }

    /// Makes RPCs wait for a ready endpoint instead of failing when the cluster is in
    /// TRANSIENT_FAILURE (gRPC's wait-for-ready), bounded by their deadline.
    pub fn wait_for_ready(mut self, wait: bool) -> Self {
        self.wait_for_ready = wait;
        self
    }

    /// Settings of the endpoint connections: the connect timeout (TCP and the
    /// server's HTTP/2 SETTINGS; at the deadline the endpoint is TRANSIENT_FAILURE),
    /// HTTP/2 keepalive and windows. Default:
    /// [`TransportSettings::endpoint_defaults`], with keepalive off as in gRPC's
    /// data-plane channels; start from it rather than from `Default` (the ADS
    /// defaults, keepalive on) to change one field.
    pub fn transport_settings(mut self, settings: TransportSettings) -> Self {
        self.transport = settings;
        self
    }

    /// How long a priority may stay CONNECTING (no endpoint READY yet, and not all in
    /// TRANSIENT_FAILURE) before the next priority is started: gRPC's priority
    /// failover timeout, [`DEFAULT_FAILOVER_TIMEOUT`] (10 s) by default.
    pub fn failover_timeout(mut self, timeout: Duration) -> Self {
        self.failover_timeout = timeout;
        self
    }

    /// Dials endpoints with xDS credentials (gRPC's `XdsCredentials`, gRFC A29): a
    /// cluster with an `UpstreamTlsContext` over TLS with the bootstrap's certificate
    /// providers (built when the channel is, `file_watcher` files reread every
    /// `refresh_interval`), any other cluster with `fallback`. A cluster update that
    /// changes the security config applies to new connections: a READY connection made
    /// with the old config takes no new RPCs (those on it finish) and is replaced.
    /// Without this, every endpoint is plaintext.
    pub fn xds_credentials(mut self, fallback: FallbackCredentials) -> Self {
        let providers = self.xds_credentials.and_then(|(_, p)| p);
        self.xds_credentials = Some((fallback, providers));
        self
    }

    /// xDS credentials (as [`xds_credentials`](Self::xds_credentials)) with these
    /// providers instead of ones built from the bootstrap: shared with other channels
    /// or a server, or a runtime's own plugins.
    pub fn xds_credentials_with(
        mut self,
        fallback: FallbackCredentials,
        providers: CertificateProviders,
    ) -> Self {
        self.xds_credentials = Some((fallback, Some(providers)));
        self
    }

    /// Starts the channel: its driver follows the target's configuration from now on;
    /// RPCs made before the first configuration arrives wait for it.
    ///
    /// # Errors
    /// No runtime; a target that names no listener (A47); with the default pool, no
    /// bootstrap or an invalid one; with xDS credentials, a certificate provider plugin
    /// the adapter cannot build.
    pub fn build(self) -> Result<XdsChannel<R>, Error> {
        let rt = match self.runtime {
            Some(rt) => rt,
            None => R::current().map_err(Error::NoRuntime)?,
        };
        let client = match self.source {
            Source::Client(client) => client,
            Source::Pool(pool) => pool.get_or_create(&self.target),
            Source::DefaultPool => default_pool::<R>()?.get_or_create(&self.target),
        };
        let resolved = client
            .bootstrap()
            .resolve_target(&self.target)
            .map_err(|error| Error::Target {
                target: self.target.clone(),
                error,
            })?;
        let credentials = match self.xds_credentials {
            None => EndpointCredentials::Plaintext,
            Some((fallback, providers)) => {
                let providers = match providers {
                    Some(providers) => providers,
                    None => CertificateProviders::start(&rt, client.bootstrap())
                        .map_err(Error::Credentials)?,
                };
                EndpointCredentials::Xds {
                    providers: Arc::new(providers),
                    fallback,
                }
            }
        };
        let seed = self.seed.unwrap_or_else(crate::client::random_seed);
        let (events_tx, events) = mpsc::unbounded();
        let settings = ChannelSettings {
            wait_for_ready: self.wait_for_ready,
            transport: self.transport,
            channel_id: seed.rotate_left(17) ^ 0x6a09_e667_f3bc_c908,
            credentials,
        };
        let mut lb_settings = LbSettings::new(seed ^ 0x9e37_79b9_7f4a_7c15);
        lb_settings.failover_timeout = self.failover_timeout;
        let lb = LoadBalancer::new(lb_settings);
        let filter_seed = self.filter_seed.unwrap_or(seed ^ 0x3c6e_f372_fe94_f82b);
        let shared = Arc::new(Shared::new(
            rt.clone(),
            lb,
            (seed, filter_seed),
            events_tx,
            settings,
        ));
        let (stop, stopped) = oneshot::channel();
        let driver = drive(shared.clone(), client, self.target.clone(), events, stopped);
        rt.spawn(Box::pin(driver));
        Ok(XdsChannel {
            inner: Arc::new(ChannelInner {
                shared,
                target: Arc::from(self.target),
                authority: Arc::from(resolved.data_plane_authority),
                _stop: stop,
            }),
        })
    }
}

/// The process's default pool for runtime `R`, created on first use from the
/// environment's bootstrap.
fn default_pool<R: Runtime>() -> Result<ClientPool<R>, Error> {
    static POOLS: Mutex<Vec<(TypeId, Box<dyn Any + Send>)>> = Mutex::new(Vec::new());
    let mut pools = POOLS.lock().unwrap_or_else(|e| e.into_inner());
    let key = TypeId::of::<R>();
    if let Some(pool) = pools
        .iter()
        .find(|(k, _)| *k == key)
        .and_then(|(_, pool)| pool.downcast_ref::<ClientPool<R>>())
    {
        return Ok(pool.clone());
    }
    let bootstrap = crate::load_bootstrap_from_env()?;
    let pool = ClientPool::<R>::builder(bootstrap).build_pool()?;
    pools.push((key, Box::new(pool.clone())));
    Ok(pool)
}

/// The channel's driver: follows the config stream into the balancer and runs the
/// balancer's timers, until the channel is dropped or the client stops.
async fn drive<R: Runtime>(
    shared: Arc<Shared<R>>,
    client: Client<R>,
    target: String,
    mut events: UnboundedReceiver<DriverEvent>,
    stopped: oneshot::Receiver<()>,
) {
    let mut stopped = stopped.fuse();
    let mut configs = futures::select_biased! {
        _ = stopped => return,
        configs = client.watch_config_for_target(&target).fuse() => match configs {
            Ok(configs) => configs,
            Err(e) => {
                shared.configure(Err(tonic::Status::unavailable(e.to_string())));
                let _ = stopped.await;
                return;
            }
        },
    };
    // The newest configuration, kept while the balancer runs on it.
    let mut _current = None;
    let mut timeout = None;
    loop {
        let sleep = sleep_until(&shared.rt, timeout);
        futures::select_biased! {
            _ = stopped => return,
            event = events.next().fuse() => match event {
                Some(DriverEvent::Dns { cluster, result }) => shared.dns_resolved(&cluster, result),
                Some(DriverEvent::Rearm) | None => {}
            },
            update = configs.next().fuse() => match update {
                Some(Ok(update)) => {
                    shared.configure(Ok((&update.config, update.selector.clone())));
                    _current = Some(update);
                }
                Some(Err(e)) => shared.configure(Err(tonic::Status::unavailable(e.to_string()))),
                None => {
                    shared.configure(Err(tonic::Status::unavailable("the xDS client stopped")));
                    let _ = stopped.await;
                    return;
                }
            },
            () = sleep.fuse() => {}
        }
        timeout = shared.handle_timeout();
    }
}

/// Sleeps until `at` on the runtime's clock; forever without one.
fn sleep_until<R: Runtime>(rt: &R, at: Option<Instant>) -> BoxFuture<()> {
    match at {
        None => Box::pin(futures::future::pending()),
        Some(at) => {
            let now = rt.now();
            rt.sleep(if at > now {
                at - now
            } else {
                std::time::Duration::ZERO
            })
        }
    }
}

impl<R: Runtime> tower_service::Service<http::Request<tonic::body::Body>> for XdsChannel<R> {
    type Response = http::Response<ResponseBody>;
    type Error = Infallible;
    type Future = BoxFuture<Result<http::Response<ResponseBody>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let shared = self.inner.shared.clone();
        let authority = self.inner.authority.clone();
        Box::pin(async move { Ok(call::run(shared, authority, request).await) })
    }
}
