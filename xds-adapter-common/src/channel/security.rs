//! How the channel dials each endpoint: its credentials (plaintext, or gRPC's
//! `XdsCredentials` with a fallback), and, under xDS credentials, the security config of
//! the cluster an endpoint address belongs to, read from each new configuration.
//!
//! The core's balancer keeps one subchannel per address, shared by the clusters that
//! name it, so the security config is looked up by address. Two clusters naming the
//! same address with different security configs cannot share one connection safely;
//! such an address fails its connection attempts with a message saying so (C-core
//! would make two subchannels; the core's pool has one per address). A connection
//! made with a config the address no longer has is retired once the new config arrives
//! (C-core's behaviour, where the new config makes new subchannels; gRPC-Go keeps the
//! old connections): RPCs on it finish, new ones go on a connection made with the new
//! config.
//!
//! The map also keeps, per cluster, its addresses, so that a pick failing for lack
//! of a reachable endpoint can name the last connection error among them.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

use xds_proto_core::dependency::{ClusterResolution, XdsConfig};
use xds_proto_core::security::UpstreamTls;

use crate::security::{CertificateProviders, FallbackCredentials};

/// How the channel dials endpoints.
#[derive(Clone, Debug, Default)]
pub(crate) enum EndpointCredentials {
    /// Plaintext h2c to every endpoint, whatever the clusters say (the channel built
    /// without `xds_credentials`).
    #[default]
    Plaintext,
    /// gRPC's `XdsCredentials`: the cluster's `UpstreamTls`, else the fallback.
    Xds {
        providers: Arc<CertificateProviders>,
        fallback: FallbackCredentials,
    },
}

/// What one endpoint address is dialled with under xDS credentials.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum EndpointSecurity {
    /// The cluster's TLS, and the endpoint's hostname (A101's `auto_host_sni`).
    Tls(Arc<UpstreamTls>, Option<String>),
    /// No `UpstreamTls`: the fallback credentials.
    Fallback,
    /// Clusters disagree about this address.
    Conflict(String),
}

impl fmt::Display for EndpointSecurity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EndpointSecurity::Tls(..) => f.write_str("TLS"),
            EndpointSecurity::Fallback => f.write_str("fallback credentials"),
            EndpointSecurity::Conflict(why) => f.write_str(why),
        }
    }
}

/// The security of every endpoint address of the current configuration, and each
/// cluster's addresses.
#[derive(Debug, Default)]
pub(crate) struct SecurityMap {
    by_address: HashMap<SocketAddr, (String, EndpointSecurity)>,
    by_cluster: HashMap<String, ClusterEntry>,
}

/// A cluster's security config, its LOGICAL_DNS host, and its addresses.
#[derive(Debug, Default)]
struct ClusterEntry {
    tls: Option<Arc<UpstreamTls>>,
    host: Option<String>,
    addresses: Vec<SocketAddr>,
}

impl SecurityMap {
    /// The map of `config`'s clusters (EDS endpoints now; LOGICAL_DNS addresses as
    /// they resolve, [`Self::dns_resolved`]).
    pub(crate) fn of(config: &XdsConfig) -> SecurityMap {
        let mut map = SecurityMap::default();
        for (name, cluster) in &config.clusters {
            let Ok(cluster) = cluster else { continue };
            let tls = cluster.cluster.tls.clone().map(Arc::new);
            match &cluster.children {
                ClusterResolution::Endpoints {
                    endpoints: Some(endpoints),
                    ..
                } => {
                    let mut addresses = Vec::new();
                    let all = endpoints.priorities.iter().flat_map(|p| &p.localities);
                    for endpoint in all.flat_map(|l| &l.endpoints) {
                        let host = Some(endpoint.hostname.clone()).filter(|h| !h.is_empty());
                        for &address in
                            std::iter::once(&endpoint.address).chain(&endpoint.additional_addresses)
                        {
                            map.add(name, address, &tls, host.clone());
                            addresses.push(address);
                        }
                    }
                    let entry = ClusterEntry {
                        tls,
                        host: None,
                        addresses,
                    };
                    map.by_cluster.insert(name.clone(), entry);
                }
                ClusterResolution::LogicalDns { host, .. } => {
                    let entry = ClusterEntry {
                        tls,
                        host: Some(host.clone()),
                        addresses: Vec::new(),
                    };
                    map.by_cluster.insert(name.clone(), entry);
                }
                _ => {}
            }
        }
        map
    }

