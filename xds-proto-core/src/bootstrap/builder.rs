//! [`Bootstrap::builder`]: a bootstrap made in code, for a program without a bootstrap
//! file (a tonic user who knows the server). The builder takes the typed parts and
//! validates them exactly as a JSON bootstrap is validated: it writes the document those
//! parts stand for and parses it with the same code, so every rule holds (a server URI
//! the transport can dial, TLS files in pairs, bounded durations, authority templates)
//! and an error names the field by the path it has in a bootstrap document
//! (`xds_servers[0].server_uri`).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::{
    ApiType, AuthorityConfig, Bootstrap, BootstrapError, CertificateProviderConfig,
    ChannelCredentials, LocalityConfig, NodeConfig, ServerConfig, ServerFeatures, TlsCredentials,
    parse_bootstrap,
};

/// Builds a [`Bootstrap`] in code: see [`Bootstrap::builder`].
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct BootstrapBuilder {
    xds_servers: Vec<ServerConfig>,
    node: NodeConfig,
    authorities: BTreeMap<String, AuthorityConfig>,
    client_default_listener_resource_name_template: Option<String>,
    server_listener_resource_name_template: Option<String>,
    certificate_providers: BTreeMap<String, CertificateProviderConfig>,
}

impl Bootstrap {
    /// A bootstrap made in code rather than read from JSON, validated as JSON is:
    ///
    /// ```
    /// use xds_proto_core::bootstrap::{ApiType, Bootstrap, ChannelCredentials, ServerConfig};
    ///
    /// let bootstrap = Bootstrap::builder()
    ///     .xds_server(ServerConfig::new("xds.example:443", ChannelCredentials::Insecure))
    ///     .node_id("my-node")
    ///     .build()?;
    /// assert_eq!(bootstrap.xds_servers[0].api_type, ApiType::Sotw);
    ///
    /// // The same rules as a bootstrap file, and errors name the field.
    /// let err = Bootstrap::builder()
    ///     .xds_server(ServerConfig::new("http://xds.example", ChannelCredentials::Insecure))
    ///     .build()
    ///     .unwrap_err();
    /// assert_eq!(err.path, "xds_servers[0].server_uri");
    /// # Ok::<(), xds_proto_core::bootstrap::BootstrapError>(())
    /// ```
    pub fn builder() -> BootstrapBuilder {
        BootstrapBuilder::default()
    }
}

impl BootstrapBuilder {
    /// Adds a top-level xDS server; the order added is the fallback order (A71).
    pub fn xds_server(mut self, server: ServerConfig) -> Self {
        self.xds_servers.push(server);
        self
    }

    /// The node identity (`node`).
    pub fn node(mut self, node: NodeConfig) -> Self {
        self.node = node;
        self
    }

    /// The node's ID (`node.id`), keeping the rest of the node.
    pub fn node_id(mut self, id: impl Into<String>) -> Self {
        self.node.id = id.into();
        self
    }

    /// Adds (or replaces) the authority `name` (A47).
    pub fn authority(mut self, name: impl Into<String>, authority: AuthorityConfig) -> Self {
        self.authorities.insert(name.into(), authority);
        self
    }

    /// `client_default_listener_resource_name_template` (default `"%s"`).
    pub fn client_default_listener_resource_name_template(
        mut self,
        template: impl Into<String>,
    ) -> Self {
        self.client_default_listener_resource_name_template = Some(template.into());
        self
    }

    /// `server_listener_resource_name_template`.
    pub fn server_listener_resource_name_template(mut self, template: impl Into<String>) -> Self {
        self.server_listener_resource_name_template = Some(template.into());
        self
    }

    /// Adds (or replaces) the certificate provider instance `name`.
    pub fn certificate_provider(
        mut self,
        name: impl Into<String>,
        provider: CertificateProviderConfig,
    ) -> Self {
        self.certificate_providers.insert(name.into(), provider);
        self
    }

    /// The bootstrap, validated as [`Bootstrap::from_json_value`] validates a document.
    ///
    /// # Errors
    /// The first field that breaks the bootstrap rules, with its path in bootstrap
    /// JSON terms (`xds_servers[1].channel_creds[0].config.private_key_file`).
    pub fn build(self) -> Result<Bootstrap, BootstrapError> {
        parse_bootstrap(&self.to_json())
    }

    /// The bootstrap document these parts stand for.
    fn to_json(&self) -> Value {
        let mut root = Map::new();
        root.insert("xds_servers".into(), servers_json(&self.xds_servers));
        root.insert("node".into(), self.node.to_json());
        if !self.authorities.is_empty() {
            let authorities = (self.authorities.iter())
                .map(|(name, a)| (name.clone(), a.to_json()))
                .collect();
            root.insert("authorities".into(), Value::Object(authorities));
        }
        let templates = [
            (
                "client_default_listener_resource_name_template",
                &self.client_default_listener_resource_name_template,
            ),
            (
                "server_listener_resource_name_template",
                &self.server_listener_resource_name_template,
            ),
        ];
        for (field, template) in templates {
            if let Some(template) = template {
                root.insert(field.into(), Value::String(template.clone()));
            }
        }
        if !self.certificate_providers.is_empty() {
            let providers = (self.certificate_providers.iter())
                .map(|(name, p)| (name.clone(), p.to_json()))
                .collect();
            root.insert("certificate_providers".into(), Value::Object(providers));
        }
        Value::Object(root)
    }
}

