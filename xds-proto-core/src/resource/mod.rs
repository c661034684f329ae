//! Resource types: the trait a type implements to be watched through the core, the
//! type-erased value the core caches and hands to watchers, and the four built-in
//! types (Listener, RouteConfiguration, Cluster, ClusterLoadAssignment) that decode
//! straight into compact validated structs.
//!
//! A user adds a type by implementing [`XdsResourceType`] and registering it with the
//! client; everything else (caching, ACK/NACK, timers) works the same for it.

use std::any::{Any, TypeId};
use std::fmt::{self, Debug};
use std::sync::Arc;

pub mod cluster;
mod context;
pub mod endpoint;
pub mod listener;
pub mod route;
pub(crate) mod tls;
pub(crate) mod validate;

pub use context::DecodeContext;
pub use validate::FieldError;

pub use cluster::{ClusterResource, ClusterType};
pub use cluster::{
    FailurePercentageEjection, LbPolicy, LbPolicyRegistry, OutlierDetection, RegisterError,
    SuccessRateEjection, UpstreamTls, WeightedRoundRobinConfig,
};
pub use endpoint::EndpointsResource;
pub use endpoint::{DropOverload, Endpoint, HealthStatus, Locality, LocalityEndpoints, Priority};
pub use listener::ListenerResource;
pub use listener::{
    CidrRange, DownstreamTls, FilterChain, FilterChainMatch, ServerListener, SourceType,
};
pub use listener::{HttpConnectionManager, HttpFilter, ListenerKind, RouteSource};
pub use route::RouteConfigResource;
pub use route::{
    ClusterSpecifier, ClusterSpecifierPlugin, DomainPattern, FilterConfigOverride, ForwardAction,
    HashPolicy, HeaderMatchKind, HeaderMatcher, HttpRetryCondition, PathMatcher, RegexRewrite,
    RetryPolicy, RetryableCode, Route, RouteAction, RouteMatch, SafeRegex, StringMatcher,
    TypedConfig, VirtualHost, WeightedCluster,
};

/// Type URLs of the built-in resource types.
pub mod type_url {
    /// `envoy.config.listener.v3.Listener` (LDS).
    pub const LISTENER: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";
    /// `envoy.config.route.v3.RouteConfiguration` (RDS).
    pub const ROUTE_CONFIGURATION: &str =
        "type.googleapis.com/envoy.config.route.v3.RouteConfiguration";
    /// `envoy.config.cluster.v3.Cluster` (CDS).
    pub const CLUSTER: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
    /// `envoy.config.endpoint.v3.ClusterLoadAssignment` (EDS).
    pub const CLUSTER_LOAD_ASSIGNMENT: &str =
        "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";
    /// `envoy.service.discovery.v3.Resource`, the wrapper a server may put around any resource.
    pub const RESOURCE_WRAPPER: &str = "type.googleapis.com/envoy.service.discovery.v3.Resource";
}

/// Why one resource in a response was rejected.
///
/// `name` is set when the decoder got far enough to read the resource's name; the
/// client then reports the error to that resource's watchers. The message becomes
/// part of the NACK's `error_detail`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeError {
    /// The resource's name, when it could be read.
    pub name: Option<String>,
    /// What is wrong, precise enough for an operator to fix the resource.
    pub message: String,
}

impl DecodeError {
    /// An error for a resource whose name is known.
    pub fn named(name: impl Into<String>, message: impl Into<String>) -> DecodeError {
        DecodeError {
            name: Some(name.into()),
            message: message.into(),
        }
    }

