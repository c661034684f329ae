//! The ADS protocol engine: one deterministic state machine per xDS client.
//!
//! It owns the watchers, the resource cache, one ADS stream per server in use (with
//! version, nonce and subscriptions per type), ACK/NACK, the A57 failure modes
//! (stream termination, connectivity errors, backoff, the does-not-exist timer),
//! TP3 `resource_errors`, the A88 watcher split, and the CSDS snapshot.
//!
//! Methods come in four groups, as in quinn-proto: getters, inputs (`watch`,
//! `cancel_watch`, `handle_event`, `handle_timeout`), and the two outputs
//! (`poll_action`, `poll_timeout`). After every input, drain `poll_action()` until it
//! returns `None`, then sleep until `poll_timeout()`.

use std::collections::{BTreeSet, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use rand_core::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;

use crate::DetHashMap as HashMap;
use crate::backoff::{Backoff, BackoffConfig};
use crate::bootstrap::{Bootstrap, ServerConfig};
use crate::metrics::{
    CacheState, OLD_STYLE_AUTHORITY, ResourceCount, ServerMetrics, TypeUpdates, XdsClientMetrics,
    resource_type_label,
};
use crate::names;
use crate::pb::envoy::service::discovery::v3 as discovery;
use crate::resource::{self, ResourceTypeInfo, ResourceValue, XdsResourceType};
use crate::time::Instant;

/// The upper bound of a NACK's `error_detail` message, in bytes.
pub const MAX_NACK_DETAIL_BYTES: usize = 8 * 1024;

/// The default does-not-exist timeout (gRFC A57, the xDS protocol's 15 seconds).
pub const DEFAULT_RESOURCE_TIMEOUT: Duration = Duration::from_secs(15);

/// Declares an opaque id type: a private integer with `Display`, raw access for logs
/// and maps, and a `from_raw` for tests that forge a stale or unknown id.
macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident($repr:ty), $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name($repr);

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

/// A gRPC status code, kept as its wire value so that codes unknown today survive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Code(pub i32);

impl Code {
    /// OK.
    pub const OK: Code = Code(0);
    /// CANCELLED.
    pub const CANCELLED: Code = Code(1);
    /// UNKNOWN.
    pub const UNKNOWN: Code = Code(2);
    /// INVALID_ARGUMENT.
    pub const INVALID_ARGUMENT: Code = Code(3);
    /// DEADLINE_EXCEEDED.
    pub const DEADLINE_EXCEEDED: Code = Code(4);
    /// NOT_FOUND.
    pub const NOT_FOUND: Code = Code(5);
    /// ALREADY_EXISTS.
    pub const ALREADY_EXISTS: Code = Code(6);
    /// PERMISSION_DENIED.
    pub const PERMISSION_DENIED: Code = Code(7);
    /// RESOURCE_EXHAUSTED.
    pub const RESOURCE_EXHAUSTED: Code = Code(8);
    /// FAILED_PRECONDITION.
    pub const FAILED_PRECONDITION: Code = Code(9);
    /// ABORTED.
    pub const ABORTED: Code = Code(10);
    /// OUT_OF_RANGE.
    pub const OUT_OF_RANGE: Code = Code(11);
    /// UNIMPLEMENTED.
    pub const UNIMPLEMENTED: Code = Code(12);
    /// INTERNAL.
    pub const INTERNAL: Code = Code(13);
    /// UNAVAILABLE.
    pub const UNAVAILABLE: Code = Code(14);
    /// DATA_LOSS.
    pub const DATA_LOSS: Code = Code(15);
    /// UNAUTHENTICATED.
    pub const UNAUTHENTICATED: Code = Code(16);

    /// The canonical upper-case name; `UNKNOWN` for a value outside 0..=16 (as gRPC
    /// maps codes it does not know). [`Display`](fmt::Display) shows such a value as
    /// `CODE(n)`.
    pub fn name(self) -> &'static str {
        const NAMES: [&str; 17] = [
            "OK",
            "CANCELLED",
            "UNKNOWN",
            "INVALID_ARGUMENT",
            "DEADLINE_EXCEEDED",
            "NOT_FOUND",
            "ALREADY_EXISTS",
            "PERMISSION_DENIED",
            "RESOURCE_EXHAUSTED",
            "FAILED_PRECONDITION",
            "ABORTED",
            "OUT_OF_RANGE",
            "UNIMPLEMENTED",
            "INTERNAL",
            "UNAVAILABLE",
            "DATA_LOSS",
            "UNAUTHENTICATED",
        ];
        usize::try_from(self.0)
            .ok()
            .and_then(|i| NAMES.get(i))
            .copied()
            .unwrap_or("UNKNOWN")
    }

    /// Whether this is one of the 17 codes gRPC defines.
    pub fn is_known(self) -> bool {
        (0..=16).contains(&self.0)
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_known() {
            f.write_str(self.name())
        } else {
            write!(f, "CODE({})", self.0)
        }
    }
}

/// A gRPC status: a code and a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// The code.
    pub code: Code,
    /// The message.
    pub message: String,
}

impl Status {
    /// A status with the given code and message.
    pub fn new(code: Code, message: impl Into<String>) -> Status {
        Status {
            code,
            message: message.into(),
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for Status {}

/// What kind of failure an [`XdsError`] reports, for programs that react to it.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The resource does not exist: the timer fired, the server said NOT_FOUND, or a
    /// deletion was applied.
    DoesNotExist,
    /// The does-not-exist timer fired on a server with `resource_timer_is_transient_error`.
    Timeout,
    /// The server sent the resource and it failed validation (it was NACKed).
    Invalid,
    /// The server omitted a cached LDS/CDS resource from a SotW response and the client
    /// kept the cached value (the default of gRFC A88).
    DeletionIgnored,
    /// The ADS stream or channel to the server failed.
    Connectivity,
    /// The server reported an error for this resource in `resource_errors` (TP3).
    ServerReported,
}

/// An error delivered to a watcher, shaped as a gRPC status with a kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XdsError {
    /// The kind of failure.
    pub kind: ErrorKind,
    /// The status a data plane would fail RPCs with, with a message naming the
    /// resource and the server.
    pub status: Status,
}

impl fmt::Display for XdsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.status.fmt(f)
    }
}

impl std::error::Error for XdsError {}

/// What a watcher is told (the gRFC A88 split).
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq)]
pub enum WatchEvent {
    /// The resource changed: a new value, or an error that replaces the old value
    /// (does-not-exist, an invalid uncached resource, a data error under
    /// `fail_on_data_errors`, a connectivity error before any value arrived).
    Changed(Result<ResourceValue, XdsError>),
    /// Something went wrong but the value the watcher holds stays valid.
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
    /// A `DiscoveryResponse` arrived, as raw bytes.
    ResponseReceived {
        /// The stream.
        stream: StreamId,
        /// The serialized `envoy.service.discovery.v3.DiscoveryResponse`.
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

/// A SotW `envoy.service.discovery.v3.DiscoveryRequest` as the client emits it. The
/// resource names are shared with the client's subscription, so an ACK of a
/// 10,000-name subscription copies no names: [`encode`](Self::encode) writes the wire
/// form straight from them, byte for byte what [`to_proto`](Self::to_proto)`().encode()`
/// writes.
#[derive(Clone, Debug, PartialEq)]
pub struct AdsRequest {
    /// The last accepted version of this type from this server (empty at first).
    pub version_info: String,
    /// The node, on a stream's first request only.
    pub node: Option<crate::pb::envoy::config::core::v3::Node>,
    /// The subscribed names, sorted.
    pub resource_names: Arc<[Arc<str>]>,
    /// The resource type.
    pub type_url: &'static str,
    /// The nonce of the last response of this type on this stream (empty at first).
    pub response_nonce: String,
    /// Set on a NACK: why the last response was rejected.
    pub error_detail: Option<crate::pb::google::rpc::Status>,
}

impl AdsRequest {
    /// The generated message with the same content.
    pub fn to_proto(&self) -> discovery::DiscoveryRequest {
        discovery::DiscoveryRequest {
            version_info: self.version_info.clone(),
            node: self.node.clone(),
            resource_names: self.resource_names.iter().map(|n| n.to_string()).collect(),
            resource_locators: Vec::new(),
            type_url: self.type_url.to_string(),
            response_nonce: self.response_nonce.clone(),
            error_detail: self.error_detail.clone(),
        }
    }

    /// The wire form in a new buffer of exactly [`encoded_len`](Self::encoded_len) bytes.
    pub fn encode_to_vec(&self) -> Vec<u8> {
        let mut buf = Vec::with_capacity(self.encoded_len());
        self.encode(&mut buf);
        buf
    }

    /// The length of the wire form.
    pub fn encoded_len(&self) -> usize {
        use prost::encoding::message;
        str_field_len(1, &self.version_info)
            + self.node.as_ref().map_or(0, |n| message::encoded_len(2, n))
            + self
                .resource_names
                .iter()
                .map(|n| {
                    prost::encoding::key_len(3)
                        + prost::encoding::encoded_len_varint(n.len() as u64)
                        + n.len()
                })
                .sum::<usize>()
            + str_field_len(4, self.type_url)
            + str_field_len(5, &self.response_nonce)
            + self
                .error_detail
                .as_ref()
                .map_or(0, |s| message::encoded_len(6, s))
    }

    /// Writes the wire form (fields in number order, as prost does).
    pub fn encode(&self, buf: &mut impl bytes::BufMut) {
        use prost::encoding::{WireType, encode_key, encode_varint, message};
        put_str_field(1, &self.version_info, buf);
        if let Some(node) = &self.node {
            message::encode(2, node, buf);
        }
        for name in self.resource_names.iter() {
            // Repeated strings are written even when empty.
            encode_key(3, WireType::LengthDelimited, buf);
            encode_varint(name.len() as u64, buf);
            buf.put_slice(name.as_bytes());
        }
        put_str_field(4, self.type_url, buf);
        put_str_field(5, &self.response_nonce, buf);
        if let Some(status) = &self.error_detail {
            message::encode(6, status, buf);
        }
    }
}

/// The wire length of a singular string field (omitted when empty, as proto3 does).
fn str_field_len(tag: u32, value: &str) -> usize {
    use prost::encoding::{encoded_len_varint, key_len};
    if value.is_empty() {
        0
    } else {
        key_len(tag) + encoded_len_varint(value.len() as u64) + value.len()
    }
}

/// Writes a singular string field (nothing when empty, as proto3 does).
fn put_str_field(tag: u32, value: &str, buf: &mut impl bytes::BufMut) {
    use prost::encoding::{WireType, encode_key, encode_varint};
    if !value.is_empty() {
        encode_key(tag, WireType::LengthDelimited, buf);
        encode_varint(value.len() as u64, buf);
        buf.put_slice(value.as_bytes());
    }
}

/// An output for the adapter.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Open an ADS stream (`StreamAggregatedResources`) to this server.
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
    /// Backoff between failing stream attempts.
    pub backoff: BackoffConfig,
    /// Reported in `Node.user_agent_name`.
    pub user_agent_name: String,
    /// Reported in `Node.user_agent_version`.
    pub user_agent_version: String,
}

impl XdsClientConfig {
    /// The defaults (15 s resource timeout, gRPC backoff) for a bootstrap.
    pub fn new(bootstrap: impl Into<Arc<Bootstrap>>) -> XdsClientConfig {
        XdsClientConfig {
            bootstrap: bootstrap.into(),
            resource_timeout: DEFAULT_RESOURCE_TIMEOUT,
            backoff: BackoffConfig::default(),
            user_agent_name: "xds-proto".to_string(),
            user_agent_version: env!("CARGO_PKG_VERSION").to_string(),
        }
    }
}

/// A resource's state as CSDS reports it (`ClientResourceStatus`).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ResourceStatusKind {
    /// Subscribed; nothing received yet.
    Requested,
    /// Known not to exist.
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

/// The last rejected update of a resource.
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
    /// The last rejected update, or the server-reported error.
    pub error_state: Option<UpdateFailure>,
    /// How many watchers it has.
    pub watchers: usize,
}

