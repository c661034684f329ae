//! The gRPC xDS bootstrap: parsing and validating the JSON document that tells the
//! client which xDS servers to talk to (gRFC A27), which authorities exist and how they
//! name listeners (A47 federation), and in which order to fall back between servers (A71).
//!
//! The module owns the bootstrap types, their validation and the error that points at the
//! offending JSON field. It never touches the environment or the file system itself:
//! [`Bootstrap::from_env_with`] and [`Bootstrap::from_file_with`] take closures that the
//! adapter supplies.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::pb::envoy::config::core::v3 as core_pb;
use crate::pb::google::protobuf as pbuf;

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

/// The largest `google.protobuf.Duration`, in seconds (10,000 years).
const MAX_DURATION_SECS: u64 = 315_576_000_000;

type Object = Map<String, Value>;

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
    /// Certificate provider plugin instances, by instance name.
    pub certificate_providers: BTreeMap<String, CertificateProviderConfig>,
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
}

/// The channel credentials to use for an xDS server.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
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
    /// `ignore_resource_deletion`: keep using a resource the server stops sending (A53).
    pub ignore_resource_deletion: bool,
    /// `fail_on_data_errors`: let data errors drop cached resources (A88).
    pub fail_on_data_errors: bool,
    /// `resource_timer_is_transient_error`: a does-not-exist timeout is reported as an
    /// ambient error rather than as does-not-exist (A88).
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

/// One entry of the bootstrap's `certificate_providers`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertificateProviderConfig {
    /// The plugin that implements the provider, never empty.
    pub plugin_name: String,
    /// The plugin's configuration, uninterpreted; `{}` when absent.
    pub config: Value,
}

/// Why a bootstrap could not be loaded.
///
/// `path` says where: a JSON path into the document such as
/// `xds_servers[1].server_uri` or `authorities["a.example"].xds_servers`; the empty
/// string for the document as a whole; the file name for [`BootstrapErrorKind::Io`].
/// `Display` prints `<path>: <reason>`, or just the reason when the path is empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootstrapError {
    /// Where the problem is.
    pub path: String,
    /// What the problem is.
    pub kind: BootstrapErrorKind,
}

/// The kinds of [`BootstrapError`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BootstrapErrorKind {
    /// A required field is absent.
    Missing,
    /// A field has the wrong JSON type.
    WrongType {
        /// The JSON type the field must have.
        expected: &'static str,
        /// The JSON type it has.
        found: &'static str,
    },
    /// A string or array that must not be empty is empty.
    Empty,
    /// A value is malformed; the string says how.
    Invalid(String),
    /// No entry of a `channel_creds` list has a supported type.
    NoSupportedChannelCreds {
        /// The types the list named, in order.
        seen: Vec<String>,
    },
    /// The document is not valid JSON; the message carries the line and column.
    Syntax(String),
    /// [`Bootstrap::servers_for_authority`] was asked for an authority the bootstrap
    /// does not define.
    UnknownAuthority,
    /// Neither `GRPC_XDS_BOOTSTRAP` nor `GRPC_XDS_BOOTSTRAP_CONFIG` is set.
    NotConfigured,
    /// The bootstrap file could not be read.
    Io(String),
}

impl BootstrapError {
    fn new(path: impl Into<String>, kind: BootstrapErrorKind) -> BootstrapError {
        BootstrapError {
            path: path.into(),
            kind,
        }
    }
}

impl fmt::Display for BootstrapErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BootstrapErrorKind::Missing => f.write_str("missing"),
            BootstrapErrorKind::WrongType { expected, found } => {
                write!(f, "expected {expected}, got {found}")
            }
            BootstrapErrorKind::Empty => f.write_str("must not be empty"),
            BootstrapErrorKind::Invalid(reason) => f.write_str(reason),
            BootstrapErrorKind::NoSupportedChannelCreds { seen } => {
                f.write_str("no supported channel credentials type (saw: ")?;
                for (i, ty) in seen.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    f.write_str(&quote(ty))?;
                }
                f.write_str(")")
            }
            BootstrapErrorKind::Syntax(message) => write!(f, "invalid JSON: {message}"),
            BootstrapErrorKind::UnknownAuthority => f.write_str("unknown authority"),
            BootstrapErrorKind::NotConfigured => write!(
                f,
                "xDS bootstrap not configured: neither {BOOTSTRAP_FILE_ENV} nor \
                 {BOOTSTRAP_CONFIG_ENV} is set"
            ),
            BootstrapErrorKind::Io(message) => {
                write!(f, "cannot read bootstrap file: {message}")
            }
        }
    }
}

impl fmt::Display for BootstrapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.kind)
        } else {
            write!(f, "{}: {}", self.path, self.kind)
        }
    }
}

impl std::error::Error for BootstrapError {}

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

impl NodeConfig {
    /// The `Node` message sent on the first request of each stream: the bootstrap's
    /// identity plus the client's user agent and [`CLIENT_FEATURES`]. Metadata numbers
    /// become `f64`; empty metadata is left unset.
    #[must_use]
    pub fn to_proto(&self, user_agent_name: &str, user_agent_version: &str) -> core_pb::Node {
        core_pb::Node {
            id: self.id.clone(),
            cluster: self.cluster.clone(),
            metadata: if self.metadata.is_empty() {
                None
            } else {
                Some(json_object_to_struct(&self.metadata))
            },
            locality: self.locality.as_ref().map(|l| core_pb::Locality {
                region: l.region.clone(),
                zone: l.zone.clone(),
                sub_zone: l.sub_zone.clone(),
            }),
            user_agent_name: user_agent_name.to_owned(),
            user_agent_version_type: Some(core_pb::node::UserAgentVersionType::UserAgentVersion(
                user_agent_version.to_owned(),
            )),
            client_features: CLIENT_FEATURES.iter().map(|f| (*f).to_owned()).collect(),
            ..Default::default()
        }
    }
}

// ---------------------------------------------------------------------------
// JSON -> protobuf Struct

fn json_object_to_struct(obj: &Object) -> pbuf::Struct {
    pbuf::Struct {
        fields: obj
            .iter()
            .map(|(k, v)| (k.clone(), json_to_proto_value(v)))
            .collect(),
    }
}

fn json_to_proto_value(value: &Value) -> pbuf::Value {
    use pbuf::value::Kind;
    let kind = match value {
        Value::Null => Kind::NullValue(pbuf::NullValue::NullValue as i32),
        Value::Bool(b) => Kind::BoolValue(*b),
        Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(f64::NAN)),
        Value::String(s) => Kind::StringValue(s.clone()),
        Value::Array(items) => Kind::ListValue(pbuf::ListValue {
            values: items.iter().map(json_to_proto_value).collect(),
        }),
        Value::Object(obj) => Kind::StructValue(json_object_to_struct(obj)),
    };
    pbuf::Value { kind: Some(kind) }
}

// ---------------------------------------------------------------------------
// Paths and typed field access