    /// An error for a resource whose name could not be read.
    pub fn unnamed(message: impl Into<String>) -> DecodeError {
        DecodeError {
            name: None,
            message: message.into(),
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.name {
            Some(name) => write!(f, "{name}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for DecodeError {}

/// A resource type the client can watch: `client.watch::<Cds>("my-cluster")`.
///
/// The four built-in types are [`Lds`], [`Rds`], [`Cds`] and [`Eds`]. A user adds a type
/// by implementing this trait on a marker type and registering it with
/// [`XdsClient::register_type`](crate::XdsClient::register_type); caching, ACK/NACK,
/// timers and fallback then work the same for it.
///
/// ```
/// use xds_proto_core::resource::{DecodeError, XdsResourceType};
///
/// /// A resource whose payload is its name, as UTF-8.
/// struct Echo;
///
/// impl XdsResourceType for Echo {
///     type Value = String;
///     const TYPE_URL: &'static str = "type.googleapis.com/example.Echo";
///     const ALL_RESOURCES_REQUIRED_IN_SOTW: bool = false;
///     fn decode(bytes: &[u8]) -> Result<(String, String), DecodeError> {
///         let name = std::str::from_utf8(bytes)
///             .map_err(|e| DecodeError::unnamed(format!("not UTF-8: {e}")))?;
///         Ok((name.to_string(), name.to_string()))
///     }
/// }
/// assert_eq!(Echo::decode(b"a").unwrap().1, "a");
/// ```
pub trait XdsResourceType: 'static {
    /// The validated value watchers receive.
    type Value: Debug + PartialEq + Send + Sync + 'static;

    /// The type URL, e.g. `type.googleapis.com/envoy.config.cluster.v3.Cluster`.
    const TYPE_URL: &'static str;

    /// Whether a SotW response must carry every subscribed resource of this type, so that
    /// a missing one means it was deleted (true for LDS and CDS).
    const ALL_RESOURCES_REQUIRED_IN_SOTW: bool;

    /// Decodes and validates one serialized resource (the `value` of a
    /// `google.protobuf.Any` whose type URL is [`TYPE_URL`](Self::TYPE_URL)), returning
    /// its name and value. Must never panic, whatever the bytes.
    fn decode(bytes: &[u8]) -> Result<(String, Self::Value), DecodeError>;

    /// [`decode`](Self::decode) with the client's context (its bootstrap): what the
    /// client calls. Types whose validation needs the context (CDS and LDS check
    /// certificate provider names, A29) override it; the default ignores the context.
    fn decode_in(
        context: &DecodeContext<'_>,
        bytes: &[u8],
    ) -> Result<(String, Self::Value), DecodeError> {
        let _ = context;
        Self::decode(bytes)
    }
}

/// A resource type seen without its Rust type: its constants and a decoder into the
/// type-erased [`ResourceValue`]. The client keeps one per registered type; tools that
/// handle every type alike (a checker, a CSDS dumper) use [`builtin_types`].
#[derive(Clone, Copy)]
pub struct ResourceTypeInfo {
    /// The Rust type that registered it: a watch through another type with the same
    /// URL is refused, so a cached value always reads back as the watched type's.
    pub(crate) type_id: std::any::TypeId,
    type_url: &'static str,
    all_resources_required_in_sotw: bool,
    decode: ErasedDecode,
}

/// A type's decoder with its value type-erased.
type ErasedDecode = fn(&DecodeContext<'_>, &[u8]) -> Result<(String, ResourceValue), DecodeError>;

impl ResourceTypeInfo {
    /// The entry for `T`.
    pub fn of<T: XdsResourceType>() -> ResourceTypeInfo {
        ResourceTypeInfo {
            type_id: std::any::TypeId::of::<T>(),
            type_url: T::TYPE_URL,
            all_resources_required_in_sotw: T::ALL_RESOURCES_REQUIRED_IN_SOTW,
            decode: |context, bytes| {
                T::decode_in(context, bytes)
                    .map(|(name, value)| (name, ResourceValue::new::<T>(value)))
            },
        }
    }

    /// [`XdsResourceType::TYPE_URL`].
    pub fn type_url(&self) -> &'static str {
        self.type_url
    }

    /// [`XdsResourceType::ALL_RESOURCES_REQUIRED_IN_SOTW`].
    pub fn all_resources_required_in_sotw(&self) -> bool {
        self.all_resources_required_in_sotw
    }

    /// [`XdsResourceType::decode`], with the value type-erased (no bootstrap: see
    /// [`DecodeContext::default`]).
    pub fn decode(&self, bytes: &[u8]) -> Result<(String, ResourceValue), DecodeError> {
        (self.decode)(&DecodeContext::default(), bytes)
    }

    /// [`XdsResourceType::decode_in`], with the value type-erased.
    pub fn decode_in(
        &self,
        context: &DecodeContext<'_>,
        bytes: &[u8],
    ) -> Result<(String, ResourceValue), DecodeError> {
        (self.decode)(context, bytes)
    }
}

impl Debug for ResourceTypeInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.type_url)
    }
}

trait ValueObject: Any + Debug + Send + Sync {
    fn as_any(&self) -> &dyn Any;
    fn as_any_arc(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
    fn equals(&self, other: &dyn ValueObject) -> bool;
}

impl<T: Any + Debug + PartialEq + Send + Sync> ValueObject for T {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_arc(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
    fn equals(&self, other: &dyn ValueObject) -> bool {
        other.as_any().downcast_ref::<T>() == Some(self)
    }
}

/// A decoded, validated resource as the client caches it: cheap to clone and shared
/// by every watcher of the resource. Read it as its type with [`get`](Self::get) or
/// [`to_arc`](Self::to_arc): `value.get::<Cds>()` is the `ClusterResource`.
///
/// It knows the resource type it was decoded as, not only its value's Rust type: two
/// types may share a value type (a user type decoding into `ClusterResource`), and a
/// value of one never reads back as the other.
#[derive(Clone)]
pub struct ResourceValue {
    value: Arc<dyn ValueObject>,
    /// The [`XdsResourceType`] it was decoded as.
    resource_type: TypeId,
}

impl ResourceValue {
    /// Wraps a decoded value of the resource type `T` (for tests and custom decoders;
    /// the client wraps what [`XdsResourceType::decode`] returns).
    pub fn new<T: XdsResourceType>(value: T::Value) -> ResourceValue {
        ResourceValue {
            value: Arc::new(value),
            resource_type: TypeId::of::<T>(),
        }
    }