    fn add(
        &mut self,
        cluster: &str,
        address: SocketAddr,
        tls: &Option<Arc<UpstreamTls>>,
        host: Option<String>,
    ) {
        let security = match tls {
            Some(tls) => EndpointSecurity::Tls(tls.clone(), host),
            None => EndpointSecurity::Fallback,
        };
        match self.by_address.get_mut(&address) {
            None => {
                self.by_address
                    .insert(address, (cluster.to_owned(), security));
            }
            Some((first, known)) if *known != security && first != cluster => {
                let why = format!(
                    "endpoint {address} is in clusters {first:?} and {cluster:?} with different \
                     security configs; one connection cannot serve both"
                );
                *known = EndpointSecurity::Conflict(why);
            }
            Some(_) => {}
        }
    }

    /// Adds a LOGICAL_DNS cluster's resolved addresses.
    pub(crate) fn dns_resolved(&mut self, cluster: &str, addresses: &[SocketAddr]) {
        let Some(entry) = self.by_cluster.get_mut(cluster) else {
            return;
        };
        let (tls, host) = (entry.tls.clone(), entry.host.clone());
        entry.addresses.extend_from_slice(addresses);
        for &address in addresses {
            self.add(cluster, address, &tls, host.clone());
        }
    }

    /// What `address` is dialled with.
    pub(crate) fn security(&self, address: &SocketAddr) -> EndpointSecurity {
        self.by_address
            .get(address)
            .map_or(EndpointSecurity::Fallback, |(_, s)| s.clone())
    }

    /// The addresses of `cluster`.
    pub(crate) fn addresses(&self, cluster: &str) -> &[SocketAddr] {
        self.by_cluster
            .get(cluster)
            .map_or(&[], |entry| &entry.addresses)
    }
}

#[cfg(test)]
mod tests {
    use xds_proto_core::security::{CertificateProviderInstance, RootCertificates};

    use super::*;

    fn tls(san: &str) -> Option<Arc<UpstreamTls>> {
        Some(Arc::new(UpstreamTls {
            identity: None,
            roots: RootCertificates::Provider(CertificateProviderInstance {
                instance_name: "mesh".into(),
                certificate_name: "".into(),
            }),
            match_subject_alt_names: vec![xds_proto_core::resource::route::StringMatcher::Exact {
                value: san.into(),
                ignore_case: false,
            }]
            .into(),
            sni: None,
            auto_host_sni: false,
            auto_sni_san_validation: false,
        }))
    }

    /// One connection per address cannot serve two security configs: the address is
    /// refused, not dialled with either cluster's.
    #[test]
    fn an_address_two_clusters_secure_differently_is_a_conflict() {
        let (a, b, c): (SocketAddr, SocketAddr, SocketAddr) = (
            "127.0.0.1:1".parse().unwrap(),
            "127.0.0.1:2".parse().unwrap(),
            "127.0.0.1:3".parse().unwrap(),
        );
        let mut map = SecurityMap::default();
        map.add("x", a, &tls("s"), Some("host".into()));
        map.add("y", a, &tls("s"), Some("host".into()));
        map.add("x", b, &tls("s"), None);
        map.add("y", b, &tls("other"), None);
        map.add("x", c, &tls("s"), None);
        map.add("y", c, &None, None);
        assert_eq!(
            map.security(&a),
            EndpointSecurity::Tls(tls("s").unwrap(), Some("host".into()))
        );
        assert!(
            matches!(map.security(&b), EndpointSecurity::Conflict(why) if why.contains("\"x\" and \"y\""))
        );
        assert!(matches!(map.security(&c), EndpointSecurity::Conflict(_)));
        let unknown: SocketAddr = "127.0.0.1:4".parse().unwrap();
        assert_eq!(map.security(&unknown), EndpointSecurity::Fallback);
    }
}
