//! The bootstrap's `certificate_providers` (gRFC A29): certificate provider plugin
//! instances by name, each a typed plugin config. CDS and LDS security configs name
//! these instances; the core checks the names (see
//! [`DecodeContext`](crate::resource::DecodeContext)) and the adapters build one provider
//! per instance.
//!
//! The one plugin gRPC defines, `file_watcher`, is parsed and validated here
//! ([`FileWatcherConfig`], with A87's `spiffe_trust_bundle_map_file`). Any other plugin
//! name is kept with its raw config ([`CertificateProviderConfig::Other`]): a runtime may
//! register its own plugins (an SDS-fed proxy, say), so the parser cannot know the full
//! list. An adapter calls [`Bootstrap::check_certificate_provider_plugins`] with the
//! plugins it can build, which gives C-core's startup error for an unknown plugin name
//! (gRPC-Go drops such an instance instead, and NACKs a cluster that names it).

use std::time::Duration;

use serde_json::{Map, Value, json};

use super::json::{as_object, child, keyed, opt_non_empty_string, opt_object, opt_string, quote};
use super::server::parse_proto_duration;
use super::{Bootstrap, BootstrapError, BootstrapErrorKind, TlsCredentials};

/// The plugin name of the file-watcher certificate provider (A29).
pub const FILE_WATCHER_PLUGIN: &str = "file_watcher";

/// `refresh_interval` when the config leaves it out (A29, A65: 10 minutes).
pub const DEFAULT_REFRESH_INTERVAL: Duration = Duration::from_secs(600);

/// The shortest refresh interval: a shorter one is raised to it (as C-core does), so a
/// `"0s"` cannot make an adapter reread its files in a loop.
pub const MIN_REFRESH_INTERVAL: Duration = Duration::from_secs(1);

/// One entry of the bootstrap's `certificate_providers`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CertificateProviderConfig {
    /// `file_watcher`: certificates and keys read from PEM files (A29, A87).
    FileWatcher(FileWatcherConfig),
    /// A plugin the core does not know; its `config` object is kept as received (`{}`
    /// when absent) for a runtime that registers the plugin.
    Other {
        /// `plugin_name`, never empty.
        plugin_name: String,
        /// `config`.
        config: Map<String, Value>,
    },
}

/// The config of a `file_watcher` certificate provider, validated.
///
/// Invariants: `certificate_file` and `private_key_file` are both set or both unset; at
/// least one of `certificate_file`, `ca_certificate_file` and
/// `spiffe_trust_bundle_map_file` is set; no path is empty; `refresh_interval` is at
/// least [`MIN_REFRESH_INTERVAL`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FileWatcherConfig {
    /// The identity certificate chain (PEM).
    pub certificate_file: Option<String>,
    /// The identity's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub private_key_file: Option<String>,
    /// The root certificates (PEM); ignored when `spiffe_trust_bundle_map_file` is set.
    pub ca_certificate_file: Option<String>,
    /// A SPIFFE trust bundle map (A87, JSON); when set, the roots come from it alone.
    pub spiffe_trust_bundle_map_file: Option<String>,
    /// How often to reread the files (default 10 minutes).
    pub refresh_interval: Duration,
}

/// Where a `file_watcher` provider takes its roots from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RootsFile<'a> {
    /// `ca_certificate_file`: PEM certificates, verified as X.509 roots.
    CaCertificates(&'a str),
    /// `spiffe_trust_bundle_map_file`: roots per SPIFFE trust domain (A87).
    SpiffeBundleMap(&'a str),
}

impl FileWatcherConfig {
    /// The certificate chain and key files, when the provider supplies an identity.
    pub fn identity_files(&self) -> Option<(&str, &str)> {
        Some((
            self.certificate_file.as_deref()?,
            self.private_key_file.as_deref()?,
        ))
    }

    /// The roots file, when the provider supplies roots: the SPIFFE bundle map when set
    /// (A87: `ca_certificate_file` is then ignored), else the CA certificates.
    pub fn roots_file(&self) -> Option<RootsFile<'_>> {
        match (
            &self.spiffe_trust_bundle_map_file,
            &self.ca_certificate_file,
        ) {
            (Some(map), _) => Some(RootsFile::SpiffeBundleMap(map)),
            (None, Some(ca)) => Some(RootsFile::CaCertificates(ca)),
            (None, None) => None,
        }
    }

    /// The file watcher behind A65's `tls` channel credentials: the same files, the
    /// default interval when unset. Unlike a bootstrap `file_watcher`, it may name no
    /// file at all (plain TLS with the system roots); the adapter then needs no watcher.
    pub fn from_tls_credentials(creds: &TlsCredentials) -> FileWatcherConfig {
        FileWatcherConfig {
            certificate_file: creds.certificate_file.clone(),
            private_key_file: creds.private_key_file.clone(),
            ca_certificate_file: creds.ca_certificate_file.clone(),
            spiffe_trust_bundle_map_file: None,
            refresh_interval: creds
                .refresh_interval
                .unwrap_or(DEFAULT_REFRESH_INTERVAL)
                .max(MIN_REFRESH_INTERVAL),
        }
    }

    /// The config as bootstrap JSON (the `config` object), for dumps and round trips.
    pub fn to_json(&self) -> Value {
        let mut obj = Map::new();
        let fields = [
            ("certificate_file", &self.certificate_file),
            ("private_key_file", &self.private_key_file),
            ("ca_certificate_file", &self.ca_certificate_file),
            (
                "spiffe_trust_bundle_map_file",
                &self.spiffe_trust_bundle_map_file,
            ),
        ];
        for (name, value) in fields {
            if let Some(v) = value {
                obj.insert(name.to_owned(), json!(v));
            }
        }
        let interval = self.refresh_interval;
        let text = if interval.subsec_nanos() == 0 {
            format!("{}s", interval.as_secs())
        } else {
            format!("{}.{:09}s", interval.as_secs(), interval.subsec_nanos())
        };
        obj.insert("refresh_interval".to_owned(), json!(text));
        Value::Object(obj)
    }
}