    /// The value, if it is a resource of type `T`.
    pub fn get<T: XdsResourceType>(&self) -> Option<&T::Value> {
        if !self.is::<T>() {
            return None;
        }
        self.value.as_any().downcast_ref::<T::Value>()
    }

    /// The value as a shared `Arc`, if it is a resource of type `T` (no copy).
    pub fn to_arc<T: XdsResourceType>(&self) -> Option<Arc<T::Value>> {
        if !self.is::<T>() {
            return None;
        }
        self.value.clone().as_any_arc().downcast::<T::Value>().ok()
    }

    /// Whether it is a resource of type `T`.
    pub fn is<T: XdsResourceType>(&self) -> bool {
        self.resource_type == TypeId::of::<T>()
    }

    /// True when both are resources of the same type with equal values.
    pub fn equals(&self, other: &ResourceValue) -> bool {
        self.resource_type == other.resource_type
            && (Arc::ptr_eq(&self.value, &other.value) || self.value.equals(other.value.as_ref()))
    }
}

impl Debug for ResourceValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.value.fmt(f)
    }
}

impl PartialEq for ResourceValue {
    fn eq(&self, other: &ResourceValue) -> bool {
        self.equals(other)
    }
}

/// The built-in LDS type (`Listener`), decoding into [`ListenerResource`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Lds;

/// The built-in RDS type (`RouteConfiguration`), decoding into [`RouteConfigResource`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Rds;

/// The built-in CDS type (`Cluster`), decoding into [`ClusterResource`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Cds;

/// The built-in EDS type (`ClusterLoadAssignment`), decoding into [`EndpointsResource`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Eds;

impl XdsResourceType for Lds {
    type Value = ListenerResource;
    const TYPE_URL: &'static str = type_url::LISTENER;
    const ALL_RESOURCES_REQUIRED_IN_SOTW: bool = true;
    fn decode(bytes: &[u8]) -> Result<(String, ListenerResource), DecodeError> {
        listener::decode(bytes)
    }
    fn decode_in(
        context: &DecodeContext<'_>,
        bytes: &[u8],
    ) -> Result<(String, ListenerResource), DecodeError> {
        listener::decode_in(context, bytes)
    }
}

impl XdsResourceType for Rds {
    type Value = RouteConfigResource;
    const TYPE_URL: &'static str = type_url::ROUTE_CONFIGURATION;
    const ALL_RESOURCES_REQUIRED_IN_SOTW: bool = false;
    fn decode(bytes: &[u8]) -> Result<(String, RouteConfigResource), DecodeError> {
        route::decode(bytes)
    }
}

impl XdsResourceType for Cds {
    type Value = ClusterResource;
    const TYPE_URL: &'static str = type_url::CLUSTER;
    const ALL_RESOURCES_REQUIRED_IN_SOTW: bool = true;
    fn decode(bytes: &[u8]) -> Result<(String, ClusterResource), DecodeError> {
        cluster::decode(bytes)
    }
    fn decode_in(
        context: &DecodeContext<'_>,
        bytes: &[u8],
    ) -> Result<(String, ClusterResource), DecodeError> {
        cluster::decode_in(context, bytes)
    }
}

impl XdsResourceType for Eds {
    type Value = EndpointsResource;
    const TYPE_URL: &'static str = type_url::CLUSTER_LOAD_ASSIGNMENT;
    const ALL_RESOURCES_REQUIRED_IN_SOTW: bool = false;
    fn decode(bytes: &[u8]) -> Result<(String, EndpointsResource), DecodeError> {
        endpoint::decode(bytes)
    }
}

/// The four built-in types, in the order the client registers them.
pub fn builtin_types() -> Vec<ResourceTypeInfo> {
    vec![
        ResourceTypeInfo::of::<Lds>(),
        ResourceTypeInfo::of::<Rds>(),
        ResourceTypeInfo::of::<Cds>(),
        ResourceTypeInfo::of::<Eds>(),
    ]
}

impl ListenerResource {
    /// The name of the RouteConfiguration this client listener takes from RDS; `None`
    /// for inline routes and server listeners.
    pub fn route_config_name(&self) -> Option<&str> {
        match &self.kind {
            listener::ListenerKind::Client(hcm) => match &hcm.route_config {
                listener::RouteSource::Rds(name) => Some(name),
                listener::RouteSource::Inline(_) => None,
            },
            listener::ListenerKind::Server(_) => None,
        }
    }

