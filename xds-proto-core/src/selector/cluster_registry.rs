//! Cluster lifetime (gRFC A31's two-step removal): the [`ClusterRegistry`] of cluster
//! manager children, each alive while some reference-counted [`ClusterHandle`] (held by
//! a selector or an in-flight RPC) holds it, and the `xds_cluster_manager_experimental`
//! LB config that lists them.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use super::{CLUSTER_CHILD_PREFIX, CLUSTER_MANAGER_POLICY, LbConfigJson, PLUGIN_CHILD_PREFIX};
use crate::resource::route::ClusterSpecifierPlugin;

/// What a cluster manager child runs.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClusterManagerChild {
    /// A CDS cluster (`cds_experimental`), child name `cluster:<name>`.
    Cluster(String),
    /// A cluster specifier plugin, child name `cluster_specifier_plugin:<name>`.
    Plugin(ClusterSpecifierPlugin),
}

impl ClusterManagerChild {
    /// The child's name in the cluster manager config.
    pub fn child_name(&self) -> String {
        match self {
            ClusterManagerChild::Cluster(name) => format!("{CLUSTER_CHILD_PREFIX}{name}"),
            ClusterManagerChild::Plugin(p) => format!("{PLUGIN_CHILD_PREFIX}{}", p.name),
        }
    }
}

type ReleaseCallback = Box<dyn Fn(&str) + Send + Sync>;

struct RegistryShared {
    released: AtomicBool,
    on_release: Option<ReleaseCallback>,
}

struct ClusterEntry {
    /// `cluster:<name>` or `cluster_specifier_plugin:<name>`.
    key: Arc<str>,
    /// Where the cluster or plugin name starts in `key`.
    name_at: usize,
    plugin: bool,
    shared: Arc<RegistryShared>,
}

impl Drop for ClusterEntry {
    fn drop(&mut self) {
        self.shared.released.store(true, Ordering::Release);
        if let Some(callback) = &self.shared.on_release {
            callback(&self.key);
        }
    }
}

/// A reference to a cluster manager child (a cluster, or a cluster specifier plugin).
///
/// Selectors hold one per cluster their routes use and every [`Selection`](super::Selection) holds one for
/// its RPC; cloning is an atomic increment. When the last handle of a child is dropped,
/// the child leaves the [`ClusterRegistry`]'s LB config.
#[derive(Clone)]
pub struct ClusterHandle(Arc<ClusterEntry>);

impl ClusterHandle {
    /// The child name in the cluster manager config (`cluster:<name>` or
    /// `cluster_specifier_plugin:<name>`).
    pub fn child_name(&self) -> &str {
        &self.0.key
    }

    /// The cluster name, for a CDS cluster.
    pub fn cluster(&self) -> Option<&str> {
        (!self.0.plugin).then(|| &self.0.key[self.0.name_at..])
    }

    /// The plugin name, for a cluster specifier plugin.
    pub fn plugin(&self) -> Option<&str> {
        self.0.plugin.then(|| &self.0.key[self.0.name_at..])
    }

    /// Whether two handles refer to the same registry entry.
    pub fn ptr_eq(a: &ClusterHandle, b: &ClusterHandle) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }
}

impl fmt::Debug for ClusterHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ClusterHandle").field(&&*self.0.key).finish()
    }
}

struct RegistryChild {
    entry: Weak<ClusterEntry>,
    child: ClusterManagerChild,
}

/// The set of cluster manager children, each alive while some handle holds it.
///
/// It lives on the resolver's side. Build each new [`ConfigSelector`](super::ConfigSelector) through it, emit
/// [`lb_config`](Self::lb_config) with the selector (the config then holds the new
/// clusters and the ones the previous selector or in-flight RPCs still use), and emit
/// the LB config again after a release is reported (the callback given to
/// [`with_release_callback`](Self::with_release_callback), or
/// [`take_released`](Self::take_released)).
pub struct ClusterRegistry {
    children: BTreeMap<Arc<str>, RegistryChild>,
    shared: Arc<RegistryShared>,
}

impl Default for ClusterRegistry {
    fn default() -> ClusterRegistry {
        ClusterRegistry::new()
    }
}

