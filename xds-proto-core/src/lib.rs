//! The sans-IO core of xds-proto: an xDS client, with gRPC's rules, as a deterministic
//! state machine. It follows a listener through its routes and clusters to endpoints
//! over ADS (state of the world or delta), routes each RPC (the config selector) and
//! picks its endpoint (the load balancer). It never reads the clock, never does I/O and
//! never draws OS randomness: time, received bytes and random numbers come in as
//! arguments, and what to send, connect or tell comes out as actions.
//!
//! Most users want an adapter instead: `xds-adapter-tokio` (or `xds-adapter-async-std`)
//! runs this core over tonic, with typed watch streams, config streams and an `xds:///`
//! channel. This crate is for a runtime of your own, a simulator, or a data plane that
//! is not tonic.
//!
//! ```text
//!    your runtime: the ADS stream, connections to endpoints, timers, random numbers
//!       │ response bytes, stream events, now              ▲ StartStream, SendRequest,
//!       ▼                                                 │ CloseStream
//!  ┌──────────────────────────────────────────────────────┴─┐
//!  │ XdsClient: ADS (SotW and delta), ACK/NACK, the cache,  │
//!  │ does-not-exist timers, failures and fallback           │
//!  └───────────────────────────┬────────────────────────────┘
//!                              │ Action::Notify: a watched resource changed, or failed
//!  ┌───────────────────────────▼────────────────────────────┐
//!  │ dependency::XdsDependencyManager: listener → route     │
//!  │ configuration → clusters → endpoints, as one XdsConfig │
//!  └──────────────┬──────────────────────────────┬──────────┘
//!                 │ XdsConfig                    │ XdsConfig
//!  ┌──────────────▼─────────────┐ cluster, ┌─────▼───────────────────────┐
//!  │ selector::ConfigSelector:  │ hash     │ lb::LoadBalancer: priority, │
//!  │ route → cluster, timeout,  ├─────────▶│ localities, endpoint policy,│
//!  │ retry policy, hash policy  │          │ outlier detection, breakers │
//!  └──────────────▲─────────────┘          └──┬───────────────────────▲──┘
//!                 │ path, headers             │ Pick (per RPC),       │ connection states,
//!               an RPC                        ▼ Connect, Disconnect   │ call outcomes, now
//!                                        your runtime ────────────────┘
//! ```
//!
//! # One loop, from a watch to a pick
//!
//! Every layer is driven the same way: make one mutation, drain the actions it produced,
//! sleep until the next deadline (`poll_timeout`). Here the control plane is the testing
//! kit's sans-IO management server (`xds-proto-testing`), so the loop runs in virtual
//! time without a socket; a real runtime writes the requests to its ADS stream instead
//! and feeds back the responses' bytes.
//!
//! ```
//! use std::collections::VecDeque;
//! use xds_proto_core::dependency::XdsDependencyManager;
//! use xds_proto_core::lb::{CallOutcome, ConnectivityState, LbAction, LbSettings};
//! use xds_proto_core::lb::{LoadBalancer, Pick, PickArgs};
//! use xds_proto_core::prost::Message;
//! use xds_proto_core::selector::{ClusterRegistry, ConfigSelector, Seeded};
//! use xds_proto_core::{Action, Bootstrap, Event, Instant, XdsClient, XdsClientConfig};
//! use xds_proto_testing::peer::{CDS, EDS, LDS, RDS};
//! use xds_proto_testing::server::{ManagementServer, ServerPolicy, SimResource};
//!
//! // The control plane: demo.example → route-1 → cluster-1 → 127.0.0.1:10001.
//! let mut server = ManagementServer::new("xds.example:443", ServerPolicy::default());
//! for (type_url, name) in [(LDS, "demo.example"), (RDS, "route-1"), (CDS, "cluster-1"),
//!                          (EDS, "cluster-1")] {
//!     server.set(type_url, name, SimResource::Valid(1));
//! }
//! let bootstrap = Bootstrap::from_json_str(r#"{
//!     "xds_servers": [{"server_uri": "xds.example:443", "channel_creds": [{"type": "insecure"}]}],
//!     "node": {"id": "my-node"}
//! }"#)?;
//! let mut client = XdsClient::new(XdsClientConfig::new(bootstrap), /* seed */ 7);
//! let now = Instant::ZERO; // this server answers at once, so time stands still
//!
//! // 1. Watch: the dependency manager (gRFC A74) watches the listener, then what it names.
//! let mut manager = XdsDependencyManager::new("demo.example", "demo.example");
//! manager.start(&mut client)?;
//! // 2. Drive the client until the manager has the whole configuration.
//! let mut wire = VecDeque::new(); // responses on their way to the client
//! let config = loop {
//!     while let Some(action) = client.poll_action() {
//!         match action {
//!             Action::StartStream { stream, .. } => {
//!                 // Open the stream; once it is dispatched on a connected channel:
//!                 server.open_stream(stream.into_raw());
//!                 client.handle_event(now, Event::StreamStarted { stream });
//!             }
//!             Action::SendRequest { stream, request } => {
//!                 client.handle_event(now, Event::RequestSent { stream });
//!                 if server.on_request(stream.into_raw(), &request.to_proto()) {
//!                     for response in server.flush(stream.into_raw(), |_| 0) {
//!                         wire.push_back((stream, response.encode_to_vec().into()));
//!                     }
//!                 }
//!             }
//!             Action::Notify(n) => assert!(manager.handle_notification(&mut client, &n)),
//!             _ => {} // CloseStream, DropChannel
//!         }
//!     }
//!     if let Some(update) = manager.poll_update() {
//!         break update?;
//!     }
//!     let (stream, bytes) = wire.pop_front().expect("a response is due");
//!     client.handle_event(now, Event::ResponseReceived { stream, bytes });
//! };
//!
//! // 3. Route an RPC (gRFC A31): the route names the cluster, its timeout and hashing.
//! let mut registry = ClusterRegistry::new();
//! let selector = ConfigSelector::new(&config, &mut registry);
//! let headers = [("x-user", "alice")];
//! let selection = selector.select("/echo.Echo/Say", &headers, &mut Seeded(1))?;
//! let cluster = selection.cluster().cluster().expect("a cluster, not a plugin");
//! assert_eq!(cluster, "cluster-1");
//!
//! // 4. Pick its endpoint. The first pick starts the cluster: it queues while the
//! // runtime connects the subchannels the balancer asks for.
//! let mut lb = LoadBalancer::new(LbSettings::new(/* seed */ 1));
//! lb.update(now, &config);
//! let args = PickArgs { hash: selection.request_hash(&headers[..], 0), random: 42, override_host: None };
//! assert_eq!(lb.pick(now, cluster, &args), Pick::Queue);
//! while let Some(action) = lb.poll_action() {
//!     if let LbAction::Connect { subchannel, address } = action {
//!         // Dial `address`; READY once the backend's HTTP/2 SETTINGS frame arrived.
//!         assert_eq!(address, "127.0.0.1:10001".parse()?);
//!         lb.subchannel_state(now, subchannel, ConnectivityState::Ready);
//!     }
//! }
//! let Pick::Complete { address, call, .. } = lb.pick(now, cluster, &args) else {
//!     panic!("the endpoint is READY");
//! };
//! assert_eq!(address, "127.0.0.1:10001".parse()?);
//! // ... send the RPC to `address`; when it ends:
//! lb.call_finished(now, call, CallOutcome::Success);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The same loop with a network delay, timers and an endpoint update is
//! `examples/custom_loop.rs` (`cargo run -p xds-proto-core --example custom_loop`);
//! [`lb::LoadBalancer`] shows the balancer's side in more detail (failures, backoff).
//!
//! # The contract
//!
//! 1. The core never reads the clock: time is an argument ([`time::Instant`]), first in
//!    every call that needs it.
//! 2. The core never does I/O: transport events come in through
//!    [`XdsClient::handle_event`], and what to send goes out through
//!    [`XdsClient::poll_action`] (and [`lb::LoadBalancer::poll_action`] for
//!    connections).
//! 3. The core never draws OS randomness: the client's and the balancer's jitter come
//!    from the seeds given to [`XdsClient::new`] and [`lb::LbSettings::new`]; routing and
//!    picks take a random source or number per RPC.
//!
//! The drive loop, the same for every layer and every adapter:
//! 1. make one mutation: [`XdsClient::watch`], [`XdsClient::cancel_watch`],
//!    [`XdsClient::handle_event`] or [`XdsClient::handle_timeout`];
//! 2. drain [`XdsClient::poll_action`] until it returns `None`;
//! 3. sleep until [`XdsClient::poll_timeout`].
//!
//! # gRFCs
//!
//! What each gRFC this client concerns is here: **implemented**, **accepted, not acted
//! on** (its configuration is read and validated, and has no effect), or **not yet**
//! (not implemented; some are in progress). `docs/ARCHITECTURE.md` has the details.
//!
//! | gRFC | | status | where, and what is missing |
//! |---|---|---|---|
//! | A27 | xDS client: bootstrap, LDS/RDS/CDS/EDS, priorities, weighted localities | implemented | [`bootstrap`], [`resource`], [`client`], [`lb`] |
//! | A27 | load reports (LRS) | implemented | [`lrs`]: per cluster and locality, drops by category, A57 backoff; the adapters run the stream on the ADS connection; A85's `lrs_report_endpoint_metrics` not yet |
//! | A28 | routing: path and header matchers, weighted clusters, runtime fractions | implemented | [`selector`] |
//! | A29 | TLS security: `UpstreamTlsContext`, certificate providers | implemented in the core | [`security`], [`resource::DecodeContext`]: validation, `file_watcher`, the SAN check; the adapters' handshakes: see `docs/ARCHITECTURE.md` |
//! | A30 | xDS v3 | implemented | v3 only |
//! | A31 | timeouts, the config selector, cluster lifetime | implemented | [`selector`] |
//! | A32 | circuit breaking | implemented | [`lb`] (`max_requests`) |
//! | A33 | fault injection | implemented | [`filter::fault`]: delay, abort, header-controlled, `max_active_faults`; `XdsChannel` runs it |
//! | A36 | xDS-enabled servers | not yet | a server Listener is decoded with its filter chains and their TLS (A29); no server runs it |
//! | A37, A75 | aggregate and LOGICAL_DNS clusters | implemented | [`dependency`], [`lb`] |
//! | A39 | HTTP filters | implemented on clients | [`filter`]: configs parsed at decode time, overrides merged per route and weighted cluster, per-RPC decisions from [`selector::Selection::run_filters`]; server filter chains come with A36 |
//! | A40 | CSDS | implemented | [`pool`], [`XdsClient::csds_configs_at`] |
//! | A41 | RBAC | not yet | |
//! | A42 | `ring_hash`, hash policies | implemented | [`lb`], [`selector::Selection::request_hash`] |
//! | A44 | retries | implemented | decoded here ([`resource::route::RetryPolicy`]); the tonic adapter's channel retries |
//! | A46 | NACK semantics: a response's valid resources are applied | implemented | [`client`] |
//! | A47 | federation: `xdstp://` names, authorities | implemented | [`names`], [`bootstrap`] |
//! | A48 | `least_request` | implemented | [`lb`] |
//! | A50 | outlier detection | implemented | [`lb`] |
//! | A51 | ORCA backend metrics | implemented | [`orca`] decodes reports bounded; the adapters read the per-call trailer, run out-of-band streams and give servers the recorders |
//! | A52 | custom LB policies | implemented | [`resource::cluster::LbPolicyRegistry`], `XdsClientConfig::lb_policies`; the built-in policies go through it |
//! | A53 | `ignore_resource_deletion` | accepted, not acted on | superseded by A88: deletions never drop a cached value unless `fail_on_data_errors` |
//! | A55, A60 | stateful session affinity | implemented | [`filter::stateful_session`], [`lb::PickArgs::override_host`], CDS `override_host_status`; DRAINING hosts are kept for sessions (never for the policies) when it allows them |
//! | A56 | the priority policy | implemented | [`lb`] |
//! | A57 | failure modes: backoff, does-not-exist timer | implemented | [`client`] |
//! | A58 | weighted round robin | implemented | [`lb`]: weights from ORCA reports, blackout, expiration; A100's slow start not yet |
//! | A61, A62 | dual-stack endpoints, `pick_first` | implemented | [`lb`] |
//! | A63 | string matchers in header matchers | implemented | [`selector`] |
//! | A64 | LRS custom metrics | implemented | [`lrs`]: the per-call ORCA report's `named_metrics` per locality |
//! | A65 | mTLS credentials in the bootstrap | implemented | [`bootstrap`]; the adapters connect with them |
//! | A71 | fallback | implemented | [`client`], [`pool`] |
//! | A74 | the dependency manager | implemented | [`dependency`] |
//! | A76 | ring hash: `request_hash_header`, endpoint `hash_key` | not yet | only the header hash function ([`lb::hash_header_value`]) |
//! | A78 | XdsClient metrics | implemented | [`metrics`]; the WRR and `pick_first` metrics: not yet |
//! | A81 | authority rewriting | accepted, not acted on | `trusted_xds_server` is read; `auto_host_rewrite` is not |
//! | A83 | GCP authentication filter (`gcp_authn`) | accepted, not acted on | a client listener with it is accepted; the filter does not run (no token is attached) |
//! | A88 | data errors | implemented | [`client`] |
//! | xRFC TP3 | `resource_errors` in responses | implemented | [`client`] |

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod backoff;
pub mod bootstrap;
pub mod client;
pub mod dependency;
pub mod filter;
pub mod lb;
pub mod lrs;
pub mod metrics;
pub mod names;
pub mod orca;
pub mod pool;
pub mod resource;
pub mod security;
pub mod selector;
pub mod server;
pub mod time;

pub use bootstrap::{ApiType, Bootstrap};
pub use client::{
    Action, AdsRequest, Code, DeltaRequest, ErrorKind, Event, Notification, ResourceSnapshot,
    ResourceStatusKind, ServerId, Status, StreamId, WatchChecker, WatchError, WatchEvent,
    WatcherId, XdsClient, XdsClientConfig, XdsError,
};
pub use resource::{Cds, DecodeError, Eds, Lds, Rds, ResourceValue, XdsResourceType};
pub use time::Instant;

/// The `bytes` crate, whose `Bytes` carries responses into the core.
pub use bytes;
/// The `prost` crate, whose messages the core's `pb` types are.
pub use prost;

/// The hash map the core uses: foldhash with a fixed seed. Deterministic (the same
/// inputs give the same iteration order on every run) and free of OS randomness, unlike
/// `std`'s `RandomState`; fast on the short string keys of resource names.
pub(crate) type DetHashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::FixedState>;

/// Prost types generated from the vendored Envoy/xDS protos (see `proto/README.md`).
pub mod pb {
    #![allow(missing_docs, clippy::all, rustdoc::all)]
    include!(concat!(env!("OUT_DIR"), "/_includes.rs"));
}

/// The README's drive-loop example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