/// `s` as a JSON string literal, quotes and escapes included.
fn quote(s: &str) -> String {
    Value::String(s.to_owned()).to_string()
}

fn child(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

fn index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

fn keyed(path: &str, key: &str) -> String {
    format!("{path}[{}]", quote(key))
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn wrong_type(path: &str, expected: &'static str, value: &Value) -> BootstrapError {
    BootstrapError::new(
        path,
        BootstrapErrorKind::WrongType {
            expected,
            found: type_name(value),
        },
    )
}

fn as_object<'a>(value: &'a Value, path: &str) -> Result<&'a Object, BootstrapError> {
    value
        .as_object()
        .ok_or_else(|| wrong_type(path, "object", value))
}

fn as_array<'a>(value: &'a Value, path: &str) -> Result<&'a [Value], BootstrapError> {
    match value {
        Value::Array(items) => Ok(items),
        _ => Err(wrong_type(path, "array", value)),
    }
}

fn as_string<'a>(value: &'a Value, path: &str) -> Result<&'a str, BootstrapError> {
    value
        .as_str()
        .ok_or_else(|| wrong_type(path, "string", value))
}

fn opt_string(obj: &Object, path: &str, name: &str) -> Result<Option<String>, BootstrapError> {
    obj.get(name)
        .map(|v| as_string(v, &child(path, name)).map(str::to_owned))
        .transpose()
}

fn opt_object<'a>(
    obj: &'a Object,
    path: &str,
    name: &str,
) -> Result<Option<&'a Object>, BootstrapError> {
    obj.get(name)
        .map(|v| as_object(v, &child(path, name)))
        .transpose()
}

/// A string field that must be present and non-empty.
fn required_string(obj: &Object, path: &str, name: &str) -> Result<String, BootstrapError> {
    let field_path = child(path, name);
    match opt_string(obj, path, name)? {
        None => Err(BootstrapError::new(field_path, BootstrapErrorKind::Missing)),
        Some(s) if s.is_empty() => Err(BootstrapError::new(field_path, BootstrapErrorKind::Empty)),
        Some(s) => Ok(s),
    }
}

/// An optional string field that, when present, must be non-empty.
fn opt_non_empty_string(
    obj: &Object,
    path: &str,
    name: &str,
) -> Result<Option<String>, BootstrapError> {
    match opt_string(obj, path, name)? {
        Some(s) if s.is_empty() => Err(BootstrapError::new(
            child(path, name),
            BootstrapErrorKind::Empty,
        )),
        other => Ok(other),
    }
}

// ---------------------------------------------------------------------------
// The parser proper

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
            certificate_providers.insert(name.clone(), parse_certificate_provider(v, &path)?);
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

/// A list of servers; the caller decides whether an empty list is acceptable.
fn parse_server_list(value: &Value, path: &str) -> Result<Vec<ServerConfig>, BootstrapError> {
    as_array(value, path)?
        .iter()
        .enumerate()
        .map(|(i, v)| parse_server(v, &index(path, i)))
        .collect()
}

fn parse_server(value: &Value, path: &str) -> Result<ServerConfig, BootstrapError> {
    let obj = as_object(value, path)?;
    let server_uri = required_string(obj, path, "server_uri")?;
    let creds_path = child(path, "channel_creds");
    let channel_creds = match obj.get("channel_creds") {
        None => return Err(BootstrapError::new(creds_path, BootstrapErrorKind::Missing)),
        Some(v) => parse_channel_creds(v, &creds_path)?,
    };
    let server_features = match obj.get("server_features") {
        None => ServerFeatures::default(),
        Some(v) => parse_server_features(v, &child(path, "server_features"))?,
    };
    Ok(ServerConfig {
        server_uri,
        channel_creds,
        server_features,
    })
}

/// Validates every entry's shape and picks the first supported type.
fn parse_channel_creds(value: &Value, path: &str) -> Result<ChannelCredentials, BootstrapError> {
    let entries = as_array(value, path)?;
    if entries.is_empty() {
        return Err(BootstrapError::new(path, BootstrapErrorKind::Empty));
    }
    let mut chosen = None;
    let mut seen = Vec::with_capacity(entries.len());
    for (i, entry) in entries.iter().enumerate() {
        let entry_path = index(path, i);
        let obj = as_object(entry, &entry_path)?;
        let ty = match obj.get("type") {
            None => {
                return Err(BootstrapError::new(
                    child(&entry_path, "type"),
                    BootstrapErrorKind::Missing,
                ));
            }
            Some(v) => as_string(v, &child(&entry_path, "type"))?,
        };
        let config = opt_object(obj, &entry_path, "config")?;
        if chosen.is_none() {
            chosen = match ty {
                "insecure" => Some(ChannelCredentials::Insecure),
                "google_default" => Some(ChannelCredentials::GoogleDefault),
                "tls" => Some(ChannelCredentials::Tls(parse_tls_config(
                    config,
                    &child(&entry_path, "config"),
                )?)),
                _ => None,
            };
        }
        seen.push(ty.to_owned());
    }
    chosen.ok_or_else(|| {
        BootstrapError::new(path, BootstrapErrorKind::NoSupportedChannelCreds { seen })
    })
}

fn parse_tls_config(config: Option<&Object>, path: &str) -> Result<TlsCredentials, BootstrapError> {
    let Some(obj) = config else {
        return Ok(TlsCredentials::default());
    };
    let ca_certificate_file = opt_non_empty_string(obj, path, "ca_certificate_file")?;
    let certificate_file = opt_non_empty_string(obj, path, "certificate_file")?;
    let private_key_file = opt_non_empty_string(obj, path, "private_key_file")?;
    match (&certificate_file, &private_key_file) {
        (Some(_), None) => {
            return Err(BootstrapError::new(
                child(path, "private_key_file"),
                BootstrapErrorKind::Invalid("must be set when certificate_file is set".into()),
            ));
        }
        (None, Some(_)) => {
            return Err(BootstrapError::new(
                child(path, "certificate_file"),
                BootstrapErrorKind::Invalid("must be set when private_key_file is set".into()),
            ));
        }
        _ => {}
    }
    let refresh_interval = match opt_string(obj, path, "refresh_interval")? {
        None => None,
        Some(s) => Some(parse_proto_duration(&s).map_err(|reason| {
            BootstrapError::new(
                child(path, "refresh_interval"),
                BootstrapErrorKind::Invalid(reason),
            )
        })?),
    };
    Ok(TlsCredentials {
        ca_certificate_file,
        certificate_file,
        private_key_file,
        refresh_interval,
    })
}

