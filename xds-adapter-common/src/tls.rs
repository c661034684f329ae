//! rustls client configurations built from the bootstrap's `tls` channel credentials
//! (gRFC A65): the CA bundle (or the system roots), and the client certificate and key
//! for mTLS. The files are read on every connection attempt, so rotated certificates
//! are picked up at the next reconnect.

use std::sync::Arc;

use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use xds_proto_core::bootstrap::TlsCredentials;

/// Builds the rustls configuration for `creds`, advertising ALPN `h2` as gRPC requires.
pub(crate) fn client_config(creds: &TlsCredentials) -> Result<Arc<rustls::ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS configuration: {e}"))?;
    let mut roots = RootCertStore::empty();
    match &creds.ca_certificate_file {
        Some(path) => {
            for cert in read_certs(path)? {
                roots
                    .add(cert)
                    .map_err(|e| format!("CA certificate in {path:?}: {e}"))?;
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
    let mut config = match (&creds.certificate_file, &creds.private_key_file) {
        (Some(cert_path), Some(key_path)) => {
            let chain = read_certs(cert_path)?;
            let key = std::fs::read(key_path)
                .map_err(|e| format!("cannot read private key {key_path:?}: {e}"))?;
            let key = PrivateKeyDer::from_pem_slice(&key)
                .map_err(|e| format!("no usable private key in {key_path:?}: {e}"))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("client certificate {cert_path:?}: {e}"))?
        }
        _ => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

fn read_certs(path: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem =
        std::fs::read(path).map_err(|e| format!("cannot read certificate file {path:?}: {e}"))?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("bad PEM in {path:?}: {e}"))?;
    if certs.is_empty() {
        return Err(format!("no certificate in {path:?}"));
    }
    Ok(certs)
}