type TypeIdx = usize;

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum TimerKey {
    Reconnect(usize),
    /// A resource's does-not-exist timer on one server: during fallback (A71) every
    /// server in use times its own subscription.
    DoesNotExist(usize, TypeIdx, Arc<str>),
}

/// The bit of `timed_on` for the server at `position` in its authority's list; the last
/// bit stands for every position from 63 on.
fn timer_bit(position: usize) -> u64 {
    1 << position.min(63)
}

/// All deadlines of the client in one table, keyed by purpose.
#[derive(Debug, Default)]
struct TimerTable {
    by_deadline: BTreeSet<(Instant, TimerKey)>,
    by_key: HashMap<TimerKey, Instant>,
}

impl TimerTable {
    fn set(&mut self, key: TimerKey, at: Instant) {
        if let Some(old) = self.by_key.insert(key.clone(), at) {
            self.by_deadline.remove(&(old, key.clone()));
        }
        self.by_deadline.insert((at, key));
    }

    fn cancel(&mut self, key: &TimerKey) {
        if let Some(old) = self.by_key.remove(key) {
            self.by_deadline.remove(&(old, key.clone()));
        }
    }

    fn is_armed(&self, key: &TimerKey) -> bool {
        self.by_key.contains_key(key)
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.by_deadline.first().map(|(at, _)| *at)
    }

    fn pop_expired(&mut self, now: Instant) -> Option<TimerKey> {
        let (at, _) = self.by_deadline.first()?;
        if *at > now {
            return None;
        }
        let (_, key) = self.by_deadline.pop_first()?;
        self.by_key.remove(&key);
        Some(key)
    }
}

#[derive(Debug)]
struct Cached {
    value: ResourceValue,
    raw: Bytes,
    version: Arc<str>,
    updated: Instant,
}

#[derive(Debug)]
struct ResourceEntry {
    name: Arc<str>,
    /// The authority whose servers serve it.
    authority: usize,
    watchers: Vec<WatcherId>,
    cached: Option<Cached>,
    /// Known not to exist (timer fired, NOT_FOUND, or deletion applied).
    does_not_exist: bool,
    /// The timer fired as a transient error (`resource_timer_is_transient_error`).
    timed_out: bool,
    /// The last NACK of this resource, until a valid copy arrives.
    nack: Option<UpdateFailure>,
    /// A TP3 error remembered until the resource or a new error arrives.
    server_error: Option<UpdateFailure>,
    /// The error that stands for new watchers: ambient when cached, the state otherwise.
    error: Option<XdsError>,
    /// The servers (by position in the authority's list, see [`timer_bit`]) whose
    /// does-not-exist timer for it is armed.
    timed_on: u64,
    /// The last response (by [`XdsClient`]'s response counter) that named it, and its
    /// position among that response's items: duplicate detection without a name index.
    seen_in: u64,
    seen_at: u32,
}

impl ResourceEntry {
    /// "Cached" in the A71 sense: a value, or known not to exist.
    fn is_cached(&self) -> bool {
        self.cached.is_some() || self.does_not_exist
    }

    /// The A78 `grpc.xds.cache_state`.
    fn cache_state(&self) -> CacheState {
        let cached = self.cached.is_some();
        match () {
            _ if self.server_error.is_some() && cached => CacheState::ReceivedErrorButCached,
            _ if self.server_error.is_some() => CacheState::ReceivedError,
            _ if self.nack.is_some() && cached => CacheState::NackedButCached,
            _ if self.nack.is_some() => CacheState::Nacked,
            _ if cached
                && self
                    .error
                    .as_ref()
                    .is_some_and(|e| e.kind == ErrorKind::DeletionIgnored) =>
            {
                CacheState::DoesNotExistButCached
            }
            _ if cached => CacheState::Acked,
            _ if self.does_not_exist => CacheState::DoesNotExist,
            _ if self.timed_out => CacheState::Timeout,
            _ => CacheState::Requested,
        }
    }

    fn status(&self) -> ResourceStatusKind {
        if self.server_error.is_some() {
            ResourceStatusKind::ReceivedError
        } else if self.nack.is_some() {
            ResourceStatusKind::Nacked
        } else if self.cached.is_some() {
            ResourceStatusKind::Acked
        } else if self.does_not_exist {
            ResourceStatusKind::DoesNotExist
        } else if self.timed_out {
            ResourceStatusKind::Timeout
        } else {
            ResourceStatusKind::Requested
        }
    }
}

/// Where a resource sits in its type's [`ResourceTable`]: a slot and the generation
/// of its occupant, so that a handle kept across responses never reaches a later
/// resource that reused the slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Slot {
    index: u32,
    generation: u32,
}

/// One resource type's watched resources: entries in a slab, found by name through an
/// index. A response's items and a server's last response refer to entries by
/// [`Slot`], so applying an unchanged SotW resend hashes no names.
#[derive(Debug, Default)]
struct ResourceTable {
    slots: Vec<(u32, Option<ResourceEntry>)>,
    free: Vec<u32>,
    by_name: HashMap<Arc<str>, u32>,
}

impl ResourceTable {
    fn slot_of(&self, name: &str) -> Option<Slot> {
        let index = *self.by_name.get(name)?;
        Some(Slot {
            index,
            generation: self.slots[index as usize].0,
        })
    }

    fn get(&self, name: &str) -> Option<&ResourceEntry> {
        let index = *self.by_name.get(name)?;
        self.slots[index as usize].1.as_ref()
    }

    fn get_mut(&mut self, name: &str) -> Option<&mut ResourceEntry> {
        let index = *self.by_name.get(name)?;
        self.slots[index as usize].1.as_mut()
    }

    /// The entry at `slot`, if it still holds the resource the slot was taken for.
    fn at_mut(&mut self, slot: Slot) -> Option<&mut ResourceEntry> {
        match self.slots.get_mut(slot.index as usize) {
            Some((generation, entry)) if *generation == slot.generation => entry.as_mut(),
            _ => None,
        }
    }

    /// The table's shared copy of a watched name.
    fn shared_name(&self, name: &str) -> Option<&Arc<str>> {
        self.by_name.get_key_value(name).map(|(k, _)| k)
    }

    fn insert(&mut self, entry: ResourceEntry) {
        let name = entry.name.clone();
        let index = match self.free.pop() {
            Some(index) => {
                self.slots[index as usize].1 = Some(entry);
                index
            }
            None => {
                let index = u32::try_from(self.slots.len()).expect("fewer than 2^32 resources");
                self.slots.push((0, Some(entry)));
                index
            }
        };
        self.by_name.insert(name, index);
    }

    fn remove(&mut self, name: &str) -> Option<ResourceEntry> {
        let index = self.by_name.remove(name)?;
        let (generation, entry) = &mut self.slots[index as usize];
        *generation = generation.wrapping_add(1);
        self.free.push(index);
        entry.take()
    }

    fn values(&self) -> impl Iterator<Item = &ResourceEntry> {
        self.slots.iter().filter_map(|(_, e)| e.as_ref())
    }

    fn values_mut(&mut self) -> impl Iterator<Item = &mut ResourceEntry> {
        self.slots.iter_mut().filter_map(|(_, e)| e.as_mut())
    }
}

#[derive(Debug, Default)]
struct ServerTypeState {
    /// The last accepted `version_info` of this type from this server.
    version: String,
    /// The names subscribed on this server.
    subscribed: BTreeSet<Arc<str>>,
    /// `subscribed` as the requests carry it, built when first needed after a change.
    names: Option<Arc<[Arc<str>]>>,
    /// The watched resources of the last response by position (`None` where one was
    /// rejected or not watched), to recognise unchanged resources of a SotW resend
    /// without decoding or hashing their names.
    last_slots: Vec<Option<Slot>>,
    /// Valid and invalid resources received of this type (A78 `resource_updates_*`).
    updates_valid: u64,
    updates_invalid: u64,
}

#[derive(Debug, Default, Clone)]
struct StreamTypeState {
    nonce: String,
    /// A NACK message waiting to be sent.
    nack: Option<String>,
    /// A request for this type has been emitted on this stream.
    ever_sent: bool,
    /// A request for this type must be (re)sent.
    dirty: bool,
    /// Names subscribed on this stream since the last request of this type was emitted:
    /// the next request is their subscribing message, which starts their timers.
    new_names: Vec<Arc<str>>,
}

#[derive(Debug)]
struct InFlight {
    type_idx: TypeIdx,
    names: Vec<Arc<str>>,
}

#[derive(Debug)]
struct StreamState {
    id: StreamId,
    connected: bool,
    saw_response: bool,
    sent_node: bool,
    in_flight: Option<InFlight>,
    /// Names whose subscribing request was sent before the stream was connected.
    sent_before_connect: Vec<(TypeIdx, Arc<str>)>,
    types: Vec<StreamTypeState>,
    dirty_order: VecDeque<TypeIdx>,
}

/// One authority (gRFC A47) and its fallback state (gRFC A71).
#[derive(Debug)]
struct AuthorityState {
    /// `None` for old-style names, served by the top-level servers.
    name: Option<String>,
    /// The bootstrap's servers for this authority, highest priority first.
    servers: Vec<usize>,
    /// How many of them are in use, `servers[..in_use]`; the last one is active.
    in_use: usize,
    /// How many resources of this authority are watched.
    resources: usize,
}

