//! Per-target client instances (gRFC A71): one [`XdsClient`] per data-plane target,
//! all sharing one parsed bootstrap, so that fallback triggered for one target never
//! changes the data another target uses. The pool also builds the CSDS
//! `ClientStatusResponse` across its instances, with `client_scope` set to each key.

use std::collections::BTreeMap;

use crate::client::{XdsClient, XdsClientConfig};
use crate::pb::envoy::service::status::v3::{
    ClientConfig as CsdsClientConfig, ClientStatusResponse,
};

/// The key xDS-enabled gRPC servers share their client instance under.
pub const SERVER_TARGET: &str = "#server";

/// A pool of client instances keyed by data-plane target.
#[derive(Debug)]
pub struct XdsClientPool {
    config: XdsClientConfig,
    seed: u64,
    clients: BTreeMap<String, XdsClient>,
}

impl XdsClientPool {
    /// An empty pool whose clients share `config` (and its parsed bootstrap). Each
    /// client's RNG seed is derived from `seed` and its target.
    pub fn new(config: XdsClientConfig, seed: u64) -> XdsClientPool {
        XdsClientPool {
            config,
            seed,
            clients: BTreeMap::new(),
        }
    }

    /// The client for `target`, created on first use.
    pub fn get_or_create(&mut self, target: &str) -> &mut XdsClient {
        if !self.clients.contains_key(target) {
            let seed = self.seed ^ fnv1a(target.as_bytes());
            self.clients.insert(
                target.to_string(),
                XdsClient::new(self.config.clone(), seed),
            );
        }
        self.clients.get_mut(target).expect("inserted above")
    }

    /// The client for `target`, if one exists.
    pub fn get(&self, target: &str) -> Option<&XdsClient> {
        self.clients.get(target)
    }

    /// The client for `target`, mutably, if one exists.
    pub fn get_mut(&mut self, target: &str) -> Option<&mut XdsClient> {
        self.clients.get_mut(target)
    }

    /// Removes the client of `target` (its last user went away).
    pub fn remove(&mut self, target: &str) -> Option<XdsClient> {
        self.clients.remove(target)
    }

    /// The targets that have a client, in order.
    pub fn targets(&self) -> impl Iterator<Item = &str> {
        self.clients.keys().map(String::as_str)
    }

    /// The shared configuration.
    pub fn config(&self) -> &XdsClientConfig {
        &self.config
    }

    /// The CSDS response: one `ClientConfig` per instance, `client_scope` set to its target.
    pub fn csds_response(&self) -> ClientStatusResponse {
        ClientStatusResponse {
            config: self
                .clients
                .iter()
                .map(|(target, client)| CsdsClientConfig {
                    node: Some(client.node().clone()),
                    generic_xds_configs: client.csds_configs(),
                    client_scope: target.clone(),
                    ..Default::default()
                })
                .collect(),
        }
    }
}

/// FNV-1a, to derive per-target seeds without any randomness.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Bootstrap;
    use std::sync::Arc;

    const BOOTSTRAP: &str = r#"{"xds_servers": [{"server_uri": "a:1", "channel_creds": [{"type": "insecure"}]}],
        "node": {"id": "n1"}}"#;

    #[test]
    fn clients_are_per_target_and_share_one_bootstrap() {
        let config = XdsClientConfig::new(Bootstrap::from_json_str(BOOTSTRAP).unwrap());
        let mut pool = XdsClientPool::new(config, 9);
        let a = Arc::as_ptr(&pool.get_or_create("dns:///a").config().bootstrap);
        let b = Arc::as_ptr(&pool.get_or_create(SERVER_TARGET).config().bootstrap);
        assert_eq!(a, b);
        pool.get_or_create("dns:///a");
        assert_eq!(
            pool.targets().collect::<Vec<_>>(),
            vec![SERVER_TARGET, "dns:///a"]
        );
        pool.get_mut("dns:///a")
            .unwrap()
            .watch::<crate::Cds>("c1")
            .unwrap();
        let csds = pool.csds_response();
        assert_eq!(csds.config.len(), 2);
        assert_eq!(csds.config[0].client_scope, SERVER_TARGET);
        assert!(csds.config[0].generic_xds_configs.is_empty());
        assert_eq!(csds.config[1].client_scope, "dns:///a");
        assert_eq!(csds.config[1].node.as_ref().unwrap().id, "n1");
        assert_eq!(csds.config[1].generic_xds_configs[0].name, "c1");
        assert!(pool.remove("dns:///a").is_some());
        assert!(pool.get("dns:///a").is_none());
    }
}
