//! rustls client configurations built from the bootstrap's `tls` channel credentials
//! (gRFC A65): the CA bundle (or the system roots), and the client certificate and key
//! for mTLS. A65 gives these credentials `file_watcher`'s config, and they are read as
//! a `file_watcher` provider is: a [`FileWatcherState`] per xDS server, reread at a
//! connection attempt once `refresh_interval` has passed since the last read, keeping
//! the last good certificates when a file is missing or bad (the attempt then uses
//! them; the error is logged).

use std::sync::Arc;

use rustls::RootCertStore;
use xds_proto_core::Instant;
use xds_proto_core::bootstrap::{FileWatcherConfig, TlsCredentials};
use xds_proto_core::security::{CertificateProvider, FileWatcherState, Material, Roots};

/// Builds the rustls configuration for `creds` at `now`, advertising ALPN `h2` as gRPC
/// requires; `state` is the server's watcher, created on first use and reread when due.
pub(crate) fn client_config(
    state: &mut Option<FileWatcherState>,
    now: Instant,
    creds: &TlsCredentials,
) -> Result<Arc<rustls::ClientConfig>, String> {
    let state = state.get_or_insert_with(|| {
        FileWatcherState::new(FileWatcherConfig::from_tls_credentials(creds))
    });
    if now >= state.poll_timeout() {
        state.refresh_with(now, |path| std::fs::read(path));
        for material in [Material::Identity, Material::Roots] {
            if let Some(error) = state.store().last_error(material) {
                tracing::warn!(%error, "tls channel credentials: reload failed; the last good {material} stay in use");
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS configuration: {e}"))?;
    let mut roots = RootCertStore::empty();
    match &creds.ca_certificate_file {
        Some(_) => {
            let material = state.roots("").map_err(|e| e.to_string())?;
            if let Roots::Certificates(certs) = &*material {
                for cert in certs {
                    roots
                        .add(cert.clone())
                        .map_err(|e| format!("ca_certificate_file: {e}"))?;
                }
            }
        }
        None => {
            let native = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(native.certs);
            if added == 0 {
                return Err(
                    "no ca_certificate_file configured and no system root certificates found"
                        .into(),
                );
            }
        }
    }
    let builder = builder.with_root_certificates(roots);
    let mut config = match creds.certificate_file {
        Some(_) => {
            let identity = state.identity("").map_err(|e| e.to_string())?;
            builder
                .with_client_auth_cert(
                    identity.cert_chain.clone(),
                    identity.private_key.clone_key(),
                )
                .map_err(|e| format!("certificate_file: {e}"))?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}
