//! The invariant checker. [`CheckedClient`] owns one [`XdsClient`], drives it through
//! the sans-IO loop (one input, then drain every action), and after every step holds
//! the client to the protocol rules, keeping a model of what it has seen: the streams
//! and their outstanding request, nonces and subscriptions; each server's last accepted
//! version and backoff state; and what each watcher holds.
//!
//! Rules checked (each [`Violation`] names the one it broke):
//! - ADS SotW: at most one outstanding send per stream (`one-outstanding-send`); a
//!   request's nonce is the last received for its type on its stream
//!   (`nonce-is-last-received`); every request carries the last accepted version
//!   (`version-is-last-accepted`); a response the reference [`judge`] rejects is NACKed
//!   and only such a one (`rejected-response-is-nacked`, `nack-only-for-rejected`,
//!   `nack-detail-bounded`); the node only on a stream's first request
//!   (`node-on-first-request-only`); a request names the watched resources of its type
//!   on that server, sorted: all of them for authorities with one server, a subset for
//!   authorities with fallback servers (`request-names-are-subscription`).
//! - Cache: valid resources are applied byte for byte (`valid-resources-applied`); a
//!   NACK never changes the cached value of the names it rejects, but drops it under
//!   `fail_on_data_errors` (A88) (`nack-keeps-cache`);
//!   values reach watchers only from a response that carried them
//!   (`values-come-from-responses`); a cached value is not replaced by an error unless
//!   `fail_on_data_errors` allows it (`cached-value-kept`).
//! - A57: does-not-exist (or its transient form) fires only from the timer, only for an
//!   uncached resource, and only after its subscription has been sent on a stream that
//!   has been connected for the whole timeout (A88: the longer transient timeout on a
//!   server with `resource_timer_is_transient_error`) (`dne-timer-eligibility`,
//!   `dne-never-for-cached`, `dne-needs-a-reason`); a stream closed before any response
//!   is a connectivity error for every watcher of its server (with fallback servers:
//!   at most one such error, A71 may fall back instead) and waits for a backoff
//!   within the jittered bounds (`connectivity-reported`, `backoff-respected`,
//!   `reconnect-by-deadline`); a stream closed after a response reconnects at once
//!   without errors (`restart-after-response`); one stream per server
//!   (`one-stream-per-server`); none without watchers (`stream-has-reason`,
//!   `no-stream-without-watch`).
//! - Watchers (A88): a new watcher gets exactly one initial state, matching the cache
//!   (`one-initial-state`); an ambient error only reaches a watcher that holds a state
//!   (`ambient-needs-state`); no update that changes nothing, except the value told
//!   again to announce that an ambient error cleared (`no-redundant-update`);
//!   every watcher of a resource hears the same thing, except that the clearing value
//!   reaches only the watchers that hold the ambient error (`notify-all-watchers`); nothing
//!   reaches a cancelled or unknown watcher (`cancelled-watcher-silent`).
//! - Timers and ids: an early `handle_timeout` is a no-op and a due one does something
//!   (`early-timeout-is-noop`, `timer-has-reason`); afterwards `poll_timeout()` is in
//!   the future (`poll-timeout-in-future`); no timer while nothing is watched
//!   (`no-timer-without-watch`); events for stale streams change nothing
//!   (`stale-event-ignored`); ids are never reused (`ids-never-reused`).
//! - A71 fallback (per authority; servers with identical configs are one server, a
//!   server listed twice counts once): a lower-priority server is put in use (its
//!   stream started, or the authority's names requested on it) only while every
//!   higher-priority server has a connectivity failure (a `ConnectivityFailure`, or a
//!   stream closed before any response) not cleared by a later response from it
//!   (`fallback-needs-failure`), and only while some watched resource of the authority
//!   is uncached: no watcher of it holds a value or does-not-exist
//!   (`fallback-needs-uncached`); once a higher-priority server responds, the servers
//!   below it stop serving the authority in that step: its names leave their
//!   subscriptions (at once, or in the next request when one is outstanding) and a
//!   stream nothing else needs is closed (`switch-back-on-response`); a response
//!   reaches the authority's watchers only from a server it has in use
//!   (`updates-only-from-server-in-use`). See [`CheckedClient::check_fallback`].

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use xds_proto_core::backoff::BackoffConfig;
use xds_proto_core::bootstrap::ServerConfig;
use xds_proto_core::client::{
    Action, ErrorKind, Event, MAX_NACK_DETAIL_BYTES, Notification, ResourceSnapshot,
    ResourceStatusKind, ServerId, StreamId, WatchError, WatchEvent, WatcherId, XdsClient,
    XdsClientConfig, XdsError,
};
use xds_proto_core::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use xds_proto_core::resource::{ResourceTypeInfo, ResourceValue, builtin_types};
use xds_proto_core::{Bootstrap, Code, Instant};

use super::verdict::{Verdict, judge};

mod delta;

/// The most actions one input may produce before the checker calls it unbounded work.
const MAX_ACTIONS_PER_STEP: usize = 100_000;

/// How the driver keeps time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CheckOptions {
    /// The driver calls `handle_timeout` exactly at every `poll_timeout()` deadline
    /// before any later input (the simulator does; a fuzzer does not). This enables the
    /// upper bounds: a reconnect comes no later than its jittered backoff allows.
    pub exact_timing: bool,
}

/// A broken invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The rule's short name, e.g. `dne-timer-eligibility`.
    pub rule: &'static str,
    /// The virtual time of the step that broke it.
    pub at: Instant,
    /// What happened, precisely enough to debug from.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invariant `{}` broken at {}: {}",
            self.rule, self.at, self.detail
        )
    }
}

impl std::error::Error for Violation {}

/// What the checker knows about one live watcher.
#[derive(Clone, Debug)]
pub struct WatcherState {
    /// The watched type.
    pub type_url: &'static str,
    /// The watched name.
    pub name: String,
    /// The name's authority (`None` for a name that is not `xdstp://`).
    pub authority: Option<String>,
    /// The servers of the name's authority, in fallback order.
    pub servers: Vec<ServerConfig>,
    /// The last `Changed` it received: its current value or error; `None` before any.
    pub held: Option<Result<ResourceValue, XdsError>>,
    /// It was told an ambient error after its last `Changed`: the next `Changed` may
    /// repeat the value, announcing that the error cleared (A88).
    pub ambient: bool,
}

#[derive(Clone, Debug, Default)]
struct StreamTypeModel {
    requested: bool,
    nonce: String,
    pending_nack: bool,
    /// Names of this type in requests reported sent on this stream, with the time each
    /// was first sent (continuously subscribed since).
    sent: BTreeMap<String, Instant>,
    /// Every name of this type any request reported sent on this stream has named.
    ever_sent: BTreeSet<String>,
    /// Names unwatched on this stream before any request reported sent named them.
    dropped_unsent: BTreeSet<String>,
    /// Delta: the names the server tracks for this stream (subscribed, not unsubscribed).
    tracked: BTreeSet<String>,
    /// Delta: the responses of this type awaiting their ACK or NACK, oldest first:
    /// each nonce, and whether it must be a NACK. Each is answered by its own request.
    acks_due: VecDeque<(String, bool)>,
}

#[derive(Clone, Debug)]
struct StreamModel {
    server: ServerId,
    alive: bool,
    requests: u64,
    outstanding: Option<(String, Vec<String>)>,
    connected_since: Option<Instant>,
    saw_response: bool,
    types: BTreeMap<String, StreamTypeModel>,
}

#[derive(Clone, Debug)]
struct ServerModel {
    config: Arc<ServerConfig>,
    /// Started and not dropped since.
    in_use: bool,
    current: Option<StreamId>,
    accepted: BTreeMap<String, String>,
    /// Consecutive streams that closed without a response.
    failures: u32,
    closed_at: Instant,
}

