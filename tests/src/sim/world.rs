//! The simulated world: clients under the invariant checker, management servers, and
//! the network and transports between them, all on one virtual clock and one seeded
//! random stream.
//!
//! A run draws its whole configuration from the seed (clients, authorities, server
//! features and policies, resource timeout, latencies, watch churn, fault rates), then
//! goes through two phases:
//! - **safety**: watches come and go, snapshots change, and faults strike: stream resets,
//!   graceful server closes, channel failures, blackholes (connections that never
//!   establish; open ones partitioned, which the client's keepalive fails as the
//!   adapter's does, or which resume with what TCP held back when the partition lifts:
//!   see `keepalive`), server restarts
//!   that forget streams and nonces, slow connects and slow sends, undecodable and
//!   invalid resources, deletions, TP3 `resource_errors`, duplicate responses, reordered
//!   types, junk messages, and events for streams that are already gone;
//! - **liveness**: the faults stop, the servers repair their snapshots, and within a
//!   virtual-time bound every watcher must hold exactly the server's current value, or
//!   does-not-exist (or its cached value where SotW cannot express a deletion). The heal
//!   lifts every partition: a stream that keepalive did not fail (it is off, or slower
//!   than the partition) resumes, so the bound holds with keepalive on or off.
//!
//! The checker runs after every client step; the run's trace is hashed so the same seed
//! can be shown to give the same trace.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write as _};
use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use xds_proto_core::client::{
    Action, ErrorKind, Event, ServerId, StreamId, WatchEvent, WatcherId, XdsClientConfig,
};
use xds_proto_core::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DiscoveryRequest, DiscoveryResponse,
};
use xds_proto_core::resource::builtin_types;
use xds_proto_core::{Bootstrap, Code, Instant, Status};

use xds_adapter_common::KeepaliveSettings;

use super::check::{CheckOptions, CheckedClient, Violation};
use super::keepalive;
use super::rng::SimRng;
use super::server::{
    ManagementServer, SIM_TYPES, ServerPolicy, SimResource, all_required, invalid_any, valid_any,
};

mod describe;
mod faults;
mod finish;
mod network;
mod plan;
mod topology;

use plan::{Features, Plan, delta_servers};

use describe::{describe_action, describe_event, prefix, server_json, short, type_path};
use finish::check_fixtures;
use topology::Topology;

/// How long a connection attempt to a blackholed server hangs before it fails.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);
/// The most steps one run may take; more means a livelock.
const MAX_STEPS: u64 = 2_000_000;
/// What a fallback server adds to the generation of each resource it serves.
const FALLBACK_GENERATION_OFFSET: u32 = 20_000;
/// The authority the simulator's `xdstp://` names use.
const AUTHORITY: &str = "auth.sim";

/// How one run is made.
#[derive(Clone, Copy, Debug, Default)]
pub struct SimOptions {
    /// Turn on the core's planted A57 bug in every client (feature `planted-bug`).
    pub planted_bug: bool,
    /// Keep the human-readable trace (always hashed; kept only when asked).
    pub trace: bool,
    /// Which servers speak delta xDS: `None` draws it from the seed (all SotW, all
    /// delta, or each server by a coin), `Some(true)` every one, `Some(false)` none.
    pub delta: Option<bool>,
}

/// Counts of what a run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Steps taken (events and timer firings).
    pub steps: u64,
    /// Client inputs checked.
    pub client_steps: u64,
    /// Faults injected.
    pub faults: u64,
    /// Streams the clients opened.
    pub streams: u64,
    /// Requests the clients emitted.
    pub requests: u64,
    /// Responses delivered to clients.
    pub responses: u64,
    /// Notifications delivered to watchers.
    pub notifications: u64,
    /// Does-not-exist (or transient timeout) notifications.
    pub does_not_exist: u64,
    /// Partitioned connections the client's keepalive failed.
    pub keepalive_failures: u64,
    /// Partitioned connections that resumed when the partition lifted.
    pub partitions_resumed: u64,
}

/// What a passing run reports.
#[derive(Clone, Debug)]
pub struct SimReport {
    /// The seed.
    pub seed: u64,
    /// The hash of the whole trace, for the determinism check.
    pub trace_hash: u64,
    /// Counts.
    pub stats: SimStats,
    /// When the faults stopped.
    pub heal_at: Instant,
    /// How long after the heal every watcher last became (and stayed) converged.
    pub converged_after: Option<Duration>,
    /// The configuration drawn from the seed, in one line.
    pub plan: String,
    /// The trace, when [`SimOptions::trace`] was set.
    pub trace: Vec<String>,
}

