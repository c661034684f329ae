//! xDS security (gRFC A29) in the adapters: the TLS half the core leaves to them.
//!
//! - [`CertificateProviders`] (`providers`): the bootstrap's certificate provider
//!   instances, live, with the `file_watcher` reload tasks;
//! - `verify`: the rustls verifiers: the chain against the provider's roots (A87's
//!   SPIFFE bundle maps included), then the core's SAN check, with the cause of a
//!   refusal recorded in words;
//! - `client`: the per-connection rustls config of an `XdsChannel` endpoint whose
//!   cluster has an `UpstreamTls` (gRPC's `XdsCredentials`), and the
//!   [`FallbackCredentials`] of clusters without one;
//! - `server`: [`XdsServerCredentials`], a TLS acceptor from an LDS filter chain's
//!   `DownstreamTls`.

mod client;
mod providers;
mod server;
mod verify;

pub use client::FallbackCredentials;
pub(crate) use client::{ConnectionTls, connection_tls};
pub use providers::{CertificateProviders, SUPPORTED_PLUGINS, file_watcher};
pub use server::XdsServerCredentials;
pub(crate) use verify::{FailureNote, explain_alert, leaf_sans};
