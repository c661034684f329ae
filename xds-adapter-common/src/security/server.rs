//! gRPC's `XdsServerCredentials`: the TLS a server's listener socket terminates, from
//! the `DownstreamTls` of the LDS filter chain a connection matched and the
//! bootstrap's certificate providers. The product is a rustls `ServerConfig` (ALPN
//! `h2`), which any runtime's acceptor takes (`tokio_rustls::TlsAcceptor::from`,
//! `futures_rustls::TlsAcceptor::from`); it is rebuilt when a provider's material
//! changes, so a rotated certificate applies to the next connection.

use std::sync::{Arc, Mutex};

use rustls::server::WebPkiClientVerifier;
use xds_proto_core::security::{CertificateProvider, DownstreamTls, Roots};

use super::providers::CertificateProviders;

/// The server credentials of one filter chain.
#[derive(Debug)]
pub struct XdsServerCredentials {
    tls: DownstreamTls,
    providers: CertificateProviders,
    /// The config built for the providers' generations (identity, client roots).
    cached: Mutex<Option<Built>>,
}

/// A server config and the providers' generations it was built for.
type Built = ((u64, u64), Arc<rustls::ServerConfig>);

impl XdsServerCredentials {
    /// Credentials for a filter chain's `tls`, with the bootstrap's `providers`.
    pub fn new(tls: DownstreamTls, providers: CertificateProviders) -> XdsServerCredentials {
        XdsServerCredentials {
            tls,
            providers,
            cached: Mutex::new(None),
        }
    }

    /// The filter chain's security config.
    pub fn tls(&self) -> &DownstreamTls {
        &self.tls
    }

    /// The rustls configuration for the next connection: the identity's certificate;
    /// with `client_roots`, a client certificate asked for and verified against them,
    /// and required when `require_client_certificate` is set (a client without one
    /// then fails the handshake: "peer sent no certificates").
    ///
    /// # Errors
    /// A provider without its material (named), or material rustls refuses.
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, String> {
        let identity_provider = self.providers.get(&self.tls.identity.instance_name)?;
        let roots_provider = match &self.tls.client_roots {
            Some(instance) => Some(self.providers.get(&instance.instance_name)?),
            None => None,
        };
        let generations = (
            identity_provider.generation(),
            roots_provider.map_or(0, |p| p.generation()),
        );
        let mut cached = self.cached.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((built_for, config)) = &*cached
            && *built_for == generations
        {
            return Ok(config.clone());
        }
        let config = self.build(identity_provider, roots_provider)?;
        *cached = Some((generations, config.clone()));
        Ok(config)
    }

    fn build(
        &self,
        identity_provider: &Arc<dyn CertificateProvider>,
        roots_provider: Option<&Arc<dyn CertificateProvider>>,
    ) -> Result<Arc<rustls::ServerConfig>, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS configuration: {e}"))?;
        let builder = match (roots_provider, &self.tls.client_roots) {
            (Some(roots_provider), Some(instance)) => {
                let roots = roots_provider
                    .roots(&instance.certificate_name)
                    .map_err(|e| {
                        format!(
                            "client root certificates of provider instance {:?}: {e}",
                            instance.instance_name
                        )
                    })?;
                let Roots::Certificates(certs) = &*roots else {
                    return Err(format!(
                        "provider instance {:?}: SPIFFE bundle maps as a server's client roots \
                         are not supported by this adapter yet",
                        instance.instance_name
                    ));
                };
                let mut store = rustls::RootCertStore::empty();
                for cert in certs {
                    store
                        .add(cert.clone())
                        .map_err(|e| format!("not a usable CA certificate: {e}"))?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(store), provider);
                let verifier = if self.tls.require_client_certificate {
                    verifier
                } else {
                    verifier.allow_unauthenticated()
                };
                let verifier = verifier
                    .build()
                    .map_err(|e| format!("client certificate verifier: {e}"))?;
                builder.with_client_cert_verifier(verifier)
            }
            _ => builder.with_no_client_auth(),
        };
        let instance = &self.tls.identity;
        let identity = identity_provider
            .identity(&instance.certificate_name)
            .map_err(|e| {
                format!(
                    "identity certificate of provider instance {:?}: {e}",
                    instance.instance_name
                )
            })?;
        let mut config = builder
            .with_single_cert(
                identity.cert_chain.clone(),
                identity.private_key.clone_key(),
            )
            .map_err(|e| format!("server certificate: {e}"))?;
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Arc::new(config))
    }
}
