//! The channel's shared load-balancing state: the core's sans-IO [`LoadBalancer`] for
//! the target, the config selector of the newest configuration, the subchannels'
//! connections (a [`Connections`] table), the queued picks and the seeded random
//! source, all behind one lock.
//!
//! Per RPC, routing and the pick take the lock once (a few hundred nanoseconds), with
//! no message to another task. Every mutation of the balancer follows the core's drive
//! loop: the mutation, then its actions drained under the lock (`Disconnect` and
//! `PickerChanged` are carried out there; `Connect`, `ResolveDns` and `LoadReports`
//! spawn work once the lock is released); the driver task (`driver`) sleeps until
//! `poll_timeout` and is woken when a mutation brings that time forward.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;

use futures::channel::mpsc::UnboundedSender;
use http::HeaderMap;
use hyper::client::conn::http2::SendRequest;
use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use xds_proto_core::Instant;
use xds_proto_core::dependency::XdsConfig;
use xds_proto_core::filter::RpcFilters;
use xds_proto_core::filter::fault::ActiveFaults;
use xds_proto_core::lb::{
    CallOutcome, CallToken, ConnectivityState, LbAction, LoadBalancer, Pick, PickArgs, SubchannelId,
};
use xds_proto_core::orca::OrcaLoadReport;
use xds_proto_core::selector::{ConfigSelector, Metadata, RandomSource, Seeded, Selection};

use super::connections::{Attempt, Connections};
use super::orca::{self, OobStart, OobStreams};
use super::security::{EndpointSecurity, SecurityMap};
use super::wire;
use crate::runtime::Runtime;
use crate::transport::Connection;

/// The RPCs being faulted in the process (A33's `max_active_faults` counts every
/// channel's): the one instance the core's fault filter counts in.
static ACTIVE_FAULTS: ActiveFaults = ActiveFaults::new();

/// What the channel knows about its target's configuration.
pub(crate) enum Resolution {
    /// No configuration yet: RPCs wait.
    Waiting,
    /// RPCs are routed by this selector.
    Ready(Arc<ConfigSelector>),
    /// The target cannot be routed (its listener or route configuration failed): RPCs
    /// fail with this status until a configuration arrives.
    Failed(tonic::Status),
}

/// What the driver task is told.
pub(crate) enum DriverEvent {
    /// The balancer's next timeout moved earlier.
    Rearm,
    /// A LOGICAL_DNS cluster's host resolved.
    Dns {
        cluster: String,
        result: Result<Vec<SocketAddr>, xds_proto_core::Status>,
    },
}

/// Work a mutation left to do once the lock is released.
#[derive(Default)]
pub(crate) struct Deferred {
    connects: Vec<(SubchannelId, Attempt, SocketAddr, EndpointSecurity)>,
    resolves: Vec<(String, String, u16)>,
    oob_starts: Vec<OobStart>,
}

pub(crate) struct State {
    lb: LoadBalancer,
    resolution: Resolution,
    connections: Connections<SubchannelId>,
    rng: Xoshiro256PlusPlus,
    /// The HTTP filters' draws, a stream of their own (see `filter_seed`).
    filter_rng: Seeded,
    /// Bumped whenever the picker may have changed; queued RPCs wait for a new value.
    picker_generation: u64,
    queued: Vec<Waker>,
    /// The timeout the driver sleeps until.
    armed: Option<Instant>,
    /// ORCA out-of-band streams, wanted and running.
    oob: OobStreams,
    /// Streams a mutation started, to spawn once the lock is released.
    oob_starts: Vec<OobStart>,
    /// Each endpoint's security config (under xDS credentials) and each cluster's
    /// addresses.
    security: SecurityMap,
    /// Whether the channel has xDS credentials (else every endpoint is plaintext).
    xds_credentials: bool,
    /// The last connection error of each address, numbered to find the latest.
    connect_errors: HashMap<SocketAddr, (u64, String)>,
    next_error: u64,
}