impl AuthorityState {
    fn in_use(&self) -> &[usize] {
        &self.servers[..self.in_use]
    }

    fn active(&self) -> Option<usize> {
        self.in_use().last().copied()
    }
}

#[derive(Debug)]
struct ServerState {
    config: Arc<ServerConfig>,
    stream: Option<StreamState>,
    backoff: Backoff,
    connectivity_error: Option<XdsError>,
    types: Vec<ServerTypeState>,
    /// A response arrived since the last connectivity failure (A78 `connected`).
    responded: bool,
    /// Healthy-to-unhealthy transitions (A78 `server_failure`).
    failures: u64,
}

impl ServerState {
    fn has_subscriptions(&self) -> bool {
        self.types.iter().any(|t| !t.subscribed.is_empty())
    }
}

/// The xDS client state machine. See the module documentation for the drive loop.
pub struct XdsClient {
    config: XdsClientConfig,
    node: crate::pb::envoy::config::core::v3::Node,
    types: Vec<ResourceTypeInfo>,
    servers: Vec<ServerState>,
    authorities: Vec<AuthorityState>,
    resources: Vec<ResourceTable>,
    watchers: HashMap<WatcherId, (TypeIdx, Arc<str>)>,
    timers: TimerTable,
    actions: VecDeque<Action>,
    rng: Xoshiro256PlusPlus,
    next_stream: u64,
    /// Responses applied so far: the stamp of the current one (see `ResourceEntry::seen_in`).
    responses_applied: u64,
    next_watcher: u64,
    /// Test-only (feature `planted-bug`): see [`XdsClient::plant_bug`].
    #[cfg(feature = "planted-bug")]
    planted_bug: bool,
}

impl fmt::Debug for XdsClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("XdsClient")
            .field("servers", &self.servers.len())
            .field("watchers", &self.watchers.len())
            .field("pending_actions", &self.actions.len())
            .finish_non_exhaustive()
    }
}

impl XdsClient {
    /// A client with the built-in LDS/RDS/CDS/EDS types. `seed` drives backoff jitter.
    pub fn new(config: XdsClientConfig, seed: u64) -> XdsClient {
        let node = config
            .bootstrap
            .node
            .to_proto(&config.user_agent_name, &config.user_agent_version);
        let types = resource::builtin_types();
        let resources = types.iter().map(|_| ResourceTable::default()).collect();
        XdsClient {
            config,
            node,
            types,
            servers: Vec::new(),
            authorities: Vec::new(),
            resources,
            watchers: HashMap::default(),
            timers: TimerTable::default(),
            actions: VecDeque::new(),
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            next_stream: 1,
            responses_applied: 0,
            next_watcher: 1,
            #[cfg(feature = "planted-bug")]
            planted_bug: false,
        }
    }

    /// Test-only (feature `planted-bug`, off by default): when `on`, the client breaks
    /// one A57 rule on purpose: it starts the does-not-exist timer when a request is
    /// reported sent even if the stream is not yet connected. The simulator's
    /// planted-bug test turns it on to show that its invariants catch the break.
    #[cfg(feature = "planted-bug")]
    #[doc(hidden)]
    pub fn plant_bug(&mut self, on: bool) {
        self.planted_bug = on;
    }

    /// Adds a user-defined resource type, so that [`watch::<T>`](Self::watch) works for it.
    pub fn register_type<T: XdsResourceType>(&mut self) -> Result<(), DuplicateTypeError> {
        if self.type_index(T::TYPE_URL).is_some() {
            return Err(DuplicateTypeError(T::TYPE_URL));
        }
        self.types.push(ResourceTypeInfo::of::<T>());
        self.resources.push(ResourceTable::default());
        for server in &mut self.servers {
            server.types.push(ServerTypeState::default());
            if let Some(stream) = &mut server.stream {
                stream.types.push(StreamTypeState::default());
            }
        }
        Ok(())
    }

    // ----- getters -----

    /// The configuration the client was built with.
    pub fn config(&self) -> &XdsClientConfig {
        &self.config
    }

    /// The node identity sent on the first request of each stream.
    pub fn node(&self) -> &crate::pb::envoy::config::core::v3::Node {
        &self.node
    }

    /// The configuration of a server this client has used.
    pub fn server_config(&self, server: ServerId) -> Option<&Arc<ServerConfig>> {
        self.servers.get(server.0).map(|s| &s.config)
    }

    /// The stream currently open to a server, if any.
    pub fn current_stream(&self, server: ServerId) -> Option<StreamId> {
        self.servers.get(server.0)?.stream.as_ref().map(|s| s.id)
    }

    /// The standing connectivity error of a server, if its last attempt failed.
    pub fn server_error(&self, server: ServerId) -> Option<&XdsError> {
        self.servers.get(server.0)?.connectivity_error.as_ref()
    }

    /// A snapshot of every watched resource, for CSDS; ordered by type, then name.
    pub fn resource_snapshot(&self) -> Vec<ResourceSnapshot> {
        let mut out = Vec::new();
        for (t, table) in self.resources.iter().enumerate() {
            let type_url = self.types[t].type_url();
            let mut entries: Vec<&ResourceEntry> = table.values().collect();
            entries.sort_by(|a, b| a.name.cmp(&b.name));
            for e in entries {
                out.push(ResourceSnapshot {
                    type_url,
                    name: e.name.clone(),
                    status: e.status(),
                    version: e
                        .cached
                        .as_ref()
                        .map_or_else(|| Arc::from(""), |c| c.version.clone()),
                    last_updated: e.cached.as_ref().map(|c| c.updated),
                    raw: e.cached.as_ref().map(|c| c.raw.clone()),
                    value: e.cached.as_ref().map(|c| c.value.clone()),
                    error_state: e.server_error.clone().or_else(|| e.nack.clone()),
                    watchers: e.watchers.len(),
                });
            }
        }
        out
    }

    /// The gRFC A78 metrics of this client (without `grpc.target`, which the embedder
    /// knows): per-server counters and connection state, and the resources gauge. The
    /// gauge is counted on each call, in time linear in the watched resources.
    pub fn metrics(&self) -> XdsClientMetrics {
        let servers = self
            .servers
            .iter()
            .map(|srv| ServerMetrics {
                server: Arc::from(srv.config.server_uri.as_str()),
                connected: srv.responded,
                failures: srv.failures,
                updates: srv
                    .types
                    .iter()
                    .zip(&self.types)
                    .filter(|(ts, _)| ts.updates_valid + ts.updates_invalid > 0)
                    .map(|(ts, ty)| TypeUpdates {
                        resource_type: resource_type_label(ty.type_url()),
                        valid: ts.updates_valid,
                        invalid: ts.updates_invalid,
                    })
                    .collect(),
            })
            .collect();
        let mut counts: std::collections::BTreeMap<(usize, usize, CacheState), u64> =
            std::collections::BTreeMap::new();
        for (t, table) in self.resources.iter().enumerate() {
            for entry in table.values() {
                *counts
                    .entry((entry.authority, t, entry.cache_state()))
                    .or_default() += 1;
            }
        }
        let mut resources: Vec<ResourceCount> = counts
            .into_iter()
            .map(|((a, t, cache_state), count)| ResourceCount {
                authority: self.authorities[a]
                    .name
                    .clone()
                    .unwrap_or_else(|| OLD_STYLE_AUTHORITY.to_string()),
                resource_type: resource_type_label(self.types[t].type_url()),
                cache_state,
                count,
            })
            .collect();
        resources.sort();
        XdsClientMetrics { servers, resources }
    }

    /// The CSDS `GenericXdsConfig` entries of this client.
    pub fn csds_configs(
        &self,
    ) -> Vec<crate::pb::envoy::service::status::v3::client_config::GenericXdsConfig> {
        use crate::pb::envoy::admin::v3::{ClientResourceStatus, UpdateFailureState};
        use crate::pb::envoy::service::status::v3::client_config::GenericXdsConfig;
        use crate::pb::google::protobuf::{Any, Timestamp};
        let timestamp = |at: Instant| {
            let d = at.since_origin();
            Timestamp {
                seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
            }
        };
        self.resource_snapshot()
            .into_iter()
            .map(|r| GenericXdsConfig {
                type_url: r.type_url.to_string(),
                name: r.name.to_string(),
                version_info: r.version.to_string(),
                xds_config: r.raw.map(|value| Any {
                    type_url: r.type_url.to_string(),
                    value,
                }),
                last_updated: r.last_updated.map(timestamp),
                config_status: 0,
                client_status: match r.status {
                    ResourceStatusKind::Requested => ClientResourceStatus::Requested,
                    ResourceStatusKind::DoesNotExist => ClientResourceStatus::DoesNotExist,
                    ResourceStatusKind::Acked => ClientResourceStatus::Acked,
                    ResourceStatusKind::Nacked => ClientResourceStatus::Nacked,
                    ResourceStatusKind::ReceivedError => ClientResourceStatus::ReceivedError,
                    ResourceStatusKind::Timeout => ClientResourceStatus::Timeout,
                } as i32,
                error_state: r.error_state.map(|e| UpdateFailureState {
                    failed_configuration: None,
                    last_update_attempt: Some(timestamp(e.at)),
                    details: e.details,
                    version_info: e.version,
                }),
                is_static_resource: false,
            })
            .collect()
    }

    // ----- inputs -----