impl CertificateProviderConfig {
    /// The plugin's name (`plugin_name`).
    pub fn plugin_name(&self) -> &str {
        match self {
            CertificateProviderConfig::FileWatcher(_) => FILE_WATCHER_PLUGIN,
            CertificateProviderConfig::Other { plugin_name, .. } => plugin_name,
        }
    }

    /// The `file_watcher` config, if that is the plugin.
    pub fn file_watcher(&self) -> Option<&FileWatcherConfig> {
        match self {
            CertificateProviderConfig::FileWatcher(config) => Some(config),
            CertificateProviderConfig::Other { .. } => None,
        }
    }

    /// The entry as bootstrap JSON (`{"plugin_name": ..., "config": {...}}`).
    pub fn to_json(&self) -> Value {
        let config = match self {
            CertificateProviderConfig::FileWatcher(config) => config.to_json(),
            CertificateProviderConfig::Other { config, .. } => Value::Object(config.clone()),
        };
        json!({"plugin_name": self.plugin_name(), "config": config})
    }
}

impl Bootstrap {
    /// Checks that every certificate provider instance uses a plugin the runtime can
    /// build (`supported`, e.g. `&["file_watcher"]`), as C-core does when it loads the
    /// bootstrap. An adapter calls this at startup, before it builds its providers.
    ///
    /// # Errors
    /// The first instance (in name order) whose plugin is not supported, at
    /// `certificate_providers["<name>"].plugin_name`.
    pub fn check_certificate_provider_plugins(
        &self,
        supported: &[&str],
    ) -> Result<(), BootstrapError> {
        for (name, provider) in &self.certificate_providers {
            let plugin = provider.plugin_name();
            if !supported.contains(&plugin) {
                let known: Vec<String> = supported.iter().map(|s| quote(s)).collect();
                return Err(BootstrapError::new(
                    child(&keyed("certificate_providers", name), "plugin_name"),
                    BootstrapErrorKind::Invalid(format!(
                        "unrecognized plugin name {} (supported: {})",
                        quote(plugin),
                        known.join(", ")
                    )),
                ));
            }
        }
        Ok(())
    }
}

/// One `certificate_providers` entry at `path` (`certificate_providers["<name>"]`).
pub(super) fn parse_certificate_provider(
    value: &Value,
    path: &str,
) -> Result<CertificateProviderConfig, BootstrapError> {
    let obj = as_object(value, path)?;
    let plugin_name = super::json::required_string(obj, path, "plugin_name")?;
    let config = opt_object(obj, path, "config")?
        .cloned()
        .unwrap_or_default();
    if plugin_name == FILE_WATCHER_PLUGIN {
        let config = parse_file_watcher(&config, &child(path, "config"))?;
        return Ok(CertificateProviderConfig::FileWatcher(config));
    }
    Ok(CertificateProviderConfig::Other {
        plugin_name,
        config,
    })
}

/// A `file_watcher` config object at `path`, validated as gRPC does (C-core's rules, and
/// A87's bundle map counting as roots as in gRPC-Go). Unknown fields are ignored.
fn parse_file_watcher(
    obj: &Map<String, Value>,
    path: &str,
) -> Result<FileWatcherConfig, BootstrapError> {
    let certificate_file = opt_non_empty_string(obj, path, "certificate_file")?;
    let private_key_file = opt_non_empty_string(obj, path, "private_key_file")?;
    let ca_certificate_file = opt_non_empty_string(obj, path, "ca_certificate_file")?;
    let spiffe_trust_bundle_map_file =
        opt_non_empty_string(obj, path, "spiffe_trust_bundle_map_file")?;
    let invalid = |field: &str, reason: &str| {
        BootstrapError::new(
            child(path, field),
            BootstrapErrorKind::Invalid(reason.into()),
        )
    };
    match (&certificate_file, &private_key_file) {
        (Some(_), None) => {
            return Err(invalid(
                "private_key_file",
                "must be set when certificate_file is set",
            ));
        }
        (None, Some(_)) => {
            return Err(invalid(
                "certificate_file",
                "must be set when private_key_file is set",
            ));
        }
        _ => {}
    }
    if certificate_file.is_none()
        && ca_certificate_file.is_none()
        && spiffe_trust_bundle_map_file.is_none()
    {
        return Err(BootstrapError::new(
            path,
            BootstrapErrorKind::Invalid(
                "at least one of certificate_file, ca_certificate_file and \
                 spiffe_trust_bundle_map_file must be set"
                    .into(),
            ),
        ));
    }
    let refresh_interval = match opt_string(obj, path, "refresh_interval")? {
        None => DEFAULT_REFRESH_INTERVAL,
        Some(text) => parse_proto_duration(&text)
            .map_err(|reason| invalid("refresh_interval", &reason))?
            .max(MIN_REFRESH_INTERVAL),
    };
    Ok(FileWatcherConfig {
        certificate_file,
        private_key_file,
        ca_certificate_file,
        spiffe_trust_bundle_map_file,
        refresh_interval,
    })
}