/// Where a pick for an RPC stands.
pub(crate) enum PickResult {
    /// Send the attempt on this connection (to this address); report its end through
    /// the token.
    Ready(SendRequest<tonic::body::Body>, CallToken, SocketAddr),
    /// The attempt fails with this status (a retry policy may retry it).
    Failed(tonic::Status),
    /// The control plane's `drop_overloads` dropped the RPC: it fails with this status
    /// and is not retried.
    Dropped(tonic::Status),
}

/// Reports how a call ended (the response body holds one, type-erased, so that it
/// does not carry the runtime type).
pub(crate) trait CallReporter: Send + Sync {
    fn call_finished(
        self: Arc<Self>,
        call: CallToken,
        code: tonic::Code,
        report: Option<OrcaLoadReport>,
    );
}

/// The end of one call: reported once, as cancelled when dropped unreported. It holds
/// the RPC's selection, so the RPC's cluster stays in the configuration until then.
pub(crate) struct CallEnd {
    reporter: Arc<dyn CallReporter>,
    call: Option<CallToken>,
    _selection: Selection,
}

impl CallEnd {
    pub(crate) fn new(
        reporter: Arc<dyn CallReporter>,
        call: CallToken,
        selection: Selection,
    ) -> CallEnd {
        CallEnd {
            reporter,
            call: Some(call),
            _selection: selection,
        }
    }

    /// Reports the call's final status, with its ORCA load report when the pick wants
    /// it and `trailers` (or a Trailers-Only response's headers) carry one.
    pub(crate) fn finish(mut self, code: tonic::Code, trailers: Option<&HeaderMap>) {
        if let Some(call) = self.call.take() {
            let report = orca::call_report(&call, trailers);
            self.reporter.clone().call_finished(call, code, report);
        }
    }
}

impl Drop for CallEnd {
    fn drop(&mut self) {
        if let Some(call) = self.call.take() {
            self.reporter
                .clone()
                .call_finished(call, tonic::Code::Cancelled, None);
        }
    }
}

/// The state every clone of a channel, its driver, its connections and its RPCs share.
pub(crate) struct Shared<R> {
    pub(crate) rt: R,
    state: Mutex<State>,
    driver: UnboundedSender<DriverEvent>,
    pub(crate) settings: super::ChannelSettings,
}