    /// The inline route configuration of a client listener, if it has one.
    pub fn inline_route_config(&self) -> Option<&RouteConfigResource> {
        match &self.kind {
            listener::ListenerKind::Client(hcm) => match &hcm.route_config {
                listener::RouteSource::Inline(rc) => Some(rc),
                listener::RouteSource::Rds(_) => None,
            },
            listener::ListenerKind::Server(_) => None,
        }
    }
}

impl RouteConfigResource {
    /// Every cluster name a route of any virtual host can send to, sorted and
    /// deduplicated (cluster specifier plugins are not included).
    pub fn cluster_names(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for vh in &self.virtual_hosts {
            for r in &vh.routes {
                if let route::RouteAction::Forward(fwd) = &r.action {
                    match &fwd.cluster {
                        route::ClusterSpecifier::Cluster(c) => names.push(c.clone()),
                        route::ClusterSpecifier::WeightedClusters(ws) => {
                            names.extend(ws.iter().map(|w| w.name.clone()))
                        }
                        route::ClusterSpecifier::ClusterSpecifierPlugin(_) => {}
                    }
                }
            }
        }
        names.sort();
        names.dedup();
        names
    }
}

impl ClusterResource {
    /// The EDS resource name of an EDS cluster: its service name, or else its own name.
    /// `None` for LOGICAL_DNS and aggregate clusters.
    pub fn eds_service_name(&self) -> Option<&str> {
        match &self.cluster_type {
            ClusterType::Eds { service_name } => {
                Some(service_name.as_deref().unwrap_or(&self.name))
            }
            _ => None,
        }
    }
}

impl EndpointsResource {
    /// The number of endpoints over every priority and locality.
    pub fn endpoint_count(&self) -> usize {
        self.priorities
            .iter()
            .flat_map(|p| &p.localities)
            .map(|l| l.endpoints.len())
            .sum()
    }
}

#[cfg(test)]
mod convenience_tests {
    use super::*;

    /// A user type whose value type is the built-in CDS one.
    struct OtherClusters;

    impl XdsResourceType for OtherClusters {
        type Value = ClusterResource;
        const TYPE_URL: &'static str = "type.googleapis.com/example.OtherCluster";
        const ALL_RESOURCES_REQUIRED_IN_SOTW: bool = false;
        fn decode(bytes: &[u8]) -> Result<(String, ClusterResource), DecodeError> {
            cluster::decode(bytes)
        }
    }

    /// Issue 24 item 5: a value reads back only as the resource type it was decoded
    /// as, even when another type has the same value type.
    #[test]
    fn a_value_reads_back_only_as_its_own_resource_type() {
        let cluster = ClusterResource {
            name: "c1".into(),
            cluster_type: ClusterType::Eds { service_name: None },
            lb_policy: cluster::LbPolicy::RoundRobin,
            lrs_server: false,
            max_requests: 1024,
            tls: None,
            outlier_detection: None,
            override_host_status: Default::default(),
        };
        let cds = ResourceValue::new::<Cds>(cluster.clone());
        let other = ResourceValue::new::<OtherClusters>(cluster);
        assert_eq!(cds.get::<Cds>().map(|c| &*c.name), Some("c1"));
        assert!(cds.get::<OtherClusters>().is_none());
        assert!(cds.to_arc::<OtherClusters>().is_none());
        assert!(other.get::<Cds>().is_none());
        assert!(other.to_arc::<OtherClusters>().is_some());
        assert!((cds.is::<Cds>(), other.is::<Cds>()) == (true, false));
        assert!(!cds.equals(&other), "equal values of two types differ");
        assert!(cds.equals(&cds.clone()));
    }

    #[test]
    fn cluster_eds_service_name_falls_back_to_the_cluster_name() {
        let mut c = ClusterResource {
            name: "c1".into(),
            cluster_type: ClusterType::Eds { service_name: None },
            lb_policy: cluster::LbPolicy::RoundRobin,
            lrs_server: false,
            max_requests: 1024,
            tls: None,
            outlier_detection: None,
            override_host_status: Default::default(),
        };
        assert_eq!(c.eds_service_name(), Some("c1"));
        c.cluster_type = ClusterType::Eds {
            service_name: Some("svc".into()),
        };
        assert_eq!(c.eds_service_name(), Some("svc"));
        c.cluster_type = ClusterType::Aggregate {
            clusters: vec!["a".into()],
        };
        assert_eq!(c.eds_service_name(), None);
    }
}
