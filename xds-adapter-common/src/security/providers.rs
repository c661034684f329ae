//! The certificate providers of a bootstrap, live: one [`CertificateProvider`] per
//! `certificate_providers` instance, and for `file_watcher` the task that rereads its
//! files when the core's [`FileWatcherState::poll_timeout`] says so.
//!
//! The first read happens when the providers are built, so a handshake right after
//! start has material (gRPC-Go's watcher also reads at creation); later reads run on
//! the runtime, reading the files (small PEM files, read synchronously) outside the
//! lock the handshakes take. A reload task holds its provider weakly: it ends once
//! the last channel or server using the providers is dropped.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, RwLock, Weak};

use xds_proto_core::bootstrap::{Bootstrap, CertificateProviderConfig, FileWatcherConfig};
use xds_proto_core::security::{CertificateProvider, FileWatcherState, Identity, Roots};

use crate::runtime::{BoxFuture, Runtime};

/// The plugins this adapter builds.
pub const SUPPORTED_PLUGINS: &[&str] = &["file_watcher"];

/// The certificate provider instances of a bootstrap, by instance name.
#[derive(Clone, Default)]
pub struct CertificateProviders {
    by_name: BTreeMap<String, Arc<dyn CertificateProvider>>,
}

impl fmt::Debug for CertificateProviders {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.by_name.iter()).finish()
    }
}

impl CertificateProviders {
    /// Builds a provider for every instance of `bootstrap`'s `certificate_providers`
    /// (each `file_watcher` read once now, then reread on `rt` every
    /// `refresh_interval`).
    ///
    /// # Errors
    /// A plugin this adapter cannot build (C-core's startup error, naming the field).
    pub fn start<R: Runtime>(rt: &R, bootstrap: &Bootstrap) -> Result<Self, String> {
        bootstrap
            .check_certificate_provider_plugins(SUPPORTED_PLUGINS)
            .map_err(|e| e.to_string())?;
        let mut providers = CertificateProviders::default();
        for (name, config) in &bootstrap.certificate_providers {
            if let CertificateProviderConfig::FileWatcher(config) = config {
                providers.insert(name, file_watcher(rt, config.clone()));
            }
        }
        Ok(providers)
    }

    /// Adds (or replaces) instance `name`: a runtime's own plugin, or fixed material.
    pub fn insert(&mut self, name: &str, provider: Arc<dyn CertificateProvider>) {
        self.by_name.insert(name.to_owned(), provider);
    }

    /// Instance `name`.
    ///
    /// # Errors
    /// When the bootstrap has no such instance (the core NACKs a resource naming one
    /// when it decodes with the bootstrap; this guards a caller that did not).
    pub fn get(&self, name: &str) -> Result<&Arc<dyn CertificateProvider>, String> {
        self.by_name
            .get(name)
            .ok_or_else(|| format!("no certificate provider instance {name:?} in the bootstrap"))
    }
}

/// A `file_watcher` provider: its state, read once now, and its reload task on `rt`.
pub fn file_watcher<R: Runtime>(
    rt: &R,
    config: FileWatcherConfig,
) -> Arc<RwLock<FileWatcherState>> {
    let mut state = FileWatcherState::new(config)
        .with_identity_check(Box::new(check_identity))
        .with_roots_check(Box::new(check_roots));
    state.refresh_with(rt.now(), |path| std::fs::read(path));
    let state = Arc::new(RwLock::new(state));
    rt.spawn(reload(rt.clone(), Arc::downgrade(&state)));
    state
}

/// Rereads the files whenever they are due, while the provider is in use.
fn reload<R: Runtime>(rt: R, state: Weak<RwLock<FileWatcherState>>) -> BoxFuture<()> {
    Box::pin(async move {
        loop {
            let (config, due) = {
                let Some(state) = state.upgrade() else { return };
                let state = state.read().unwrap_or_else(|e| e.into_inner());
                (state.config().clone(), state.poll_timeout())
            };
            let now = rt.now();
            if due > now {
                rt.sleep(due - now).await;
            }
            let reads = config.read_files(|path| std::fs::read(path));
            let Some(state) = state.upgrade() else { return };
            let mut state = state.write().unwrap_or_else(|e| e.into_inner());
            if state.on_files_read(rt.now(), reads) {
                tracing::info!(
                    generation = state.generation(),
                    "file_watcher: new certificates"
                );
            }
            for error in [
                state
                    .store()
                    .last_error(xds_proto_core::security::Material::Identity),
                state
                    .store()
                    .last_error(xds_proto_core::security::Material::Roots),
            ]
            .into_iter()
            .flatten()
            {
                tracing::warn!(%error, "file_watcher: reload failed; the last good certificates stay in use");
            }
        }
    })
}

/// That the key belongs to the certificate (rustls compares the public keys).
fn check_identity(identity: &Identity) -> Result<(), String> {
    let provider = rustls::crypto::ring::default_provider();
    rustls::sign::CertifiedKey::from_der(
        identity.cert_chain.clone(),
        identity.private_key.clone_key(),
        &provider,
    )
    .map(|_| ())
    .map_err(|e| format!("the key does not fit the certificate: {e}"))
}

/// That every root parses as a trust anchor.
fn check_roots(roots: &Roots) -> Result<(), String> {
    if let Roots::Certificates(certs) = roots {
        let mut store = rustls::RootCertStore::empty();
        for cert in certs {
            store
                .add(cert.clone())
                .map_err(|e| format!("not a usable CA certificate: {e}"))?;
        }
    }
    Ok(())
}
