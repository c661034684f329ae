//! gRPC's `XdsCredentials` for an `XdsChannel`'s endpoint connections: a cluster with
//! an [`UpstreamTls`] is dialled with rustls, its identity and roots asked of the
//! bootstrap's certificate providers at each connection attempt (so rotated files
//! apply to the next connection); a cluster without one uses the fallback credentials.

use std::fmt;
use std::sync::Arc;

use rustls::pki_types::ServerName;
use xds_proto_core::security::{RootCertificates, UpstreamTls};

use super::providers::CertificateProviders;
use super::verify::{FailureNote, TrustRoots, XdsServerVerifier};

/// What a cluster without a security config is dialled with (gRPC's fallback
/// credentials of `XdsCredentials`).
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum FallbackCredentials {
    /// Plaintext HTTP/2 (h2c), gRPC's insecure credentials.
    #[default]
    Insecure,
    /// TLS with this configuration (it should advertise ALPN `h2`); the server name
    /// sent and checked is the endpoint's IP address.
    Tls(Arc<rustls::ClientConfig>),
}

impl fmt::Debug for FallbackCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FallbackCredentials::Insecure => f.write_str("Insecure"),
            FallbackCredentials::Tls(_) => f.write_str("Tls"),
        }
    }
}

/// The TLS of one connection attempt: the rustls config, the server name it sends,
/// and where its verifier writes why it refused the server.
#[derive(Clone, Debug)]
pub(crate) struct ConnectionTls {
    pub(crate) config: Arc<rustls::ClientConfig>,
    pub(crate) server_name: ServerName<'static>,
    pub(crate) note: FailureNote,
}

/// The rustls configuration for one connection to an endpoint of a cluster with
/// `tls`, whose EDS hostname is `host` (A101's `auto_host_sni`).
///
/// # Errors
/// A provider without the material (named), or roots that do not load.
pub(crate) fn connection_tls(
    tls: &Arc<UpstreamTls>,
    providers: &CertificateProviders,
    host: Option<&str>,
    address: std::net::SocketAddr,
) -> Result<ConnectionTls, String> {
    let roots = match &tls.roots {
        RootCertificates::Provider(instance) => {
            let roots = providers
                .get(&instance.instance_name)?
                .roots(&instance.certificate_name)
                .map_err(|e| {
                    format!(
                        "root certificates of provider instance {:?}: {e}",
                        instance.instance_name
                    )
                })?;
            TrustRoots::from_provider(&roots)?
        }
        RootCertificates::System => TrustRoots::system()?,
        other => return Err(format!("unsupported roots {other:?}")),
    };
    let sni = tls.sni_for(host);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let note = FailureNote::default();
    let verifier = XdsServerVerifier {
        tls: tls.clone(),
        roots,
        sni: sni.clone(),
        provider: provider.clone(),
        note: note.clone(),
    };
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS configuration: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier));
    let mut config = match &tls.identity {
        Some(instance) => {
            let identity = providers
                .get(&instance.instance_name)?
                .identity(&instance.certificate_name)
                .map_err(|e| {
                    format!(
                        "identity certificate of provider instance {:?}: {e}",
                        instance.instance_name
                    )
                })?;
            builder
                .with_client_auth_cert(
                    identity.cert_chain.clone(),
                    identity.private_key.clone_key(),
                )
                .map_err(|e| format!("client certificate: {e}"))?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    // No SNI without one (A101): rustls sends none for an IP address.
    let server_name = match sni {
        Some(sni) => {
            ServerName::try_from(sni.clone()).map_err(|e| format!("invalid SNI {sni:?}: {e}"))?
        }
        None => ServerName::IpAddress(address.ip().into()),
    };
    Ok(ConnectionTls {
        config: Arc::new(config),
        server_name,
        note,
    })
}
