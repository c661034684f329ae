//! The gRPC xDS bootstrap: parsing and validating the JSON document that tells the
//! client which xDS servers to talk to (gRFC A27), which authorities exist and how they
//! name listeners (A47 federation), and in which order to fall back between servers (A71).
//!
//! The module owns the bootstrap types, their validation and the error that points at the
//! offending JSON field. A bootstrap made in code ([`Bootstrap::builder`]) goes through
//! the same validation. It never touches the environment or the file system itself:
//! [`Bootstrap::from_env_with`] and [`Bootstrap::from_file_with`] take closures that the
//! adapter supplies.
//!
//! The parts: `json` reads typed fields with their paths, `error` is the error type,
//! `builder` the typed builder,
//! `server` parses the servers (their URIs, channel credentials), `node` the node
//! identity, and `target` resolves data-plane targets to listener names through the
//! templates (A47). This module holds the types, the loading entry points, authorities
//! and their listener name templates; `certificate_providers` the typed certificate
//! provider instances (A29).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

mod builder;
mod certificate_providers;
mod error;
mod json;
mod node;
mod server;
mod target;
#[cfg(test)]
mod tests;

pub use builder::BootstrapBuilder;
use certificate_providers::parse_certificate_provider;
pub use certificate_providers::{
    CertificateProviderConfig, DEFAULT_REFRESH_INTERVAL, FILE_WATCHER_PLUGIN, FileWatcherConfig,
    MIN_REFRESH_INTERVAL, RootsFile,
};
pub use error::{BootstrapError, BootstrapErrorKind};

use json::{as_object, child, keyed, opt_object, opt_string, quote};
use node::parse_node;
pub use server::ServerTarget;
use server::parse_server_list;
pub use target::{ResolvedTarget, TargetError};

/// The environment variable naming the bootstrap file; checked first.
pub const BOOTSTRAP_FILE_ENV: &str = "GRPC_XDS_BOOTSTRAP";

/// The environment variable holding the bootstrap JSON itself; checked second.
pub const BOOTSTRAP_CONFIG_ENV: &str = "GRPC_XDS_BOOTSTRAP_CONFIG";

/// The default `client_default_listener_resource_name_template`.
pub const DEFAULT_CLIENT_LISTENER_TEMPLATE: &str = "%s";

/// The client features every node advertises, in this order.
pub const CLIENT_FEATURES: &[&str] = &[
    "envoy.lb.does_not_support_overprovisioning",
    "xds.config.resource-in-sotw",
];

/// A parsed and validated xDS bootstrap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bootstrap {
    /// The top-level xDS servers, never empty. The order is the fallback order (A71):
    /// the first is the primary, the rest are tried in turn.
    pub xds_servers: Vec<ServerConfig>,
    /// The node identity sent to the servers.
    pub node: NodeConfig,
    /// The authorities for `xdstp://` names (A47), by name.
    pub authorities: BTreeMap<String, AuthorityConfig>,
    /// The template that turns a target into a listener name for targets without an
    /// authority; `%s` is replaced by the target. Defaults to `"%s"`.
    pub client_default_listener_resource_name_template: String,
    /// The listener name template for xDS-enabled servers, if configured.
    pub server_listener_resource_name_template: Option<String>,
    /// Certificate provider plugin instances, by instance name. The names are shared:
    /// every security config decoded with this bootstrap holds its instance name as a
    /// clone of the key here, not as a copy.
    pub certificate_providers: BTreeMap<Arc<str>, CertificateProviderConfig>,
}

/// One xDS management server.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ServerConfig {
    /// The server's target URI, never empty.
    pub server_uri: String,
    /// The first supported entry of the server's `channel_creds`.
    pub channel_creds: ChannelCredentials,
    /// The recognised entries of the server's `server_features`.
    pub server_features: ServerFeatures,
    /// Which ADS variant to speak to it (`api_type`): state of the world by default,
    /// or delta (incremental). Part of the server's identity: the same URI with two
    /// variants is two servers.
    ///
    /// `api_type` is this project's extension of gRPC's bootstrap (gRFC A27 has no
    /// such field, and gRPC's clients speak state of the world only): they ignore
    /// the field, so a bootstrap that sets it still loads in C-core and gRPC-Go, which
    /// speak state of the world to that server.
    pub api_type: ApiType,
}

/// The ADS variant spoken to a server, named as Envoy's `ApiConfigSource.ApiType`
/// names it in a bootstrap entry's `api_type` field (this project's extension of
/// gRPC's bootstrap: see [`ServerConfig::api_type`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ApiType {
    /// `AGGREGATED_GRPC`: `StreamAggregatedResources`, state of the world (the default).
    #[default]
    Sotw,
    /// `AGGREGATED_DELTA_GRPC`: `DeltaAggregatedResources`, incremental xDS.
    Delta,
}

