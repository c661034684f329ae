//! The load balancer's public vocabulary: settings, ids, connectivity states, pick
//! arguments and results, call outcomes and the actions the embedder carries out.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::backoff::BackoffConfig;
use crate::client::{Code, Status};

/// How long a priority may stay CONNECTING before the next one is tried (gRPC's
/// priority policy).
pub const DEFAULT_FAILOVER_TIMEOUT: Duration = Duration::from_secs(10);

/// The ring size cap gRPC applies on top of a cluster's `maximum_ring_size`
/// (`grpc.lb.ring_hash.ring_size_cap`, A42).
pub const DEFAULT_RING_SIZE_CAP: u64 = 4096;

/// Settings of a [`LoadBalancer`](super::LoadBalancer).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct LbSettings {
    /// Seed of the load balancer's own randomness (reconnect jitter, `pick_first`
    /// shuffling, round-robin start positions, outlier-detection enforcement draws):
    /// the same seed and inputs replay the same run.
    pub seed: u64,
    /// The priority failover timeout (default 10 s).
    pub failover_timeout: Duration,
    /// The cap on ring-hash ring sizes (default 4096, as gRPC): a cluster's
    /// `minimum_ring_size` and `maximum_ring_size` above it count as the cap (A42).
    /// [`LoadBalancer::new`](super::LoadBalancer::new) brings it into `[1,`
    /// [`MAX_RING_SIZE`](crate::resource::cluster::MAX_RING_SIZE)`]`, as gRPC-Go bounds
    /// `GRPC_RING_HASH_CAP`: a ring is never larger than the 8M entries xDS allows, nor
    /// empty for want of a cap.
    pub ring_size_cap: u64,
    /// The backoff between connection attempts to one address (gRPC's connection
    /// backoff: 1 s initial, ×1.6, ±20 % jitter, 120 s maximum).
    pub reconnect_backoff: BackoffConfig,
}

impl LbSettings {
    /// The defaults with this seed.
    pub fn new(seed: u64) -> LbSettings {
        LbSettings {
            seed,
            failover_timeout: DEFAULT_FAILOVER_TIMEOUT,
            ring_size_cap: DEFAULT_RING_SIZE_CAP,
            reconnect_backoff: BackoffConfig::default(),
        }
    }
}

impl Default for LbSettings {
    fn default() -> LbSettings {
        LbSettings::new(0)
    }
}

/// One address's connection, shared by every cluster whose endpoints name the address.
///
/// Opaque and never reused: an event for a subchannel that no longer exists is ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SubchannelId(pub(super) u64);

#[allow(dead_code)] // used by the implementation that follows the skeleton
impl SubchannelId {
    pub(super) fn new(index: u32, generation: u32) -> SubchannelId {
        SubchannelId((u64::from(generation) << 32) | u64::from(index))
    }

    pub(super) fn index(self) -> usize {
        (self.0 & 0xffff_ffff) as usize
    }

    pub(super) fn generation(self) -> u32 {
        (self.0 >> 32) as u32
    }
}

/// gRPC's connectivity states, for subchannels and for clusters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConnectivityState {
    /// Not connected and not trying to.
    Idle,
    /// A connection attempt is under way.
    Connecting,
    /// Connected: RPCs can be sent.
    Ready,
    /// The last attempt failed; the core waits out the reconnect backoff.
    TransientFailure,
}

/// What a pick needs from the RPC, computed by the embedder.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PickArgs {
    /// The request hash for `ring_hash` (A42: from the route's hash policies, or A76's
    /// request-hash header, see [`hash_header_value`](super::hash_header_value)).
    /// `None` picks a random point on the ring.
    pub hash: Option<u64>,
    /// A fresh random number for this pick (drops, locality choice, least-request
    /// sampling). The core draws no randomness of its own on the pick path.
    pub random: u64,
    /// The host a stateful session asks for (A55: the RPC's session cookie). It is
    /// picked when it is an endpoint of the cluster's priority in use whose health the
    /// cluster's `override_host_status` allows: at once when READY, after a connection
    /// attempt when IDLE, the pick queued while it is CONNECTING; otherwise (unknown,
    /// disallowed, TRANSIENT_FAILURE) the policy picks as usual. A DRAINING endpoint
    /// is only ever picked this way, and only when the set includes DRAINING.
    /// `None`: no session.
    pub override_host: Option<SocketAddr>,
}