impl fmt::Debug for ClusterRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterRegistry")
            .field("children", &self.children.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl ClusterRegistry {
    /// An empty registry.
    pub fn new() -> ClusterRegistry {
        ClusterRegistry {
            children: BTreeMap::new(),
            shared: Arc::new(RegistryShared {
                released: AtomicBool::new(false),
                on_release: None,
            }),
        }
    }

    /// An empty registry that calls `callback` with the child name whenever the last
    /// handle of a child is dropped. The callback runs on the thread that drops the
    /// handle (often a data-plane thread): it should only wake the control loop.
    pub fn with_release_callback(
        callback: impl Fn(&str) + Send + Sync + 'static,
    ) -> ClusterRegistry {
        ClusterRegistry {
            children: BTreeMap::new(),
            shared: Arc::new(RegistryShared {
                released: AtomicBool::new(false),
                on_release: Some(Box::new(callback)),
            }),
        }
    }

    /// A handle on a child: the live entry if one exists (its policy updated to
    /// `child`), else a new one.
    pub fn handle(&mut self, child: ClusterManagerChild) -> ClusterHandle {
        let key: Arc<str> = Arc::from(child.child_name());
        if let Some(existing) = self.children.get_mut(&key)
            && let Some(entry) = existing.entry.upgrade()
        {
            existing.child = child;
            return ClusterHandle(entry);
        }
        let prefix = match child {
            ClusterManagerChild::Cluster(_) => CLUSTER_CHILD_PREFIX,
            ClusterManagerChild::Plugin(_) => PLUGIN_CHILD_PREFIX,
        };
        let entry = Arc::new(ClusterEntry {
            key: key.clone(),
            name_at: prefix.len(),
            plugin: matches!(child, ClusterManagerChild::Plugin(_)),
            shared: self.shared.clone(),
        });
        self.children.insert(
            key,
            RegistryChild {
                entry: Arc::downgrade(&entry),
                child,
            },
        );
        ClusterHandle(entry)
    }

    /// Whether some child lost its last handle since the last call (and clears the flag).
    pub fn take_released(&self) -> bool {
        self.shared.released.swap(false, Ordering::AcqRel)
    }

    fn prune(&mut self) {
        self.children.retain(|_, c| c.entry.strong_count() > 0);
    }

    /// The child names still held by some handle, sorted.
    pub fn children(&mut self) -> Vec<String> {
        self.prune();
        self.children.keys().map(|k| k.to_string()).collect()
    }

    /// The cluster specifier plugin children still held by some handle
    /// (`cluster_specifier_plugin:<name>`), sorted: [`children`](Self::children)
    /// without the clusters.
    pub fn plugin_children(&mut self) -> Vec<String> {
        self.prune();
        (self.children.iter())
            .filter(|(_, c)| matches!(c.child, ClusterManagerChild::Plugin(_)))
            .map(|(k, _)| k.to_string())
            .collect()
    }

    /// Whether the child `child_name` (`cluster:<name>` ...) is still held.
    pub fn contains(&self, child_name: &str) -> bool {
        self.children
            .get(child_name)
            .is_some_and(|c| c.entry.strong_count() > 0)
    }

    /// The service config's `loadBalancingConfig` as A31 describes it:
    /// `[{"xds_cluster_manager_experimental": {"children": {NAME: {"childPolicy": [...]}}}}]`
    /// with `{"cds_experimental": {"cluster": NAME}}` for clusters. Plugin children carry
    /// the plugin's configuration opaquely, as
    /// `{"cluster_specifier_plugin_experimental": {"name", "typeUrl", "valueBase64"}}`;
    /// use [`lb_config_with`](Self::lb_config_with) to turn it into the plugin's own
    /// policy (e.g. `rls_experimental`).
    pub fn lb_config(&mut self) -> LbConfigJson {
        self.lb_config_with(|p| {
            serde_json::json!([{
                "cluster_specifier_plugin_experimental": {
                    "name": p.name,
                    "typeUrl": p.config.type_url,
                    "valueBase64": base64(&p.config.value),
                }
            }])
        })
    }

    /// [`lb_config`](Self::lb_config) with plugin children's `childPolicy` built by
    /// `plugin_policy`.
    pub fn lb_config_with(
        &mut self,
        plugin_policy: impl Fn(&ClusterSpecifierPlugin) -> LbConfigJson,
    ) -> LbConfigJson {
        self.prune();
        let mut children = serde_json::Map::new();
        for (key, c) in &self.children {
            let policy = match &c.child {
                ClusterManagerChild::Cluster(name) => {
                    serde_json::json!([{ "cds_experimental": { "cluster": name } }])
                }
                ClusterManagerChild::Plugin(p) => plugin_policy(p),
            };
            children.insert(
                key.to_string(),
                serde_json::json!({ "childPolicy": policy }),
            );
        }
        serde_json::json!([{ CLUSTER_MANAGER_POLICY: { "children": children } }])
    }
}

pub(super) fn base64(bytes: &[u8]) -> String {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(TABLE[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}