impl ApiType {
    /// The bootstrap's name of the variant.
    pub fn as_str(self) -> &'static str {
        match self {
            ApiType::Sotw => "AGGREGATED_GRPC",
            ApiType::Delta => "AGGREGATED_DELTA_GRPC",
        }
    }

    /// The variant a bootstrap names, if it is one the client speaks.
    pub fn from_name(name: &str) -> Option<ApiType> {
        match name {
            "AGGREGATED_GRPC" => Some(ApiType::Sotw),
            "AGGREGATED_DELTA_GRPC" => Some(ApiType::Delta),
            _ => None,
        }
    }
}

impl ServerConfig {
    /// Whether the client speaks delta (incremental) xDS to this server.
    pub fn is_delta(&self) -> bool {
        self.api_type == ApiType::Delta
    }
}

/// The channel credentials to use for an xDS server.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ChannelCredentials {
    /// `insecure`: plaintext.
    Insecure,
    /// `tls`: TLS or mTLS configured from files (gRFC A65).
    Tls(TlsCredentials),
    /// `google_default`: Google default credentials.
    GoogleDefault,
}

/// The configuration of `tls` channel credentials (gRFC A65).
///
/// `certificate_file` and `private_key_file` are either both set (mTLS) or both unset
/// (plain TLS). Without `ca_certificate_file` the system roots are used.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct TlsCredentials {
    /// Path to the CA certificate bundle.
    pub ca_certificate_file: Option<String>,
    /// Path to the identity certificate chain.
    pub certificate_file: Option<String>,
    /// Path to the identity private key.
    pub private_key_file: Option<String>,
    /// How often to re-read the files; `None` means the default (10 minutes).
    pub refresh_interval: Option<Duration>,
}

/// The `server_features` the client understands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ServerFeatures {
    /// `ignore_resource_deletion` (A53), deprecated by A88: still parsed, but it no
    /// longer has an effect. Deletions are ignored by default (the value is kept);
    /// `fail_on_data_errors` alone decides whether a deletion drops it.
    pub ignore_resource_deletion: bool,
    /// `fail_on_data_errors`: let data errors (NACKs, LDS/CDS deletions, TP3
    /// NOT_FOUND and PERMISSION_DENIED) drop cached resources (A88).
    pub fail_on_data_errors: bool,
    /// `resource_timer_is_transient_error`: the resource timer runs 30 s instead of
    /// 15 s and, when it fires, reports a timeout (UNAVAILABLE) rather than
    /// does-not-exist (A88).
    pub resource_timer_is_transient_error: bool,
    /// `trusted_xds_server`: the server is trusted with security-sensitive config (A81).
    pub trusted_xds_server: bool,
}

/// The node identity from the bootstrap's `node` object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeConfig {
    /// `node.id`; empty when absent.
    pub id: String,
    /// `node.cluster`; empty when absent.
    pub cluster: String,
    /// `node.locality`, when present.
    pub locality: Option<LocalityConfig>,
    /// `node.metadata`; empty when absent.
    pub metadata: Map<String, Value>,
}

/// The node's locality; absent fields are empty.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LocalityConfig {
    /// `region`.
    pub region: String,
    /// `zone`.
    pub zone: String,
    /// `sub_zone`.
    pub sub_zone: String,
}

/// One entry of the bootstrap's `authorities` (A47).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthorityConfig {
    /// The listener name template for targets naming this authority. Defaults to
    /// `xdstp://<authority>/envoy.config.listener.v3.Listener/%s`.
    pub client_listener_resource_name_template: String,
    /// The authority's servers in fallback order; empty means "use the top-level list".
    pub xds_servers: Vec<ServerConfig>,
}

impl Bootstrap {
    /// Parses and validates a bootstrap from its JSON text.
    ///
    /// # Errors
    /// [`BootstrapErrorKind::Syntax`] for malformed JSON; otherwise the first field that
    /// breaks the bootstrap rules, with its JSON path.
    pub fn from_json_str(json: &str) -> Result<Bootstrap, BootstrapError> {
        let value: Value = serde_json::from_str(json)
            .map_err(|e| BootstrapError::new("", BootstrapErrorKind::Syntax(e.to_string())))?;
        Bootstrap::from_json_value(&value)
    }

    /// Validates a bootstrap that is already parsed as JSON.
    ///
    /// # Errors
    /// The first field that breaks the bootstrap rules, with its JSON path.
    pub fn from_json_value(value: &Value) -> Result<Bootstrap, BootstrapError> {
        parse_bootstrap(value)
    }

    /// Reads the bootstrap file at `path` through `read_file` and parses it.
    ///
    /// # Errors
    /// A read failure is a [`BootstrapErrorKind::Io`] whose path is the file's path;
    /// content errors are as for [`Bootstrap::from_json_str`].
    pub fn from_file_with(
        path: &str,
        read_file: impl Fn(&str) -> std::io::Result<String>,
    ) -> Result<Bootstrap, BootstrapError> {
        let text = read_file(path)
            .map_err(|e| BootstrapError::new(path, BootstrapErrorKind::Io(e.to_string())))?;
        Bootstrap::from_json_str(&text)
    }