/// The result of a pick.
#[derive(Clone, Debug, PartialEq)]
pub enum Pick {
    /// Send the RPC on this subchannel; report its end with
    /// [`call_finished`](super::LoadBalancer::call_finished) and this token.
    Complete {
        /// The subchannel (connected: its last reported state is READY).
        subchannel: SubchannelId,
        /// Its address.
        address: SocketAddr,
        /// The call's token: it holds a circuit-breaker slot and a least-request count
        /// until the call is reported finished.
        call: CallToken,
    },
    /// Nothing is ready yet (connections are being made): keep the RPC, under its
    /// deadline, and pick again after the next [`LbAction::PickerChanged`].
    Queue,
    /// Fail the RPC with this status (UNAVAILABLE: no reachable endpoint, the circuit
    /// breaker is open, or the cluster's resource failed). The status is shared, so
    /// failing picks allocate nothing.
    Fail(Arc<Status>),
    /// The control plane's `drop_overloads` dropped the RPC: fail it with UNAVAILABLE
    /// and do not retry it.
    Drop {
        /// The drop category (shared, for load reports).
        category: Arc<str>,
    },
}

/// Identifies a call that a [`Pick::Complete`] started; give it back to
/// [`call_finished`](super::LoadBalancer::call_finished) exactly once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CallToken {
    pub(super) cluster: u32,
    pub(super) cluster_generation: u32,
    pub(super) subchannel: SubchannelId,
    /// The locality counters the call is counted in (LRS), if its cluster reports load.
    pub(super) load: super::load_report::LoadSlot,
    pub(super) wants_load_report: bool,
}

impl CallToken {
    /// Whether the call's ORCA per-call report (the `endpoint-load-metrics-bin`
    /// trailer) is wanted at its end: its cluster balances by weighted round robin from
    /// per-call reports (A58), or reports its load to LRS, which adds up the report's
    /// named metrics (A64). Give it to
    /// [`call_finished_with_report`](super::LoadBalancer::call_finished_with_report);
    /// otherwise the trailer need not be decoded.
    pub fn wants_load_report(&self) -> bool {
        self.wants_load_report || self.load != super::load_report::LoadSlot::NONE
    }
}

/// How a call ended, for outlier detection (A50: a call is a success when its status is
/// OK).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CallOutcome {
    /// The call ended with status OK.
    Success,
    /// The call ended with any other status (or never got a response).
    Failure,
}

impl CallOutcome {
    /// The outcome of a call that ended with `code`.
    pub fn from_code(code: Code) -> CallOutcome {
        if code == Code::OK {
            CallOutcome::Success
        } else {
            CallOutcome::Failure
        }
    }
}

/// What the embedder must do.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LbAction {
    /// Make one connection attempt to `address`, reporting CONNECTING, then READY or
    /// TRANSIENT_FAILURE; a READY connection that later closes (or that the server
    /// retires with GOAWAY) is reported IDLE. READY means the server's HTTP/2 SETTINGS
    /// arrived, not merely that TCP is up. The core owns the reconnect backoff: it asks
    /// again when it wants another attempt.
    Connect {
        /// The subchannel.
        subchannel: SubchannelId,
        /// Where to connect.
        address: SocketAddr,
    },
    /// Close the subchannel's connection (if any) and forget it: no cluster uses the
    /// address any more. Calls already on it may finish.
    Disconnect {
        /// The subchannel.
        subchannel: SubchannelId,
    },
    /// Close the subchannel's connection (if any) but keep the subchannel, now IDLE: no
    /// priority in use has needed it for 15 minutes (a lower priority after failing
    /// back, kept that long as gRPC's priority policy keeps its children). A later
    /// `Connect` dials it again. Calls already on the connection may finish.
    Idle {
        /// The subchannel.
        subchannel: SubchannelId,
    },
    /// Resolve a LOGICAL_DNS cluster's host name and report the addresses with
    /// [`dns_resolved`](super::LoadBalancer::dns_resolved); resolve again whenever
    /// this action comes again: when a connection of the cluster fails or closes (at
    /// most once per 30 s), and after a failed resolution (with backoff).
    ResolveDns {
        /// The cluster.
        cluster: String,
        /// The host name.
        host: String,
        /// The port.
        port: u16,
    },
    /// Some cluster's picker changed (an endpoint became ready or unusable, a config
    /// update): pick again for the queued RPCs. Coalesced: at most one is waiting.
    PickerChanged,
    /// Run (`Some(interval)`) or stop (`None`) the subchannel's ORCA out-of-band load
    /// reports (A51): while its connection is READY, keep one
    /// `xds.service.orca.v3.OpenRcaService/StreamCoreMetrics` call open on it asking
    /// for a report every `interval`, and give each report to
    /// [`oob_report`](super::LoadBalancer::oob_report). Start it again on each new
    /// connection and when the interval changes; after a failure retry with backoff
    /// (reset by a report), except after UNIMPLEMENTED, which ends it for the
    /// connection. Comes again only when the interval changes.
    LoadReports {
        /// The subchannel.
        subchannel: SubchannelId,
        /// The reporting interval to ask for; `None`: stop.
        interval: Option<Duration>,
    },
}