impl ServerConfig {
    /// A server at `server_uri` reached with `channel_creds`, speaking state of the
    /// world, with no server features (set the fields to change them). Checked when
    /// the bootstrap is built ([`Bootstrap::builder`]).
    pub fn new(server_uri: impl Into<String>, channel_creds: ChannelCredentials) -> ServerConfig {
        ServerConfig {
            server_uri: server_uri.into(),
            channel_creds,
            server_features: ServerFeatures::default(),
            api_type: ApiType::default(),
        }
    }

    fn to_json(&self) -> Value {
        let creds = match &self.channel_creds {
            ChannelCredentials::Insecure => json!({"type": "insecure"}),
            ChannelCredentials::GoogleDefault => json!({"type": "google_default"}),
            ChannelCredentials::Tls(tls) => json!({"type": "tls", "config": tls.to_json()}),
        };
        let f = &self.server_features;
        let features: Vec<&str> = [
            (f.ignore_resource_deletion, "ignore_resource_deletion"),
            (f.fail_on_data_errors, "fail_on_data_errors"),
            (
                f.resource_timer_is_transient_error,
                "resource_timer_is_transient_error",
            ),
            (f.trusted_xds_server, "trusted_xds_server"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect();
        json!({
            "server_uri": self.server_uri,
            "channel_creds": [creds],
            "server_features": features,
            "api_type": self.api_type.as_str(),
        })
    }
}

impl TlsCredentials {
    fn to_json(&self) -> Value {
        let mut config = Map::new();
        let files = [
            ("ca_certificate_file", &self.ca_certificate_file),
            ("certificate_file", &self.certificate_file),
            ("private_key_file", &self.private_key_file),
        ];
        for (field, file) in files {
            if let Some(file) = file {
                config.insert(field.into(), Value::String(file.clone()));
            }
        }
        if let Some(interval) = self.refresh_interval {
            config.insert("refresh_interval".into(), duration_json(interval));
        }
        Value::Object(config)
    }
}

impl NodeConfig {
    fn to_json(&self) -> Value {
        let mut node = json!({
            "id": self.id,
            "cluster": self.cluster,
            "metadata": self.metadata,
        });
        if let Some(LocalityConfig {
            region,
            zone,
            sub_zone,
        }) = &self.locality
        {
            node["locality"] = json!({"region": region, "zone": zone, "sub_zone": sub_zone});
        }
        node
    }
}

impl AuthorityConfig {
    /// The authority `name` with its default listener name template and no servers of
    /// its own (it uses the top-level list).
    pub fn new(name: &str) -> AuthorityConfig {
        AuthorityConfig {
            client_listener_resource_name_template: AuthorityConfig::default_listener_template(
                name,
            ),
            xds_servers: Vec::new(),
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "client_listener_resource_name_template": self.client_listener_resource_name_template,
            "xds_servers": servers_json(&self.xds_servers),
        })
    }
}

fn servers_json(servers: &[ServerConfig]) -> Value {
    Value::Array(servers.iter().map(ServerConfig::to_json).collect())
}

/// A duration in protobuf's JSON form: `"600s"`, `"1.500000000s"`.
fn duration_json(d: Duration) -> Value {
    let text = match d.subsec_nanos() {
        0 => format!("{}s", d.as_secs()),
        nanos => format!("{}.{nanos:09}s", d.as_secs()),
    };
    Value::String(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::BootstrapErrorKind;
    use crate::bootstrap::FileWatcherConfig;

    fn insecure(uri: &str) -> ServerConfig {
        ServerConfig::new(uri, ChannelCredentials::Insecure)
    }

    /// Every part the builder takes comes out as the same bootstrap as its JSON.
    #[test]
    fn a_built_bootstrap_equals_the_same_bootstrap_read_from_json() {
        let tls = TlsCredentials {
            ca_certificate_file: Some("/ca.pem".into()),
            certificate_file: Some("/cert.pem".into()),
            private_key_file: Some("/key.pem".into()),
            refresh_interval: Some(Duration::from_millis(1500)),
        };
        let mut delta = ServerConfig::new("dns:///xds.example:443", ChannelCredentials::Tls(tls));
        delta.api_type = ApiType::Delta;
        delta.server_features.fail_on_data_errors = true;
        delta.server_features.trusted_xds_server = true;
        let mut authority = AuthorityConfig::new("a.example");
        authority.xds_servers.push(insecure("[::1]:8080"));
        let mut node = NodeConfig {
            id: "my-node".into(),
            cluster: "my-cluster".into(),
            locality: Some(LocalityConfig {
                region: "r".into(),
                zone: "z".into(),
                sub_zone: "s".into(),
            }),
            ..NodeConfig::default()
        };
        node.metadata.insert("k".into(), json!({"n": 1.5}));
        let built = Bootstrap::builder()
            .xds_server(delta)
            .xds_server(ServerConfig::new(
                "fallback:443",
                ChannelCredentials::GoogleDefault,
            ))
            .node(node)
            .authority("a.example", authority)
            .client_default_listener_resource_name_template("xdstp:///listeners/%s")
            .server_listener_resource_name_template("grpc/server?xds.resource.listening_address=%s")
            .certificate_provider(
                "files",
                CertificateProviderConfig::FileWatcher(FileWatcherConfig {
                    certificate_file: Some("/c.pem".into()),
                    private_key_file: Some("/k.pem".into()),
                    ca_certificate_file: None,
                    spiffe_trust_bundle_map_file: None,
                    refresh_interval: Duration::from_secs(60),
                }),
            )
            .build()
            .expect("valid");
        let from_json = Bootstrap::from_json_str(
            r#"{
              "xds_servers": [
                {"server_uri": "dns:///xds.example:443",
                 "channel_creds": [{"type": "tls", "config": {
                   "ca_certificate_file": "/ca.pem", "certificate_file": "/cert.pem",
                   "private_key_file": "/key.pem", "refresh_interval": "1.5s"}}],
                 "server_features": ["fail_on_data_errors", "trusted_xds_server"],
                 "api_type": "AGGREGATED_DELTA_GRPC"},
                {"server_uri": "fallback:443", "channel_creds": [{"type": "google_default"}]}
              ],
              "node": {"id": "my-node", "cluster": "my-cluster",
                       "locality": {"region": "r", "zone": "z", "sub_zone": "s"},
                       "metadata": {"k": {"n": 1.5}}},
              "authorities": {"a.example": {"xds_servers": [
                {"server_uri": "[::1]:8080", "channel_creds": [{"type": "insecure"}]}]}},
              "client_default_listener_resource_name_template": "xdstp:///listeners/%s",
              "server_listener_resource_name_template": "grpc/server?xds.resource.listening_address=%s",
              "certificate_providers": {"files": {"plugin_name": "file_watcher",
                                                  "config": {"certificate_file": "/c.pem",
                                                             "private_key_file": "/k.pem",
                                                             "refresh_interval": "60s"}}}
            }"#,
        )
        .expect("valid");
        assert_eq!(built, from_json);
    }

    /// The JSON rules hold for built bootstraps, and the error names the field.
    #[test]
    fn a_built_bootstrap_is_validated_as_json_and_errors_name_the_field() {
        let error = |b: BootstrapBuilder| {
            let e = b.build().expect_err("invalid");
            (e.path.clone(), e.kind)
        };
        assert_eq!(
            error(Bootstrap::builder()),
            ("xds_servers".into(), BootstrapErrorKind::Empty)
        );
        let (path, kind) = error(Bootstrap::builder().xds_server(insecure("unix:/x")));
        assert_eq!(path, "xds_servers[0].server_uri");
        assert!(matches!(kind, BootstrapErrorKind::Invalid(_)), "{kind:?}");
        assert_eq!(
            error(Bootstrap::builder().xds_server(insecure(""))),
            (
                "xds_servers[0].server_uri".into(),
                BootstrapErrorKind::Empty
            )
        );
        let half_pair = TlsCredentials {
            certificate_file: Some("/cert.pem".into()),
            ..TlsCredentials::default()
        };
        let (path, _) = error(
            Bootstrap::builder()
                .xds_server(insecure("xds:443"))
                .xds_server(ServerConfig::new(
                    "xds:443",
                    ChannelCredentials::Tls(half_pair),
                )),
        );
        assert_eq!(
            path,
            "xds_servers[1].channel_creds[0].config.private_key_file"
        );
        let too_long = TlsCredentials {
            refresh_interval: Some(Duration::from_secs(400_000_000_000)),
            ..TlsCredentials::default()
        };
        let (path, _) = error(Bootstrap::builder().xds_server(ServerConfig::new(
            "xds:443",
            ChannelCredentials::Tls(too_long),
        )));
        assert_eq!(
            path,
            "xds_servers[0].channel_creds[0].config.refresh_interval"
        );
        let mut other = AuthorityConfig::new("b.example");
        other.xds_servers.push(insecure("xds:0"));
        let (path, _) = error(
            Bootstrap::builder()
                .xds_server(insecure("xds:443"))
                .authority("a.example", other.clone()),
        );
        assert_eq!(
            path,
            r#"authorities["a.example"].client_listener_resource_name_template"#
        );
        other.client_listener_resource_name_template =
            AuthorityConfig::default_listener_template("a.example");
        let (path, _) = error(
            Bootstrap::builder()
                .xds_server(insecure("xds:443"))
                .authority("a.example", other),
        );
        assert_eq!(
            path,
            r#"authorities["a.example"].xds_servers[0].server_uri"#
        );
    }
}
