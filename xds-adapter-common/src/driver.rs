//! The drive loop: one task owns the [`XdsClient`]. It takes one input at a time (a
//! command from a handle, a report from a stream task, a cluster released by a config
//! stream's selector, or its timer), makes the one matching mutation, drains
//! `poll_action()` until it is empty (notifications of the config streams' dependency
//! managers go to them, see [`ConfigWatches`]; stream actions to the stream tasks, see
//! [`StreamTasks`]), and sleeps until `poll_timeout()`.
//!
//! A burst of watches leaves as one request per type: the driver holds each type's
//! requests while its watch and cancel commands keep coming (see [`Holds`]), and lets
//! a type go once two looks with a yield between them found it settled (see
//! `look_at_holds` and [`Input::Holds`]).
//!
//! Nothing reaches the driver faster than it can take it: the stream tasks' reports and
//! the commands come first, responses wait in a channel of a few ([`INBOUND_BUFFER`]),
//! so a fast server is held back by HTTP/2 flow control; watch streams keep only the
//! newest state ([`WatchSender`]).

use std::sync::Arc;
use std::task::Poll;

use futures::channel::mpsc::{self, Receiver, UnboundedReceiver};
use futures::channel::oneshot;
use futures::{FutureExt, StreamExt};
use xds_proto_core::pb::envoy::service::status::v3::ClientConfig as CsdsClientConfig;
use xds_proto_core::pb::envoy::service::status::v3::client_config::GenericXdsConfig;
use xds_proto_core::resource::ResourceTypeInfo;
use xds_proto_core::{
    Action, Code, Event, Instant, ResourceSnapshot, ServerId, Status, StreamId, WatchEvent,
    WatcherId, XdsClient,
};

use crate::ads::{Report, StreamKind, TaskMessage};
use crate::config::{ConfigCommand, ConfigId, ConfigWatches};
use crate::events::{ChannelEvent, EventSender};
use crate::holds::Holds;
use crate::metrics::MetricsExporter;
use crate::runtime::{BoxFuture, Runtime, WallClock};
use crate::stream_tasks::{ReportEvent, StreamTasks};
use crate::transport::TransportSettings;
use crate::watch::{WatchSender, WatchSlot};

/// The driver's maps: a fixed, fast hash (the keys are counters the driver hands out).
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::FixedState>;

/// How many responses may wait between the stream tasks and the driver (plus one per
/// stream task, which futures' bounded channel guarantees each sender). A stream task
/// holding a response it cannot hand over reads no further, so the server is slowed by
/// HTTP/2 flow control instead of the client buffering a backlog.
const INBOUND_BUFFER: usize = 2;

/// The most commands taken between two looks at the stream tasks' reports: a driver
/// behind a long burst of watches still hears within a fraction of a millisecond that
/// a request went out, and sends the next type's.
const BATCH: usize = 1024;

/// The most inputs the driver handles back to back before it lets its thread run other
/// tasks once. A driver kept busy (responses arriving as fast as it takes them) would
/// otherwise hold its thread: futures' channels spend none of tokio's cooperative
/// budget, and on tokio a task the driver wakes (a watch stream's reader) waits in its
/// worker's LIFO slot, which no other worker steals from (tokio#4941), until the driver
/// runs out of input.
const INPUTS_PER_YIELD: u32 = 64;

/// A command from a handle to the driver.
pub(crate) enum Command {
    /// A watch the handle's checker has accepted.
    Watch {
        type_url: &'static str,
        /// The watched type (`XdsClient::watch_type_shared`).
        ty: ResourceTypeInfo,
        name: Arc<str>,
        events: WatchSender,
    },
    /// A dropped watch stream's slot, which names its watcher, and its type.
    Cancel {
        slot: Arc<WatchSlot>,
        type_url: &'static str,
    },
    Snapshot(oneshot::Sender<Vec<ResourceSnapshot>>),
    Csds(oneshot::Sender<Vec<GenericXdsConfig>>),
    /// The CSDS `ClientConfig` (node and resources; the handle sets the scope).
    ClientConfig(oneshot::Sender<CsdsClientConfig>),
    ServerErrors(oneshot::Sender<Vec<(Arc<str>, Option<String>)>>),
    Subscribe(EventSender),
    Config(ConfigCommand),
    ExportMetrics(oneshot::Sender<()>),
    Shutdown(oneshot::Sender<()>),
}