    /// Starts watching the resource `name` of type `T`. The watcher is told the current
    /// state at once if the resource is already known, and of every change after, through
    /// [`Action::Notify`]; read the value with [`Notification::value::<T>`](Notification::value).
    ///
    /// ```
    /// use xds_proto_core::{Action, Bootstrap, Cds, XdsClient, XdsClientConfig};
    ///
    /// let bootstrap = Bootstrap::from_json_str(r#"{
    ///     "xds_servers": [{"server_uri": "xds.example:443", "channel_creds": [{"type": "insecure"}]}],
    ///     "node": {"id": "my-node"}
    /// }"#)?;
    /// let mut client = XdsClient::new(XdsClientConfig::new(bootstrap), 7);
    /// let watcher = client.watch::<Cds>("my-cluster")?;
    /// // The first watch on a server opens its ADS stream and subscribes the name.
    /// assert!(matches!(client.poll_action(), Some(Action::StartStream { .. })));
    /// match client.poll_action() {
    ///     Some(Action::SendRequest { request, .. }) => {
    ///         assert_eq!(&*request.resource_names[0], "my-cluster");
    ///     }
    ///     other => panic!("{other:?}"),
    /// }
    /// client.cancel_watch(watcher);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn watch<T: XdsResourceType>(&mut self, name: &str) -> Result<WatcherId, WatchError> {
        let t = self
            .type_index(T::TYPE_URL)
            .filter(|&t| self.types[t].type_id == std::any::TypeId::of::<T>())
            .ok_or_else(|| WatchError::UnknownType(T::TYPE_URL.to_string()))?;
        let canonical = names::canonicalize(name).map_err(WatchError::InvalidName)?;
        let authority = self.authority_for(t, &canonical)?;
        let id = WatcherId(self.next_watcher);
        self.next_watcher += 1;
        let type_url = self.types[t].type_url();
        // An authority's first watch puts its first server in use, before its standing
        // error is read: a server shared with another authority may be failing already.
        let auth = &mut self.authorities[authority];
        if auth.in_use == 0 {
            auth.in_use = 1;
        }
        let conn = self.authorities[authority]
            .active()
            .and_then(|s| self.servers[s].connectivity_error.clone());
        if let Some(entry) = self.resources[t].get_mut(&canonical) {
            entry.watchers.push(id);
            let name = entry.name.clone();
            self.watchers.insert(id, (t, name.clone()));
            for event in initial_events(entry, conn.as_ref()) {
                self.actions.push_back(Action::Notify(Notification {
                    watcher: id,
                    type_url,
                    name: name.clone(),
                    event,
                }));
            }
            return Ok(id);
        }
        let name: Arc<str> = Arc::from(&*canonical);
        self.resources[t].insert(ResourceEntry {
            name: name.clone(),
            authority,
            watchers: vec![id],
            cached: None,
            does_not_exist: false,
            timed_out: false,
            nack: None,
            server_error: None,
            error: None,
            timed_on: 0,
            seen_in: 0,
            seen_at: 0,
        });
        self.watchers.insert(id, (t, name.clone()));
        self.authorities[authority].resources += 1;
        // A new uncached resource while the active server is failing: fall back (A71),
        // or tell the watcher at once.
        if let Some(err) = conn
            && !self.maybe_fallback(authority)
        {
            self.actions.push_back(Action::Notify(Notification {
                watcher: id,
                type_url,
                name: name.clone(),
                event: WatchEvent::Changed(Err(err)),
            }));
        }
        for server in self.authorities[authority].in_use().to_vec() {
            if self.subscribe(server, t, &name) {
                self.subscription_changed(server, t);
            }
        }
        Ok(id)
    }

    /// Stops a watch. Nothing more reaches the watcher. When it was the last watch of
    /// the resource, the resource is unsubscribed and forgotten; when it was the last
    /// on a server, that server's stream is closed.
    pub fn cancel_watch(&mut self, watcher: WatcherId) {
        let Some((t, name)) = self.watchers.remove(&watcher) else {
            return;
        };
        self.actions
            .retain(|a| !matches!(a, Action::Notify(n) if n.watcher == watcher));
        let Some(entry) = self.resources[t].get_mut(&name) else {
            return;
        };
        entry.watchers.retain(|w| *w != watcher);
        if !entry.watchers.is_empty() {
            return;
        }
        let authority = entry.authority;
        if let Some(mut entry) = self.resources[t].remove(&name) {
            cancel_entry_timers(&mut self.timers, &self.authorities, t, &mut entry, None);
        }
        let auth = &mut self.authorities[authority];
        let servers = auth.in_use().to_vec();
        auth.resources -= 1;
        if auth.resources == 0 {
            auth.in_use = 0;
        }
        for server in servers {
            self.unsubscribe(server, t, &name);
            if self.servers[server].has_subscriptions() {
                self.subscription_changed(server, t);
            } else {
                self.release_server(server);
            }
        }
    }

    /// Feeds one transport event.
    pub fn handle_event(&mut self, now: Instant, event: Event) {
        match event {
            Event::StreamStarted { stream } => {
                if let Some(server) = self.server_of_stream(stream) {
                    self.mark_connected(server, now);
                }
            }
            Event::RequestSent { stream } => self.on_request_sent(stream, now),
            Event::ResponseReceived { stream, bytes } => self.on_response(stream, bytes, now),
            Event::StreamClosed { stream, status } => {
                if let Some(server) = self.server_of_stream(stream) {
                    self.on_stream_closed(server, status, now);
                }
            }
            Event::ConnectivityFailure { server, reason } => {
                self.on_connectivity_failure(server.0, reason)
            }
        }
    }

    /// Fires every timer due at `now`. An early call is a no-op.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(key) = self.timers.pop_expired(now) {
            match key {
                TimerKey::Reconnect(server) => self.ensure_stream(server),
                TimerKey::DoesNotExist(server, t, name) => self.on_resource_timer(server, t, &name),
            }
        }
    }

    // ----- outputs -----

    /// The next action for the adapter, in order.
    #[must_use]
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) must be called next.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next_deadline()
    }

    // ----- internals -----

    /// The cache's shared copy of a name, or a new one for a name not watched.
    fn intern(&self, t: TypeIdx, name: String) -> Arc<str> {
        match self.resources[t].shared_name(&name) {
            Some(k) => k.clone(),
            None => Arc::from(name),
        }
    }

    fn type_index(&self, type_url: &str) -> Option<TypeIdx> {
        self.types.iter().position(|t| t.type_url() == type_url)
    }

    /// The authority that serves the canonical name `name`, creating its state (and
    /// the state of its servers) on first use.
    fn authority_for(&mut self, t: TypeIdx, name: &str) -> Result<usize, WatchError> {
        let parsed = names::parse_xdstp(name).map_err(WatchError::InvalidName)?;
        if let Some(p) = &parsed
            && p.resource_type != names::message_type(self.types[t].type_url())
        {
            return Err(WatchError::InvalidName(names::NameError {
                name: name.to_string(),
                reason: "the resource type in the name is not the watched type",
            }));
        }
        let authority = parsed.as_ref().map(|p| p.authority);
        if let Some(i) = self
            .authorities
            .iter()
            .position(|a| a.name.as_deref() == authority)
        {
            return Ok(i);
        }
        let bootstrap = self.config.bootstrap.clone();
        let configs = bootstrap.servers_for_authority(authority).map_err(|_| {
            WatchError::UnknownAuthority {
                authority: authority.unwrap_or("").to_string(),
                name: name.to_string(),
            }
        })?;
        if configs.is_empty() {
            return Err(WatchError::NoServer(name.to_string()));
        }
        let mut servers: Vec<usize> = Vec::with_capacity(configs.len());
        for config in configs {
            let server = self.server_index(config);
            if !servers.contains(&server) {
                servers.push(server);
            }
        }
        self.authorities.push(AuthorityState {
            name: authority.map(str::to_string),
            servers,
            in_use: 0,
            resources: 0,
        });
        Ok(self.authorities.len() - 1)
    }

    /// The index of a server, creating its state on first use. Identical server
    /// configurations share one state, and so one stream.
    fn server_index(&mut self, config: &ServerConfig) -> usize {
        if let Some(i) = self.servers.iter().position(|s| *s.config == *config) {
            return i;
        }
        self.servers.push(ServerState {
            config: Arc::new(config.clone()),
            stream: None,
            backoff: Backoff::new(self.config.backoff),
            connectivity_error: None,
            responded: false,
            failures: 0,
            types: self
                .types
                .iter()
                .map(|_| ServerTypeState::default())
                .collect(),
        });
        self.servers.len() - 1
    }

    /// Starts fallback for an authority whose active server failed, if it has an
    /// uncached watched resource (gRFC A71): the next servers in order are put in use,
    /// each subscribed to every watched resource of the authority, until one is not
    /// known to be failing. Returns whether a server that may work is now in use.
    fn maybe_fallback(&mut self, authority: usize) -> bool {
        let uncached = self.resources.iter().any(|table| {
            table
                .values()
                .any(|e| e.authority == authority && !e.is_cached())
        });
        if !uncached {
            return false;
        }
        loop {
            let auth = &mut self.authorities[authority];
            let Some(&server) = auth.servers.get(auth.in_use) else {
                return false;
            };
            auth.in_use += 1;
            for t in 0..self.types.len() {
                let names: Vec<Arc<str>> = self.resources[t]
                    .values()
                    .filter(|e| e.authority == authority)
                    .map(|e| e.name.clone())
                    .collect();
                let mut added = false;
                for name in &names {
                    added |= self.subscribe(server, t, name);
                }
                if added {
                    self.subscription_changed(server, t);
                }
            }
            if self.servers[server].connectivity_error.is_none() {
                return true;
            }
        }
    }

    /// A server answered: it is healthy. For every authority that has it in use below a
    /// lower-priority server, switch back to it and stop using those below (A71).
    fn set_healthy(&mut self, server: usize) {
        let srv = &mut self.servers[server];
        srv.backoff.reset();
        srv.connectivity_error = None;
        srv.responded = true;
        let mut lowers: Vec<usize> = Vec::new();
        let mut changed: Vec<(usize, TypeIdx)> = Vec::new();
        for a in 0..self.authorities.len() {
            let auth = &mut self.authorities[a];
            let Some(pos) = auth.in_use().iter().position(|s| *s == server) else {
                continue;
            };
            if pos + 1 == auth.in_use {
                continue;
            }
            let dropped = auth.servers[pos + 1..auth.in_use].to_vec();
            auth.in_use = pos + 1;
            for lower in dropped {
                if !lowers.contains(&lower) {
                    lowers.push(lower);
                }
                for t in self.unsubscribe_authority(a, lower) {
                    if !changed.contains(&(lower, t)) {
                        changed.push((lower, t));
                    }
                }
            }
        }
        // Every authority first, then one request or one release per server: a server
        // shared by two authorities is not sent the second one's names on its way out.
        for lower in lowers {
            if !self.servers[lower].has_subscriptions() {
                self.release_server(lower);
                continue;
            }
            for &(_, t) in changed.iter().filter(|(s, _)| *s == lower) {
                self.subscription_changed(lower, t);
            }
        }
    }

    /// Removes every resource of `authority` from `server`'s subscriptions; returns the
    /// types whose subscription changed (the caller sends them or releases the server).
    fn unsubscribe_authority(&mut self, authority: usize, server: usize) -> Vec<TypeIdx> {
        let mut changed = Vec::new();
        let mut removed = Vec::new();
        for (t, table) in self.resources.iter_mut().enumerate() {
            for entry in table.values_mut().filter(|e| e.authority == authority) {
                if self.servers[server].types[t]
                    .subscribed
                    .contains(&entry.name)
                {
                    if !changed.contains(&t) {
                        changed.push(t);
                    }
                    removed.push((t, entry.name.clone()));
                    cancel_entry_timers(
                        &mut self.timers,
                        &self.authorities,
                        t,
                        entry,
                        Some(server),
                    );
                }
            }
        }
        for (t, name) in removed {
            self.unsubscribe(server, t, &name);
        }
        changed
    }

    fn server_of_stream(&self, stream: StreamId) -> Option<usize> {
        self.servers
            .iter()
            .position(|s| s.stream.as_ref().is_some_and(|st| st.id == stream))
    }

    /// The subscription of type `t` on `server` changed: resend it, or open a stream.
    fn subscription_changed(&mut self, server: usize, t: TypeIdx) {
        let srv = &mut self.servers[server];
        match &mut srv.stream {
            Some(stream) => {
                let ts = &mut stream.types[t];
                if ts.ever_sent || !srv.types[t].subscribed.is_empty() {
                    mark_dirty(stream, t);
                }
                self.pump(server);
            }
            None => self.ensure_stream(server),
        }
    }

    /// Adds `name` to the subscription of type `t` on `server`; returns whether it is new.
    /// A new name is remembered for the stream's next request, which subscribes it.
    fn subscribe(&mut self, server: usize, t: TypeIdx, name: &Arc<str>) -> bool {
        let srv = &mut self.servers[server];
        if !srv.types[t].subscribed.insert(name.clone()) {
            return false;
        }
        srv.types[t].names = None;
        if let Some(stream) = &mut srv.stream {
            stream.types[t].new_names.push(name.clone());
        }
        true
    }

    /// Removes `name` from the subscription of type `t` on `server`, and from the
    /// stream's record of names whose subscribing request is still to be sent, is
    /// outstanding, or was sent before the stream connected: if the name is watched
    /// again, only a request built after that may start its timer (A57).
    fn unsubscribe(&mut self, server: usize, t: TypeIdx, name: &Arc<str>) {
        let srv = &mut self.servers[server];
        if !srv.types[t].subscribed.remove(name) {
            return;
        }
        srv.types[t].names = None;
        if let Some(stream) = &mut srv.stream {
            stream.types[t].new_names.retain(|n| n != name);
            if let Some(in_flight) = &mut stream.in_flight
                && in_flight.type_idx == t
            {
                in_flight.names.retain(|n| n != name);
            }
            stream
                .sent_before_connect
                .retain(|(ty, n)| !(*ty == t && n == name));
        }
    }

    /// Opens a stream to `server` if it has subscriptions, none is open, and no
    /// backoff is pending.
    fn ensure_stream(&mut self, server: usize) {
        let srv = &mut self.servers[server];
        if srv.stream.is_some()
            || !srv.has_subscriptions()
            || self.timers.is_armed(&TimerKey::Reconnect(server))
        {
            return;
        }
        let id = StreamId(self.next_stream);
        self.next_stream += 1;
        let mut stream = StreamState {
            id,
            connected: false,
            saw_response: false,
            sent_node: false,
            in_flight: None,
            sent_before_connect: Vec::new(),
            types: vec![StreamTypeState::default(); self.types.len()],
            dirty_order: VecDeque::new(),
        };
        for (t, ts) in srv.types.iter().enumerate() {
            if !ts.subscribed.is_empty() {
                stream.types[t].new_names = ts.subscribed.iter().cloned().collect();
                mark_dirty(&mut stream, t);
            }
        }
        srv.stream = Some(stream);
        self.actions.push_back(Action::StartStream {
            server: ServerId(server),
            config: srv.config.clone(),
            stream: id,
        });
        self.pump(server);
    }

    /// Emits the next request of `server`'s stream if none is outstanding.
    fn pump(&mut self, server: usize) {
        let srv = &mut self.servers[server];
        let Some(stream) = &mut srv.stream else {
            return;
        };
        if stream.in_flight.is_some() {
            return;
        }
        // A type whose names were all unwatched before its first request left sends
        // nothing: an empty first request would be a wildcard subscription for LDS/CDS.
        let t = loop {
            let Some(t) = stream.dirty_order.pop_front() else {
                return;
            };
            let ts = &mut stream.types[t];
            if ts.ever_sent || !srv.types[t].subscribed.is_empty() {
                break t;
            }
            ts.dirty = false;
            ts.new_names.clear();
            ts.nack = None;
        };
        let ts = &mut stream.types[t];
        ts.dirty = false;
        ts.ever_sent = true;
        let names = std::mem::take(&mut ts.new_names);
        let error_detail = ts
            .nack
            .take()
            .map(|message| crate::pb::google::rpc::Status {
                code: Code::INVALID_ARGUMENT.0,
                message,
                details: Vec::new(),
            });
        let sts = &mut srv.types[t];
        let resource_names = sts
            .names
            .get_or_insert_with(|| sts.subscribed.iter().cloned().collect())
            .clone();
        let request = AdsRequest {
            version_info: sts.version.clone(),
            node: (!stream.sent_node).then(|| self.node.clone()),
            resource_names,
            type_url: self.types[t].type_url(),
            response_nonce: ts.nonce.clone(),
            error_detail,
        };
        stream.sent_node = true;
        stream.in_flight = Some(InFlight { type_idx: t, names });
        self.actions.push_back(Action::SendRequest {
            stream: stream.id,
            request: Box::new(request),
        });
    }

    fn on_request_sent(&mut self, stream_id: StreamId, now: Instant) {
        let Some(server) = self.server_of_stream(stream_id) else {
            return;
        };
        let Some(stream) = self.servers[server].stream.as_mut() else {
            return;
        };
        let Some(in_flight) = stream.in_flight.take() else {
            return;
        };
        let t = in_flight.type_idx;
        #[cfg(feature = "planted-bug")]
        let connected = stream.connected || self.planted_bug;
        #[cfg(not(feature = "planted-bug"))]
        let connected = stream.connected;
        if connected {
            for name in &in_flight.names {
                self.start_resource_timer(server, t, name, now);
            }
        } else {
            stream
                .sent_before_connect
                .extend(in_flight.names.into_iter().map(|n| (t, n)));
        }
        self.pump(server);
    }

    fn mark_connected(&mut self, server: usize, now: Instant) {
        let Some(stream) = self.servers[server].stream.as_mut() else {
            return;
        };
        if stream.connected {
            return;
        }
        stream.connected = true;
        for (t, name) in std::mem::take(&mut stream.sent_before_connect) {
            self.start_resource_timer(server, t, &name, now);
        }
    }

    /// Starts `server`'s does-not-exist timer of a resource whose subscribing request
    /// was sent on its connected stream, unless the resource is cached, NACKed, has a
    /// server-reported error standing, or is already timed on this stream. A resource
    /// whose timer ran out as a transient error (`resource_timer_is_transient_error`)
    /// is not cached, so a new stream times it again (A57).
    fn start_resource_timer(&mut self, server: usize, t: TypeIdx, name: &Arc<str>, now: Instant) {
        let Some(entry) = self.resources[t].get_mut(name) else {
            return;
        };
        let Some(position) = self.authorities[entry.authority]
            .in_use()
            .iter()
            .position(|s| *s == server)
        else {
            return;
        };
        if entry.is_cached() || entry.nack.is_some() || entry.server_error.is_some() {
            return;
        }
        // An armed timer of this server is one of its current stream: every stream end
        // cancels them (`cancel_resource_timers`).
        let key = TimerKey::DoesNotExist(server, t, name.clone());
        if self.timers.is_armed(&key) {
            return;
        }
        entry.timed_on |= timer_bit(position);
        self.timers.set(key, now + self.config.resource_timeout);
    }

    fn on_resource_timer(&mut self, server: usize, t: TypeIdx, name: &Arc<str>) {
        let type_url = self.types[t].type_url();
        let Some(entry) = self.resources[t].get_mut(name) else {
            return;
        };
        if entry.is_cached() {
            return;
        }
        // One verdict per resource: the timers still running on other servers stop.
        cancel_entry_timers(&mut self.timers, &self.authorities, t, entry, None);
        let srv = &self.servers[server];
        let timeout = self.config.resource_timeout;
        let error = if srv.config.server_features.resource_timer_is_transient_error {
            entry.timed_out = true;
            XdsError {
                kind: ErrorKind::Timeout,
                status: Status::new(
                    Code::UNAVAILABLE,
                    format!(
                        "timed out after {timeout:?} waiting for {} {name:?} from xDS server {:?}",
                        short_type(type_url),
                        srv.config.server_uri
                    ),
                ),
            }
        } else {
            entry.does_not_exist = true;
            does_not_exist_error(
                type_url,
                name,
                &format!(
                    "xDS server {:?} did not send it within {timeout:?}",
                    srv.config.server_uri
                ),
            )
        };
        entry.error = Some(error.clone());
        notify_all(
            &mut self.actions,
            entry,
            type_url,
            WatchEvent::Changed(Err(error)),
        );
    }

    fn on_connectivity_failure(&mut self, server: usize, reason: String) {
        let Some(srv) = self.servers.get_mut(server) else {
            return;
        };
        if let Some(stream) = &mut srv.stream {
            stream.connected = false;
        }
        let error = connectivity_error(&srv.config.server_uri, &reason);
        self.report_connectivity_error(server, error);
    }

    fn on_stream_closed(&mut self, server: usize, status: Status, now: Instant) {
        let Some(stream) = self.servers[server].stream.take() else {
            return;
        };
        if stream.saw_response {
            self.servers[server].backoff.reset();
            self.cancel_resource_timers(server);
            self.ensure_stream(server);
            return;
        }
        let srv = &mut self.servers[server];
        let reason = format!("ADS stream closed before any response: {status}");
        let error = connectivity_error(&srv.config.server_uri, &reason);
        let delay = srv.backoff.next_delay(&mut self.rng);
        if srv.has_subscriptions() {
            self.timers.set(TimerKey::Reconnect(server), now + delay);
        }
        self.report_connectivity_error(server, error);
    }

    /// Stops the does-not-exist timers of a server's resources (they never run while
    /// it is disconnected) and lets them start again on the next stream.
    fn cancel_resource_timers(&mut self, server: usize) {
        for (t, table) in self.resources.iter_mut().enumerate() {
            for entry in table.values_mut().filter(|e| e.timed_on != 0) {
                cancel_entry_timers(&mut self.timers, &self.authorities, t, entry, Some(server));
            }
        }
    }

    /// Records a connectivity failure of `server` and, for every authority it is the
    /// active server of, falls back (A71) or reports the error to the watchers.
    fn report_connectivity_error(&mut self, server: usize, error: XdsError) {
        self.cancel_resource_timers(server);
        let srv = &mut self.servers[server];
        if srv.connectivity_error.is_none() {
            srv.failures += 1;
        }
        srv.responded = false;
        srv.connectivity_error = Some(error.clone());
        for a in 0..self.authorities.len() {
            if self.authorities[a].active() != Some(server) || self.maybe_fallback(a) {
                continue;
            }
            for (t, table) in self.resources.iter().enumerate() {
                let type_url = self.types[t].type_url();
                let mut entries: Vec<&ResourceEntry> =
                    table.values().filter(|e| e.authority == a).collect();
                entries.sort_by(|x, y| x.name.cmp(&y.name));
                for entry in entries {
                    let event = if entry.is_cached() {
                        WatchEvent::AmbientError(error.clone())
                    } else {
                        WatchEvent::Changed(Err(error.clone()))
                    };
                    notify_all(&mut self.actions, entry, type_url, event);
                }
            }
        }
    }

    /// Nothing is watched on `server` any more: close its stream and forget its state.
    fn release_server(&mut self, server: usize) {
        let srv = &mut self.servers[server];
        if let Some(stream) = srv.stream.take() {
            self.actions
                .push_back(Action::CloseStream { stream: stream.id });
        }
        self.timers.cancel(&TimerKey::Reconnect(server));
        srv.backoff.reset();
        srv.connectivity_error = None;
        srv.responded = false;
        for ts in &mut srv.types {
            ts.version.clear();
        }
        self.actions.push_back(Action::DropChannel {
            server: ServerId(server),
        });
    }

    fn on_response(&mut self, stream_id: StreamId, bytes: Bytes, now: Instant) {
        let Some(server) = self.server_of_stream(stream_id) else {
            return;
        };
        let response = match envelope::decode(bytes) {
            Ok(r) => r,
            Err(e) => {
                // Not a DiscoveryResponse at all: the stream is unusable, as gRPC treats a
                // message it cannot parse.
                self.actions
                    .push_back(Action::CloseStream { stream: stream_id });
                let status = Status::new(
                    Code::INTERNAL,
                    format!("failed to decode DiscoveryResponse: {e}"),
                );
                self.on_stream_closed(server, status, now);
                return;
            }
        };
        self.mark_connected(server, now);
        let srv = &mut self.servers[server];
        if let Some(stream) = srv.stream.as_mut() {
            stream.saw_response = true;
        }
        self.set_healthy(server);
        let Some(t) = self.type_index(&response.type_url) else {
            return; // a type this client does not know: ignored, as gRPC does
        };
        let Some(stream) = self.servers[server].stream.as_mut() else {
            return;
        };
        if !stream.types[t].ever_sent {
            return; // never requested on this stream: an ACK would subscribe to a wildcard
        }
        stream.types[t].nonce = response.nonce.clone();
        let outcome = self.apply_response(server, t, response, now);
        let srv = &mut self.servers[server];
        if let Some(stream) = srv.stream.as_mut() {
            match outcome {
                Ok(version) => {
                    srv.types[t].version = version;
                    stream.types[t].nack = None;
                }
                Err(detail) => stream.types[t].nack = Some(detail),
            }
            mark_dirty(stream, t);
        }
        self.pump(server);
    }

    /// Validates and applies one response. Returns the version to ACK, or the NACK's
    /// error detail.
    fn apply_response(
        &mut self,
        server: usize,
        t: TypeIdx,
        response: envelope::DiscoveryResponse,
        now: Instant,
    ) -> Result<String, String> {
        let ty = self.types[t];
        let type_url = ty.type_url();
        let version: Arc<str> = Arc::from(response.version_info.as_str());
        let mut errors: Vec<String> = Vec::new();
        let mut unnamed_error = false;
        // Resources that decoded and validated (A78); the rest of `count` were invalid.
        let mut valid = 0u64;
        self.responses_applied += 1;
        let stamp = self.responses_applied;
        // Every named resource of the response in order: watched ones by slot (each
        // entry stamped with this response and its item), others by name in
        // `unwatched`, only to find duplicates.
        let count = response.resources.len();
        let mut items: Vec<(Option<Slot>, Outcome)> = Vec::with_capacity(count);
        let mut unwatched: HashMap<String, usize> = HashMap::default();
        let last_slots = std::mem::take(&mut self.servers[server].types[t].last_slots);
        let mut order: Vec<Option<Slot>> = Vec::with_capacity(count);

        // Each resource's type URL against the response's, in one pass over the envelope
        // just decoded (checked between decodes, each check was a cache miss).
        let type_matches: Vec<bool> = response
            .resources
            .iter()
            .map(|a| a.type_url == type_url.as_bytes())
            .collect();

        let table = &mut self.resources[t];
        for (i, any) in response.resources.into_iter().enumerate() {
            // SotW resends: the same bytes at the same position as in the last response
            // are the cached resource, unchanged; no decode, no name lookup.
            if let Some(Some(slot)) = last_slots.get(i)
                && type_matches[i]
                && let Some(entry) = table.at_mut(*slot)
                && entry.seen_in != stamp
                && entry.cached.as_ref().is_some_and(|c| c.raw == any.value)
            {
                entry.seen_in = stamp;
                entry.seen_at = items.len() as u32;
                valid += 1;
                items.push((Some(*slot), Outcome::Unchanged));
                order.push(Some(*slot));
                continue;
            }
            match decode_one(&ty, any, type_matches[i]) {
                Ok((name, value, raw)) => {
                    let name = canonical_name(name);
                    match note_item(table, &mut unwatched, items.len(), stamp, &name) {
                        Seen::First(slot) => {
                            valid += 1;
                            items.push((slot, Outcome::Changed(value, raw)));
                            order.push(slot);
                        }
                        Seen::Again(k) => {
                            errors.push(format!(
                                "resource index {i}: {name}: duplicate resource name in response"
                            ));
                            items[k].1 =
                                Outcome::Invalid("duplicate resource name in response".to_string());
                            order.push(None);
                        }
                    }
                }
                Err(e) => {
                    let label = e.name.as_deref().unwrap_or("<unknown name>");
                    errors.push(format!("resource index {i}: {label}: {}", e.message));
                    match e.name.map(canonical_name) {
                        Some(name) => {
                            match note_item(table, &mut unwatched, items.len(), stamp, &name) {
                                Seen::First(slot) => {
                                    items.push((slot, Outcome::Invalid(e.message)))
                                }
                                Seen::Again(k) => items[k].1 = Outcome::Invalid(e.message),
                            }
                        }
                        None => unnamed_error = true,
                    }
                    order.push(None);
                }
            }
        }
        let sts = &mut self.servers[server].types[t];
        sts.last_slots = order;
        sts.updates_valid += valid;
        sts.updates_invalid += (count as u64) - valid;

        // The item a name had in this response, if any.
        let item_of = |table: &ResourceTable, name: &str| match table.get(name) {
            Some(e) => (e.seen_in == stamp).then_some(e.seen_at as usize),
            None => unwatched.get(name).copied(),
        };
        let mut server_errors: Vec<(Arc<str>, Status)> = Vec::new();
        for (j, re) in response.resource_errors.into_iter().enumerate() {
            let name = canonical_name(re.resource_name.map(|n| n.name).unwrap_or_default());
            let status = re
                .error_detail
                .map(|s| Status::new(Code(s.code), s.message));
            if name.is_empty() {
                errors.push(format!("resource_errors[{j}]: empty resource name"));
                continue;
            }
            let present = item_of(&self.resources[t], &name)
                .is_some_and(|k| !matches!(items[k].1, Outcome::Invalid(_)));
            match status {
                None => errors.push(format!(
                    "resource_errors[{j}]: {name}: missing error_detail"
                )),
                Some(s) if s.code == Code::OK => errors.push(format!(
                    "resource_errors[{j}]: {name}: error_detail has status OK"
                )),
                Some(_) if present => errors.push(format!(
                    "resource_errors[{j}]: {name}: resource is also present in resources"
                )),
                Some(s) => server_errors.push((self.intern(t, name), s)),
            }
        }

        let features = self.servers[server].config.server_features;
        let server_uri = self.servers[server].config.server_uri.clone();
        let table = &mut self.resources[t];
        // Does-not-exist timers of the resources received, cancelled after the loop.
        let mut cancelled_timers: Vec<TimerKey> = Vec::new();

        // Watched resources of this response whose authority this server serves: when
        // they are as many as the server's subscription, none is missing.
        let mut present_here = 0usize;
        for (slot, outcome) in items {
            let Some(entry) = slot.and_then(|slot| table.at_mut(slot)) else {
                continue; // not subscribed: ignored
            };
            if self.authorities[entry.authority].active() != Some(server) {
                continue; // served by another server of its authority (A71)
            }
            debug_assert!(
                self.servers[server].types[t]
                    .subscribed
                    .contains(&entry.name),
                "the active server's subscription names every watched resource it serves"
            );
            present_here += 1;
            if entry.timed_on != 0 {
                let servers = &self.authorities[entry.authority].servers;
                for (position, &s) in servers.iter().enumerate() {
                    if entry.timed_on & timer_bit(position) != 0 {
                        cancelled_timers.push(TimerKey::DoesNotExist(s, t, entry.name.clone()));
                    }
                }
                entry.timed_on = 0;
            }
            let (value, raw) = match outcome {
                Outcome::Invalid(message) => {
                    entry.nack = Some(UpdateFailure {
                        details: message.clone(),
                        version: response.version_info.clone(),
                        at: now,
                    });
                    let error = XdsError {
                        kind: ErrorKind::Invalid,
                        status: Status::new(
                            Code::UNAVAILABLE,
                            format!(
                                "xDS server {server_uri:?} sent an invalid {} {:?} (version {:?}): {message}",
                                short_type(type_url),
                                entry.name,
                                response.version_info
                            ),
                        ),
                    };
                    entry.error = Some(error.clone());
                    let event = if entry.cached.is_some() {
                        WatchEvent::AmbientError(error)
                    } else {
                        WatchEvent::Changed(Err(error))
                    };
                    notify_all(&mut self.actions, entry, type_url, event);
                    continue;
                }
                Outcome::Unchanged => (None, None),
                Outcome::Changed(value, raw) => (Some(value), Some(raw)),
            };
            entry.nack = None;
            entry.server_error = None;
            entry.does_not_exist = false;
            entry.timed_out = false;
            entry.error = None;
            let (Some(value), Some(raw)) = (value, raw) else {
                if let Some(c) = entry.cached.as_mut() {
                    c.version = version.clone();
                }
                continue;
            };
            if let Some(c) = entry.cached.as_mut()
                && (c.raw == raw || c.value.equals(&value))
            {
                // Unchanged: no notification. Keep the newest bytes for CSDS, copied so
                // that the response buffer is not kept alive by one resource.
                if c.raw != raw {
                    c.raw = Bytes::copy_from_slice(&raw);
                }
                c.version = version.clone();
                continue;
            }
            entry.cached = Some(Cached {
                value: value.clone(),
                raw: Bytes::copy_from_slice(&raw),
                version: version.clone(),
                updated: now,
            });
            notify_all(
                &mut self.actions,
                entry,
                type_url,
                WatchEvent::Changed(Ok(value)),
            );
        }
        // Many at once (a first delivery): one pass over the deadline set instead of an
        // ordered search, comparing names, per timer.
        if cancelled_timers.len() * 8 >= self.timers.by_deadline.len() {
            for key in &cancelled_timers {
                self.timers.by_key.remove(key);
            }
            let by_key = &self.timers.by_key;
            self.timers
                .by_deadline
                .retain(|(at, key)| by_key.get(key) == Some(at));
        } else {
            for key in &cancelled_timers {
                self.timers.cancel(key);
            }
        }

        for (name, status) in &server_errors {
            let Some(entry) = table.get_mut(name) else {
                continue;
            };
            if self.authorities[entry.authority].active() != Some(server) {
                continue; // served by another server of its authority (A71)
            }
            cancel_entry_timers(&mut self.timers, &self.authorities, t, entry, None);
            entry.server_error = Some(UpdateFailure {
                details: status.to_string(),
                version: response.version_info.clone(),
                at: now,
            });
            let data_error =
                status.code == Code::NOT_FOUND || status.code == Code::PERMISSION_DENIED;
            let kind = if status.code == Code::NOT_FOUND {
                ErrorKind::DoesNotExist
            } else {
                ErrorKind::ServerReported
            };
            let error = XdsError {
                kind,
                status: Status::new(
                    status.code,
                    format!(
                        "xDS server {server_uri:?} reported an error for {} {name:?}: {}",
                        short_type(type_url),
                        status
                    ),
                ),
            };
            if data_error && features.fail_on_data_errors {
                entry.cached = None;
            }
            if status.code == Code::NOT_FOUND && entry.cached.is_none() {
                entry.does_not_exist = true;
            }
            entry.error = Some(error.clone());
            let event = if entry.cached.is_some() {
                WatchEvent::AmbientError(error)
            } else {
                WatchEvent::Changed(Err(error))
            };
            notify_all(&mut self.actions, entry, type_url, event);
        }

        // The active server's subscription covers every watched name of the authorities
        // it serves, so a count equal to the subscription means none is missing.
        let subscription = &self.servers[server].types[t].subscribed;
        if ty.all_resources_required_in_sotw()
            && !unnamed_error
            && present_here < subscription.len()
        {
            let subscribed: Vec<Arc<str>> = subscription
                .iter()
                .filter(|n| {
                    table.get(n).is_some_and(|e| e.seen_in != stamp)
                        && !server_errors.iter().any(|(e, _)| e == *n)
                })
                .cloned()
                .collect();
            for name in subscribed {
                let Some(entry) = table.get_mut(&name) else {
                    continue;
                };
                if self.authorities[entry.authority].active() != Some(server)
                    || entry.cached.is_none()
                    || entry.server_error.is_some()
                {
                    continue; // uncached: the timer decides; TP3 error: counts as present
                }
                // A88: deletions drop the resource only under fail_on_data_errors, and
                // never when the server also says ignore_resource_deletion (A53).
                if features.fail_on_data_errors && !features.ignore_resource_deletion {
                    entry.cached = None;
                    entry.nack = None;
                    entry.does_not_exist = true;
                    let error = does_not_exist_error(
                        type_url,
                        &name,
                        &format!("xDS server {server_uri:?} removed it (fail_on_data_errors)"),
                    );
                    entry.error = Some(error.clone());
                    notify_all(
                        &mut self.actions,
                        entry,
                        type_url,
                        WatchEvent::Changed(Err(error)),
                    );
                } else if !entry
                    .error
                    .as_ref()
                    .is_some_and(|e| e.kind == ErrorKind::DeletionIgnored)
                {
                    let error = XdsError {
                        kind: ErrorKind::DeletionIgnored,
                        status: Status::new(
                            Code::NOT_FOUND,
                            format!(
                                "xDS server {server_uri:?} no longer sends {} {name:?}; keeping the cached value",
                                short_type(type_url)
                            ),
                        ),
                    };
                    entry.error = Some(error.clone());
                    notify_all(
                        &mut self.actions,
                        entry,
                        type_url,
                        WatchEvent::AmbientError(error),
                    );
                }
            }
        }

        if errors.is_empty() {
            Ok(response.version_info)
        } else {
            Err(nack_detail(&errors))
        }
    }
}