/// Parses the protobuf JSON form of a `google.protobuf.Duration` (`"600s"`, `"1.5s"`),
/// rejecting negative values, which make no sense for an interval.
fn parse_proto_duration(text: &str) -> Result<Duration, String> {
    let invalid = || {
        format!(
            "invalid duration {}: expected a protobuf JSON duration such as \"600s\"",
            quote(text)
        )
    };
    let (negative, magnitude) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let body = magnitude.strip_suffix('s').ok_or_else(invalid)?;
    let (whole, frac) = match body.split_once('.') {
        Some((w, f)) => (w, Some(f)),
        None => (body, None),
    };
    if whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    let secs: u64 = whole.parse().map_err(|_| invalid())?;
    if secs > MAX_DURATION_SECS {
        return Err(format!("invalid duration {}: too large", quote(text)));
    }
    let nanos = match frac {
        None => 0,
        Some(f) => {
            if f.is_empty() || f.len() > 9 || !f.bytes().all(|b| b.is_ascii_digit()) {
                return Err(invalid());
            }
            let digits: u32 = f.parse().map_err(|_| invalid())?;
            // Scale "5" (tenths) up to nanoseconds; at most 9 digits, so no overflow.
            (f.len()..9).fold(digits, |n, _| n * 10)
        }
    };
    if negative {
        return Err(format!(
            "invalid duration {}: must not be negative",
            quote(text)
        ));
    }
    Ok(Duration::new(secs, nanos))
}

fn parse_server_features(value: &Value, path: &str) -> Result<ServerFeatures, BootstrapError> {
    let mut features = ServerFeatures::default();
    for (i, v) in as_array(value, path)?.iter().enumerate() {
        match as_string(v, &index(path, i))? {
            "ignore_resource_deletion" => features.ignore_resource_deletion = true,
            "fail_on_data_errors" => features.fail_on_data_errors = true,
            "resource_timer_is_transient_error" => {
                features.resource_timer_is_transient_error = true;
            }
            "trusted_xds_server" => features.trusted_xds_server = true,
            _ => {}
        }
    }
    Ok(features)
}