/// What the checker knows about one authority's fallback (A71).
#[derive(Clone, Debug, Default)]
struct AuthorityModel {
    /// The authority's servers, highest priority first, each once (the client shares
    /// one server among identical configs).
    servers: Vec<ServerConfig>,
    /// How many of them, a prefix, the client may have in use: the primary while the
    /// authority has watchers, and each next one once every server before it has failed
    /// while a watched resource of the authority was uncached. A superset of what the
    /// client uses: it grows at the end of any step where the conditions hold, and
    /// shrinks only where the client must stop using a server (a response from a
    /// higher-priority one, its channel dropped, the authority's last watch cancelled).
    allowed: usize,
    /// Positions taken out of use by a response from a higher-priority server, and the
    /// server that answered, until allowed again (to name the rule a later use breaks).
    cut: BTreeMap<usize, String>,
}

/// What one step did that the fallback rules look at after it.
#[derive(Clone, Debug, Default)]
struct FallbackStep {
    /// Requests emitted: stream, server, type and names.
    requests: Vec<(StreamId, ServerId, String, Vec<String>)>,
    /// Servers whose stream started.
    started: BTreeSet<ServerId>,
    /// Positions of authorities taken out of use by this step's response.
    cut: BTreeSet<(Option<String>, usize)>,
}

/// Why the current input was made, for the rules that depend on it.
enum Ctx {
    Watch {
        watcher: WatcherId,
        pre: Option<ResourceSnapshot>,
    },
    Cancel,
    Quiet,
    Response {
        type_url: String,
        server: Arc<ServerConfig>,
        verdict: Verdict,
        fail_on_data_errors: bool,
        all_required: bool,
        /// Delta: the names the response removes.
        removed: BTreeSet<String>,
    },
    Closed {
        server: ServerId,
        saw_response: bool,
    },
    Connectivity {
        server: ServerId,
    },
    Timeout {
        pre: Vec<ResourceSnapshot>,
    },
}

/// One [`XdsClient`] under the invariant checker. Every input method runs one step of
/// the drive loop and returns the actions it produced, or the first broken rule.
pub struct CheckedClient {
    client: XdsClient,
    bootstrap: Arc<Bootstrap>,
    opts: CheckOptions,
    resource_timeout: Duration,
    /// The resource timer on a server with `resource_timer_is_transient_error` (A88).
    transient_resource_timeout: Duration,
    backoff: BackoffConfig,
    types: Vec<ResourceTypeInfo>,
    streams: BTreeMap<StreamId, StreamModel>,
    servers: BTreeMap<ServerId, ServerModel>,
    watchers: BTreeMap<WatcherId, WatcherState>,
    cancelled: BTreeSet<WatcherId>,
    /// A71: each authority's fallback state, by authority (`None`: old-style names).
    authorities: BTreeMap<Option<String>, AuthorityModel>,
    /// Servers with a connectivity failure not cleared by a later response (nor by
    /// dropping their channel), by id, also for ids not seen started.
    failed: BTreeSet<ServerId>,
    step: FallbackStep,
    max_stream: u64,
    max_watcher: u64,
    now: Instant,
}

impl fmt::Debug for CheckedClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CheckedClient")
            .field("client", &self.client)
            .field("watchers", &self.watchers.len())
            .field("streams", &self.streams.len())
            .finish_non_exhaustive()
    }
}

fn violation(rule: &'static str, at: Instant, detail: impl Into<String>) -> Violation {
    Violation {
        rule,
        at,
        detail: detail.into(),
    }
}

fn short(type_url: &str) -> &str {
    type_url.rsplit('.').next().unwrap_or(type_url)
}

fn describe(event: &WatchEvent) -> String {
    match event {
        WatchEvent::Changed(Ok(_)) => "Changed(value)".to_string(),
        WatchEvent::Changed(Err(e)) => format!("Changed(Err {:?}: {})", e.kind, e.status),
        WatchEvent::AmbientError(e) => format!("AmbientError({:?}: {})", e.kind, e.status),
        other => format!("{other:?}"),
    }
}

/// The authority of `name`: `None` for a name that is not `xdstp://`.
pub fn authority_of(name: &str) -> Option<String> {
    name.strip_prefix("xdstp://")
        .map(|rest| rest.split('/').next().unwrap_or("").to_string())
}

/// The servers that serve `name`, in fallback order, as the bootstrap says.
pub fn servers_for_name(bootstrap: &Bootstrap, name: &str) -> Vec<ServerConfig> {
    let authority = name
        .strip_prefix("xdstp://")
        .map(|rest| rest.split('/').next().unwrap_or(""));
    bootstrap
        .servers_for_authority(authority)
        .map(<[ServerConfig]>::to_vec)
        .unwrap_or_default()
}

impl CheckedClient {
    /// A checked client built from `config` with jitter seed `seed`.
    pub fn new(config: XdsClientConfig, seed: u64, opts: CheckOptions) -> CheckedClient {
        let bootstrap = config.bootstrap.clone();
        let resource_timeout = config.resource_timeout;
        let transient_resource_timeout = config.transient_resource_timeout;
        let backoff = config.backoff;
        CheckedClient {
            client: XdsClient::new(config, seed),
            bootstrap,
            opts,
            resource_timeout,
            transient_resource_timeout,
            backoff,
            types: builtin_types(),
            streams: BTreeMap::new(),
            servers: BTreeMap::new(),
            watchers: BTreeMap::new(),
            cancelled: BTreeSet::new(),
            authorities: BTreeMap::new(),
            failed: BTreeSet::new(),
            step: FallbackStep::default(),
            max_stream: 0,
            max_watcher: 0,
            now: Instant::ZERO,
        }
    }

    /// The client, for getters.
    pub fn client(&self) -> &XdsClient {
        &self.client
    }

    /// The client itself, for test switches. Inputs must go through this wrapper, or
    /// the checker's model goes out of step.
    pub fn client_mut(&mut self) -> &mut XdsClient {
        &mut self.client
    }

    /// The live watchers and what each holds.
    pub fn watchers(&self) -> &BTreeMap<WatcherId, WatcherState> {
        &self.watchers
    }