/// The `DiscoveryResponse` envelope as the client reads it: the same fields, types and
/// strictness as the generated message, except that each resource's `type_url` stays a
/// slice of the received buffer (checked for UTF-8 as it is read, as the generated
/// decoder does) instead of a new `String`: a 10,000-cluster response makes no
/// per-resource allocation before its bytes are compared with the cache.
mod envelope {
    use bytes::{Buf, BufMut, Bytes};
    use prost::encoding::{self, DecodeContext, WireType};

    use crate::pb::envoy::config::core::v3::ControlPlane;
    use crate::pb::envoy::service::discovery::v3::ResourceError;
    use crate::resource::type_url;

    /// `google.protobuf.Any` with its type URL kept as bytes.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub(super) struct Any {
        pub type_url: Bytes,
        pub value: Bytes,
    }

    /// Type URLs known to be UTF-8, compared before running the UTF-8 check.
    const KNOWN_URLS: [&str; 5] = [
        type_url::CLUSTER,
        type_url::CLUSTER_LOAD_ASSIGNMENT,
        type_url::LISTENER,
        type_url::ROUTE_CONFIGURATION,
        type_url::RESOURCE_WRAPPER,
    ];

    impl prost::Message for Any {
        fn encode_raw(&self, buf: &mut impl BufMut) {
            if !self.type_url.is_empty() {
                encoding::bytes::encode(1, &self.type_url, buf);
            }
            if !self.value.is_empty() {
                encoding::bytes::encode(2, &self.value, buf);
            }
        }

        fn merge_field(
            &mut self,
            tag: u32,
            wire_type: WireType,
            buf: &mut impl Buf,
            ctx: DecodeContext,
        ) -> Result<(), prost::DecodeError> {
            match tag {
                1 => {
                    encoding::bytes::merge(wire_type, &mut self.type_url, buf, ctx.clone())?;
                    let url = &self.type_url[..];
                    if KNOWN_URLS.iter().any(|k| k.as_bytes() == url)
                        || std::str::from_utf8(url).is_ok()
                    {
                        return Ok(());
                    }
                    // Not UTF-8: fail exactly as the generated decoder does, by reading
                    // the same bytes as a string.
                    let mut again = Vec::with_capacity(url.len() + 10);
                    encoding::encode_varint(url.len() as u64, &mut again);
                    again.extend_from_slice(url);
                    encoding::string::merge(
                        WireType::LengthDelimited,
                        &mut String::new(),
                        &mut again.as_slice(),
                        ctx,
                    )
                }
                2 => encoding::bytes::merge(wire_type, &mut self.value, buf, ctx),
                _ => encoding::skip_field(wire_type, tag, buf, ctx),
            }
        }

        fn encoded_len(&self) -> usize {
            (if self.type_url.is_empty() {
                0
            } else {
                encoding::bytes::encoded_len(1, &self.type_url)
            }) + if self.value.is_empty() {
                0
            } else {
                encoding::bytes::encoded_len(2, &self.value)
            }
        }

        fn clear(&mut self) {
            self.type_url.clear();
            self.value.clear();
        }
    }

    /// `envoy.service.discovery.v3.DiscoveryResponse`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct DiscoveryResponse {
        #[prost(string, tag = "1")]
        pub version_info: String,
        #[prost(message, repeated, tag = "2")]
        pub resources: Vec<Any>,
        #[prost(bool, tag = "3")]
        pub canary: bool,
        #[prost(string, tag = "4")]
        pub type_url: String,
        #[prost(string, tag = "5")]
        pub nonce: String,
        #[prost(message, optional, tag = "6")]
        pub control_plane: Option<ControlPlane>,
        #[prost(message, repeated, tag = "7")]
        pub resource_errors: Vec<ResourceError>,
    }

    /// Decodes a response, rejecting exactly what the generated message rejects; the
    /// error is the reason.
    pub(super) fn decode(bytes: Bytes) -> Result<DiscoveryResponse, String> {
        <DiscoveryResponse as prost::Message>::decode(bytes).map_err(|e| e.to_string())
    }

    #[cfg(test)]
    mod tests {
        use bytes::Bytes;
        use prost::Message;

        use crate::pb::envoy::service::discovery::v3::DiscoveryResponse;

        /// An `Any` whose type_url occurs twice, first as invalid UTF-8: the generated
        /// decoder rejects it even though the last occurrence is valid (found by the
        /// `decode_response` fuzzer).
        #[test]
        fn an_invalid_type_url_occurrence_fails_like_the_generated_decoder() {
            let any = [
                &[0x0a, 0x02, 0xff, 0xfe][..],
                &[0x0a, 0x01, b'a'],
                &[0x12, 0x01, 0x00],
            ]
            .concat();
            let mut response = vec![0x12, any.len() as u8];
            response.extend_from_slice(&any);
            let full = DiscoveryResponse::decode(response.as_slice());
            assert!(full.is_err());
            let lite = super::decode(Bytes::from(response)).unwrap_err();
            assert!(
                lite.contains("DiscoveryResponse.resources")
                    && lite.contains("data is not UTF-8 encoded"),
                "{lite}"
            );
        }

        #[test]
        fn a_valid_envelope_reads_the_same_as_the_generated_one() {
            let full = DiscoveryResponse {
                version_info: "1".into(),
                resources: vec![crate::pb::google::protobuf::Any {
                    type_url: "type.googleapis.com/x.Y".into(),
                    value: Bytes::from_static(b"abc"),
                }],
                canary: true,
                type_url: "type.googleapis.com/x.Y".into(),
                nonce: "n".into(),
                ..Default::default()
            };
            let lite = super::decode(Bytes::from(full.encode_to_vec())).unwrap();
            assert_eq!(lite.version_info, "1");
            assert_eq!(lite.nonce, "n");
            assert!(lite.canary);
            assert_eq!(&lite.resources[0].type_url[..], b"type.googleapis.com/x.Y");
            assert_eq!(&lite.resources[0].value[..], b"abc");
        }
    }
}