/// How a batch of commands ended.
enum Batch {
    /// The queue ran dry.
    Done,
    /// [`BATCH`] commands were taken; more may wait.
    Full,
    /// A shutdown, with its reply: the loop ends.
    Shutdown(oneshot::Sender<()>),
}

/// Lets the runtime run its other ready tasks once: a task that wakes itself while
/// polled is queued behind them.
async fn yield_now() {
    let mut yielded = false;
    futures::future::poll_fn(|cx| {
        if std::mem::replace(&mut yielded, true) {
            return Poll::Ready(());
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    })
    .await;
}

enum Input {
    Task(TaskMessage),
    Command(Command),
    Released(ConfigId),
    Timer(Instant),
    /// The second look at the holds found settled: the driver has yielded since, so
    /// the tasks that were ready to run have queued what they had (taken first).
    Holds,
    Closed,
}

/// The state the drive loop owns.
pub(crate) struct Driver<R: Runtime> {
    core: XdsClient,
    rt: R,
    commands: UnboundedReceiver<Command>,
    /// The stream tasks' reports: small, and taken before responses.
    reports: UnboundedReceiver<TaskMessage>,
    /// The stream tasks' responses (see [`INBOUND_BUFFER`]).
    inbound: Receiver<TaskMessage>,
    /// The watch streams' senders, by the core's watcher.
    watchers: HashMap<WatcherId, WatchSender>,
    configs: ConfigWatches,
    tasks: StreamTasks<R>,
    subscribers: Vec<EventSender>,
    sleep: Option<(Instant, BoxFuture<()>)>,
    metrics: MetricsExporter,
    /// Maps the core's instants to the wall-clock times CSDS reports.
    wall_clock: WallClock,
    /// The stream whose response is the input being handled: a `CloseStream` for it
    /// means the response was unusable.
    responding: Option<StreamId>,
    /// The types whose requests are held while a burst of their watches comes in.
    holds: Holds,
    /// Some hold was found settled and the driver yielded: look again (see
    /// [`Input::Holds`]).
    holds_to_recheck: bool,
    /// Inputs handled since the input queues were last empty (see
    /// [`INPUTS_PER_YIELD`]).
    ready_streak: u32,
}

impl<R: Runtime> Driver<R> {
    pub(crate) fn new(
        core: XdsClient,
        rt: R,
        settings: TransportSettings,
        commands: UnboundedReceiver<Command>,
        metrics: MetricsExporter,
    ) -> Driver<R> {
        let (reports_tx, reports) = mpsc::unbounded();
        let (inbound_tx, inbound) = mpsc::channel(INBOUND_BUFFER);
        let wall_clock = WallClock::starting_at(rt.now());
        Driver {
            core,
            tasks: StreamTasks::new(rt.clone(), settings, reports_tx, inbound_tx),
            rt,
            commands,
            reports,
            inbound,
            watchers: HashMap::default(),
            configs: ConfigWatches::new(),
            subscribers: Vec::new(),
            sleep: None,
            metrics,
            wall_clock,
            responding: None,
            holds: Holds::default(),
            holds_to_recheck: false,
            ready_streak: 0,
        }
    }

    /// Runs until shut down, or until every handle and watch stream is dropped.
    pub(crate) async fn run(mut self) {
        tracing::debug!("xDS client driver started");
        let shutdown_reply = loop {
            self.drain_actions();
            self.arm_timer();
            if self.ready_streak >= INPUTS_PER_YIELD {
                self.ready_streak = 0;
                yield_now().await;
            }
            let input = futures::future::poll_fn(|cx| {
                let input = self.poll_input(cx);
                self.ready_streak = if input.is_pending() {
                    0
                } else {
                    self.ready_streak + 1
                };
                input
            })
            .await;
            match input {
                Input::Task(message) => {
                    let now = self.rt.now();
                    self.on_task_message(message, now)
                }
                Input::Command(command) => match self.on_commands(command) {
                    Batch::Shutdown(reply) => break Some(reply),
                    // A task this one woke (a stream task given a request) would wait
                    // in its worker's next-task slot, which no other worker takes from,
                    // until the burst is through.
                    Batch::Full => {
                        self.ready_streak = 0;
                        yield_now().await
                    }
                    // The second look at the holds comes after the tasks that were ready
                    // to run have queued what they had.
                    Batch::Done => {
                        if self.holds_to_recheck {
                            yield_now().await
                        }
                    }
                },
                Input::Released(id) => self.configs.on_released(&mut self.core, id),
                Input::Timer(deadline) => {
                    self.sleep = None;
                    // The sleep is the "timer fired" event: never report it as early.
                    let now = self.rt.now().max(deadline);
                    if self.core.poll_timeout().is_some_and(|t| t <= now) {
                        self.core.handle_timeout(now);
                    }
                    self.metrics.export_if_due(now, &self.core);
                    if self.holds.settled(&mut self.core, now) {
                        self.holds_to_recheck = true;
                        yield_now().await
                    }
                }
                Input::Holds => self.holds.release_seen(&mut self.core),
                Input::Closed => break None,
            }
        };
        self.metrics.finish(&self.core);
        self.close_all();
        tracing::debug!("xDS client driver stopped");
        if let Some(reply) = shutdown_reply {
            let _ = reply.send(());
        }
    }

    /// The next input, by priority: the small reports of the stream tasks first (a
    /// request reported sent lets the next type's request go while a burst of watches
    /// of other types is still being taken), then commands (a shutdown or a cancel
    /// never waits behind responses), the second look at settled holds (after the
    /// commands that came meanwhile), released clusters, the timer, and last the
    /// responses, of which at most a few wait.
    fn poll_input(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Input> {
        if let Poll::Ready(Some(m)) = self.reports.poll_next_unpin(cx) {
            return Poll::Ready(Input::Task(m));
        }
        match self.commands.poll_next_unpin(cx) {
            Poll::Ready(Some(c)) => return Poll::Ready(Input::Command(c)),
            Poll::Ready(None) => return Poll::Ready(Input::Closed),
            Poll::Pending => {}
        }
        if std::mem::take(&mut self.holds_to_recheck) {
            return Poll::Ready(Input::Holds);
        }
        if let Poll::Ready(id) = self.configs.poll_released(cx) {
            return Poll::Ready(Input::Released(id));
        }
        if let Some((deadline, sleep)) = &mut self.sleep
            && sleep.poll_unpin(cx).is_ready()
        {
            return Poll::Ready(Input::Timer(*deadline));
        }
        if let Poll::Ready(Some(m)) = self.inbound.poll_next_unpin(cx) {
            return Poll::Ready(Input::Task(m));
        }
        Poll::Pending
    }

    /// Keeps one sleep armed for the earliest of the core's next deadline, the next
    /// metrics export and the next look at the held requests.
    fn arm_timer(&mut self) {
        let deadline = (self.core.poll_timeout().into_iter())
            .chain(self.metrics.next_export())
            .chain(self.holds.next_check())
            .min();
        if self.sleep.as_ref().map(|(d, _)| *d) == deadline {
            return;
        }
        self.sleep = deadline.map(|d| {
            let sleep = self.rt.sleep(d.saturating_duration_since(self.rt.now()));
            (d, sleep)
        });
    }

    fn publish(&mut self, event: ChannelEvent) {
        self.subscribers.retain(|s| s.send(&event));
    }

    /// Takes `first` and the commands already queued behind it, up to [`BATCH`] in
    /// all, actions left to drain once after them all (a burst of 20,000 watches would
    /// otherwise drain and re-arm the timer 20,000 times).
    fn on_commands(&mut self, first: Command) -> Batch {
        let mut next = Some(first);
        let mut taken = 0;
        while let Some(command) = next {
            if let Command::Watch { type_url, .. } | Command::Cancel { type_url, .. } = &command {
                self.holds.hold(&mut self.core, type_url);
            }
            if let Command::Shutdown(reply) = command {
                return Batch::Shutdown(reply);
            }
            self.on_command(command);
            taken += 1;
            next = (taken < BATCH)
                .then(|| self.commands.try_recv().ok())
                .flatten();
        }
        if !self.holds.is_empty() {
            let now = self.rt.now();
            self.look_at_holds(now);
        }
        if taken == BATCH {
            Batch::Full
        } else {
            Batch::Done
        }
    }

    /// After a batch of commands taken at `now`: the types it held wait their settle
    /// time more; the types found settled at the last look (before the yield that
    /// preceded this batch) and not extended by it go; and the bursts settled by now
    /// are marked for the next look (the next batch's end, or [`Input::Holds`] once the
    /// queue is empty), after the driver has yielded once (a lone watch's type goes
    /// now).
    fn look_at_holds(&mut self, now: Instant) {
        self.holds.end_batch(now);
        self.holds.release_seen(&mut self.core);
        self.holds_to_recheck = self.holds.settled(&mut self.core, now);
    }

    fn on_command(&mut self, command: Command) {
        match command {
            Command::Watch {
                type_url,
                ty,
                name,
                events,
            } => match self.core.watch_type_shared(&ty, &name) {
                Ok(id) => {
                    tracing::debug!(type_url = %type_url, resource = %name, watcher = %id, "watch");
                    events.set_watcher(id);
                    self.watchers.insert(id, events);
                }
                // The handle's checker accepted it: the core disagreeing is a bug. The
                // dropped sender ends the stream.
                Err(e) => {
                    tracing::error!(type_url = %type_url, resource = %name, error = %e, "watch refused after its check")
                }
            },
            // The watch was taken before (the queue keeps order), so the slot names its
            // watcher, unless the core refused it or the watcher is already forgotten.
            Command::Cancel { slot, .. } => {
                if let Some(id) = slot.watcher() {
                    self.forget_watcher(id);
                }
            }
            Command::Snapshot(reply) => {
                let _ = reply.send(self.core.resource_snapshot());
            }
            Command::Csds(reply) => {
                let _ = reply.send(self.csds_configs());
            }
            Command::ClientConfig(reply) => {
                let _ = reply.send(CsdsClientConfig {
                    node: Some(self.core.node().clone()),
                    generic_xds_configs: self.csds_configs(),
                    ..Default::default()
                });
            }
            Command::ServerErrors(reply) => {
                let mut out = Vec::new();
                let mut i = 0;
                while let Some(config) = self.core.server_config(ServerId::from_raw(i)) {
                    let error = self
                        .core
                        .server_error(ServerId::from_raw(i))
                        .map(|e| e.to_string());
                    out.push((Arc::from(config.server_uri.as_str()), error));
                    i += 1;
                }
                let _ = reply.send(out);
            }
            Command::Subscribe(sender) => self.subscribers.push(sender),
            Command::Config(command) => self.configs.on_command(&mut self.core, command),
            Command::ExportMetrics(reply) => {
                self.metrics.export(&self.core.metrics());
                let _ = reply.send(());
            }
            Command::Shutdown(_) => unreachable!("handled by the loop"),
        }
    }

    /// The core's CSDS entries, their times as wall-clock times.
    fn csds_configs(&self) -> Vec<GenericXdsConfig> {
        let wall_clock = self.wall_clock;
        self.core.csds_configs_at(|at| wall_clock.timestamp(at))
    }

    fn on_task_message(&mut self, message: TaskMessage, now: Instant) {
        let (stream, report) = match message {
            TaskMessage::ConnectionClosed {
                server,
                server_uri,
                error,
            } => {
                match &error {
                    Some(e) => {
                        tracing::info!(server = %server_uri, error = %e, "xDS connection closed")
                    }
                    None => tracing::debug!(server = %server_uri, "xDS connection closed"),
                }
                self.publish(ChannelEvent::ConnectionClosed {
                    server,
                    server_uri,
                    error,
                });
                return;
            }
            TaskMessage::Stream { stream, report } => (stream, report),
        };
        // Reports of a stream the core has closed are stale: drop them.
        let Some(ReportEvent {
            server,
            kind,
            event,
            span,
        }) = self.tasks.event(stream, &report)
        else {
            return;
        };
        if let Some(event) = event {
            self.publish(event);
        }
        let _enter = span.enter();
        let event = match report {
            Report::Connecting | Report::Connected { .. } => return,
            // The ADS stream reports the server's connectivity; an LRS stream's failed
            // attempt is told by its close.
            Report::ConnectFailed(_) if kind == StreamKind::LoadReport => return,
            Report::ConnectFailed(reason) => Event::ConnectivityFailure { server, reason },
            Report::Started => Event::StreamStarted { stream },
            Report::Sent => Event::RequestSent { stream },
            Report::Response(bytes) => {
                self.responding = Some(stream);
                Event::ResponseReceived { stream, bytes }
            }
            Report::Closed(status) => Event::StreamClosed { stream, status },
        };
        self.core.handle_event(now, event);
    }

    /// Applies every action; then lets the config streams publish what their managers
    /// resolved, which may start or cancel watches, until nothing is left to do.
    fn drain_actions(&mut self) {
        loop {
            while let Some(action) = self.core.poll_action() {
                self.apply(action);
            }
            if !self.configs.flush(&mut self.core) {
                self.responding = None;
                return;
            }
        }
    }

    fn apply(&mut self, action: Action) {
        match action {
            Action::StartStream {
                server,
                config,
                stream,
            } => {
                let event = self.tasks.start(server, config, stream);
                self.publish(event);
            }
            Action::SendRequest { stream, request } => self.tasks.send(stream, request),
            Action::SendDeltaRequest { stream, request } => self.tasks.send_delta(stream, request),
            Action::StartLoadReportStream {
                server,
                config,
                stream,
            } => self.tasks.start_load_reporting(server, config, stream),
            Action::SendLoadReport { stream, request } => {
                self.tasks.send_load_report(stream, request)
            }
            Action::CloseStream { stream } => {
                let status = self.why_closed(stream);
                if let Some(event) = self.tasks.close(stream, status) {
                    self.publish(event);
                }
            }
            Action::DropChannel { server } => {
                self.tasks.drop_channel(server);
                self.publish(ChannelEvent::ChannelDropped { server });
            }
            Action::Notify(n) => {
                let span =
                    tracing::debug_span!("xds_watch", type_url = n.type_url, resource = %n.name);
                let _enter = span.enter();
                match &n.event {
                    WatchEvent::Changed(Ok(_)) => {
                        tracing::debug!(watcher = %n.watcher, "resource changed")
                    }
                    WatchEvent::Changed(Err(e)) => {
                        tracing::info!(watcher = %n.watcher, kind = ?e.kind, error = %e, "resource error")
                    }
                    WatchEvent::AmbientError(e) => {
                        tracing::info!(watcher = %n.watcher, kind = ?e.kind, error = %e, "ambient error")
                    }
                    other => tracing::debug!(watcher = %n.watcher, event = ?other, "watch event"),
                }
                if self.configs.handle_notification(&mut self.core, &n) {
                    return;
                }
                if let Some(sender) = self.watchers.get(&n.watcher)
                    && !sender.publish(n.event)
                {
                    // The stream was dropped; its cancel command, on its way, will
                    // find nothing left to do.
                    self.forget_watcher(n.watcher);
                }
            }
            other => tracing::warn!(action = ?other, "action this driver does not know; ignored"),
        }
    }

    /// Why the core closes `stream`. It does so for three reasons only: a response on
    /// the stream that is no `DiscoveryResponse` (then that response is the input being
    /// handled), a server nothing is watched on any more, or (an LRS stream) a server
    /// no cluster reports load to any more.
    fn why_closed(&self, stream: StreamId) -> Status {
        if self.tasks.kind(stream) == Some(StreamKind::LoadReport) {
            Status::new(
                Code::CANCELLED,
                "closed by the client: no cluster reports load to this server any more",
            )
        } else if self.responding == Some(stream) {
            Status::new(
                Code::INTERNAL,
                "closed by the client: a response could not be decoded as a DiscoveryResponse",
            )
        } else {
            Status::new(
                Code::CANCELLED,
                "closed by the client: nothing is watched on this server any more",
            )
        }
    }

    /// Forgets a watch stream's watcher and cancels its watch in the core: the one way
    /// a watcher leaves the driver, so none stays subscribed for good.
    fn forget_watcher(&mut self, id: WatcherId) {
        if self.watchers.remove(&id).is_some() {
            tracing::debug!(watcher = %id, "cancel watch");
            self.core.cancel_watch(id);
        }
    }

    /// Shuts everything down: streams are cancelled, connections dropped, and every
    /// watch stream and event subscriber sees its end.
    fn close_all(&mut self) {
        self.commands.close();
        self.tasks.abort_all();
        self.watchers.clear();
        self.configs.close_all();
        self.subscribers.clear();
        self.sleep = None;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Wake, Waker};

    use xds_proto_core::{Bootstrap, XdsClientConfig};

    use super::*;
    use crate::events::subscription;

    /// A runtime that runs nothing and connects nowhere: the test polls the driver
    /// itself.
    #[derive(Clone)]
    struct Idle;

    impl Runtime for Idle {
        type TcpStream = futures::io::Cursor<Vec<u8>>;

        fn current() -> Result<Self, String> {
            Ok(Idle)
        }

        fn spawn(&self, _task: BoxFuture<()>) {}

        fn now(&self) -> Instant {
            Instant::ZERO
        }

        fn sleep(&self, _duration: std::time::Duration) -> BoxFuture<()> {
            Box::pin(futures::future::pending())
        }

        fn connect_tcp(&self, _: &str, _: u16) -> BoxFuture<std::io::Result<Self::TcpStream>> {
            Box::pin(async { Err(std::io::ErrorKind::Unsupported.into()) })
        }
    }

    /// Counts its wakes.
    #[derive(Default)]
    struct Wakes(AtomicUsize);

    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A driver given a thousand ready inputs at once hands its thread back after
    /// every [`INPUTS_PER_YIELD`] of them (it returns `Pending` having woken itself),
    /// instead of holding it until the queue is empty.
    #[test]
    fn a_flood_of_inputs_yields_the_thread_every_few() {
        const FLOOD: usize = 1_000;
        let bootstrap = Bootstrap::from_json_str(
            r#"{"xds_servers": [{"server_uri": "xds.example:443", "channel_creds": [{"type": "insecure"}]}],
                "node": {"id": "n"}}"#,
        )
        .expect("a valid bootstrap");
        let core = XdsClient::new(XdsClientConfig::new(bootstrap), 1);
        let (commands_tx, commands) = mpsc::unbounded();
        let metrics = MetricsExporter::new(Arc::from("test"), None, Instant::ZERO);
        let driver = Driver::new(core, Idle, TransportSettings::default(), commands, metrics);
        let reports = driver.tasks.report_sender();
        let (events_tx, mut events) = subscription(2 * FLOOD);
        let wakes = Arc::new(Wakes::default());
        let waker = Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let mut run = Box::pin(driver.run());
        let mut heard = |cx: &mut Context<'_>| {
            let mut n = 0;
            while let Poll::Ready(Some(_)) = events.poll_next_unpin(cx) {
                n += 1;
            }
            n
        };

        commands_tx
            .unbounded_send(Command::Subscribe(events_tx))
            .expect("the driver runs");
        assert!(run.as_mut().poll(&mut cx).is_pending());
        for _ in 0..FLOOD {
            let closed = TaskMessage::ConnectionClosed {
                server: ServerId::from_raw(0),
                server_uri: Arc::from("xds.example:443"),
                error: None,
            };
            reports.unbounded_send(closed).expect("the driver runs");
        }
        let mut polls = Vec::new();
        let mut total = 0;
        while total < FLOOD {
            let woken = wakes.0.load(Ordering::SeqCst);
            assert!(run.as_mut().poll(&mut cx).is_pending());
            let n = heard(&mut cx);
            total += n;
            polls.push(n);
            assert!(polls.len() <= FLOOD, "no progress: {polls:?}");
            if total < FLOOD {
                assert!(
                    wakes.0.load(Ordering::SeqCst) > woken,
                    "the driver stopped with input left and did not wake itself: {polls:?}"
                );
            }
        }
        assert!(
            polls.iter().all(|&n| n <= INPUTS_PER_YIELD as usize),
            "at most {INPUTS_PER_YIELD} inputs between yields: {polls:?}"
        );
        assert_eq!(polls.len(), FLOOD.div_ceil(INPUTS_PER_YIELD as usize));
        commands_tx
            .unbounded_send(Command::Shutdown(oneshot::channel().0))
            .expect("the driver runs");
        assert!(run.as_mut().poll(&mut cx).is_ready(), "it shuts down");
    }
}