    /// Loads the bootstrap the way gRPC does, through closures the adapter supplies.
    ///
    /// `GRPC_XDS_BOOTSTRAP`, a file path read with `read_file`, wins; otherwise
    /// `GRPC_XDS_BOOTSTRAP_CONFIG` holds the JSON itself. A variable set to the empty
    /// string counts as unset.
    ///
    /// # Errors
    /// [`BootstrapErrorKind::NotConfigured`] when neither variable is set; otherwise as
    /// for [`Bootstrap::from_file_with`] or [`Bootstrap::from_json_str`].
    pub fn from_env_with(
        get_env: impl Fn(&str) -> Option<String>,
        read_file: impl Fn(&str) -> std::io::Result<String>,
    ) -> Result<Bootstrap, BootstrapError> {
        let non_empty = |name: &str| get_env(name).filter(|v| !v.is_empty());
        if let Some(path) = non_empty(BOOTSTRAP_FILE_ENV) {
            return Bootstrap::from_file_with(&path, read_file);
        }
        if let Some(json) = non_empty(BOOTSTRAP_CONFIG_ENV) {
            return Bootstrap::from_json_str(&json);
        }
        Err(BootstrapError::new("", BootstrapErrorKind::NotConfigured))
    }

    /// The servers, in fallback order, for resources of `authority`.
    ///
    /// `None` (old-style names, no `xdstp:` authority) gives the top-level list. A known
    /// authority gives its own list, or the top-level list when its list is empty.
    ///
    /// # Errors
    /// An authority the bootstrap does not define gives
    /// [`BootstrapErrorKind::UnknownAuthority`] with the path `authorities["<name>"]`.
    pub fn servers_for_authority(
        &self,
        authority: Option<&str>,
    ) -> Result<&[ServerConfig], BootstrapError> {
        let Some(name) = authority else {
            return Ok(&self.xds_servers);
        };
        match self.authorities.get(name) {
            Some(a) if !a.xds_servers.is_empty() => Ok(&a.xds_servers),
            Some(_) => Ok(&self.xds_servers),
            None => Err(BootstrapError::new(
                keyed("authorities", name),
                BootstrapErrorKind::UnknownAuthority,
            )),
        }
    }
}

impl AuthorityConfig {
    /// The default listener name template for the authority `name`.
    #[must_use]
    pub fn default_listener_template(name: &str) -> String {
        format!("xdstp://{name}/envoy.config.listener.v3.Listener/%s")
    }
}

fn parse_bootstrap(value: &Value) -> Result<Bootstrap, BootstrapError> {
    let root = as_object(value, "")?;

    let xds_servers = match root.get("xds_servers") {
        None => {
            return Err(BootstrapError::new(
                "xds_servers",
                BootstrapErrorKind::Missing,
            ));
        }
        Some(v) => parse_server_list(v, "xds_servers")?,
    };
    if xds_servers.is_empty() {
        return Err(BootstrapError::new(
            "xds_servers",
            BootstrapErrorKind::Empty,
        ));
    }

    let node = match opt_object(root, "", "node")? {
        None => NodeConfig::default(),
        Some(obj) => parse_node(obj, "node")?,
    };

    let mut authorities = BTreeMap::new();
    if let Some(obj) = opt_object(root, "", "authorities")? {
        for (name, v) in obj {
            let path = keyed("authorities", name);
            authorities.insert(name.clone(), parse_authority(name, v, &path)?);
        }
    }

    let client_default_listener_resource_name_template =
        opt_string(root, "", "client_default_listener_resource_name_template")?
            .unwrap_or_else(|| DEFAULT_CLIENT_LISTENER_TEMPLATE.to_owned());
    let server_listener_resource_name_template =
        opt_string(root, "", "server_listener_resource_name_template")?;

    let mut certificate_providers = BTreeMap::new();
    if let Some(obj) = opt_object(root, "", "certificate_providers")? {
        for (name, v) in obj {
            let path = keyed("certificate_providers", name);
            certificate_providers
                .insert(name.as_str().into(), parse_certificate_provider(v, &path)?);
        }
    }

    Ok(Bootstrap {
        xds_servers,
        node,
        authorities,
        client_default_listener_resource_name_template,
        server_listener_resource_name_template,
        certificate_providers,
    })
}

fn parse_authority(
    name: &str,
    value: &Value,
    path: &str,
) -> Result<AuthorityConfig, BootstrapError> {
    let obj = as_object(value, path)?;
    let template_field = "client_listener_resource_name_template";
    let client_listener_resource_name_template = match opt_string(obj, path, template_field)? {
        None => AuthorityConfig::default_listener_template(name),
        Some(template) => {
            let prefix = format!("xdstp://{name}/");
            if !template.starts_with(&prefix) {
                return Err(BootstrapError::new(
                    child(path, template_field),
                    BootstrapErrorKind::Invalid(format!("must start with {}", quote(&prefix))),
                ));
            }
            template
        }
    };
    let xds_servers = match obj.get("xds_servers") {
        None => Vec::new(),
        Some(v) => parse_server_list(v, &child(path, "xds_servers"))?,
    };
    Ok(AuthorityConfig {
        client_listener_resource_name_template,
        xds_servers,
    })
}