/// Whether a name was already seen in the response being applied.
enum Seen {
    /// First time: its slot if watched.
    First(Option<Slot>),
    /// A duplicate of the item at this position.
    Again(usize),
}

/// Records that the response's item at `position` names `name`, or finds the earlier
/// item that did.
fn note_item(
    table: &mut ResourceTable,
    unwatched: &mut HashMap<String, usize>,
    position: usize,
    stamp: u64,
    name: &str,
) -> Seen {
    if let Some(slot) = table.slot_of(name)
        && let Some(entry) = table.at_mut(slot)
    {
        if entry.seen_in == stamp {
            return Seen::Again(entry.seen_at as usize);
        }
        entry.seen_in = stamp;
        entry.seen_at = position as u32;
        return Seen::First(Some(slot));
    }
    match unwatched.get(name) {
        Some(&k) => Seen::Again(k),
        None => {
            unwatched.insert(name.to_string(), position);
            Seen::First(None)
        }
    }
}

/// What a response says about one named resource.
enum Outcome {
    /// The same bytes as cached (found without decoding).
    Unchanged,
    /// Decoded and valid; may still equal the cached value.
    Changed(ResourceValue, Bytes),
    /// Rejected, with the reason.
    Invalid(String),
}

/// Unwraps an optional `envoy.service.discovery.v3.Resource` and decodes one resource.
/// `type_matches`: whether `any.type_url` is the type's URL (the caller compared them).
fn decode_one(
    ty: &ResourceTypeInfo,
    any: envelope::Any,
    type_matches: bool,
) -> Result<(String, ResourceValue, Bytes), resource::DecodeError> {
    let (any, type_matches) = if any.type_url == resource::type_url::RESOURCE_WRAPPER.as_bytes() {
        let wrapper = discovery::Resource::decode(any.value).map_err(|e| {
            resource::DecodeError::unnamed(format!("failed to decode Resource wrapper: {e}"))
        })?;
        let name = (!wrapper.name.is_empty()).then_some(wrapper.name);
        let inner = wrapper.resource.ok_or_else(|| resource::DecodeError {
            name,
            message: "Resource wrapper has no resource".to_string(),
        })?;
        let matches = inner.type_url == ty.type_url();
        let inner = envelope::Any {
            type_url: Bytes::from(inner.type_url.into_bytes()),
            value: inner.value,
        };
        (inner, matches)
    } else {
        (any, type_matches)
    };
    if !type_matches {
        return Err(resource::DecodeError::unnamed(format!(
            "type URL {:?} does not match the response's {:?}",
            String::from_utf8_lossy(&any.type_url),
            ty.type_url()
        )));
    }
    let (name, value) = ty.decode(&any.value)?;
    Ok((name, value, any.value))
}