/// A failing run.
#[derive(Clone, Debug)]
pub struct SimFailure {
    /// The seed.
    pub seed: u64,
    /// The broken rule.
    pub rule: String,
    /// When.
    pub at: Instant,
    /// What happened.
    pub detail: String,
    /// The configuration drawn from the seed.
    pub plan: String,
    /// The trace up to the failure (empty unless traced; [`run`] traces a failing seed
    /// again to fill it). `Display` shows the last 80 lines.
    pub trace: Vec<String>,
}

impl fmt::Display for SimFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "simulation seed {} failed: invariant `{}` broken at {}",
            self.seed, self.rule, self.at
        )?;
        writeln!(f, "  {}", self.detail)?;
        writeln!(f, "plan: {}", self.plan)?;
        if !self.trace.is_empty() {
            let tail = &self.trace[self.trace.len().saturating_sub(80)..];
            writeln!(f, "last {} trace lines:", tail.len())?;
            for line in tail {
                writeln!(f, "  {line}")?;
            }
        }
        write!(f, "replay: {}", replay_command(self.seed))
    }
}

impl std::error::Error for SimFailure {}

/// The one command that replays `seed` with its full trace.
pub fn replay_command(seed: u64) -> String {
    format!(
        "XDS_SIM_SEED={seed} cargo test -p xds-proto-tests --test simulation -- replay --nocapture"
    )
}

/// Runs one seed. On failure, runs it again with the trace on to show how it got there.
pub fn run(seed: u64, opts: &SimOptions) -> Result<SimReport, SimFailure> {
    match World::new(seed, *opts).and_then(World::run) {
        Ok(report) => Ok(report),
        Err(mut failure) if !opts.trace => {
            let traced = SimOptions {
                trace: true,
                ..*opts
            };
            if let Err(again) = World::new(seed, traced).and_then(World::run) {
                failure.trace = again.trace;
            }
            Err(failure)
        }
        Err(failure) => Err(failure),
    }
}

/// 64-bit FNV-1a, fed through `fmt::Write` so trace lines hash without allocating.
struct Fnv(u64);

impl fmt::Write for Fnv {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for b in s.bytes() {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        Ok(())
    }
}

