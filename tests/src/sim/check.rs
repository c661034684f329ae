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
use xds_proto_core::resource::{DecodeContext, ResourceTypeInfo, ResourceValue, builtin_types};
use xds_proto_core::{Bootstrap, Code, Instant};

use super::verdict::{Verdict, judge};

mod delta;
mod fallback;
mod notify;
mod sends;
mod steps;

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

impl StreamModel {
    /// A stream just started to `server`.
    fn new(server: ServerId) -> StreamModel {
        StreamModel {
            server,
            alive: true,
            requests: 0,
            outstanding: None,
            connected_since: None,
            saw_response: false,
            types: BTreeMap::new(),
        }
    }

    /// The outstanding request went out: its names count as sent from `now` (or from
    /// when an earlier request sent them), and names it dropped no longer do.
    fn request_sent(&mut self, now: Instant) {
        if let Some((type_url, names)) = self.outstanding.take() {
            let st = self.types.entry(type_url).or_default();
            st.sent.retain(|n, _| names.contains(n));
            for n in names {
                st.ever_sent.insert(n.clone());
                st.sent.entry(n).or_insert(now);
            }
        }
    }
}

/// What each watcher heard in one client step, in order.
type Heard = BTreeMap<WatcherId, Vec<WatchEvent>>;

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
        let ctx = self.before_event(now, &event);
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

    /// Updates the models for a live stream's (or a known server's) event before the
    /// client handles it, and returns the context its actions are judged in.
    fn before_event(&mut self, now: Instant, event: &Event) -> Ctx {
        match event {
            Event::StreamStarted { stream } => {
                let s = self.streams.get_mut(stream).expect("live");
                s.connected_since.get_or_insert(now);
                Ctx::Quiet
            }
            Event::RequestSent { stream } => {
                self.streams
                    .get_mut(stream)
                    .expect("live")
                    .request_sent(now);
                Ctx::Quiet
            }
            Event::ResponseReceived { stream, bytes } => self.before_response(now, *stream, bytes),
            Event::StreamClosed { stream, .. } => {
                let s = self.streams.get_mut(stream).expect("live");
                s.alive = false;
                let (server, saw_response) = (s.server, s.saw_response);
                self.servers.get_mut(&server).expect("server").current = None;
                self.stream_ended(now, server, saw_response)
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
        }
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

    /// A stream of `server` ended (closed, or failed on a response it could not
    /// decode): one that had a response resets the backoff, one that had none counts a
    /// connectivity failure.
    fn stream_ended(&mut self, now: Instant, server: ServerId, saw_response: bool) -> Ctx {
        let sm = self.servers.get_mut(&server).expect("server");
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
}