/// Cancels a resource's does-not-exist timers: those of `only` that server, or all.
fn cancel_entry_timers(
    timers: &mut TimerTable,
    authorities: &[AuthorityState],
    t: TypeIdx,
    entry: &mut ResourceEntry,
    only: Option<usize>,
) {
    if entry.timed_on == 0 {
        return;
    }
    let servers = &authorities[entry.authority].servers;
    for (position, &server) in servers.iter().enumerate() {
        let bit = timer_bit(position);
        if entry.timed_on & bit == 0 || only.is_some_and(|s| s != server) {
            continue;
        }
        timers.cancel(&TimerKey::DoesNotExist(server, t, entry.name.clone()));
        // The shared last bit stays set while a later position may still be armed.
        if position < 63 || only.is_none() {
            entry.timed_on &= !bit;
        }
    }
}

/// The canonical spelling of a name a server sent (xdstp context parameters sorted).
fn canonical_name(name: String) -> String {
    if !name.starts_with("xdstp:") {
        return name;
    }
    match names::canonicalize(&name) {
        Ok(std::borrow::Cow::Owned(canonical)) => canonical,
        _ => name,
    }
}

/// Joins NACK reasons, keeping the result under [`MAX_NACK_DETAIL_BYTES`].
fn nack_detail(errors: &[String]) -> String {
    let mut out = String::new();
    for (i, e) in errors.iter().enumerate() {
        let sep = if out.is_empty() { "" } else { "; " };
        let remaining = errors.len() - i;
        let tail = format!("; ... and {remaining} more errors");
        if out.len() + sep.len() + e.len() + tail.len() > MAX_NACK_DETAIL_BYTES {
            if out.is_empty() {
                let mut cut = MAX_NACK_DETAIL_BYTES - tail.len();
                while !e.is_char_boundary(cut) {
                    cut -= 1;
                }
                out.push_str(&e[..cut]);
                if remaining > 1 {
                    out.push_str(&format!("; ... and {} more errors", remaining - 1));
                }
            } else {
                out.push_str(&tail);
            }
            return out;
        }
        out.push_str(sep);
        out.push_str(e);
    }
    out
}

