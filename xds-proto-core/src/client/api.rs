//! The client's public vocabulary: ids, the transport's inputs ([`Event`]) and the
//! adapter's outputs ([`Action`]), what watchers are told, the configuration, and the
//! CSDS view of one resource. No behaviour beyond accessors lives here.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::delta_request::DeltaRequest;
use super::request::AdsRequest;
use super::{Status, XdsError};
use crate::backoff::BackoffConfig;
use crate::bootstrap::{Bootstrap, ServerConfig};
use crate::names;
use crate::pb::envoy::service::load_stats::v3::LoadStatsRequest;
use crate::resource::cluster::LbPolicyRegistry;
use crate::resource::{ResourceValue, XdsResourceType};
use crate::time::Instant;

/// The upper bound of a NACK's `error_detail` message, in bytes.
pub const MAX_NACK_DETAIL_BYTES: usize = 8 * 1024;

/// The default does-not-exist timeout (gRFC A57, the xDS protocol's 15 seconds).
pub const DEFAULT_RESOURCE_TIMEOUT: Duration = Duration::from_secs(15);

/// The default resource timer on a server with `resource_timer_is_transient_error`
/// (gRFC A88: 30 seconds instead of 15, and the error is UNAVAILABLE).
pub const DEFAULT_TRANSIENT_RESOURCE_TIMEOUT: Duration = Duration::from_secs(30);