#[derive(Clone, Debug)]
enum Ev {
    Churn {
        client: usize,
    },
    Update,
    Fault,
    Heal,
    Probe,
    End,
    Connect {
        conn: u64,
    },
    ConnectFail {
        conn: u64,
        reason: &'static str,
    },
    SendDone {
        conn: u64,
    },
    BufferedSent {
        conn: u64,
    },
    ServerRecv {
        conn: u64,
        request: Box<Wire>,
    },
    ServerFlush {
        conn: u64,
    },
    ServerSeesClose {
        conn: u64,
    },
    ClientRecv {
        conn: u64,
        bytes: Bytes,
    },
    ClientClosed {
        conn: u64,
        status: Status,
    },
    /// The keepalive fails a partitioned connection (`stall`: which partition).
    Kill {
        conn: u64,
        stall: u64,
    },
    /// A partition of a connection lifts.
    Resume {
        conn: u64,
        stall: u64,
    },
    ServerUp {
        server: usize,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ConnState {
    Connecting,
    Open,
    Closed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    Normal,
    NeverEstablish,
    Refused,
}

#[derive(Clone, Debug)]
struct Conn {
    client: usize,
    stream: StreamId,
    server_id: ServerId,
    server: usize,
    state: ConnState,
    fate: Fate,
    /// Partitioned: responses are held back (`held`), requests wait.
    stalled: bool,
    /// Counts the partitions, so that a stale `Kill` or `Resume` is ignored.
    stall: u64,
    /// When the current partition began and until when it lasts.
    stall_span: (Instant, Instant),
    /// The responses a partition held back, in order.
    held: Vec<Bytes>,
    /// The last frame read that counts as keepalive activity (the stream opening, or
    /// a response).
    last_activity: Instant,
    pending: Option<Wire>,
    backlog: Vec<Wire>,
    c2s_last: Instant,
    s2c_last: Instant,
    last_bytes: Option<Bytes>,
}

/// A request on the wire: SotW or delta, as the stream speaks.
#[derive(Clone, Debug)]
enum Wire {
    Sotw(DiscoveryRequest),
    Delta(DeltaDiscoveryRequest),
}

struct SimClient {
    cc: CheckedClient,
    buffering: bool,
    reports_connectivity: bool,
    churn_mean_ms: u64,
    keepalive: Option<KeepaliveSettings>,
}

/// A group of names served by the same servers (the top level, or the authority).
#[derive(Clone, Debug)]
struct Group {
    servers: Vec<usize>,
    features: Features,
    names: Vec<(&'static str, String)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Safety,
    Liveness,
}

struct World {
    seed: u64,
    opts: SimOptions,
    plan: Plan,
    rng: SimRng,
    now: Instant,
    seq: u64,
    queue: BTreeMap<(Instant, u64), Ev>,
    clients: Vec<SimClient>,
    servers: Vec<ManagementServer>,
    /// Which servers speak delta xDS (by index, as `servers`).
    delta: Vec<bool>,
    groups: Vec<Group>,
    conns: BTreeMap<u64, Conn>,
    conn_of: BTreeMap<(usize, StreamId), u64>,
    next_conn: u64,
    flush_due: BTreeSet<u64>,
    blackholes: BTreeMap<(usize, usize), Instant>,
    ever_bad: BTreeSet<(usize, &'static str, String)>,
    generation: u32,
    phase: Phase,
    heal_at: Instant,
    end_at: Instant,
    hash: Fnv,
    trace: Vec<String>,
    stats: SimStats,
    converged_at: Option<Instant>,
}

impl World {
    fn new(seed: u64, opts: SimOptions) -> Result<World, SimFailure> {
        let mut rng = SimRng::new(seed);
        let plan = Plan::draw(&mut rng);
        let fail = |rule: &str, detail: String| SimFailure {
            seed,
            rule: rule.to_string(),
            at: Instant::ZERO,
            detail,
            plan: plan.summary(),
            trace: Vec::new(),
        };
        check_fixtures().map_err(|d| fail("fixtures-decode-as-intended", d))?;

        let delta = delta_servers(seed, &opts);
        let Topology {
            servers,
            groups,
            top_list,
            authorities,
        } = Topology::lay_out(&plan, &delta);

        let clients = SimClient::for_plan(&plan, &top_list, &authorities, &mut rng, &opts)
            .map_err(|(rule, detail)| fail(rule, detail))?;

        let start = Instant::from_secs(1_000);
        let heal_at = start + plan.safety;
        let bound = Duration::from_secs(150) + 2 * plan.resource_timeout + Duration::from_secs(60);
        let mut delta = delta;
        delta.truncate(servers.len());
        let mut world = World {
            seed,
            opts,
            plan,
            rng,
            now: start,
            seq: 0,
            queue: BTreeMap::new(),
            clients,
            servers,
            delta,
            groups,
            conns: BTreeMap::new(),
            conn_of: BTreeMap::new(),
            next_conn: 1,
            flush_due: BTreeSet::new(),
            blackholes: BTreeMap::new(),
            ever_bad: BTreeSet::new(),
            generation: 1,
            phase: Phase::Safety,
            heal_at,
            end_at: heal_at + bound,
            hash: Fnv(0xcbf2_9ce4_8422_2325),
            trace: Vec::new(),
            stats: SimStats::default(),
            converged_at: None,
        };
        world.begin();
        Ok(world)
    }

    /// The initial snapshots (about two thirds of the names exist), and the first of
    /// each recurring event: every client's churn, the updates, the faults, then the
    /// heal and the end.
    fn begin(&mut self) {
        let start = self.now;
        for g in 0..self.groups.len() {
            for (t, name) in self.groups[g].names.clone() {
                if self.rng.chance(0.65) {
                    self.set_resource(g, t, &name, SimResource::Valid(1));
                }
            }
        }
        for c in 0..self.clients.len() {
            self.schedule(start, Ev::Churn { client: c });
        }
        let update = self.rng.exp_millis(self.plan.update_mean_ms);
        self.schedule(start + update, Ev::Update);
        let fault = self.rng.exp_millis(self.plan.fault_mean_ms);
        self.schedule(start + fault, Ev::Fault);
        self.schedule(self.heal_at, Ev::Heal);
        self.schedule(self.end_at, Ev::End);
    }

    fn run(mut self) -> Result<SimReport, SimFailure> {
        loop {
            self.stats.steps += 1;
            if self.stats.steps > MAX_STEPS {
                return Err(self.failure(
                    "step-budget",
                    "more than 2,000,000 steps: a livelock".to_string(),
                ));
            }
            let timer = self
                .clients
                .iter()
                .enumerate()
                .filter_map(|(i, c)| c.cc.poll_timeout().map(|t| (t, i)))
                .min();
            let next_event = self.queue.first_key_value().map(|(k, _)| k.0);
            match (timer, next_event) {
                (Some((t, i)), e) if e.is_none_or(|e| t <= e) => {
                    self.now = self.now.max(t);
                    self.note(format_args!("c{i} timeout"));
                    let actions = self.client_step(i, |cc, now| cc.timeout(now))?;
                    self.apply(i, actions)?;
                }
                (_, Some(_)) => {
                    let ((t, _), ev) = self.queue.pop_first().expect("an event");
                    self.now = t;
                    if matches!(ev, Ev::End) {
                        return self.finish();
                    }
                    self.handle(ev)?;
                }
                _ => return self.finish(),
            }
        }
    }

    // ----- bookkeeping -----

    fn schedule(&mut self, at: Instant, ev: Ev) {
        self.seq += 1;
        self.queue.insert((at, self.seq), ev);
    }

    fn note(&mut self, args: fmt::Arguments<'_>) {
        let _ = write!(self.hash, "{} ", self.now.as_nanos());
        let _ = self.hash.write_fmt(args);
        let _ = self.hash.write_str("\n");
        if self.opts.trace {
            self.trace.push(format!("{} {args}", self.now));
        }
    }

    fn failure(&self, rule: &str, detail: String) -> SimFailure {
        SimFailure {
            seed: self.seed,
            rule: rule.to_string(),
            at: self.now,
            detail,
            plan: format!("{}; delta servers {:?}", self.plan.summary(), self.delta),
            trace: self.trace.clone(),
        }
    }

    /// One step of a client's checked core at the current time, counted; a broken
    /// invariant fails the run.
    fn client_step<T>(
        &mut self,
        client: usize,
        step: impl FnOnce(&mut CheckedClient, Instant) -> Result<T, Violation>,
    ) -> Result<T, SimFailure> {
        let out = step(&mut self.clients[client].cc, self.now).map_err(|v| self.violation(v))?;
        self.stats.client_steps += 1;
        Ok(out)
    }

    fn violation(&self, v: Violation) -> SimFailure {
        SimFailure {
            at: v.at,
            ..self.failure(v.rule, v.detail)
        }
    }

    fn latency(&mut self) -> Duration {
        let (lo, hi) = self.plan.latency_ms;
        self.rng.millis(lo, hi)
    }

    fn safety(&self) -> bool {
        self.phase == Phase::Safety
    }

    fn set_resource(&mut self, group: usize, t: &'static str, name: &str, r: SimResource) {
        if matches!(r, SimResource::Invalid | SimResource::Error(_)) {
            self.ever_bad.insert((group, t, name.to_string()));
        }
        self.note(format_args!("group {group}: {} {name:?} = {r:?}", short(t)));
        for (rank, s) in self.groups[group].servers.clone().into_iter().enumerate() {
            // A fallback server serves its own (older, say) content for the same names,
            // so that whose data a watcher holds is visible.
            let r = match r {
                SimResource::Valid(g) => {
                    SimResource::Valid(g + FALLBACK_GENERATION_OFFSET * rank as u32)
                }
                other => other,
            };
            self.servers[s].set(t, name, r);
            self.wake_streams(s);
        }
    }

    fn remove_resource(&mut self, group: usize, t: &'static str, name: &str) {
        self.note(format_args!("group {group}: {} {name:?} deleted", short(t)));
        for s in self.groups[group].servers.clone() {
            self.servers[s].remove(t, name);
            self.wake_streams(s);
        }
    }

    /// After a snapshot change, every stream of the server gets a flush.
    fn wake_streams(&mut self, server: usize) {
        let keys: Vec<u64> = self
            .conns
            .iter()
            .filter(|(k, c)| c.server == server && self.servers[server].has_stream(**k))
            .map(|(k, _)| *k)
            .collect();
        for k in keys {
            self.schedule_flush(k);
        }
    }

    fn schedule_flush(&mut self, conn: u64) {
        if self.flush_due.insert(conn) {
            let at = self.now + self.rng.millis(0, 20);
            self.schedule(at, Ev::ServerFlush { conn });
        }
    }

    fn group_of(&self, name: &str) -> usize {
        if name.starts_with("xdstp://") && self.groups.len() > 1 {
            1
        } else {
            0
        }
    }

    // ----- client steps -----

    fn deliver(&mut self, client: usize, event: Event) -> Result<(), SimFailure> {
        self.note(format_args!("c{client} <- {}", describe_event(&event)));
        if matches!(event, Event::ResponseReceived { .. }) {
            self.stats.responses += 1;
        }
        let actions = self.client_step(client, |cc, now| cc.event(now, event))?;
        self.apply(client, actions)
    }

    fn apply(&mut self, client: usize, actions: Vec<Action>) -> Result<(), SimFailure> {
        for action in actions {
            self.note(format_args!("c{client} -> {}", describe_action(&action)));
            match action {
                Action::StartStream {
                    server,
                    config,
                    stream,
                } => {
                    self.stats.streams += 1;
                    self.start_conn(client, server, &config.server_uri, stream)?;
                }
                Action::SendRequest { stream, request } => {
                    self.stats.requests += 1;
                    self.client_send(client, stream, Wire::Sotw(crate::on_the_wire(&request)));
                }
                Action::SendDeltaRequest { stream, request } => {
                    self.stats.requests += 1;
                    let request = Wire::Delta(crate::delta_on_the_wire(&request));
                    self.client_send(client, stream, request);
                }
                Action::CloseStream { stream } => self.client_close(client, stream),
                Action::DropChannel { .. } => {}
                Action::Notify(n) => {
                    self.stats.notifications += 1;
                    if let WatchEvent::Changed(Err(e)) = &n.event
                        && matches!(e.kind, ErrorKind::DoesNotExist | ErrorKind::Timeout)
                    {
                        self.stats.does_not_exist += 1;
                    }
                }
                other => panic!("the simulator does not know the action {other:?}"),
            }
        }
        Ok(())
    }

    fn handle(&mut self, ev: Ev) -> Result<(), SimFailure> {
        match ev {
            Ev::Churn { client } => self.churn(client),
            Ev::Update => {
                if self.safety() {
                    self.update();
                    let gap = self.rng.exp_millis(self.plan.update_mean_ms);
                    self.schedule(self.now + gap, Ev::Update);
                }
                Ok(())
            }
            Ev::Fault => {
                if !self.safety() {
                    return Ok(());
                }
                let gap = self.rng.exp_millis(self.plan.fault_mean_ms);
                self.schedule(self.now + gap, Ev::Fault);
                self.fault()
            }
            Ev::Heal => self.heal(),
            Ev::Probe => {
                let converged = (0..self.clients.len()).all(|i| self.converged(i).is_ok());
                if !converged {
                    self.converged_at = None;
                } else if self.converged_at.is_none() {
                    self.converged_at = Some(self.now);
                }
                self.schedule(self.now + Duration::from_secs(1), Ev::Probe);
                Ok(())
            }
            Ev::End => Ok(()),
            Ev::Connect { conn } => self.on_connect(conn),
            Ev::ConnectFail { conn, reason } => {
                if self.conns[&conn].state == ConnState::Connecting {
                    self.fail_conn(conn, reason)?;
                }
                Ok(())
            }
            Ev::SendDone { conn } => self.on_send_done(conn),
            Ev::BufferedSent { conn } => self.on_buffered_sent(conn),
            Ev::ServerRecv { conn, request } => self.on_server_recv(conn, request),
            Ev::ServerFlush { conn } => self.on_server_flush(conn),
            Ev::ServerSeesClose { conn } => {
                let server = self.conns[&conn].server;
                self.servers[server].close_stream(conn);
                Ok(())
            }
            Ev::ClientRecv { conn, bytes } => self.on_client_recv(conn, bytes),
            Ev::ClientClosed { conn, status } => self.on_client_closed(conn, status),
            Ev::Kill { conn, stall } => self.on_kill(conn, stall),
            Ev::Resume { conn, stall } => {
                if self.conns[&conn].stall != stall {
                    return Ok(());
                }
                self.resume(conn)
            }
            Ev::ServerUp { server } => {
                let uri = self.servers[server].uri.clone();
                self.note(format_args!("srv {uri} up"));
                self.servers[server].start();
                Ok(())
            }
        }
    }
}
