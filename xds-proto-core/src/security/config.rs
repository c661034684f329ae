//! The validated security configs of gRFC A29: what a cluster's `UpstreamTlsContext`
//! ([`UpstreamTls`]) and a server filter chain's `DownstreamTlsContext`
//! ([`DownstreamTls`]) ask for, in the terms an adapter acts on — which certificate
//! provider instances to take the identity and the roots from, how to authorize the
//! peer, which SNI to send (A101). The decoders in `resource/tls.rs` build them; the
//! methods here are the decisions an adapter's TLS handshake makes with them.

use std::sync::Arc;

use crate::resource::route::StringMatcher;

use super::san::{SanMismatch, SubjectAltName, describe_matchers, sans_match};

/// The longest `sni` a cluster may carry (A101, as Envoy: 255 bytes).
pub const MAX_SNI_LEN: usize = 255;

/// A certificate provider plugin instance and the certificate to ask it for
/// (`CertificateProviderPluginInstance`, or the deprecated `CertificateProviderInstance`
/// of the same shape). The instance name is a key of the bootstrap's
/// `certificate_providers`; `file_watcher` ignores the certificate name (A29).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct CertificateProviderInstance {
    /// `instance_name`, never empty. Decoded for a client, it is the bootstrap's own key
    /// (shared by every config that names the instance, not a copy per cluster).
    pub instance_name: Arc<str>,
    /// `certificate_name` (may be empty). Boxed, as every string kept per cluster here:
    /// the configs are immutable, and a cached cluster's size counts (BENCHMARKS.md).
    pub certificate_name: Box<str>,
}

/// Where a client takes the roots that verify the server's certificate from. The two
/// are exclusive (A82: a provider instance, when set, wins over `system_root_certs`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RootCertificates {
    /// `ca_certificate_provider_instance` (or its deprecated forms): the provider's
    /// roots, X.509 CA certificates or a SPIFFE trust bundle map (A87).
    Provider(CertificateProviderInstance),
    /// `system_root_certs` (A82): the platform's trust store. Clients only.
    System,
}

/// A cluster's validated `UpstreamTlsContext`: the client side of A29 and A101.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamTls {
    /// `tls_certificate_provider_instance`: the client certificate for mTLS, sent when
    /// the server asks for one. `None`: plain TLS.
    pub identity: Option<CertificateProviderInstance>,
    /// The roots that verify the server (always set: a client without roots is NACKed).
    pub roots: RootCertificates,
    /// `match_subject_alt_names` of the validation context, in order; empty means any
    /// SAN is accepted (once the chain verifies).
    pub match_subject_alt_names: Box<[StringMatcher]>,
    /// `sni`, when non-empty (at most [`MAX_SNI_LEN`] bytes).
    pub sni: Option<Box<str>>,
    /// `auto_host_sni` (A101): send the endpoint's hostname as SNI when it has one.
    pub auto_host_sni: bool,
    /// `auto_sni_san_validation` (A101): check the server's DNS SANs against the SNI
    /// sent, instead of the matchers.
    pub auto_sni_san_validation: bool,
}

/// A server filter chain's validated `DownstreamTlsContext`: the server side of A29.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DownstreamTls {
    /// `tls_certificate_provider_instance`: the server's certificate (required).
    pub identity: CertificateProviderInstance,
    /// The roots that verify client certificates, when the chain has a validation
    /// context (mTLS). `None`: the server does not ask for a client certificate.
    pub client_roots: Option<CertificateProviderInstance>,
    /// `require_client_certificate`: refuse a client without a valid certificate
    /// (implies `client_roots`). When false but `client_roots` is set, the server asks
    /// for a certificate and verifies one that is sent, but accepts a client without.
    pub require_client_certificate: bool,
}

impl UpstreamTls {
    /// The SNI to send to an endpoint (A101), in this order: the endpoint's hostname
    /// when `auto_host_sni` is set and the host is known and non-empty (its port, if any,
    /// removed); else `sni`; else none. `host` is the EDS endpoint's `hostname`, or the
    /// host of a LOGICAL_DNS cluster.
    pub fn sni_for(&self, host: Option<&str>) -> Option<String> {
        if self.auto_host_sni
            && let Some(host) = host.map(strip_port).filter(|h| !h.is_empty())
        {
            return Some(host.to_owned());
        }
        self.sni.as_deref().map(str::to_owned)
    }

    /// A29's server authorization, with A101's SNI rule: when `auto_sni_san_validation`
    /// is set and an SNI was sent, the server's SANs must match that SNI exactly (DNS
    /// rules for DNS SANs: wildcards, case); otherwise they must satisfy
    /// [`match_subject_alt_names`](Self::match_subject_alt_names). `sans` are the leaf
    /// certificate's, and the chain must already have been verified against the roots.
    ///
    /// # Errors
    /// [`SanMismatch`] ("certificate check failure"), listing the SANs and what they
    /// had to match.
    pub fn check_server_sans(
        &self,
        sni: Option<&str>,
        sans: &[SubjectAltName],
    ) -> Result<(), SanMismatch> {
        let by_sni = sni.filter(|s| self.auto_sni_san_validation && !s.is_empty());
        let (ok, expected) = match by_sni {
            Some(sni) => {
                let exact = [StringMatcher::Exact {
                    value: sni.to_owned(),
                    ignore_case: false,
                }];
                (sans_match(&exact, sans), format!("the SNI {sni:?}"))
            }
            None => (
                sans_match(&self.match_subject_alt_names, sans),
                describe_matchers(&self.match_subject_alt_names),
            ),
        };
        if ok {
            Ok(())
        } else {
            Err(SanMismatch {
                sans: sans.to_vec(),
                expected,
            })
        }
    }

    /// Every certificate provider instance the config names (identity first).
    pub fn provider_instances(&self) -> impl Iterator<Item = &CertificateProviderInstance> {
        let roots = match &self.roots {
            RootCertificates::Provider(p) => Some(p),
            RootCertificates::System => None,
        };
        self.identity.iter().chain(roots)
    }
}

impl DownstreamTls {
    /// Every certificate provider instance the config names (identity first).
    pub fn provider_instances(&self) -> impl Iterator<Item = &CertificateProviderInstance> {
        std::iter::once(&self.identity).chain(self.client_roots.iter())
    }
}

/// `host` without a trailing `:port`: `a.example:443` is `a.example`, `[::1]:443` is
/// `::1`; a bare IPv6 address (several colons, no brackets) is left whole.
pub(super) fn strip_port(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split_once(']').map_or(host, |(inside, _)| inside);
    }
    match host.rsplit_once(':') {
        Some((name, port))
            if !name.contains(':')
                && !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit()) =>
        {
            name
        }
        _ => host,
    }
}