fn parse_node(obj: &Object, path: &str) -> Result<NodeConfig, BootstrapError> {
    let id = opt_string(obj, path, "id")?.unwrap_or_default();
    let cluster = opt_string(obj, path, "cluster")?.unwrap_or_default();
    let locality_path = child(path, "locality");
    let locality = match opt_object(obj, path, "locality")? {
        None => None,
        Some(l) => Some(LocalityConfig {
            region: opt_string(l, &locality_path, "region")?.unwrap_or_default(),
            zone: opt_string(l, &locality_path, "zone")?.unwrap_or_default(),
            sub_zone: opt_string(l, &locality_path, "sub_zone")?.unwrap_or_default(),
        }),
    };
    let metadata = opt_object(obj, path, "metadata")?
        .cloned()
        .unwrap_or_default();
    Ok(NodeConfig {
        id,
        cluster,
        locality,
        metadata,
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

fn parse_certificate_provider(
    value: &Value,
    path: &str,
) -> Result<CertificateProviderConfig, BootstrapError> {
    let obj = as_object(value, path)?;
    let plugin_name = required_string(obj, path, "plugin_name")?;
    let config = obj
        .get("config")
        .cloned()
        .unwrap_or_else(|| Value::Object(Map::new()));
    Ok(CertificateProviderConfig {
        plugin_name,
        config,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::cell::RefCell;
    use std::io;

    const MINIMAL: &str = r#"{
        "xds_servers": [{"server_uri": "xds.example:443", "channel_creds": [{"type": "insecure"}]}]
    }"#;

    fn parse(value: Value) -> Result<Bootstrap, BootstrapError> {
        Bootstrap::from_json_str(&value.to_string())
    }

    fn err(value: Value) -> String {
        match parse(value) {
            Ok(b) => panic!("expected an error, parsed {b:?}"),
            Err(e) => e.to_string(),
        }
    }

    fn insecure(uri: &str) -> ServerConfig {
        ServerConfig {
            server_uri: uri.to_owned(),
            channel_creds: ChannelCredentials::Insecure,
            server_features: ServerFeatures::default(),
        }
    }

    /// A valid bootstrap with one field replaced, for error tests.
    fn with(key: &str, value: Value) -> Value {
        let mut root = json!({
            "xds_servers": [{"server_uri": "xds.example:443", "channel_creds": [{"type": "insecure"}]}]
        });
        root[key] = value;
        root
    }

    /// A valid bootstrap whose only server is `server`.
    fn with_server(server: Value) -> Value {
        json!({ "xds_servers": [server] })
    }

    /// A valid bootstrap whose only server has these `channel_creds`.
    fn with_creds(creds: Value) -> Value {
        with_server(json!({"server_uri": "s", "channel_creds": creds}))
    }

    fn tls_with(config: Value) -> Value {
        with_creds(json!([{"type": "tls", "config": config}]))
    }

    #[test]
    fn full_bootstrap_parses_every_field() {
        let text = r#"{
            "xds_servers": [
                {
                    "server_uri": "primary.example:443",
                    "channel_creds": [
                        {"type": "unknown_creds", "config": {"x": 1}},
                        {"type": "tls", "config": {
                            "ca_certificate_file": "/certs/ca.pem",
                            "certificate_file": "/certs/cert.pem",
                            "private_key_file": "/certs/key.pem",
                            "refresh_interval": "600s",
                            "unknown_field": true
                        }},
                        {"type": "insecure"}
                    ],
                    "server_features": ["ignore_resource_deletion", "trusted_xds_server", "xds_v3"]
                },
                {
                    "server_uri": "fallback.example:443",
                    "channel_creds": [{"type": "google_default"}],
                    "server_features": [
                        "fail_on_data_errors", "resource_timer_is_transient_error"
                    ]
                }
            ],
            "node": {
                "id": "projects/1/networks/default/nodes/abc",
                "cluster": "cluster-a",
                "locality": {"region": "us-east1", "zone": "us-east1-b", "sub_zone": "rack7"},
                "metadata": {"TRAFFICDIRECTOR_NETWORK_NAME": "default", "n": 3, "nested": {"k": [1, "two"]}},
                "user_agent_name": "ignored"
            },
            "authorities": {
                "a.example": {
                    "client_listener_resource_name_template":
                        "xdstp://a.example/envoy.config.listener.v3.Listener/custom/%s",
                    "xds_servers": [
                        {"server_uri": "a1.example:443", "channel_creds": [{"type": "insecure"}]},
                        {"server_uri": "a2.example:443", "channel_creds": [{"type": "insecure"}]}
                    ]
                },
                "b.example": {}
            },
            "client_default_listener_resource_name_template": "xdstp://a.example/envoy.config.listener.v3.Listener/%s",
            "server_listener_resource_name_template": "grpc/server?xds.resource.listening_address=%s",
            "certificate_providers": {
                "default": {"plugin_name": "file_watcher", "config": {"certificate_file": "/c.pem", "refresh_interval": "5s"}},
                "bare": {"plugin_name": "meshca"}
            },
            "some_future_field": [1, 2, 3]
        }"#;
        let b = Bootstrap::from_json_str(text).unwrap();

        let mut metadata = Map::new();
        metadata.insert("TRAFFICDIRECTOR_NETWORK_NAME".into(), json!("default"));
        metadata.insert("n".into(), json!(3));
        metadata.insert("nested".into(), json!({"k": [1, "two"]}));

        let expected = Bootstrap {
            xds_servers: vec![
                ServerConfig {
                    server_uri: "primary.example:443".into(),
                    channel_creds: ChannelCredentials::Tls(TlsCredentials {
                        ca_certificate_file: Some("/certs/ca.pem".into()),
                        certificate_file: Some("/certs/cert.pem".into()),
                        private_key_file: Some("/certs/key.pem".into()),
                        refresh_interval: Some(Duration::from_secs(600)),
                    }),
                    server_features: ServerFeatures {
                        ignore_resource_deletion: true,
                        fail_on_data_errors: false,
                        resource_timer_is_transient_error: false,
                        trusted_xds_server: true,
                    },
                },
                ServerConfig {
                    server_uri: "fallback.example:443".into(),
                    channel_creds: ChannelCredentials::GoogleDefault,
                    server_features: ServerFeatures {
                        ignore_resource_deletion: false,
                        fail_on_data_errors: true,
                        resource_timer_is_transient_error: true,
                        trusted_xds_server: false,
                    },
                },
            ],
            node: NodeConfig {
                id: "projects/1/networks/default/nodes/abc".into(),
                cluster: "cluster-a".into(),
                locality: Some(LocalityConfig {
                    region: "us-east1".into(),
                    zone: "us-east1-b".into(),
                    sub_zone: "rack7".into(),
                }),
                metadata,
            },
            authorities: BTreeMap::from([
                (
                    "a.example".to_owned(),
                    AuthorityConfig {
                        client_listener_resource_name_template:
                            "xdstp://a.example/envoy.config.listener.v3.Listener/custom/%s".into(),
                        xds_servers: vec![insecure("a1.example:443"), insecure("a2.example:443")],
                    },
                ),
                (
                    "b.example".to_owned(),
                    AuthorityConfig {
                        client_listener_resource_name_template:
                            "xdstp://b.example/envoy.config.listener.v3.Listener/%s".into(),
                        xds_servers: vec![],
                    },
                ),
            ]),
            client_default_listener_resource_name_template:
                "xdstp://a.example/envoy.config.listener.v3.Listener/%s".into(),
            server_listener_resource_name_template: Some(
                "grpc/server?xds.resource.listening_address=%s".into(),
            ),
            certificate_providers: BTreeMap::from([
                (
                    "bare".to_owned(),
                    CertificateProviderConfig {
                        plugin_name: "meshca".into(),
                        config: json!({}),
                    },
                ),
                (
                    "default".to_owned(),
                    CertificateProviderConfig {
                        plugin_name: "file_watcher".into(),
                        config: json!({"certificate_file": "/c.pem", "refresh_interval": "5s"}),
                    },
                ),
            ]),
        };
        assert_eq!(b, expected);
    }

    #[test]
    fn minimal_bootstrap_gets_defaults() {
        let b = Bootstrap::from_json_str(MINIMAL).unwrap();
        assert_eq!(b.xds_servers, vec![insecure("xds.example:443")]);
        assert_eq!(b.node, NodeConfig::default());
        assert_eq!(b.node.id, "");
        assert_eq!(b.node.cluster, "");
        assert_eq!(b.node.locality, None);
        assert!(b.node.metadata.is_empty());
        assert!(b.authorities.is_empty());
        assert_eq!(b.client_default_listener_resource_name_template, "%s");
        assert_eq!(b.server_listener_resource_name_template, None);
        assert!(b.certificate_providers.is_empty());
        assert_eq!(b.xds_servers[0].server_features, ServerFeatures::default());
    }

    #[test]
    fn node_locality_fields_default_to_empty() {
        let b = parse(with("node", json!({"locality": {"zone": "z"}}))).unwrap();
        assert_eq!(
            b.node.locality,
            Some(LocalityConfig {
                region: String::new(),
                zone: "z".into(),
                sub_zone: String::new()
            })
        );
        let b = parse(with("node", json!({}))).unwrap();
        assert_eq!(b.node, NodeConfig::default());
    }

    #[test]
    fn channel_creds_first_supported_type_wins() {
        let cases = [
            (
                json!([{"type": "insecure"}, {"type": "google_default"}]),
                ChannelCredentials::Insecure,
            ),
            (
                json!([{"type": "google_default"}, {"type": "insecure"}]),
                ChannelCredentials::GoogleDefault,
            ),
            (
                json!([{"type": "foo"}, {"type": "bar", "config": {}}, {"type": "google_default"}]),
                ChannelCredentials::GoogleDefault,
            ),
            (
                json!([{"type": "tls"}, {"type": "insecure"}]),
                ChannelCredentials::Tls(TlsCredentials::default()),
            ),
            (
                json!([{"type": "tls", "config": {}}]),
                ChannelCredentials::Tls(TlsCredentials::default()),
            ),
            (
                json!([{"type": "tls", "config": {"ca_certificate_file": "/ca.pem"}}]),
                ChannelCredentials::Tls(TlsCredentials {
                    ca_certificate_file: Some("/ca.pem".into()),
                    ..TlsCredentials::default()
                }),
            ),
            (
                json!([{"type": "tls", "config": {"certificate_file": "/c", "private_key_file": "/k", "refresh_interval": "1.5s"}}]),
                ChannelCredentials::Tls(TlsCredentials {
                    ca_certificate_file: None,
                    certificate_file: Some("/c".into()),
                    private_key_file: Some("/k".into()),
                    refresh_interval: Some(Duration::from_millis(1500)),
                }),
            ),
            // The config of an entry after the chosen one is not interpreted.
            (
                json!([{"type": "insecure"}, {"type": "tls", "config": {"certificate_file": "/c"}}]),
                ChannelCredentials::Insecure,
            ),
            // Unknown types' configs are not interpreted either.
            (
                json!([{"type": "foo", "config": {"certificate_file": 7}}, {"type": "insecure"}]),
                ChannelCredentials::Insecure,
            ),
        ];
        for (creds, expected) in cases {
            let b = parse(with_creds(creds.clone())).unwrap_or_else(|e| panic!("{creds}: {e}"));
            assert_eq!(b.xds_servers[0].channel_creds, expected, "{creds}");
        }
    }

    #[test]
    fn server_features_recognised_and_unknown_ignored() {
        let b = parse(with_server(json!({
            "server_uri": "s",
            "channel_creds": [{"type": "insecure"}],
            "server_features": ["xds_v3", "fail_on_data_errors", "", "fail_on_data_errors"]
        })))
        .unwrap();
        assert_eq!(
            b.xds_servers[0].server_features,
            ServerFeatures {
                fail_on_data_errors: true,
                ..ServerFeatures::default()
            }
        );
        let b = parse(with_server(json!({
            "server_uri": "s",
            "channel_creds": [{"type": "insecure"}],
            "server_features": []
        })))
        .unwrap();
        assert_eq!(b.xds_servers[0].server_features, ServerFeatures::default());
    }

    #[test]
    fn authority_defaults_and_empty_server_list() {
        let b = parse(with(
            "authorities",
            json!({"x.test": {"xds_servers": []}, "": {}, "y.test": {"unknown": 1}}),
        ))
        .unwrap();
        assert_eq!(b.authorities.len(), 3);
        assert_eq!(
            b.authorities["x.test"],
            AuthorityConfig {
                client_listener_resource_name_template:
                    "xdstp://x.test/envoy.config.listener.v3.Listener/%s".into(),
                xds_servers: vec![],
            }
        );
        assert_eq!(
            b.authorities[""].client_listener_resource_name_template,
            "xdstp:///envoy.config.listener.v3.Listener/%s"
        );
        assert_eq!(
            b.authorities["y.test"].client_listener_resource_name_template,
            "xdstp://y.test/envoy.config.listener.v3.Listener/%s"
        );
    }

    #[test]
    fn authority_template_with_matching_prefix_is_kept() {
        let b = parse(with(
            "authorities",
            json!({"a.example": {"client_listener_resource_name_template": "xdstp://a.example/%s"}}),
        ))
        .unwrap();
        assert_eq!(
            b.authorities["a.example"].client_listener_resource_name_template,
            "xdstp://a.example/%s"
        );
    }

    #[test]
    fn every_error_path_has_an_exact_message() {
        let s = |uri: &str| json!({"server_uri": uri, "channel_creds": [{"type": "insecure"}]});
        let cases: Vec<(Value, &str)> = vec![
            // The document.
            (json!([]), "expected object, got array"),
            (json!(null), "expected object, got null"),
            (json!("x"), "expected object, got string"),
            // xds_servers.
            (json!({}), "xds_servers: missing"),
            (json!({"xds_servers": []}), "xds_servers: must not be empty"),
            (
                json!({"xds_servers": {}}),
                "xds_servers: expected array, got object",
            ),
            (
                json!({"xds_servers": [s("a"), 5]}),
                "xds_servers[1]: expected object, got number",
            ),
            // server_uri.
            (
                json!({"xds_servers": [s("a"), {"channel_creds": [{"type": "insecure"}]}]}),
                "xds_servers[1].server_uri: missing",
            ),
            (
                with_server(json!({"server_uri": "", "channel_creds": [{"type": "insecure"}]})),
                "xds_servers[0].server_uri: must not be empty",
            ),
            (
                with_server(json!({"server_uri": 1, "channel_creds": [{"type": "insecure"}]})),
                "xds_servers[0].server_uri: expected string, got number",
            ),
            // channel_creds.
            (
                with_server(json!({"server_uri": "s"})),
                "xds_servers[0].channel_creds: missing",
            ),
            (
                with_creds(json!([])),
                "xds_servers[0].channel_creds: must not be empty",
            ),
            (
                with_creds(json!({"type": "insecure"})),
                "xds_servers[0].channel_creds: expected array, got object",
            ),
            (
                with_creds(json!(["insecure"])),
                "xds_servers[0].channel_creds[0]: expected object, got string",
            ),
            (
                with_creds(json!([{"config": {}}])),
                "xds_servers[0].channel_creds[0].type: missing",
            ),
            (
                with_creds(json!([{"type": true}])),
                "xds_servers[0].channel_creds[0].type: expected string, got boolean",
            ),
            (
                with_creds(json!([{"type": "insecure"}, {"type": 3}])),
                "xds_servers[0].channel_creds[1].type: expected string, got number",
            ),
            (
                with_creds(json!([{"type": "insecure", "config": []}])),
                "xds_servers[0].channel_creds[0].config: expected object, got array",
            ),
            (
                with_creds(json!([{"type": "foo"}, {"type": "bar"}])),
                r#"xds_servers[0].channel_creds: no supported channel credentials type (saw: "foo", "bar")"#,
            ),
            (
                with_creds(json!([{"type": "we\"ird"}])),
                r#"xds_servers[0].channel_creds: no supported channel credentials type (saw: "we\"ird")"#,
            ),
            // tls config.
            (
                tls_with(json!("x")),
                "xds_servers[0].channel_creds[0].config: expected object, got string",
            ),
            (
                tls_with(json!({"ca_certificate_file": 1})),
                "xds_servers[0].channel_creds[0].config.ca_certificate_file: expected string, got number",
            ),
            (
                tls_with(json!({"ca_certificate_file": ""})),
                "xds_servers[0].channel_creds[0].config.ca_certificate_file: must not be empty",
            ),
            (
                tls_with(json!({"certificate_file": ["/c"], "private_key_file": "/k"})),
                "xds_servers[0].channel_creds[0].config.certificate_file: expected string, got array",
            ),
            (
                tls_with(json!({"certificate_file": "/c", "private_key_file": ""})),
                "xds_servers[0].channel_creds[0].config.private_key_file: must not be empty",
            ),
            (
                tls_with(json!({"certificate_file": "/c"})),
                "xds_servers[0].channel_creds[0].config.private_key_file: must be set when certificate_file is set",
            ),
            (
                tls_with(json!({"private_key_file": "/k", "ca_certificate_file": "/ca"})),
                "xds_servers[0].channel_creds[0].config.certificate_file: must be set when private_key_file is set",
            ),
            (
                tls_with(json!({"refresh_interval": 600})),
                "xds_servers[0].channel_creds[0].config.refresh_interval: expected string, got number",
            ),
            (
                tls_with(json!({"refresh_interval": "10m"})),
                r#"xds_servers[0].channel_creds[0].config.refresh_interval: invalid duration "10m": expected a protobuf JSON duration such as "600s""#,
            ),
            (
                tls_with(json!({"refresh_interval": "-5s"})),
                r#"xds_servers[0].channel_creds[0].config.refresh_interval: invalid duration "-5s": must not be negative"#,
            ),
            (
                tls_with(json!({"refresh_interval": "315576000001s"})),
                r#"xds_servers[0].channel_creds[0].config.refresh_interval: invalid duration "315576000001s": too large"#,
            ),
            (
                with_creds(
                    json!([{"type": "foo"}, {"type": "tls", "config": {"certificate_file": "/c"}}]),
                ),
                "xds_servers[0].channel_creds[1].config.private_key_file: must be set when certificate_file is set",
            ),
            // server_features.
            (
                with_server(
                    json!({"server_uri": "s", "channel_creds": [{"type": "insecure"}], "server_features": "ignore_resource_deletion"}),
                ),
                "xds_servers[0].server_features: expected array, got string",
            ),
            (
                with_server(
                    json!({"server_uri": "s", "channel_creds": [{"type": "insecure"}], "server_features": ["ignore_resource_deletion", {"x": 1}]}),
                ),
                "xds_servers[0].server_features[1]: expected string, got object",
            ),
            // node.
            (
                with("node", json!("n")),
                "node: expected object, got string",
            ),
            (
                with("node", json!({"id": 1})),
                "node.id: expected string, got number",
            ),
            (
                with("node", json!({"cluster": null})),
                "node.cluster: expected string, got null",
            ),
            (
                with("node", json!({"locality": "us"})),
                "node.locality: expected object, got string",
            ),
            (
                with("node", json!({"locality": {"region": 1}})),
                "node.locality.region: expected string, got number",
            ),
            (
                with("node", json!({"locality": {"zone": false}})),
                "node.locality.zone: expected string, got boolean",
            ),
            (
                with("node", json!({"locality": {"sub_zone": []}})),
                "node.locality.sub_zone: expected string, got array",
            ),
            (
                with("node", json!({"metadata": [1]})),
                "node.metadata: expected object, got array",
            ),
            // authorities.
            (
                with("authorities", json!([])),
                "authorities: expected object, got array",
            ),
            (
                with("authorities", json!({"a.example": 1})),
                r#"authorities["a.example"]: expected object, got number"#,
            ),
            (
                with(
                    "authorities",
                    json!({"a.example": {"client_listener_resource_name_template": 5}}),
                ),
                r#"authorities["a.example"].client_listener_resource_name_template: expected string, got number"#,
            ),
            (
                with(
                    "authorities",
                    json!({"a.example": {"client_listener_resource_name_template": "xdstp://b.example/%s"}}),
                ),
                r#"authorities["a.example"].client_listener_resource_name_template: must start with "xdstp://a.example/""#,
            ),
            (
                with(
                    "authorities",
                    json!({"a.example": {"client_listener_resource_name_template": "xdstp://a.example"}}),
                ),
                r#"authorities["a.example"].client_listener_resource_name_template: must start with "xdstp://a.example/""#,
            ),
            (
                with(
                    "authorities",
                    json!({"a.example": {"client_listener_resource_name_template": "%s"}}),
                ),
                r#"authorities["a.example"].client_listener_resource_name_template: must start with "xdstp://a.example/""#,
            ),
            (
                with("authorities", json!({"a.example": {"xds_servers": "s"}})),
                r#"authorities["a.example"].xds_servers: expected array, got string"#,
            ),
            (
                with(
                    "authorities",
                    json!({"a.example": {"xds_servers": [s("a"), {"server_uri": "b"}]}}),
                ),
                r#"authorities["a.example"].xds_servers[1].channel_creds: missing"#,
            ),
            (
                with(
                    "authorities",
                    json!({"a.example": {"xds_servers": [{"server_uri": "b", "channel_creds": [{"type": "x"}]}]}}),
                ),
                r#"authorities["a.example"].xds_servers[0].channel_creds: no supported channel credentials type (saw: "x")"#,
            ),
            (
                with("authorities", json!({"q\"uote": 1})),
                r#"authorities["q\"uote"]: expected object, got number"#,
            ),
            // Templates.
            (
                with("client_default_listener_resource_name_template", json!(1)),
                "client_default_listener_resource_name_template: expected string, got number",
            ),
            (
                with("server_listener_resource_name_template", json!({})),
                "server_listener_resource_name_template: expected string, got object",
            ),
            // certificate_providers.
            (
                with("certificate_providers", json!([])),
                "certificate_providers: expected object, got array",
            ),
            (
                with("certificate_providers", json!({"p": "x"})),
                r#"certificate_providers["p"]: expected object, got string"#,
            ),
            (
                with("certificate_providers", json!({"p": {}})),
                r#"certificate_providers["p"].plugin_name: missing"#,
            ),
            (
                with("certificate_providers", json!({"p": {"plugin_name": ""}})),
                r#"certificate_providers["p"].plugin_name: must not be empty"#,
            ),
            (
                with("certificate_providers", json!({"p": {"plugin_name": 2}})),
                r#"certificate_providers["p"].plugin_name: expected string, got number"#,
            ),
        ];
        for (input, expected) in cases {
            assert_eq!(err(input.clone()), expected, "input: {input}");
        }
    }

    #[test]
    fn error_kinds_are_typed() {
        let e = parse(json!({})).unwrap_err();
        assert_eq!(
            e,
            BootstrapError {
                path: "xds_servers".into(),
                kind: BootstrapErrorKind::Missing
            }
        );
        let e = parse(with_creds(json!([{"type": "foo"}, {"type": "bar"}]))).unwrap_err();
        assert_eq!(
            e,
            BootstrapError {
                path: "xds_servers[0].channel_creds".into(),
                kind: BootstrapErrorKind::NoSupportedChannelCreds {
                    seen: vec!["foo".into(), "bar".into()]
                },
            }
        );
        let e = parse(with("node", json!({"id": 1}))).unwrap_err();
        assert_eq!(
            e.kind,
            BootstrapErrorKind::WrongType {
                expected: "string",
                found: "number"
            }
        );
        let dyn_err: &dyn std::error::Error = &e;
        assert_eq!(dyn_err.to_string(), "node.id: expected string, got number");
    }

    #[test]
    fn syntax_errors_carry_line_and_column() {
        let e = Bootstrap::from_json_str("{\n  \"xds_servers\": [\n}").unwrap_err();
        assert_eq!(e.path, "");
        assert_eq!(
            e.kind,
            BootstrapErrorKind::Syntax("expected value at line 3 column 1".into())
        );
        assert_eq!(
            e.to_string(),
            "invalid JSON: expected value at line 3 column 1"
        );

        let e = Bootstrap::from_json_str("").unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid JSON: EOF while parsing a value at line 1 column 0"
        );

        let e = Bootstrap::from_json_str(&format!("{MINIMAL} trailing")).unwrap_err();
        assert!(matches!(e.kind, BootstrapErrorKind::Syntax(_)), "{e:?}");
        assert!(
            e.to_string()
                .starts_with("invalid JSON: trailing characters at line 3"),
            "{e}"
        );
    }

    #[test]
    fn proto_durations() {
        let ok = [
            ("600s", Duration::from_secs(600)),
            ("0s", Duration::ZERO),
            ("1.5s", Duration::from_millis(1500)),
            ("1.000s", Duration::from_secs(1)),
            ("0.000000001s", Duration::from_nanos(1)),
            ("3.123456789s", Duration::new(3, 123_456_789)),
            ("315576000000s", Duration::from_secs(315_576_000_000)),
        ];
        for (text, expected) in ok {
            assert_eq!(parse_proto_duration(text), Ok(expected), "{text}");
        }
        let bad = [
            "",
            "s",
            "10",
            "10m",
            "1.s",
            ".5s",
            "1.0000000001s",
            "+1s",
            "1e3s",
            " 1s",
            "1s ",
            "1.5.5s",
            "١s",
            "99999999999999999999999s",
        ];
        for text in bad {
            let e = parse_proto_duration(text).unwrap_err();
            assert!(e.starts_with("invalid duration"), "{text}: {e}");
        }
        assert_eq!(
            parse_proto_duration("-0.5s"),
            Err(r#"invalid duration "-0.5s": must not be negative"#.into())
        );
        assert_eq!(
            parse_proto_duration("-10m"),
            Err(
                r#"invalid duration "-10m": expected a protobuf JSON duration such as "600s""#
                    .into()
            )
        );
        assert_eq!(
            parse_proto_duration("--1s"),
            Err(
                r#"invalid duration "--1s": expected a protobuf JSON duration such as "600s""#
                    .into()
            )
        );
        let many_dashes = format!("{}1s", "-".repeat(1_000_000));
        assert!(parse_proto_duration(&many_dashes).is_err());
        assert_eq!(
            parse_proto_duration("-315576000001s"),
            Err(r#"invalid duration "-315576000001s": too large"#.into())
        );
        assert_eq!(
            parse_proto_duration("99999999999999999999999s"),
            Err(r#"invalid duration "99999999999999999999999s": expected a protobuf JSON duration such as "600s""#.into())
        );
    }

    // -- from_env_with / from_file_with --------------------------------------

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    fn no_files(path: &str) -> io::Result<String> {
        panic!("unexpected read of {path}")
    }

    #[test]
    fn from_env_reads_the_file_named_by_grpc_xds_bootstrap() {
        let reads = RefCell::new(Vec::new());
        let b = Bootstrap::from_env_with(env(&[("GRPC_XDS_BOOTSTRAP", "/etc/xds.json")]), |p| {
            reads.borrow_mut().push(p.to_owned());
            Ok(MINIMAL.to_owned())
        })
        .unwrap();
        assert_eq!(reads.into_inner(), vec!["/etc/xds.json".to_owned()]);
        assert_eq!(b.xds_servers, vec![insecure("xds.example:443")]);
    }

    #[test]
    fn from_env_uses_grpc_xds_bootstrap_config() {
        let b = Bootstrap::from_env_with(env(&[("GRPC_XDS_BOOTSTRAP_CONFIG", MINIMAL)]), no_files)
            .unwrap();
        assert_eq!(b.xds_servers, vec![insecure("xds.example:443")]);
    }

    #[test]
    fn from_env_file_variable_takes_precedence() {
        let other = r#"{"xds_servers": [{"server_uri": "from-file", "channel_creds": [{"type": "insecure"}]}]}"#;
        let vars = [
            ("GRPC_XDS_BOOTSTRAP_CONFIG", MINIMAL),
            ("GRPC_XDS_BOOTSTRAP", "/f.json"),
        ];
        let b = Bootstrap::from_env_with(env(&vars), |_| Ok(other.to_owned())).unwrap();
        assert_eq!(b.xds_servers, vec![insecure("from-file")]);

        // Precedence holds even when the file cannot be read: no silent fallback.
        let e = Bootstrap::from_env_with(env(&vars), |_| {
            Err(io::Error::new(io::ErrorKind::NotFound, "no such file"))
        })
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "/f.json: cannot read bootstrap file: no such file"
        );
    }

    #[test]
    fn from_env_empty_variables_count_as_unset() {
        let vars = [
            ("GRPC_XDS_BOOTSTRAP", ""),
            ("GRPC_XDS_BOOTSTRAP_CONFIG", MINIMAL),
        ];
        let b = Bootstrap::from_env_with(env(&vars), no_files).unwrap();
        assert_eq!(b.xds_servers, vec![insecure("xds.example:443")]);

        let vars = [
            ("GRPC_XDS_BOOTSTRAP", ""),
            ("GRPC_XDS_BOOTSTRAP_CONFIG", ""),
        ];
        let e = Bootstrap::from_env_with(env(&vars), no_files).unwrap_err();
        assert_eq!(e.kind, BootstrapErrorKind::NotConfigured);
    }

    #[test]
    fn from_env_neither_variable_set() {
        let e = Bootstrap::from_env_with(env(&[("UNRELATED", "x")]), no_files).unwrap_err();
        assert_eq!(
            e,
            BootstrapError {
                path: String::new(),
                kind: BootstrapErrorKind::NotConfigured
            }
        );
        assert_eq!(
            e.to_string(),
            "xDS bootstrap not configured: neither GRPC_XDS_BOOTSTRAP nor GRPC_XDS_BOOTSTRAP_CONFIG is set"
        );
    }

    #[test]
    fn from_env_file_read_error() {
        let e = Bootstrap::from_env_with(env(&[("GRPC_XDS_BOOTSTRAP", "/missing.json")]), |_| {
            Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "permission denied",
            ))
        })
        .unwrap_err();
        assert_eq!(
            e,
            BootstrapError {
                path: "/missing.json".into(),
                kind: BootstrapErrorKind::Io("permission denied".into()),
            }
        );
        assert_eq!(
            e.to_string(),
            "/missing.json: cannot read bootstrap file: permission denied"
        );
    }

    #[test]
    fn from_env_propagates_content_errors() {
        let e = Bootstrap::from_env_with(env(&[("GRPC_XDS_BOOTSTRAP_CONFIG", "{}")]), no_files)
            .unwrap_err();
        assert_eq!(e.to_string(), "xds_servers: missing");
        let e = Bootstrap::from_env_with(env(&[("GRPC_XDS_BOOTSTRAP", "/b.json")]), |_| {
            Ok("{\"xds_servers\": 1}".to_owned())
        })
        .unwrap_err();
        assert_eq!(e.to_string(), "xds_servers: expected array, got number");
    }

    #[test]
    fn from_file_with_reads_the_given_path() {
        let b = Bootstrap::from_file_with("/x/bootstrap.json", |p| {
            assert_eq!(p, "/x/bootstrap.json");
            Ok(MINIMAL.to_owned())
        })
        .unwrap();
        assert_eq!(b, Bootstrap::from_json_str(MINIMAL).unwrap());
        let e = Bootstrap::from_file_with("/x/b.json", |_| Ok("not json".to_owned())).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid JSON: expected ident at line 1 column 2"
        );
    }

    // -- servers_for_authority -------------------------------------------------

    #[test]
    fn servers_for_authority_cases() {
        let b = parse(json!({
            "xds_servers": [
                {"server_uri": "top1", "channel_creds": [{"type": "insecure"}]},
                {"server_uri": "top2", "channel_creds": [{"type": "insecure"}]}
            ],
            "authorities": {
                "own.example": {"xds_servers": [
                    {"server_uri": "own1", "channel_creds": [{"type": "insecure"}]},
                    {"server_uri": "own2", "channel_creds": [{"type": "insecure"}]}
                ]},
                "empty.example": {"xds_servers": []},
                "absent.example": {}
            }
        }))
        .unwrap();
        let top = vec![insecure("top1"), insecure("top2")];
        assert_eq!(b.servers_for_authority(None).unwrap(), top.as_slice());
        assert_eq!(
            b.servers_for_authority(Some("own.example")).unwrap(),
            [insecure("own1"), insecure("own2")].as_slice()
        );
        assert_eq!(
            b.servers_for_authority(Some("empty.example")).unwrap(),
            top.as_slice()
        );
        assert_eq!(
            b.servers_for_authority(Some("absent.example")).unwrap(),
            top.as_slice()
        );

        let e = b.servers_for_authority(Some("nope.example")).unwrap_err();
        assert_eq!(
            e,
            BootstrapError {
                path: r#"authorities["nope.example"]"#.into(),
                kind: BootstrapErrorKind::UnknownAuthority,
            }
        );
        assert_eq!(
            e.to_string(),
            r#"authorities["nope.example"]: unknown authority"#
        );
        // The empty authority is only known if configured.
        assert_eq!(
            b.servers_for_authority(Some("")).unwrap_err().to_string(),
            r#"authorities[""]: unknown authority"#
        );
    }

    // -- Node ----------------------------------------------------------------

    fn pv(kind: pbuf::value::Kind) -> pbuf::Value {
        pbuf::Value { kind: Some(kind) }
    }

    #[test]
    fn node_to_proto_full() {
        use pbuf::value::Kind;
        let b = parse(with(
            "node",
            json!({
                "id": "node-1",
                "cluster": "cl",
                "locality": {"region": "r", "zone": "z", "sub_zone": "s"},
                "metadata": {
                    "str": "v",
                    "int": 42,
                    "neg": -7,
                    "float": 0.25,
                    "bool": true,
                    "null": null,
                    "list": [1, "a", [false], {"k": null}],
                    "nested": {"inner": {"deep": "x"}, "empty": {}}
                }
            }),
        ))
        .unwrap();
        let node = b.node.to_proto("grpc-rust-xds", "0.1.0");

        assert_eq!(node.id, "node-1");
        assert_eq!(node.cluster, "cl");
        assert_eq!(
            node.locality,
            Some(core_pb::Locality {
                region: "r".into(),
                zone: "z".into(),
                sub_zone: "s".into()
            })
        );
        assert_eq!(node.user_agent_name, "grpc-rust-xds");
        assert_eq!(
            node.user_agent_version_type,
            Some(core_pb::node::UserAgentVersionType::UserAgentVersion(
                "0.1.0".into()
            ))
        );
        assert_eq!(
            node.client_features,
            vec![
                "envoy.lb.does_not_support_overprovisioning".to_owned(),
                "xds.config.resource-in-sotw".to_owned()
            ]
        );
        assert!(node.extensions.is_empty());
        assert!(node.dynamic_parameters.is_empty());

        let fields = node.metadata.unwrap().fields;
        assert_eq!(fields.len(), 8);
        assert_eq!(fields["str"], pv(Kind::StringValue("v".into())));
        assert_eq!(fields["int"], pv(Kind::NumberValue(42.0)));
        assert_eq!(fields["neg"], pv(Kind::NumberValue(-7.0)));
        assert_eq!(fields["float"], pv(Kind::NumberValue(0.25)));
        assert_eq!(fields["bool"], pv(Kind::BoolValue(true)));
        assert_eq!(fields["null"], pv(Kind::NullValue(0)));
        assert_eq!(
            fields["list"],
            pv(Kind::ListValue(pbuf::ListValue {
                values: vec![
                    pv(Kind::NumberValue(1.0)),
                    pv(Kind::StringValue("a".into())),
                    pv(Kind::ListValue(pbuf::ListValue {
                        values: vec![pv(Kind::BoolValue(false))]
                    })),
                    pv(Kind::StructValue(pbuf::Struct {
                        fields: [("k".to_owned(), pv(Kind::NullValue(0)))]
                            .into_iter()
                            .collect(),
                    })),
                ],
            }))
        );
        let deep = pbuf::Struct {
            fields: [("deep".to_owned(), pv(Kind::StringValue("x".into())))]
                .into_iter()
                .collect(),
        };
        assert_eq!(
            fields["nested"],
            pv(Kind::StructValue(pbuf::Struct {
                fields: [
                    ("inner".to_owned(), pv(Kind::StructValue(deep))),
                    (
                        "empty".to_owned(),
                        pv(Kind::StructValue(pbuf::Struct::default()))
                    ),
                ]
                .into_iter()
                .collect(),
            }))
        );
    }

    #[test]
    fn node_to_proto_minimal() {
        let node = NodeConfig::default().to_proto("ua", "v9");
        assert_eq!(node.id, "");
        assert_eq!(node.cluster, "");
        assert_eq!(node.metadata, None);
        assert_eq!(node.locality, None);
        assert_eq!(node.user_agent_name, "ua");
        assert_eq!(
            node.user_agent_version_type,
            Some(core_pb::node::UserAgentVersionType::UserAgentVersion(
                "v9".into()
            ))
        );
        assert_eq!(node.client_features.len(), 2);

        // A present but empty locality is still sent.
        let cfg = NodeConfig {
            locality: Some(LocalityConfig::default()),
            ..NodeConfig::default()
        };
        assert_eq!(
            cfg.to_proto("ua", "v").locality,
            Some(core_pb::Locality::default())
        );
    }

    #[test]
    fn node_to_proto_encodes() {
        use prost::Message;
        let b = parse(with(
            "node",
            json!({"id": "n", "metadata": {"a": {"b": [1, null]}}}),
        ))
        .unwrap();
        let node = b.node.to_proto("ua", "1");
        let bytes = node.encode_to_vec();
        assert_eq!(core_pb::Node::decode(bytes.as_slice()).unwrap(), node);
    }

    // -- No panics -------------------------------------------------------------

    #[test]
    fn truncated_documents_never_panic() {
        let full = json!({
            "xds_servers": [{"server_uri": "s", "channel_creds": [{"type": "tls", "config": {"refresh_interval": "1.5s"}}], "server_features": ["x"]}],
            "node": {"id": "i", "locality": {"zone": "z"}, "metadata": {"a": [1, {"b": null}]}},
            "authorities": {"a": {"client_listener_resource_name_template": "xdstp://a/%s", "xds_servers": []}},
            "certificate_providers": {"p": {"plugin_name": "x", "config": 1}}
        })
        .to_string();
        assert!(Bootstrap::from_json_str(&full).is_ok());
        for end in 0..full.len() {
            if full.is_char_boundary(end) {
                assert!(
                    Bootstrap::from_json_str(&full[..end]).is_err(),
                    "prefix of length {end}"
                );
            }
        }
    }

    #[test]
    fn deeply_nested_input_is_an_error_not_a_crash() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let e = Bootstrap::from_json_str(&deep).unwrap_err();
        assert!(matches!(e.kind, BootstrapErrorKind::Syntax(_)), "{e:?}");
    }

    quickcheck::quickcheck! {
        fn arbitrary_text_never_panics(text: String) -> bool {
            let _ = Bootstrap::from_json_str(&text);
            true
        }

        fn arbitrary_durations_never_panic(text: String) -> bool {
            let _ = parse_proto_duration(&text);
            true
        }

        fn servers_for_any_authority_never_panics(name: String) -> bool {
            let b = Bootstrap::from_json_str(MINIMAL).unwrap();
            b.servers_for_authority(Some(&name)).is_err()
        }
    }
}