/// Declares an opaque id type: a private integer with `Display`, raw access for logs
/// and maps, and a `from_raw` for tests that forge a stale or unknown id.
macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident($repr:ty), $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub(super) $repr);

        impl $name {
            /// The id with this raw value. The client hands out ids itself; this is for
            /// tests and fuzzers that forge one it never issued.
            pub const fn from_raw(raw: $repr) -> $name {
                $name(raw)
            }

            /// The raw value, for logs and keys.
            pub const fn into_raw(self) -> $repr {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

id_type!(
    /// Identifies one ADS stream. Never reused, so events for an old stream are ignored.
    StreamId(u64),
    "stream-"
);
id_type!(
    /// Identifies one watch. Never reused.
    WatcherId(u64),
    "watcher-"
);
id_type!(
    /// Identifies one xDS server (a distinct [`ServerConfig`]) of this client: the
    /// servers are numbered from 0 in the order the client first uses them.
    ServerId(usize),
    "server-"
);

/// What a watcher is told (the gRFC A88 split).
///
/// An ambient error stands until the watcher is told `Changed` again. When the error
/// clears while the value stays the same (the NACKed resource, the ignored deletion
/// or the server-reported error is followed by the same value, or the server comes
/// back after a connectivity error and sends the same value), the watcher is told the
/// value again, `Changed(Ok(value))`, as gRPC does when a resource is received after
/// an error. So a `Changed(Ok)` may repeat the value the watcher holds.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq)]
pub enum WatchEvent {
    /// The resource changed: a new value (or the same one, when an ambient error
    /// cleared), or an error that replaces the old value (does-not-exist, an invalid
    /// uncached resource, a data error under `fail_on_data_errors`, which drops the
    /// cached value, a connectivity error before any value arrived).
    Changed(Result<ResourceValue, XdsError>),
    /// Something went wrong but the value the watcher holds stays valid, until the
    /// next `Changed`.
    AmbientError(XdsError),
}

/// A notification for one watcher.
#[derive(Clone, Debug, PartialEq)]
pub struct Notification {
    /// The watcher it is for.
    pub watcher: WatcherId,
    /// The type URL of the watched resource.
    pub type_url: &'static str,
    /// The name of the watched resource.
    pub name: Arc<str>,
    /// What happened.
    pub event: WatchEvent,
}

impl Notification {
    /// Whether it is about a resource of type `T`.
    pub fn is<T: XdsResourceType>(&self) -> bool {
        self.type_url == T::TYPE_URL
    }

    /// The new value, when the event carries one and the watch is of type `T`.
    pub fn value<T: XdsResourceType>(&self) -> Option<&T::Value> {
        self.event.value::<T>()
    }
}

impl WatchEvent {
    /// The new value, when this is `Changed(Ok(_))` and the value is `T`'s.
    pub fn value<T: XdsResourceType>(&self) -> Option<&T::Value> {
        match self {
            WatchEvent::Changed(Ok(v)) => v.get::<T>(),
            _ => None,
        }
    }

    /// A `Changed` event as `T`'s shared value or the error that replaces it; `None`
    /// for an ambient error, or when the value is not `T`'s.
    pub fn changed<T: XdsResourceType>(&self) -> Option<Result<Arc<T::Value>, XdsError>> {
        match self {
            WatchEvent::Changed(Ok(v)) => v.to_arc::<T>().map(Ok),
            WatchEvent::Changed(Err(e)) => Some(Err(e.clone())),
            WatchEvent::AmbientError(_) => None,
        }
    }

    /// The error, replacing or ambient.
    pub fn error(&self) -> Option<&XdsError> {
        match self {
            WatchEvent::Changed(Err(e)) | WatchEvent::AmbientError(e) => Some(e),
            WatchEvent::Changed(Ok(_)) => None,
        }
    }
}

/// An input from the transport.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// The stream has been dispatched on an established connection to its server.
    /// Until this (or a response) arrives, the does-not-exist timer does not start.
    StreamStarted {
        /// The stream.
        stream: StreamId,
    },
    /// The transport has taken the last [`Action::SendRequest`] of this stream onto an
    /// established connection. The next request is only emitted after this.
    RequestSent {
        /// The stream.
        stream: StreamId,
    },
    /// A response arrived, as raw bytes.
    ResponseReceived {
        /// The stream.
        stream: StreamId,
        /// The serialized `envoy.service.discovery.v3.DiscoveryResponse`, or on a delta
        /// stream (a server whose [`ServerConfig::is_delta`]) the serialized
        /// `DeltaDiscoveryResponse`, or on an LRS stream the `LoadStatsResponse`.
        bytes: Bytes,
    },
    /// The stream ended with this status. Not needed after [`Action::CloseStream`]: the
    /// core has already forgotten that stream.
    StreamClosed {
        /// The stream.
        stream: StreamId,
        /// How it ended.
        status: Status,
    },
    /// The channel to a server reported a connectivity failure (TRANSIENT_FAILURE).
    ConnectivityFailure {
        /// The server.
        server: ServerId,
        /// Why, as the channel reported it.
        reason: String,
    },
}

/// An output for the adapter.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Open an ADS stream to this server: `StreamAggregatedResources`, or
    /// `DeltaAggregatedResources` when [`ServerConfig::is_delta`] (`config.api_type`).
    StartStream {
        /// The server.
        server: ServerId,
        /// Its configuration (URI and credentials).
        config: Arc<ServerConfig>,
        /// The id events for this stream must carry.
        stream: StreamId,
    },
    /// Send this request on the stream, after the ones before it. Report
    /// [`Event::RequestSent`] when the transport has taken it.
    SendRequest {
        /// The stream.
        stream: StreamId,
        /// The request (boxed: it is the largest action by far).
        request: Box<AdsRequest>,
    },
    /// Send this delta request on the (delta) stream, after the ones before it. Report
    /// [`Event::RequestSent`] when the transport has taken it.
    SendDeltaRequest {
        /// The stream.
        stream: StreamId,
        /// The request.
        request: Box<DeltaRequest>,
    },
    /// Open an LRS stream (`StreamLoadStats` of
    /// `envoy.service.load_stats.v3.LoadReportingService`) to this server, on the
    /// connection its ADS stream uses. Its events are the ADS stream's:
    /// [`Event::StreamStarted`], [`Event::RequestSent`], [`Event::ResponseReceived`]
    /// (a `LoadStatsResponse`) and [`Event::StreamClosed`].
    StartLoadReportStream {
        /// The server.
        server: ServerId,
        /// Its configuration (URI and credentials).
        config: Arc<ServerConfig>,
        /// The id events for this stream must carry.
        stream: StreamId,
    },
    /// Send this `LoadStatsRequest` on the LRS stream, after the ones before it.
    /// Report [`Event::RequestSent`] when the transport has taken it.
    SendLoadReport {
        /// The stream.
        stream: StreamId,
        /// The request: the node first, then the load reports.
        request: Box<LoadStatsRequest>,
    },
    /// Close the stream (half-close and drop it). No event is expected for it.
    CloseStream {
        /// The stream.
        stream: StreamId,
    },
    /// Nothing on this server is watched any more: its channel may be dropped.
    DropChannel {
        /// The server.
        server: ServerId,
    },
    /// Deliver a notification to a watcher.
    Notify(Notification),
}

/// Why a watch could not be registered.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchError {
    /// The type is not registered (or another type with its type URL is).
    UnknownType(String),
    /// The resource name is an `xdstp://` name whose authority is not in the bootstrap.
    UnknownAuthority {
        /// The authority.
        authority: String,
        /// The resource name.
        name: String,
    },
    /// The bootstrap names no server for this resource.
    NoServer(String),
    /// The name is a malformed `xdstp://` name, or names another resource type.
    InvalidName(names::NameError),
}