impl<R: Runtime> Shared<R> {
    pub(crate) fn new(
        rt: R,
        lb: LoadBalancer,
        (seed, filter_seed): (u64, u64),
        driver: UnboundedSender<DriverEvent>,
        settings: super::ChannelSettings,
    ) -> Shared<R> {
        Shared {
            rt,
            state: Mutex::new(State {
                lb,
                resolution: Resolution::Waiting,
                connections: Connections::new(),
                rng: Xoshiro256PlusPlus::seed_from_u64(seed),
                filter_rng: Seeded(filter_seed),
                picker_generation: 0,
                queued: Vec::new(),
                armed: None,
                oob: OobStreams::default(),
                oob_starts: Vec::new(),
                security: SecurityMap::default(),
                xds_credentials: !matches!(
                    settings.credentials,
                    super::security::EndpointCredentials::Plaintext
                ),
                connect_errors: HashMap::new(),
                next_error: 0,
            }),
            driver,
            settings,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs one mutation of the balancer, drains its actions and carries out the
    /// deferred ones once the lock is released.
    pub(crate) fn mutate<T>(
        self: &Arc<Self>,
        mutation: impl FnOnce(&mut State, Instant) -> T,
    ) -> T {
        let now = self.rt.now();
        let (out, deferred) = {
            let mut state = self.lock();
            let out = mutation(&mut state, now);
            let deferred = state.drain_actions();
            if state
                .lb
                .poll_timeout()
                .is_some_and(|t| state.armed.is_none_or(|a| t < a))
            {
                let _ = self.driver.unbounded_send(DriverEvent::Rearm);
            }
            (out, deferred)
        };
        self.carry_out(deferred);
        out
    }

    /// Starts the connections and resolutions a mutation asked for.
    fn carry_out(self: &Arc<Self>, deferred: Deferred) {
        for (subchannel, attempt, address, security) in deferred.connects {
            super::subchannel::spawn_connect(self, subchannel, attempt, address, security);
        }
        for start in deferred.oob_starts {
            orca::spawn(self, start);
        }
        for (cluster, host, port) in deferred.resolves {
            let driver = self.driver.clone();
            // Name resolution blocks: it runs on a thread of its own.
            std::thread::spawn(move || {
                let result = super::subchannel::resolve(&host, port);
                let _ = driver.unbounded_send(DriverEvent::Dns { cluster, result });
            });
        }
    }

    /// Takes a new configuration (or the target's failure).
    pub(crate) fn configure(
        self: &Arc<Self>,
        update: Result<(&XdsConfig, Arc<ConfigSelector>), tonic::Status>,
    ) {
        self.mutate(|state, now| {
            state.resolution = match update {
                Ok((config, selector)) => {
                    state.security = SecurityMap::of(config);
                    state.lb.update(now, config);
                    state.retire_outdated_connections(now);
                    Resolution::Ready(selector)
                }
                Err(status) => Resolution::Failed(status),
            };
            state.picker_changed();
        });
    }

    /// Routes an RPC: its selection and what its HTTP filters decided (A39), or why it
    /// fails, or `Ok(Err(generation))` while the target's configuration has not
    /// arrived (wait for [`Self::picker_changed`] to move past the generation).
    pub(crate) fn route(
        &self,
        path: &str,
        headers: &impl Metadata,
    ) -> Result<Result<(Selection, RpcFilters<'static>), u64>, tonic::Status> {
        let mut state = self.lock();
        let State {
            resolution,
            rng,
            filter_rng,
            ..
        } = &mut *state;
        match resolution {
            Resolution::Waiting => Ok(Err(state.picker_generation)),
            Resolution::Failed(status) => Err(status.clone()),
            Resolution::Ready(selector) => {
                let selection = selector
                    .select(path, headers, &mut || rng.next_u32())
                    .map_err(|s| wire::tonic_status(&s))?;
                let filters = selection.run_filters(
                    path,
                    headers,
                    &mut || filter_rng.next_u32(),
                    &ACTIVE_FAULTS,
                );
                Ok(Ok((selection, filters)))
            }
        }
    }

    /// Picks a connection for an attempt of an RPC routed to `cluster`, or queues it:
    /// `Err(generation)` means pick again once the picker's generation moves past it.
    pub(crate) fn pick(
        self: &Arc<Self>,
        cluster: &str,
        hash: Option<u64>,
        override_host: Option<SocketAddr>,
    ) -> Result<PickResult, u64> {
        let wait_for_ready = self.settings.wait_for_ready;
        self.mutate(|state, now| {
            let args = PickArgs {
                hash,
                random: state.rng.next_u64(),
                override_host,
            };
            Ok(match state.lb.pick(now, cluster, &args) {
                Pick::Complete {
                    subchannel,
                    call,
                    address,
                } => match state.connections.usable(&subchannel) {
                    Some(conn) => PickResult::Ready(conn.send.clone(), call, address),
                    // Retired (GOAWAY, or closed) before the balancer heard of it: the
                    // retirement's report is on its way and changes the picker, so the
                    // RPC picks again then, as gRPC-Go's picker wrapper does (it ends
                    // the unused pick as a success, with nothing sent).
                    _ => {
                        state.lb.call_finished(now, call, CallOutcome::Success);
                        return Err(state.picker_generation);
                    }
                },
                Pick::Queue => return Err(state.picker_generation),
                Pick::Fail(_) if wait_for_ready => return Err(state.picker_generation),
                Pick::Fail(status) => PickResult::Failed(
                    state.with_connect_error(cluster, wire::tonic_status(&status)),
                ),
                Pick::Drop { category } => PickResult::Dropped(tonic::Status::unavailable(
                    format!("dropped by the control plane: {category}"),
                )),
            })
        })
    }

    /// Whether the picker changed since `generation`; otherwise `waker` is woken when
    /// it does.
    pub(crate) fn picker_changed_since(&self, generation: u64, waker: &Waker) -> bool {
        let mut state = self.lock();
        if state.picker_generation != generation {
            return true;
        }
        if !state.queued.iter().any(|w| w.will_wake(waker)) {
            state.queued.push(waker.clone());
        }
        false
    }

    /// A uniform random draw (retry jitter).
    pub(crate) fn random_u32(&self) -> u32 {
        self.lock().rng.next_u32()
    }

    /// A subchannel's new connectivity state, from its connection attempt `attempt`;
    /// with `Ready`, the connection. Ignored (the connection dropped) when the
    /// subchannel is gone or has moved on to another attempt.
    pub(crate) fn attempt_state(
        self: &Arc<Self>,
        subchannel: SubchannelId,
        attempt: Attempt,
        state: ConnectivityState,
        ready: Option<Connection>,
    ) {
        self.mutate(|s, now| {
            // A connection made with a security config its address no longer has (the
            // cluster's TLS changed while it was being made) is not used.
            let outdated = ready.is_some() && {
                let current = s.dial_security(now, subchannel);
                !s.connections.dials_with(&subchannel, &current)
            };
            let (state, ready) = if outdated {
                (ConnectivityState::Idle, None)
            } else {
                (state, ready)
            };
            if s.connections.report(&subchannel, attempt, ready) {
                match s.connections.ready(&subchannel) {
                    Some((attempt, conn)) => s
                        .oob_starts
                        .extend(s.oob.connected(subchannel, attempt, conn)),
                    None => s.oob.disconnected(subchannel),
                }
                if state == ConnectivityState::Ready
                    && let Some(address) = s.lb.subchannel_address(subchannel)
                {
                    s.connect_errors.remove(&address);
                }
                s.lb.subchannel_state(now, subchannel, state);
            }
        });
    }

    /// An ORCA out-of-band report from `subchannel`'s connection `attempt` (ignored
    /// when that connection is no longer the subchannel's).
    pub(crate) fn oob_report(
        self: &Arc<Self>,
        subchannel: SubchannelId,
        attempt: Attempt,
        report: &OrcaLoadReport,
    ) {
        self.mutate(|s, now| {
            if s.connections.is_current(&subchannel, attempt) {
                s.lb.oob_report(now, subchannel, report);
            }
        });
    }

    /// A failed connection attempt: TRANSIENT_FAILURE, and its error kept for the
    /// status of picks that fail for lack of a reachable endpoint.
    pub(crate) fn attempt_failed(
        self: &Arc<Self>,
        subchannel: SubchannelId,
        attempt: Attempt,
        address: SocketAddr,
        error: String,
    ) {
        self.mutate(|s, now| {
            if s.connections.report(&subchannel, attempt, None) {
                s.next_error += 1;
                s.connect_errors.insert(address, (s.next_error, error));
                s.lb.subchannel_state(now, subchannel, ConnectivityState::TransientFailure);
                s.oob.disconnected(subchannel);
            }
        });
    }

    /// Runs the balancer's due timers; returns when to run them next.
    pub(crate) fn handle_timeout(self: &Arc<Self>) -> Option<Instant> {
        self.mutate(|state, now| {
            state.lb.handle_timeout(now);
            state.armed = state.lb.poll_timeout();
            state.armed
        })
    }

    /// Reports a LOGICAL_DNS resolution.
    pub(crate) fn dns_resolved(
        self: &Arc<Self>,
        cluster: &str,
        result: Result<Vec<SocketAddr>, xds_proto_core::Status>,
    ) {
        self.mutate(|state, now| {
            if let Ok(addresses) = &result {
                state.security.dns_resolved(cluster, addresses);
            }
            state.lb.dns_resolved(now, cluster, result);
        });
    }
}

impl<R: Runtime> CallReporter for Shared<R> {
    fn call_finished(
        self: Arc<Self>,
        call: CallToken,
        code: tonic::Code,
        report: Option<OrcaLoadReport>,
    ) {
        // A50 counts every status but OK as a failure, cancellations included.
        let outcome = if code == tonic::Code::Ok {
            CallOutcome::Success
        } else {
            CallOutcome::Failure
        };
        self.mutate(|state, now| {
            (state.lb).call_finished_with_report(now, call, outcome, report.as_ref())
        });
    }
}

impl State {
    /// Drains the balancer's actions: what can be done under the lock is done, the
    /// rest is returned.
    fn drain_actions(&mut self) -> Deferred {
        let mut deferred = Deferred {
            oob_starts: std::mem::take(&mut self.oob_starts),
            ..Deferred::default()
        };
        while let Some(action) = self.lb.poll_action() {
            match action {
                LbAction::Connect {
                    subchannel,
                    address,
                } => {
                    let security = self.dial_security_of(&address);
                    let attempt = self.connections.start(subchannel, security.clone());
                    deferred
                        .connects
                        .push((subchannel, attempt, address, security));
                }
                // Forgotten, or kept IDLE with its connection closed (a priority not
                // in use for 15 minutes): a later `Connect` dials anew. RPCs on the
                // connection hold their own handle and finish.
                LbAction::Disconnect { subchannel } => {
                    self.connections.remove(&subchannel);
                    self.oob.forget(subchannel);
                }
                LbAction::Idle { subchannel } => {
                    self.connections.remove(&subchannel);
                    self.oob.disconnected(subchannel);
                }
                LbAction::LoadReports {
                    subchannel,
                    interval,
                } => {
                    let ready = self.connections.ready(&subchannel);
                    deferred
                        .oob_starts
                        .extend(self.oob.set(subchannel, interval, ready));
                }
                LbAction::ResolveDns {
                    cluster,
                    host,
                    port,
                } => deferred.resolves.push((cluster, host, port)),
                LbAction::PickerChanged => self.picker_changed(),
                _ => {}
            }
        }
        deferred
    }

    /// What `address` is dialled with now.
    fn dial_security_of(&self, address: &SocketAddr) -> EndpointSecurity {
        if self.xds_credentials {
            self.security.security(address)
        } else {
            EndpointSecurity::Fallback
        }
    }

    /// What `subchannel`'s address is dialled with now.
    fn dial_security(&self, _now: Instant, subchannel: SubchannelId) -> EndpointSecurity {
        match self.lb.subchannel_address(subchannel) {
            Some(address) => self.dial_security_of(&address),
            None => EndpointSecurity::Fallback,
        }
    }

    /// Retires the READY connections whose security config changed with the new
    /// configuration: IDLE to the balancer (which dials again with the new one); RPCs
    /// on them finish.
    fn retire_outdated_connections(&mut self, now: Instant) {
        if !self.xds_credentials {
            return;
        }
        let State {
            lb,
            connections,
            security,
            ..
        } = self;
        let retired = connections.retire_outdated(|subchannel| {
            lb.subchannel_address(*subchannel)
                .map_or(EndpointSecurity::Fallback, |a| security.security(&a))
        });
        for subchannel in retired {
            tracing::debug!(
                ?subchannel,
                "the cluster's security config changed: reconnecting"
            );
            self.lb
                .subchannel_state(now, subchannel, ConnectivityState::Idle);
        }
    }

    /// `status` of a pick that failed for `cluster`, with the latest connection error
    /// among the cluster's addresses (gRPC's "last connection error").
    fn with_connect_error(&self, cluster: &str, status: tonic::Status) -> tonic::Status {
        let latest = (self.security.addresses(cluster).iter())
            .filter_map(|a| self.connect_errors.get(a))
            .max_by_key(|(n, _)| *n);
        match latest {
            Some((_, error)) => tonic::Status::new(
                status.code(),
                format!("{}; last connection error: {error}", status.message()),
            ),
            None => status,
        }
    }

    /// Lets the queued RPCs pick again.
    fn picker_changed(&mut self) {
        self.picker_generation += 1;
        for waker in self.queued.drain(..) {
            waker.wake();
        }
    }
}
