//! A scriptable loopback ADS management server for tests, and the demo control plane
//! of the `xds` CLI.
//!
//! [`LoopbackServer`] speaks State-of-the-World ADS (`StreamAggregatedResources`) and
//! delta ADS (`DeltaAggregatedResources`) on 127.0.0.1 through tonic, with plaintext
//! or TLS, from one snapshot. A test scripts it from any runtime:
//! - versioned snapshots per type ([`LoopbackServer::set_resources`]), pushed to every
//!   stream subscribed to the type;
//! - withheld resources ([`LoopbackServer::withhold`]) and TP3 `resource_errors`
//!   ([`LoopbackServer::set_resource_errors`]);
//! - streams closed with a chosen status ([`LoopbackServer::close_streams`]), and
//!   messages that are no `DiscoveryResponse` ([`LoopbackServer::send_undecodable_message`]);
//! - refused connections ([`LoopbackServer::refuse_connections`]), and a stop and
//!   restart on the same port ([`LoopbackServer::stop`], [`LoopbackServer::restart`]);
//! - every request recorded and classified as a subscription, an ACK or a NACK
//!   ([`LoopbackServer::requests`], with the delta fields of a delta request), and
//!   every response ([`LoopbackServer::responses`]);
//! - on delta, a version per resource (the snapshot version at which its bytes last
//!   changed), only the difference sent, and istiod's deviations on request
//!   ([`DeltaQuirks`], [`LoopbackServer::set_delta_quirks`]);
//! - an LRS service (`StreamLoadStats`) that records every load report and asks for
//!   the clusters and interval the test sets ([`LoopbackServer::set_load_reporting`],
//!   [`LoopbackServer::load_reports`]).
//!
//! Like real control planes, it answers a burst of requests with one response per
//! type: requests that are already waiting are all read before it responds.
//!
//! The server runs on the calling tokio runtime when there is one (so tests with a
//! paused clock stay deterministic), and otherwise on a dedicated thread with its own
//! runtime (so an async-std test can use it without a tokio runtime of its own).
//!
//! [`FaultProxy`] sits between a client and a server to inject faults: a server that
//! never speaks HTTP/2, one that goes silent mid-stream, one that sends GOAWAY. In
//! front of an echo backend it makes the misbehaving endpoints of [`channel_faults`].
//!
//! [`recorder::TestRecorder`] is a `metrics` recorder that tests read the clients'
//! exported metrics from.
//!
//! [`resources`] builds valid (and deliberately invalid) Envoy resources, and [`demo`]
//! holds the small mesh the CLI's demo serves. [`suite`], [`config_suite`],
//! [`channel_suite`], [`lrs_suite`] and [`wrr_suite`] are the adapters' integration
//! scenarios, written once for any runtime. The `tls` feature
//! adds the `tls` module (a throwaway PKI built with rcgen, for tests only) and the TLS
//! scenario; the CLI leaves it off.

#![warn(missing_docs)]

pub mod channel_faults;
pub mod channel_suite;
mod codec;
pub mod config_suite;
mod delta;
pub mod demo;
pub mod echo;
pub mod filter_suite;
mod host;
pub mod interop_build;
mod lrs;
pub mod lrs_suite;
pub mod ports;
pub mod proxy;
mod record;
pub mod recorder;
pub mod resources;
#[cfg(feature = "tls")]
pub mod security_suite;
mod server;
pub mod server_suite;
mod service;
mod session;
mod sotw;
pub mod suite;
#[cfg(feature = "tls")]
pub mod tls;
pub mod wrr_suite;

pub use delta::DeltaQuirks;
pub use lrs::{LoadReportingSettings, RecordedLoadReport};
pub use proxy::FaultProxy;
pub use record::{DeltaFields, RecordedRequest, RecordedResponse, RequestKind, ServerStats};
pub use server::LoopbackServer;