fn mark_dirty(stream: &mut StreamState, t: TypeIdx) {
    let ts = &mut stream.types[t];
    if !ts.dirty {
        ts.dirty = true;
        stream.dirty_order.push_back(t);
    }
}

fn notify_all(
    actions: &mut VecDeque<Action>,
    entry: &ResourceEntry,
    type_url: &'static str,
    event: WatchEvent,
) {
    for w in &entry.watchers {
        actions.push_back(Action::Notify(Notification {
            watcher: *w,
            type_url,
            name: entry.name.clone(),
            event: event.clone(),
        }));
    }
}

/// What a new watcher of an existing resource is told at once.
fn initial_events(entry: &ResourceEntry, connectivity: Option<&XdsError>) -> Vec<WatchEvent> {
    let mut events = Vec::new();
    if let Some(c) = &entry.cached {
        events.push(WatchEvent::Changed(Ok(c.value.clone())));
        if let Some(e) = entry.error.as_ref().or(connectivity) {
            events.push(WatchEvent::AmbientError(e.clone()));
        }
    } else if let Some(e) = &entry.error {
        events.push(WatchEvent::Changed(Err(e.clone())));
        if let Some(c) = connectivity.filter(|_| entry.does_not_exist) {
            events.push(WatchEvent::AmbientError(c.clone()));
        }
    } else if let Some(c) = connectivity {
        events.push(WatchEvent::Changed(Err(c.clone())));
    }
    events
}

fn connectivity_error(server_uri: &str, reason: &str) -> XdsError {
    XdsError {
        kind: ErrorKind::Connectivity,
        status: Status::new(
            Code::UNAVAILABLE,
            format!("xDS channel for server {server_uri:?}: {reason}"),
        ),
    }
}

fn does_not_exist_error(type_url: &str, name: &str, why: &str) -> XdsError {
    XdsError {
        kind: ErrorKind::DoesNotExist,
        status: Status::new(
            Code::NOT_FOUND,
            format!("{} {name:?} does not exist: {why}", short_type(type_url)),
        ),
    }
}

/// `type.googleapis.com/envoy.config.listener.v3.Listener` → `Listener`.
fn short_type(type_url: &str) -> &str {
    type_url.rsplit(['.', '/']).next().unwrap_or(type_url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nack_detail_stays_under_the_limit_and_counts_what_it_drops() {
        let errors: Vec<String> = (0..500)
            .map(|i| format!("resource index {i}: r{i}: {}", "x".repeat(40)))
            .collect();
        let detail = nack_detail(&errors);
        assert!(detail.len() <= MAX_NACK_DETAIL_BYTES, "{}", detail.len());
        assert!(detail.starts_with("resource index 0: r0: "));
        let kept = detail.matches("resource index").count();
        assert!(
            detail.ends_with(&format!("; ... and {} more errors", 500 - kept)),
            "{detail}"
        );
        let huge = vec!["é".repeat(10_000), "second".to_string()];
        let detail = nack_detail(&huge);
        assert!(detail.len() <= MAX_NACK_DETAIL_BYTES);
        assert!(detail.ends_with("; ... and 1 more errors"));
        assert_eq!(nack_detail(&["a".into(), "b".into()]), "a; b");
    }

    #[test]
    fn timer_table_orders_deadlines_and_replaces_keys() {
        let mut t = TimerTable::default();
        t.set(TimerKey::Reconnect(1), Instant::from_secs(5));
        t.set(TimerKey::Reconnect(2), Instant::from_secs(3));
        t.set(TimerKey::Reconnect(1), Instant::from_secs(1));
        assert_eq!(t.next_deadline(), Some(Instant::from_secs(1)));
        assert_eq!(
            t.pop_expired(Instant::from_secs(2)),
            Some(TimerKey::Reconnect(1))
        );
        assert_eq!(t.pop_expired(Instant::from_secs(2)), None);
        t.cancel(&TimerKey::Reconnect(2));
        assert_eq!(t.next_deadline(), None);
    }

    #[test]
    fn ads_request_encodes_like_the_generated_message() {
        use crate::pb::envoy::config::core::v3::Node;
        let request = AdsRequest {
            version_info: "7".to_string(),
            node: Some(Node {
                id: "n".to_string(),
                ..Default::default()
            }),
            resource_names: ["", "a", &"x".repeat(300)]
                .iter()
                .map(|n| Arc::from(*n))
                .collect(),
            type_url: crate::resource::type_url::CLUSTER,
            response_nonce: "n7".to_string(),
            error_detail: Some(crate::pb::google::rpc::Status {
                code: 3,
                message: "bad".to_string(),
                details: Vec::new(),
            }),
        };
        let expected = request.to_proto().encode_to_vec();
        let mut wire = Vec::new();
        request.encode(&mut wire);
        assert_eq!(wire, expected);
        assert_eq!(request.encoded_len(), expected.len());
        let empty = AdsRequest {
            version_info: String::new(),
            node: None,
            resource_names: Arc::from([]),
            type_url: crate::resource::type_url::LISTENER,
            response_nonce: String::new(),
            error_detail: None,
        };
        let mut wire = Vec::new();
        empty.encode(&mut wire);
        assert_eq!(wire, empty.to_proto().encode_to_vec());
        assert_eq!(empty.encoded_len(), wire.len());
    }

    #[test]
    fn code_names() {
        assert_eq!(Code::UNAVAILABLE.name(), "UNAVAILABLE");
        assert_eq!(Code(42).name(), "UNKNOWN");
        assert_eq!(Code(42).to_string(), "CODE(42)");
        assert_eq!(Code::DATA_LOSS.to_string(), "DATA_LOSS");
        assert_eq!(short_type(resource::type_url::CLUSTER), "Cluster");
    }
}