impl fmt::Display for WatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WatchError::UnknownType(url) => write!(f, "unknown resource type {url:?}"),
            WatchError::UnknownAuthority { authority, name } => write!(
                f,
                "authority {authority:?} of resource {name:?} is not in the bootstrap's authorities"
            ),
            WatchError::NoServer(name) => {
                write!(f, "no xDS server configured for resource {name:?}")
            }
            WatchError::InvalidName(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for WatchError {}

/// Why a type could not be registered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DuplicateTypeError(pub &'static str);

impl fmt::Display for DuplicateTypeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "resource type {} is already registered", self.0)
    }
}

impl std::error::Error for DuplicateTypeError {}

/// The client's settings beyond the bootstrap.
#[derive(Clone, Debug)]
pub struct XdsClientConfig {
    /// The parsed bootstrap.
    pub bootstrap: Arc<Bootstrap>,
    /// How long to wait for a subscribed resource before it is taken not to exist.
    pub resource_timeout: Duration,
    /// How long to wait for a subscribed resource, on a server with the feature
    /// `resource_timer_is_transient_error`, before it is reported as timed out (A88).
    pub transient_resource_timeout: Duration,
    /// Backoff between failing stream attempts.
    pub backoff: BackoffConfig,
    /// Reported in `Node.user_agent_name`.
    pub user_agent_name: String,
    /// Reported in `Node.user_agent_version`.
    pub user_agent_version: String,
    /// The shortest load reporting interval taken from an LRS server (gRPC's 1 s by
    /// default); a shorter `load_reporting_interval` is taken as this.
    pub min_load_reporting_interval: Duration,
    /// The LB policies CDS `load_balancing_policy` may name (A52): the built-in ones,
    /// and an embedder's own registered with [`LbPolicyRegistry::register`].
    pub lb_policies: Arc<LbPolicyRegistry>,
}

impl XdsClientConfig {
    /// The defaults (15 s resource timeout, 30 s when the timer is a transient error,
    /// gRPC backoff) for a bootstrap.
    pub fn new(bootstrap: impl Into<Arc<Bootstrap>>) -> XdsClientConfig {
        XdsClientConfig {
            bootstrap: bootstrap.into(),
            resource_timeout: DEFAULT_RESOURCE_TIMEOUT,
            transient_resource_timeout: DEFAULT_TRANSIENT_RESOURCE_TIMEOUT,
            backoff: BackoffConfig::default(),
            user_agent_name: "xds-proto".to_string(),
            user_agent_version: env!("CARGO_PKG_VERSION").to_string(),
            min_load_reporting_interval: crate::lrs::DEFAULT_MIN_LOAD_REPORTING_INTERVAL,
            lb_policies: Arc::new(LbPolicyRegistry::built_in().clone()),
        }
    }
}

/// A resource's state as CSDS reports it (`ClientResourceStatus`).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ResourceStatusKind {
    /// Subscribed; nothing received yet.
    Requested,
    /// Known not to exist; with a value still cached when an LDS/CDS deletion was
    /// ignored (A88's default), as C-core reports it.
    DoesNotExist,
    /// Received and accepted.
    Acked,
    /// The last update of it was rejected; the cached value (if any) is the last good one.
    Nacked,
    /// The server reported an error for it (TP3).
    ReceivedError,
    /// The does-not-exist timer fired on a server with `resource_timer_is_transient_error`.
    Timeout,
}

/// The last rejected update of a resource, a server-reported error, or why it does
/// not exist (`details`; `version` is the response's, or the type's last accepted one
/// when the timer fired).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpdateFailure {
    /// Why it was rejected.
    pub details: String,
    /// The version of the rejected response.
    pub version: String,
    /// When it arrived.
    pub at: Instant,
}

/// A read-only view of one resource, for CSDS and diagnostics.
#[derive(Clone, Debug, PartialEq)]
pub struct ResourceSnapshot {
    /// The type URL.
    pub type_url: &'static str,
    /// The name.
    pub name: Arc<str>,
    /// The status.
    pub status: ResourceStatusKind,
    /// The version of the response that delivered the cached value ("" when none).
    pub version: Arc<str>,
    /// When the cached value was last updated.
    pub last_updated: Option<Instant>,
    /// The raw serialized resource, as the server sent it.
    pub raw: Option<Bytes>,
    /// The decoded value.
    pub value: Option<ResourceValue>,
    /// The server-reported error, else the last rejected update, else why it does
    /// not exist (every [`ResourceStatusKind::DoesNotExist`] has one).
    pub error_state: Option<UpdateFailure>,
    /// How many watchers it has.
    pub watchers: usize,
}