    /// The client's next deadline.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.client.poll_timeout()
    }

    /// The client's live streams (as the checker has seen them), newest last.
    pub fn live_streams(&self) -> Vec<StreamId> {
        self.streams
            .iter()
            .filter(|(_, s)| s.alive)
            .map(|(id, _)| *id)
            .collect()
    }

    /// Every stream the client ever opened, live or not.
    pub fn all_streams(&self) -> Vec<StreamId> {
        self.streams.keys().copied().collect()
    }

    /// Whether a request is outstanding (emitted, not yet reported sent) on `stream`.
    pub fn has_outstanding(&self, stream: StreamId) -> bool {
        self.streams
            .get(&stream)
            .is_some_and(|s| s.alive && s.outstanding.is_some())
    }

    // ----- inputs -----

    /// `XdsClient::watch`, checked. Returns the client's answer and the actions.
    pub fn watch(
        &mut self,
        now: Instant,
        type_url: &str,
        name: &str,
    ) -> Result<(Result<WatcherId, WatchError>, Vec<Action>), Violation> {
        self.advance(now)?;
        let pre = self.snapshot_of(type_url, name);
        let result = crate::watch_by_type_url(&mut self.client, type_url, name);
        let actions = self.drain(now)?;
        match &result {
            Err(e) => {
                if !actions.is_empty() {
                    return Err(violation(
                        "rejected-watch-has-no-effect",
                        now,
                        format!(
                            "watch({type_url}, {name}) failed with {e} yet produced {actions:?}"
                        ),
                    ));
                }
            }
            Ok(w) => {
                if w.into_raw() <= self.max_watcher {
                    return Err(violation(
                        "ids-never-reused",
                        now,
                        format!("watcher id {w:?} reused"),
                    ));
                }
                self.max_watcher = w.into_raw();
                let canonical = self
                    .types
                    .iter()
                    .map(|t| t.type_url())
                    .find(|t| *t == type_url)
                    .ok_or_else(|| {
                        violation("watch-known-type", now, format!("{type_url} accepted"))
                    })?;
                let servers = servers_for_name(&self.bootstrap, name);
                self.watchers.insert(
                    *w,
                    WatcherState {
                        type_url: canonical,
                        name: name.to_string(),
                        authority: authority_of(name),
                        servers,
                        held: None,
                        ambient: false,
                    },
                );
                self.process(now, &Ctx::Watch { watcher: *w, pre }, &actions)?;
            }
        }
        self.after_step(now)?;
        Ok((result, actions))
    }

    /// `XdsClient::cancel_watch`, checked.
    pub fn cancel(&mut self, now: Instant, watcher: WatcherId) -> Result<Vec<Action>, Violation> {
        self.advance(now)?;
        let removed = self.watchers.remove(&watcher);
        let servers_before: Vec<(ServerId, Option<StreamId>)> = self
            .servers
            .iter()
            .filter(|(_, s)| s.in_use)
            .map(|(id, s)| (*id, s.current))
            .collect();
        self.client.cancel_watch(watcher);
        let actions = self.drain(now)?;
        if let Some(w) = &removed {
            self.cancelled.insert(watcher);
            let shared = self
                .watchers
                .values()
                .any(|o| o.type_url == w.type_url && o.name == w.name);
            if !shared {
                for s in self.streams.values_mut().filter(|s| s.alive) {
                    let st = s.types.entry(w.type_url.to_string()).or_default();
                    if !st.sent.contains_key(&w.name) {
                        st.dropped_unsent.insert(w.name.clone());
                    }
                }
            }
            if shared && !actions.is_empty() {
                return Err(violation(
                    "cancel-keeps-shared-resource",
                    now,
                    format!(
                        "cancelling {watcher:?} of a resource others watch produced {actions:?}"
                    ),
                ));
            }
            for (server, stream) in servers_before {
                let config = self.servers[&server].config.clone();
                if !w.servers.contains(&config) || self.watchers_on(&config) > 0 {
                    continue;
                }
                let closes =
                    stream.is_none_or(|s| actions.contains(&Action::CloseStream { stream: s }));
                if !closes || !actions.contains(&Action::DropChannel { server }) {
                    return Err(violation(
                        "last-watch-closes-stream",
                        now,
                        format!(
                            "last watch on {} cancelled: expected CloseStream({stream:?}) and \
                             DropChannel({server:?}), got {actions:?}",
                            config.server_uri
                        ),
                    ));
                }
            }
        } else if !actions.is_empty() {
            return Err(violation(
                "cancel-unknown-is-noop",
                now,
                format!("cancelling unknown {watcher:?} produced {actions:?}"),
            ));
        }
        self.process(now, &Ctx::Cancel, &actions)?;
        self.after_step(now)?;
        Ok(actions)
    }

    /// `XdsClient::handle_event`, checked.
    pub fn event(&mut self, now: Instant, event: Event) -> Result<Vec<Action>, Violation> {
        self.advance(now)?;
        let stream = match &event {
            Event::StreamStarted { stream }
            | Event::RequestSent { stream }
            | Event::ResponseReceived { stream, .. }
            | Event::StreamClosed { stream, .. } => Some(*stream),
            Event::ConnectivityFailure { .. } => None,
            other => panic!("the checker does not know the event {other:?}"),
        };
        if let Event::ConnectivityFailure { server, .. } = &event {
            // The client records it on any server it knows, started or not.
            self.failed.insert(*server);
        }
        let live = stream.filter(|s| self.streams.get(s).is_some_and(|m| m.alive));
        let stale = match &event {
            Event::ConnectivityFailure { server, .. } => !self.servers.contains_key(server),
            _ => live.is_none(),
        };
        if stale {
            return self.stale_event(now, event);
        }
        let ctx = match &event {
            Event::StreamStarted { stream } => {
                let s = self.streams.get_mut(stream).expect("live");
                s.connected_since.get_or_insert(now);
                Ctx::Quiet
            }
            Event::RequestSent { stream } => {
                let s = self.streams.get_mut(stream).expect("live");
                if let Some((type_url, names)) = s.outstanding.take() {
                    let st = s.types.entry(type_url).or_default();
                    st.sent.retain(|n, _| names.contains(n));
                    for n in names {
                        st.ever_sent.insert(n.clone());
                        st.sent.entry(n).or_insert(now);
                    }
                }
                Ctx::Quiet
            }
            Event::ResponseReceived { stream, bytes } => self.before_response(now, *stream, bytes),
            Event::StreamClosed { stream, .. } => {
                let s = self.streams.get_mut(stream).expect("live");
                s.alive = false;
                let (server, saw_response) = (s.server, s.saw_response);
                let sm = self.servers.get_mut(&server).expect("server of a stream");
                sm.current = None;
                if saw_response {
                    sm.failures = 0;
                } else {
                    sm.failures += 1;
                    sm.closed_at = now;
                    self.failed.insert(server);
                }
                Ctx::Closed {
                    server,
                    saw_response,
                }
            }
            Event::ConnectivityFailure { server, .. } => {
                if let Some(current) = self.servers[server].current {
                    self.streams
                        .get_mut(&current)
                        .expect("current")
                        .connected_since = None;
                }
                Ctx::Connectivity { server: *server }
            }
            other => panic!("the checker does not know the event {other:?}"),
        };
        let pre = match ctx {
            Ctx::Response { .. } => self.client.resource_snapshot(),
            _ => Vec::new(),
        };
        let decode_failed =
            matches!(ctx, Ctx::Closed { .. }) && matches!(event, Event::ResponseReceived { .. });
        self.client.handle_event(now, event);
        let actions = self.drain(now)?;
        if decode_failed {
            let stream = stream.expect("response has a stream");
            if actions.first() != Some(&Action::CloseStream { stream }) {
                return Err(violation(
                    "undecodable-response-closes-stream",
                    now,
                    format!("expected CloseStream({stream:?}) first, got {actions:?}"),
                ));
            }
        }
        self.process(now, &ctx, &actions)?;
        if let Ctx::Response {
            type_url,
            server,
            verdict: v,
            ..
        } = &ctx
        {
            self.check_cache(now, type_url, server, v, &pre)?;
        }
        self.after_step(now)?;
        Ok(actions)
    }

    /// `XdsClient::handle_timeout`, checked.
    pub fn timeout(&mut self, now: Instant) -> Result<Vec<Action>, Violation> {
        self.advance(now)?;
        let due = self.client.poll_timeout().is_some_and(|t| t <= now);
        let pre = if due {
            self.client.resource_snapshot()
        } else {
            Vec::new()
        };
        self.client.handle_timeout(now);
        let actions = self.drain(now)?;
        if !due && !actions.is_empty() {
            return Err(violation(
                "early-timeout-is-noop",
                now,
                format!("not due, yet {actions:?}"),
            ));
        }
        if due && actions.is_empty() {
            return Err(violation(
                "timer-has-reason",
                now,
                "a timer fired and did nothing: it outlived its reason",
            ));
        }
        self.process(now, &Ctx::Timeout { pre }, &actions)?;
        if let Some(next) = self.client.poll_timeout().filter(|t| *t <= now) {
            return Err(violation(
                "poll-timeout-in-future",
                now,
                format!("after handle_timeout({now}), poll_timeout() is {next}"),
            ));
        }
        self.after_step(now)?;
        Ok(actions)
    }

    // ----- the model -----

    fn advance(&mut self, now: Instant) -> Result<(), Violation> {
        if now < self.now {
            return Err(violation(
                "driver-time-monotonic",
                now,
                format!("time went back from {}", self.now),
            ));
        }
        self.now = now;
        Ok(())
    }

    fn drain(&mut self, now: Instant) -> Result<Vec<Action>, Violation> {
        let mut actions = Vec::new();
        while let Some(a) = self.client.poll_action() {
            actions.push(a);
            if actions.len() > MAX_ACTIONS_PER_STEP {
                return Err(violation(
                    "bounded-work",
                    now,
                    "one input produced over 100,000 actions",
                ));
            }
        }
        Ok(actions)
    }

    fn snapshot_of(&self, type_url: &str, name: &str) -> Option<ResourceSnapshot> {
        self.client
            .resource_snapshot()
            .into_iter()
            .find(|r| r.type_url == type_url && &*r.name == name)
    }

    fn watchers_on(&self, config: &ServerConfig) -> usize {
        self.watchers
            .values()
            .filter(|w| w.servers.contains(config))
            .count()
    }

    fn type_of(&self, type_url: &str) -> Option<ResourceTypeInfo> {
        self.types
            .iter()
            .find(|t| t.type_url() == type_url)
            .cloned()
    }

    /// The base backoff delay after `failures` consecutive failed streams.
    fn backoff_base(&self, failures: u32) -> f64 {
        let mut base = self.backoff.initial.as_secs_f64();
        for _ in 1..failures {
            base = (base * self.backoff.multiplier).min(self.backoff.max.as_secs_f64());
        }
        base
    }

    fn backoff_window(&self, failures: u32) -> (Duration, Duration) {
        let base = self.backoff_base(failures);
        let slack = 0.001;
        let lo = (base * (1.0 - self.backoff.jitter) - slack).max(0.0);
        let hi = base * (1.0 + self.backoff.jitter) + slack;
        (Duration::from_secs_f64(lo), Duration::from_secs_f64(hi))
    }

    fn stale_event(&mut self, now: Instant, event: Event) -> Result<Vec<Action>, Violation> {
        let pre = self.client.resource_snapshot();
        let pre_timeout = self.client.poll_timeout();
        let shown = format!("{event:?}");
        self.client.handle_event(now, event);
        let actions = self.drain(now)?;
        let post = self.client.resource_snapshot();
        if !actions.is_empty() || post != pre || self.client.poll_timeout() != pre_timeout {
            return Err(violation(
                "stale-event-ignored",
                now,
                format!(
                    "{shown} for a stale stream or unknown server produced {actions:?} or changed the state"
                ),
            ));
        }
        self.after_step(now)?;
        Ok(actions)
    }

    fn before_response(&mut self, now: Instant, stream: StreamId, bytes: &Bytes) -> Ctx {
        let s = self.streams.get_mut(&stream).expect("live");
        let server = s.server;
        let is_delta = self.servers[&server].config.is_delta();
        let decoded = if is_delta {
            delta::decode_as_sotw(bytes)
        } else {
            DiscoveryResponse::decode(bytes.clone())
                .ok()
                .map(|r| (r, BTreeSet::new()))
        };
        let s = self.streams.get_mut(&stream).expect("live");
        let Some((response, removed)) = decoded else {
            // The client closes the stream as if it had failed.
            let saw_response = s.saw_response;
            let sm = self.servers.get_mut(&server).expect("server");
            if saw_response {
                sm.failures = 0;
            } else {
                sm.failures += 1;
                sm.closed_at = now;
                self.failed.insert(server);
            }
            return Ctx::Closed {
                server,
                saw_response,
            };
        };
        s.connected_since.get_or_insert(now);
        s.saw_response = true;
        // Any decodable response on a live stream, even of a type not requested, shows
        // the server healthy: the client switches back to it (A71).
        self.failed.remove(&server);
        self.switch_back(server);
        let sm = self.servers.get_mut(&server).expect("server");
        sm.failures = 0;
        let features = sm.config.server_features;
        let server_config = sm.config.clone();
        let Some(ty) = self
            .types
            .iter()
            .find(|t| t.type_url() == response.type_url)
            .cloned()
        else {
            return Ctx::Quiet;
        };
        let s = self.streams.get_mut(&stream).expect("live");
        let st = s.types.entry(response.type_url.clone()).or_default();
        if !st.requested {
            return Ctx::Quiet;
        }
        st.nonce = response.nonce.clone();
        let mut verdict = judge(&ty, &response);
        // Delta: a name both sent (valid or not) and removed is a contradiction the
        // client NACKs; a TP3 error beside a removal is not.
        if removed
            .iter()
            .any(|n| verdict.valid.contains_key(n) || verdict.invalid.contains(n))
        {
            verdict.accept = false;
        }
        st.pending_nack = !verdict.accept;
        if is_delta {
            st.acks_due
                .push_back((response.nonce.clone(), !verdict.accept));
        }
        if verdict.accept {
            self.servers
                .get_mut(&server)
                .expect("server")
                .accepted
                .insert(response.type_url.clone(), response.version_info.clone());
        }
        Ctx::Response {
            type_url: response.type_url.clone(),
            server: server_config,
            verdict,
            fail_on_data_errors: features.fail_on_data_errors,
            all_required: ty.all_resources_required_in_sotw() && !is_delta,
            removed,
        }
    }

    fn process(&mut self, now: Instant, ctx: &Ctx, actions: &[Action]) -> Result<(), Violation> {
        let mut heard: BTreeMap<WatcherId, Vec<WatchEvent>> = BTreeMap::new();
        // The watchers holding an ambient error and a value: only they hear the value
        // again when the error clears (A88).
        let ambient_before: BTreeMap<WatcherId, ResourceValue> = (self.watchers.iter())
            .filter(|(_, w)| w.ambient)
            .filter_map(|(id, w)| match &w.held {
                Some(Ok(v)) => Some((*id, v.clone())),
                _ => None,
            })
            .collect();
        let mut started: BTreeSet<ServerId> = BTreeSet::new();
        for action in actions {
            match action {
                Action::StartStream {
                    server,
                    config,
                    stream,
                } => {
                    self.on_start(now, *server, config, *stream)?;
                    started.insert(*server);
                }
                Action::SendRequest { stream, request } => {
                    self.on_send(now, *stream, &crate::on_the_wire(request))?
                }
                Action::SendDeltaRequest { stream, request } => {
                    self.on_send_delta(now, *stream, &crate::delta_on_the_wire(request))?
                }
                Action::CloseStream { stream } => self.on_close_action(now, *stream)?,
                Action::DropChannel { server } => self.on_drop(now, *server)?,
                Action::Notify(n) => {
                    self.on_notify(now, ctx, n)?;
                    heard.entry(n.watcher).or_default().push(n.event.clone());
                }
                other => panic!("the checker does not know the action {other:?}"),
            }
        }
        match ctx {
            Ctx::Watch { watcher, pre } => {
                self.check_initial_state(now, *watcher, pre.as_ref(), &heard, actions)?
            }
            Ctx::Cancel | Ctx::Quiet => {
                if let Some((w, events)) = heard.iter().next() {
                    return Err(violation(
                        "no-notification-without-cause",
                        now,
                        format!("{w:?} told {events:?} on an input that changes no resource"),
                    ));
                }
            }
            Ctx::Response { .. } | Ctx::Timeout { .. } => {
                self.check_notify_all(now, &heard, &ambient_before)?
            }
            Ctx::Closed {
                server,
                saw_response: true,
            } => {
                if !heard.is_empty() {
                    return Err(violation(
                        "restart-after-response",
                        now,
                        format!(
                            "a stream closed after a response must not notify anyone: {heard:?}"
                        ),
                    ));
                }
                let config = self.servers[server].config.clone();
                if self.watchers_on(&config) > 0 && !started.contains(server) {
                    return Err(violation(
                        "restart-after-response",
                        now,
                        format!(
                            "the stream to {} closed after a response: expected a new stream at once",
                            config.server_uri
                        ),
                    ));
                }
            }
            Ctx::Closed {
                server,
                saw_response: false,
            }
            | Ctx::Connectivity { server } => {
                if started.contains(server) {
                    return Err(violation(
                        "backoff-respected",
                        now,
                        "a new stream started in the same step as a connectivity failure",
                    ));
                }
                self.check_connectivity_reported(now, *server, &heard)?;
            }
        }
        Ok(())
    }

    fn on_start(
        &mut self,
        now: Instant,
        server: ServerId,
        config: &Arc<ServerConfig>,
        stream: StreamId,
    ) -> Result<(), Violation> {
        if stream.into_raw() <= self.max_stream {
            return Err(violation(
                "ids-never-reused",
                now,
                format!("stream id {stream:?} reused"),
            ));
        }
        self.max_stream = stream.into_raw();
        let watchers = self.watchers_on(config);
        let (lo, hi) = {
            let failures = self.servers.get(&server).map_or(0, |s| s.failures);
            self.backoff_window(failures.max(1))
        };
        let sm = self.servers.entry(server).or_insert_with(|| ServerModel {
            config: config.clone(),
            in_use: true,
            current: None,
            accepted: BTreeMap::new(),
            failures: 0,
            closed_at: now,
        });
        if *sm.config != **config {
            return Err(violation(
                "server-id-stable",
                now,
                format!(
                    "{server:?} was {} and is now {}",
                    sm.config.server_uri, config.server_uri
                ),
            ));
        }
        if let Some(current) = sm.current {
            return Err(violation(
                "one-stream-per-server",
                now,
                format!(
                    "{stream:?} started while {current:?} to {} is open",
                    config.server_uri
                ),
            ));
        }
        if watchers == 0 {
            return Err(violation(
                "stream-has-reason",
                now,
                format!(
                    "{stream:?} started to {} with nothing watched there",
                    config.server_uri
                ),
            ));
        }
        if sm.failures > 0 {
            let waited = now.saturating_duration_since(sm.closed_at);
            if waited < lo || (self.opts.exact_timing && waited > hi) {
                return Err(violation(
                    "backoff-respected",
                    now,
                    format!(
                        "after {} failed stream(s) to {}, the next started {waited:?} later; allowed {lo:?}..={hi:?}",
                        sm.failures, config.server_uri
                    ),
                ));
            }
        }
        sm.current = Some(stream);
        sm.in_use = true;
        self.step.started.insert(server);
        self.streams.insert(
            stream,
            StreamModel {
                server,
                alive: true,
                requests: 0,
                outstanding: None,
                connected_since: None,
                saw_response: false,
                types: BTreeMap::new(),
            },
        );
        Ok(())
    }

    fn on_send(
        &mut self,
        now: Instant,
        stream: StreamId,
        req: &DiscoveryRequest,
    ) -> Result<(), Violation> {
        let Some(s) = self.streams.get(&stream).filter(|s| s.alive) else {
            return Err(violation(
                "request-on-live-stream",
                now,
                format!("request on {stream:?}, not open"),
            ));
        };
        if let Some((t, _)) = &s.outstanding {
            return Err(violation(
                "one-outstanding-send",
                now,
                format!(
                    "{} request on {stream:?} while the {} request is not yet sent",
                    short(&req.type_url),
                    short(t)
                ),
            ));
        }
        if self.type_of(&req.type_url).is_none() {
            return Err(violation(
                "request-type-registered",
                now,
                format!("request for {}", req.type_url),
            ));
        }
        if req.node.is_some() != (s.requests == 0) {
            return Err(violation(
                "node-on-first-request-only",
                now,
                format!(
                    "request #{} on {stream:?} has node: {}",
                    s.requests + 1,
                    req.node.is_some()
                ),
            ));
        }
        let server = s.server;
        let config = self.servers[&server].config.clone();
        let accepted = self.servers[&server]
            .accepted
            .get(&req.type_url)
            .cloned()
            .unwrap_or_default();
        // Names of single-server authorities must be there; names of authorities with
        // fallback servers may be (which of them are in use is A71's business).
        let of_type = || {
            self.watchers
                .values()
                .filter(|w| w.type_url == req.type_url)
        };
        let must: BTreeSet<&str> = of_type()
            .filter(|w| w.servers.len() == 1 && w.servers[0] == *config)
            .map(|w| w.name.as_str())
            .collect();
        let may: BTreeSet<&str> = of_type()
            .filter(|w| w.servers.contains(&config))
            .map(|w| w.name.as_str())
            .collect();
        let sorted = req.resource_names.windows(2).all(|p| p[0] < p[1]);
        let names: BTreeSet<&str> = req.resource_names.iter().map(String::as_str).collect();
        let names_ok = sorted && must.is_subset(&names) && names.is_subset(&may);
        self.step.requests.push((
            stream,
            server,
            req.type_url.clone(),
            req.resource_names.clone(),
        ));
        let expected = format!("all of {must:?}, within {may:?}, sorted, no duplicates");
        let s = self.streams.get_mut(&stream).expect("live");
        s.requests += 1;
        let st = s.types.entry(req.type_url.clone()).or_default();
        let ty = short(&req.type_url);
        if req.response_nonce != st.nonce {
            return Err(violation(
                "nonce-is-last-received",
                now,
                format!(
                    "{ty} request on {stream:?} has nonce {:?}, last received {:?}",
                    req.response_nonce, st.nonce
                ),
            ));
        }
        if req.version_info != accepted {
            return Err(violation(
                "version-is-last-accepted",
                now,
                format!(
                    "{ty} request on {stream:?} has version {:?}, last accepted {accepted:?}",
                    req.version_info
                ),
            ));
        }
        match (&req.error_detail, st.pending_nack) {
            (Some(d), false) => {
                return Err(violation(
                    "nack-only-for-rejected",
                    now,
                    format!(
                        "{ty} NACK ({:?}) but the last response was valid or already answered",
                        d.message
                    ),
                ));
            }
            (None, true) => {
                return Err(violation(
                    "rejected-response-is-nacked",
                    now,
                    format!(
                        "{ty} request acks version {:?} of a response with invalid content",
                        req.version_info
                    ),
                ));
            }
            (Some(d), true) if d.message.is_empty() || d.message.len() > MAX_NACK_DETAIL_BYTES => {
                return Err(violation(
                    "nack-detail-bounded",
                    now,
                    format!("NACK detail of {} bytes", d.message.len()),
                ));
            }
            _ => {}
        }
        st.pending_nack = false;
        st.requested = true;
        if !names_ok {
            return Err(violation(
                "request-names-are-subscription",
                now,
                format!(
                    "{ty} request names {:?}, watched {expected:?}",
                    req.resource_names
                ),
            ));
        }
        s.outstanding = Some((req.type_url.clone(), req.resource_names.clone()));
        Ok(())
    }

    fn on_close_action(&mut self, now: Instant, stream: StreamId) -> Result<(), Violation> {
        let Some(s) = self.streams.get_mut(&stream).filter(|s| s.alive) else {
            return Err(violation(
                "close-live-stream",
                now,
                format!("CloseStream({stream:?}) of a stream not open"),
            ));
        };
        s.alive = false;
        let server = s.server;
        self.servers.get_mut(&server).expect("server").current = None;
        Ok(())
    }

    fn on_drop(&mut self, now: Instant, server: ServerId) -> Result<(), Violation> {
        let Some(sm) = self.servers.get(&server) else {
            return Err(violation(
                "drop-known-channel",
                now,
                format!("DropChannel({server:?}) never started"),
            ));
        };
        let config = sm.config.clone();
        let primary_of = self
            .watchers
            .values()
            .filter(|w| w.servers.first() == Some(&config))
            .count();
        if sm.current.is_some() || primary_of > 0 {
            return Err(violation(
                "drop-only-unwatched",
                now,
                format!("DropChannel({server:?}) with a stream open or watchers left"),
            ));
        }
        let sm = self.servers.get_mut(&server).expect("server");
        sm.accepted.clear();
        sm.failures = 0;
        sm.in_use = false;
        // A dropped channel forgets its failure, and no authority has it in use (nor,
        // the in-use servers being a prefix, any server after it).
        self.failed.remove(&server);
        for a in self.authorities.values_mut() {
            if let Some(pos) = a.servers.iter().position(|c| *c == *config) {
                a.allowed = a.allowed.min(pos);
            }
        }
        Ok(())
    }

    fn on_notify(&mut self, now: Instant, ctx: &Ctx, n: &Notification) -> Result<(), Violation> {
        let Some(w) = self.watchers.get(&n.watcher) else {
            let rule = if self.cancelled.contains(&n.watcher) {
                "cancelled-watcher-silent"
            } else {
                "unknown-watcher"
            };
            return Err(violation(
                rule,
                now,
                format!("{:?} told {}", n.watcher, describe(&n.event)),
            ));
        };
        if n.type_url != w.type_url || *n.name != *w.name {
            return Err(violation(
                "notification-matches-watch",
                now,
                format!(
                    "{:?} watches {} {} but was told about {} {}",
                    n.watcher,
                    short(w.type_url),
                    w.name,
                    short(n.type_url),
                    n.name
                ),
            ));
        }
        let what = || {
            format!(
                "{:?} ({} {:?}) told {}",
                n.watcher,
                short(w.type_url),
                w.name,
                describe(&n.event)
            )
        };
        if let Ctx::Response { server, .. } = ctx {
            let none = AuthorityModel::default();
            let a = self.authorities.get(&w.authority).unwrap_or(&none);
            let pos = a.servers.iter().position(|c| *c == **server);
            if pos.is_none_or(|p| p >= a.allowed) {
                return Err(violation(
                    "updates-only-from-server-in-use",
                    now,
                    format!(
                        "{} by a response from {} ({}), which authority {:?} does not have in \
                         use (it may use {:?})",
                        what(),
                        server.server_uri,
                        match pos {
                            Some(p) => format!("its server #{p}"),
                            None => "not one of its servers".to_string(),
                        },
                        w.authority,
                        a.servers[..a.allowed]
                            .iter()
                            .map(|c| c.server_uri.as_str())
                            .collect::<Vec<_>>()
                    ),
                ));
            }
        }
        let fail_on_data_errors = w
            .servers
            .first()
            .is_some_and(|s| s.server_features.fail_on_data_errors);
        match &n.event {
            WatchEvent::AmbientError(_) => {
                if w.held.is_none() {
                    return Err(violation(
                        "ambient-needs-state",
                        now,
                        format!("{} before any state", what()),
                    ));
                }
            }
            WatchEvent::Changed(Ok(v)) => {
                if let Some(Ok(old)) = &w.held
                    && old == v
                    && !w.ambient
                {
                    return Err(violation(
                        "no-redundant-update",
                        now,
                        format!("{}, equal to what it holds", what()),
                    ));
                }
                let carried = match ctx {
                    Ctx::Response {
                        verdict, server, ..
                    } => verdict.valid.contains_key(&w.name) && w.servers.contains(server),
                    Ctx::Watch { watcher, .. } => *watcher == n.watcher,
                    _ => false,
                };
                if !carried {
                    return Err(violation(
                        "values-come-from-responses",
                        now,
                        format!("{} on an input that carried no such value", what()),
                    ));
                }
            }
            WatchEvent::Changed(Err(e)) => {
                match &w.held {
                    Some(Ok(_)) => {
                        let data_error =
                            matches!(e.kind, ErrorKind::DoesNotExist | ErrorKind::Invalid)
                                || (e.kind == ErrorKind::ServerReported
                                    && e.status.code == Code::PERMISSION_DENIED);
                        if !(fail_on_data_errors && data_error) {
                            return Err(violation(
                                "cached-value-kept",
                                now,
                                format!("{} replacing a cached value", what()),
                            ));
                        }
                    }
                    Some(Err(h))
                        if h.kind == ErrorKind::DoesNotExist
                            && e.kind == ErrorKind::Connectivity =>
                    {
                        return Err(violation(
                            "cached-value-kept",
                            now,
                            format!(
                                "{} replacing does-not-exist (a cached state: must be ambient)",
                                what()
                            ),
                        ));
                    }
                    _ => {}
                }
                if matches!(e.kind, ErrorKind::DoesNotExist | ErrorKind::Timeout) {
                    self.check_dne(now, ctx, n, e, &what())?;
                }
            }
            other => panic!("the checker does not know the event {other:?}"),
        }
        let w = self.watchers.get_mut(&n.watcher).expect("known");
        match &n.event {
            WatchEvent::Changed(state) => {
                w.held = Some(state.clone());
                w.ambient = false;
            }
            WatchEvent::AmbientError(_) => w.ambient = true,
            _ => {}
        }
        Ok(())
    }

    fn check_dne(
        &self,
        now: Instant,
        ctx: &Ctx,
        n: &Notification,
        e: &XdsError,
        what: &str,
    ) -> Result<(), Violation> {
        let w = &self.watchers[&n.watcher];
        match ctx {
            Ctx::Timeout { pre } => {
                let entry = pre
                    .iter()
                    .find(|r| r.type_url == w.type_url && *r.name == *w.name);
                if entry.is_some_and(|r| {
                    r.value.is_some() || r.status == ResourceStatusKind::DoesNotExist
                }) {
                    return Err(violation(
                        "dne-never-for-cached",
                        now,
                        format!("{what}, but it was cached: {entry:?}"),
                    ));
                }
                self.dne_eligible(now, w).map_err(|why| {
                    violation("dne-timer-eligibility", now, format!("{what}: {why}"))
                })
            }
            Ctx::Response {
                verdict: v,
                fail_on_data_errors,
                all_required,
                removed,
                ..
            } => {
                let not_found = v
                    .server_errors
                    .get(&w.name)
                    .is_some_and(|codes| codes.contains(&Code::NOT_FOUND));
                let deleted = *fail_on_data_errors
                    && *all_required
                    && !v.unnamed_error
                    && !v.present.contains(&w.name);
                // Delta: a removal is a deletion, of a cached value only under
                // fail_on_data_errors (cached-value-kept holds the rest).
                let deleted = deleted || removed.contains(&w.name);
                if e.kind == ErrorKind::DoesNotExist && (not_found || deleted) {
                    Ok(())
                } else {
                    Err(violation(
                        "dne-needs-a-reason",
                        now,
                        format!("{what} on a response with no NOT_FOUND or deletion for it"),
                    ))
                }
            }
            Ctx::Watch { .. } => Ok(()), // checked against the cache by check_initial_state
            _ => Err(violation(
                "dne-needs-a-reason",
                now,
                format!("{what} on an input that cannot cause it"),
            )),
        }
    }

    /// The A57 conditions for the does-not-exist timer to have run out: a live stream
    /// to a server of the resource has been connected, and the subscribing request sent
    /// on it, for at least the whole timeout.
    fn dne_eligible(&self, now: Instant, w: &WatcherState) -> Result<(), String> {
        let mut why = Vec::new();
        for (id, s) in self.streams.iter().filter(|(_, s)| s.alive) {
            if !w.servers.contains(&self.servers[&s.server].config) {
                continue;
            }
            let timeout = self.resource_timeout_of(&self.servers[&s.server].config);
            let st = s.types.get(w.type_url);
            let sent = st.and_then(|st| st.sent.get(&w.name));
            let unsubscribed = st.is_some_and(|st| st.ever_sent.contains(&w.name));
            let dropped_unsent = st.is_some_and(|st| st.dropped_unsent.contains(&w.name));
            match (s.connected_since, sent) {
                (Some(c), Some(t)) => {
                    let since = c.max(*t);
                    if now >= since + timeout {
                        return Ok(());
                    }
                    let hint = if dropped_unsent {
                        "; the name was unwatched once before any request reported sent named it"
                    } else {
                        ""
                    };
                    why.push(format!("{id:?}: connected and sent only since {since}{hint}"));
                }
                (None, _) => why.push(format!("{id:?}: not connected")),
                (_, None) if unsubscribed => why.push(format!(
                    "{id:?}: subscription not reported sent since the name was unsubscribed \
                     (an earlier request reported sent had named it)"
                )),
                (_, None) if dropped_unsent => why.push(format!(
                    "{id:?}: subscription not reported sent; the name was unwatched once before any \
                     request reported sent named it"
                )),
                (_, None) => why.push(format!("{id:?}: subscription not reported sent")),
            }
        }
        if why.is_empty() {
            why.push("no open stream to its server".to_string());
        }
        Err(format!(
            "the resource timer has not run on a connected stream ({})",
            why.join("; ")
        ))
    }

    /// A88: the resource timer runs longer on a server that treats it as transient.
    fn resource_timeout_of(&self, server: &ServerConfig) -> Duration {
        if server.server_features.resource_timer_is_transient_error {
            self.transient_resource_timeout
        } else {
            self.resource_timeout
        }
    }

    fn check_initial_state(
        &self,
        now: Instant,
        watcher: WatcherId,
        pre: Option<&ResourceSnapshot>,
        heard: &BTreeMap<WatcherId, Vec<WatchEvent>>,
        actions: &[Action],
    ) -> Result<(), Violation> {
        if let Some((other, _)) = heard.iter().find(|(w, _)| **w != watcher) {
            return Err(violation(
                "one-initial-state",
                now,
                format!("watching {watcher:?} notified {other:?}"),
            ));
        }
        let events = heard.get(&watcher).map(Vec::as_slice).unwrap_or_default();
        let changed = events
            .iter()
            .filter(|e| matches!(e, WatchEvent::Changed(_)))
            .count();
        let bad = |why: String| {
            Err(violation(
                "one-initial-state",
                now,
                format!("{watcher:?}: {why}; got {events:?}"),
            ))
        };
        if changed > 1 {
            return bad("more than one initial Changed".to_string());
        }
        let first = events.first();
        match pre {
            Some(p) if p.value.is_some() => match first {
                Some(WatchEvent::Changed(Ok(v))) if Some(v) == p.value.as_ref() => {}
                _ => return bad("a cached resource must be delivered first".to_string()),
            },
            Some(p) if p.status == ResourceStatusKind::DoesNotExist => match first {
                Some(WatchEvent::Changed(Err(e))) if e.kind == ErrorKind::DoesNotExist => {}
                _ => return bad("a resource known not to exist must say so first".to_string()),
            },
            Some(p)
                if matches!(
                    p.status,
                    ResourceStatusKind::Nacked
                        | ResourceStatusKind::ReceivedError
                        | ResourceStatusKind::Timeout
                ) =>
            {
                if !matches!(first, Some(WatchEvent::Changed(Err(_)))) {
                    return bad(format!(
                        "a resource in state {:?} must report its error first",
                        p.status
                    ));
                }
            }
            _ => {
                let ok = match events {
                    [] => true,
                    [WatchEvent::Changed(Err(e))] => e.kind == ErrorKind::Connectivity,
                    _ => false,
                };
                if !ok {
                    return bad(
                        "an unknown resource gets nothing or the standing connectivity error"
                            .to_string(),
                    );
                }
            }
        }
        if pre.is_some()
            && let Some(a) = actions.iter().find(|a| !matches!(a, Action::Notify(_)))
        {
            return Err(violation(
                "no-request-for-known-resource",
                now,
                format!("watching an already subscribed resource produced {a:?}"),
            ));
        }
        Ok(())
    }

    /// Every watcher of a resource hears the same, except that the value told again
    /// when an ambient error clears reaches only the watchers that held that error.
    fn check_notify_all(
        &self,
        now: Instant,
        heard: &BTreeMap<WatcherId, Vec<WatchEvent>>,
        ambient_before: &BTreeMap<WatcherId, ResourceValue>,
    ) -> Result<(), Violation> {
        for (id, events) in heard {
            let w = &self.watchers[id];
            // Told the value it held again (no-redundant-update allowed it: a clearing).
            let clearing = match &events[..] {
                [WatchEvent::Changed(Ok(v))] => ambient_before.get(id) == Some(v),
                _ => false,
            };
            for (other, ow) in &self.watchers {
                let spared =
                    clearing && !ambient_before.contains_key(other) && !heard.contains_key(other);
                if ow.type_url == w.type_url
                    && ow.name == w.name
                    && heard.get(other) != Some(events)
                    && !spared
                {
                    return Err(violation(
                        "notify-all-watchers",
                        now,
                        format!(
                            "{id:?} told {events:?} but {other:?} of the same resource told {:?}",
                            heard.get(other)
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    fn check_connectivity_reported(
        &self,
        now: Instant,
        server: ServerId,
        heard: &BTreeMap<WatcherId, Vec<WatchEvent>>,
    ) -> Result<(), Violation> {
        let config = self.servers[&server].config.clone();
        for (id, w) in &self.watchers {
            let on_server = w.servers.contains(&config);
            let events = heard.get(id).map(Vec::as_slice).unwrap_or_default();
            let told = matches!(events, [WatchEvent::Changed(Err(e)) | WatchEvent::AmbientError(e)] if e.kind == ErrorKind::Connectivity);
            // With fallback servers the authority may fall back instead, or not be on
            // this server at the moment: then nothing is said.
            let ok = if !on_server {
                events.is_empty()
            } else if w.servers.len() == 1 {
                told
            } else {
                told || events.is_empty()
            };
            if !ok {
                return Err(violation(
                    "connectivity-reported",
                    now,
                    format!(
                        "connectivity failure of {}: {id:?} (on it: {on_server}) told {events:?}",
                        config.server_uri
                    ),
                ));
            }
        }
        Ok(())
    }

    fn check_cache(
        &self,
        now: Instant,
        type_url: &str,
        server: &ServerConfig,
        v: &Verdict,
        pre: &[ResourceSnapshot],
    ) -> Result<(), Violation> {
        for r in self
            .client
            .resource_snapshot()
            .iter()
            .filter(|r| r.type_url == type_url)
        {
            // Only a name's own server writes it (with fallback servers, A71 decides
            // which of them that is at the moment: not checked here).
            let sole_server = self
                .watchers
                .values()
                .find(|w| w.type_url == type_url && *w.name == *r.name)
                .is_some_and(|w| w.servers.len() == 1 && w.servers[0] == *server);
            if let Some(bytes) = v.valid.get(&*r.name)
                && sole_server
                && r.raw.as_ref() != Some(bytes)
            {
                return Err(violation(
                    "valid-resources-applied",
                    now,
                    format!(
                        "{} {:?} was valid in the response but the cache holds other bytes",
                        short(type_url),
                        r.name
                    ),
                ));
            }
            if v.invalid.contains(&*r.name) && !v.server_errors.contains_key(&*r.name) {
                let before = pre
                    .iter()
                    .find(|p| p.type_url == r.type_url && p.name == r.name);
                // A88: under fail_on_data_errors a NACK drops the cached value.
                let dropped = server.server_features.fail_on_data_errors && r.value.is_none();
                if let Some(b) = before
                    && (b.raw != r.raw || b.value != r.value)
                    && !dropped
                {
                    return Err(violation(
                        "nack-keeps-cache",
                        now,
                        format!(
                            "{} {:?} was rejected but its cached value changed",
                            short(type_url),
                            r.name
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    fn after_step(&mut self, now: Instant) -> Result<(), Violation> {
        if self.watchers.is_empty()
            && let Some(t) = self.client.poll_timeout()
        {
            return Err(violation(
                "no-timer-without-watch",
                now,
                format!("nothing watched, yet a timer at {t}"),
            ));
        }
        for (id, sm) in &self.servers {
            let watched = self.watchers_on(&sm.config);
            if watched == 0 && sm.current.is_some() {
                return Err(violation(
                    "no-stream-without-watch",
                    now,
                    format!(
                        "{id:?} ({}) has a stream and no watchers",
                        sm.config.server_uri
                    ),
                ));
            }
            if self.opts.exact_timing && sm.failures > 0 && sm.current.is_none() && watched > 0 {
                let (_, hi) = self.backoff_window(sm.failures);
                if now > sm.closed_at + hi {
                    return Err(violation(
                        "reconnect-by-deadline",
                        now,
                        format!(
                            "{} is still not retried {hi:?} after its last failure",
                            sm.config.server_uri
                        ),
                    ));
                }
            }
        }
        self.check_fallback(now)
    }

    /// A response from `server`: every authority that lists it stops using the servers
    /// after it (A71). Sound whether or not the authority had it in use: the client's
    /// servers in use are a prefix of the list, so any below it are dropped.
    fn switch_back(&mut self, server: ServerId) {
        let config = self.servers[&server].config.clone();
        for (key, a) in &mut self.authorities {
            let Some(pos) = a.servers.iter().position(|c| *c == *config) else {
                continue;
            };
            for k in pos + 1..a.allowed {
                a.cut.insert(k, config.server_uri.clone());
                self.step.cut.insert((key.clone(), k));
            }
            a.allowed = a.allowed.min(pos + 1);
        }
    }

    fn server_id_of(&self, config: &ServerConfig) -> Option<ServerId> {
        self.servers
            .iter()
            .find(|(_, s)| *s.config == *config)
            .map(|(id, _)| *id)
    }

    /// The first server before position `k` of authority `a` without a standing
    /// connectivity failure, if any.
    fn unfailed_before(&self, a: &AuthorityModel, k: usize) -> Option<String> {
        a.servers[..k]
            .iter()
            .find(|c| {
                self.server_id_of(c)
                    .is_none_or(|id| !self.failed.contains(&id))
            })
            .map(|c| c.server_uri.clone())
    }

    /// Whether some watched resource of `authority` is uncached in the A71 sense: no
    /// watcher of it holds a value or does-not-exist.
    fn has_uncached(&self, authority: &Option<String>) -> bool {
        let mut cached: BTreeMap<(&str, &str), bool> = BTreeMap::new();
        for w in self.watchers.values().filter(|w| w.authority == *authority) {
            let holds = match &w.held {
                Some(Ok(_)) => true,
                Some(Err(e)) => e.kind == ErrorKind::DoesNotExist,
                None => false,
            };
            *cached.entry((w.type_url, w.name.as_str())).or_default() |= holds;
        }
        cached.values().any(|c| !c)
    }

    /// The rule that the use of server #`k` of `authority` (beyond what it may use)
    /// breaks, and why.
    fn fallback_violation(
        &self,
        now: Instant,
        authority: &Option<String>,
        k: usize,
        what: String,
    ) -> Violation {
        let a = &self.authorities[authority];
        let uri = &a.servers[k].server_uri;
        let unfailed = self.unfailed_before(a, k);
        if let (Some(by), Some(_)) = (a.cut.get(&k), &unfailed) {
            return violation(
                "switch-back-on-response",
                now,
                format!(
                    "{what}: {uri} (server #{k} of authority {authority:?}) stopped serving it \
                     when {by} responded, and it may not fall back again since"
                ),
            );
        }
        match unfailed {
            Some(up) => violation(
                "fallback-needs-failure",
                now,
                format!(
                    "{what}: {uri} is server #{k} of authority {authority:?}, and the \
                     higher-priority {up} has no connectivity failure standing"
                ),
            ),
            None => violation(
                "fallback-needs-uncached",
                now,
                format!(
                    "{what}: {uri} is server #{k} of authority {authority:?}, and every \
                     watched resource of it is cached (a value or does-not-exist)"
                ),
            ),
        }
    }

    /// Where server `server` sits in `authority`'s list, when the authority is watched
    /// and lists it.
    fn position_in(&self, authority: &Option<String>, server: ServerId) -> Option<usize> {
        let config = &self.servers.get(&server)?.config;
        let a = self.authorities.get(authority)?;
        a.servers.iter().position(|c| *c == **config)
    }

    /// A71 fallback. The model (`AuthorityModel::allowed`) is brought up to date for
    /// the step (watched authorities use their primary; while every server before the
    /// next has a connectivity failure standing and some watched resource is uncached,
    /// the next may be used too), then the client is held to it:
    /// - a request emitted in the step names a resource of an authority only on servers
    ///   it may use;
    /// - a server with an open stream is one some watched authority may use (so a
    ///   started stream, and one left open after a switch-back, have a reason);
    /// - an open stream with no request outstanding is subscribed (per its last request
    ///   of each type) to an authority's names only on servers it may use: after a
    ///   switch-back, the request that unsubscribes them is emitted in that step, or as
    ///   soon as the outstanding one is sent.
    ///
    /// A use beyond the model breaks `switch-back-on-response` when a response from a
    /// higher-priority server took the server out of use, else `fallback-needs-failure`
    /// or `fallback-needs-uncached` for the condition that does not hold. Updates from
    /// servers not in use are checked as they are notified
    /// (`updates-only-from-server-in-use`).
    pub fn check_fallback(&mut self, now: Instant) -> Result<(), Violation> {
        let step = std::mem::take(&mut self.step);
        // Watched authorities use their primary; unwatched ones nothing.
        let mut watched: BTreeMap<Option<String>, Vec<ServerConfig>> = BTreeMap::new();
        for w in self.watchers.values() {
            watched.entry(w.authority.clone()).or_insert_with(|| {
                let mut servers: Vec<ServerConfig> = Vec::new();
                for c in &w.servers {
                    if !servers.contains(c) {
                        servers.push(c.clone());
                    }
                }
                servers
            });
        }
        for (key, a) in &mut self.authorities {
            if !watched.contains_key(key) {
                a.allowed = 0;
                a.cut.clear();
            }
        }
        for (key, servers) in watched {
            let a = self.authorities.entry(key).or_default();
            a.servers = servers;
            a.allowed = a.allowed.max(1).min(a.servers.len());
        }
        // Fallback is allowed while its conditions hold.
        let keys: Vec<Option<String>> = self
            .authorities
            .iter()
            .filter(|(_, a)| a.allowed > 0)
            .map(|(k, _)| k.clone())
            .collect();
        for key in &keys {
            if !self.has_uncached(key) {
                continue;
            }
            loop {
                let a = &self.authorities[key];
                let k = a.allowed;
                if k >= a.servers.len() || self.unfailed_before(a, k).is_some() {
                    break;
                }
                let a = self.authorities.get_mut(key).expect("known");
                a.allowed += 1;
                a.cut.remove(&k);
            }
        }
        // Requests name an authority's resources only on servers it may use. In the step
        // that takes a server out of use, the client drops one authority at a time: a
        // request emitted before it got to this one may still name its resources, if
        // the stream is closed or the next request unsubscribes them (checked below
        // and when that request is emitted).
        for (stream, server, type_url, names) in &step.requests {
            for name in names {
                let authority = authority_of(name);
                if let Some(k) = self.position_in(&authority, *server)
                    && k >= self.authorities[&authority].allowed
                    && !step.cut.contains(&(authority.clone(), k))
                {
                    return Err(self.fallback_violation(
                        now,
                        &authority,
                        k,
                        format!("{} request on {stream:?} names {name:?}", short(type_url)),
                    ));
                }
            }
        }
        for (id, sm) in &self.servers {
            let Some(stream) = sm.current else {
                continue;
            };
            // An open stream needs an authority that may use its server. Else blame the
            // authority it was last taken out of use for, if any.
            let mut listed = None;
            let mut needed = false;
            for (key, a) in self.authorities.iter().filter(|(_, a)| a.allowed > 0) {
                if let Some(k) = a.servers.iter().position(|c| *c == *sm.config) {
                    needed |= k < a.allowed;
                    if listed.is_none() || a.cut.contains_key(&k) {
                        listed = Some((key, k));
                    }
                }
            }
            if let (false, Some((key, k))) = (needed, listed) {
                let what = if step.started.contains(id) {
                    format!("{stream:?} started")
                } else {
                    format!("{stream:?} left open")
                };
                return Err(self.fallback_violation(now, key, k, what));
            }
            // An idle stream's subscription is what the client has in use.
            let s = &self.streams[&stream];
            if s.outstanding.is_some() {
                continue;
            }
            for (type_url, st) in &s.types {
                for name in st.sent.keys() {
                    let authority = authority_of(name);
                    if let Some(k) = self.position_in(&authority, *id)
                        && k >= self.authorities[&authority].allowed
                    {
                        return Err(self.fallback_violation(
                            now,
                            &authority,
                            k,
                            format!(
                                "{stream:?} (no request outstanding) stays subscribed to {} {name:?}",
                                short(type_url)
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}
