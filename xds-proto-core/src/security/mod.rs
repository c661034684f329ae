//! xDS security (gRFC A29, with A82's system roots, A87's SPIFFE roots and A101's SNI),
//! the sans-IO half: the validated security configs, certificate providers, and the
//! server-authorization check. The TLS handshakes themselves (rustls) are the adapters'.
//!
//! # What the core gives an adapter
//!
//! - **Configs.** A cluster's [`ClusterResource::tls`](crate::resource::ClusterResource::tls)
//!   is an [`UpstreamTls`] when its `transport_socket` carries an `UpstreamTlsContext`,
//!   and `None` when it has none (then the channel uses its fallback credentials, A29).
//!   A server listener's filter chains carry a [`DownstreamTls`] each when theirs has a
//!   `DownstreamTlsContext`. Both are validated as gRPC does: a NACK for what A29 says to
//!   NACK (naming the field), and every provider instance they name is checked against
//!   the bootstrap's `certificate_providers` when the client decodes with its bootstrap
//!   ([`DecodeContext`](crate::resource::DecodeContext)).
//! - **Providers.** [`CertificateProvider`] is what a handshake asks for an identity
//!   ([`Identity`]: chain and key as rustls-pki-types DER) or roots ([`Roots`]: CA
//!   certificates or a [`SpiffeBundleMap`]), by the `certificate_name` of the config's
//!   [`CertificateProviderInstance`]. An adapter keeps one provider per bootstrap
//!   instance name ([`Bootstrap::certificate_providers`](crate::Bootstrap)), after
//!   [`Bootstrap::check_certificate_provider_plugins`](crate::Bootstrap::check_certificate_provider_plugins)
//!   with the plugins it can build. For `file_watcher` that is a [`FileWatcherState`]
//!   behind an `RwLock` (itself a `CertificateProvider`), reloaded by a task that reads
//!   the files when [`FileWatcherState::poll_timeout`] says so; a bad or missing file
//!   is a [`CertificateError`] naming the field and the file, and the last good material
//!   stays in use. [`CertificateProvider::generation`] tells the adapter when to rebuild
//!   what it caches (rustls configs, root stores). A65's `tls` channel credentials for
//!   the control plane reuse the same state
//!   ([`FileWatcherConfig::from_tls_credentials`](crate::bootstrap::FileWatcherConfig::from_tls_credentials)).
//! - **Decisions.** [`UpstreamTls::sni_for`] picks the SNI (A101);
//!   [`UpstreamTls::check_server_sans`] runs A29's SAN check (or A101's SNI check) on the
//!   leaf's [`SubjectAltName`]s, which the adapter extracts from the certificate (the
//!   core has no X.509 parser); [`SpiffeBundleMap::roots_for_peer`] picks the roots for a
//!   SPIFFE peer (A87) before the chain is verified.
//!
//! # A client handshake, step by step
//! 1. roots: `RootCertificates::System` → the platform's; `Provider(p)` → `roots(p)`;
//!    for `Roots::SpiffeBundleMap`, the roots of the peer's trust domain;
//! 2. verify the chain (rustls/webpki) without the hostname check, which A29 replaces;
//! 3. `check_server_sans(sni_sent, leaf_sans)`;
//! 4. identity (if any): `identity(p)` as the client certificate.
//!
//! A server: `identity(tls.identity)` as its certificate; with `client_roots`, ask for
//! a client certificate and verify it (required when `require_client_certificate`).
//!
//! # Where gRPC-Go and C-core differ, and what this crate follows
//! - Unknown bootstrap plugin names: C-core fails the bootstrap, Go drops the instance
//!   (a cluster naming it is then NACKed). The core keeps the instance, and the adapter
//!   gets C-core's startup error from `check_certificate_provider_plugins`, so a runtime
//!   may register plugins of its own.
//! - SAN types: Go matches typed SANs (DNS rules for DNS SANs only); C-core applies DNS
//!   rules to every SAN. The core follows Go ([`san`](self) module).
//! - Deprecated fields: identity falls back to `tls_certificate_certificate_provider_instance`
//!   and roots, inside `combined_validation_context`, to its
//!   `validation_context_certificate_provider_instance`, field by field as C-core does
//!   (Istio's proxyless clusters use the latter). The deprecated
//!   `validation_context_certificate_provider_instance` member of the validation context
//!   oneof is honoured as Go does (C-core ignores it, which on a server would silently
//!   drop client authentication).
//! - `transport_socket_matches`: C-core ignores the field, Go NACKs it; the core NACKs,
//!   since ignoring it would send plaintext where the control plane may want TLS.
//! - A server validation context without a CA provider: Go NACKs (A29's text), C-core
//!   only when `require_client_certificate` is set; the core NACKs.
//! - `safe_regex` with `ignore_case`: C-core NACKs, Go ignores `ignore_case`; the core
//!   NACKs, as its route matchers already do.
//! - The transport socket is recognised by its `typed_config` type, as C-core does (Go
//!   also requires the name `envoy.transport_sockets.tls`).
//! - `match_typed_subject_alt_names`, Envoy's newer typed matchers, is read by neither
//!   (Java documents it as not working). Beside `match_subject_alt_names` it is ignored
//!   here too; alone it is NACKed, since ignoring it would skip the SAN check the control
//!   plane asked for (A29's rule for fields whose omission weakens security). This is the
//!   one NACK gRPC does not have.

mod config;
mod file_watcher;
mod provider;
pub mod san;
mod spiffe;

pub use config::{
    CertificateProviderInstance, DownstreamTls, MAX_SNI_LEN, RootCertificates, UpstreamTls,
};
pub use file_watcher::{FileReads, FileWatcherState, MaterialCheck};
pub use provider::{
    CertificateError, CertificateProvider, CertificateStore, Identity, Material, Roots,
};
pub use san::{SanMismatch, SubjectAltName, dns_name_matches, sans_match};
pub use spiffe::{MAX_SPIFFE_ID_LEN, MAX_TRUST_DOMAIN_LEN, SpiffeBundleMap, SpiffeId};

/// The crate the key material types come from (`CertificateDer`, `PrivateKeyDer`), as
/// rustls uses them.
pub use rustls_pki_types as pki_types;

#[cfg(test)]
mod tests;
