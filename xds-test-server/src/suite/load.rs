//! The adapters under load (issue 11 items 13 and 14): a watcher that stops reading
//! holds the newest state only, and a driver slower than its server reads the ADS
//! stream only as fast as it handles responses, and still shuts down at once.

use std::cell::Cell;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use futures::future::{self, Either};
use xds_adapter_common::{BoxFuture, ChannelEvent, Runtime, WatchUpdate};
use xds_proto_core::Instant;
use xds_proto_core::resource::{Cds, Eds};

use super::{CDS, EDS, builder, next_value, ports_of, ready_updates, server_saw, within};
use crate::LoopbackServer;
use crate::resources::{endpoints, padded_cluster};

/// Item 14: a watcher that is never polled while the server pushes thousands of
/// updates of its resource (each one ACKed, so each one reached the watcher) holds at
/// most two of them, and reading it yields the newest value.
pub async fn stuck_watcher_holds_only_the_newest_state<R: Runtime>() {
    const UPDATES: u32 = 2_000;
    let rt = R::current().expect("a runtime");
    let server = LoopbackServer::start();
    server.record_requests(false);
    server.set_resources(EDS, "0", vec![endpoints("cluster-1", &[1000])]);
    let client = builder::<R>(&server.bootstrap_json("stuck-node", None))
        .build()
        .expect("a client");
    let mut stuck = client.watch::<Eds>("cluster-1").await.expect("the watch");
    server_saw(&rt, &server, "the first ACK", |_, s| {
        (s.acks >= 1).then_some(())
    })
    .await;

    for version in 1..=UPDATES {
        let ports = [1000 + version];
        server.set_resources(
            EDS,
            &version.to_string(),
            vec![endpoints("cluster-1", &ports)],
        );
        let acks = u64::from(version) + 1;
        server_saw(&rt, &server, "the ACK of the update", |_, s| {
            (s.acks >= acks).then_some(())
        })
        .await;
    }

    assert!(
        stuck.unread() <= 2,
        "{} updates wait unread after {UPDATES} changes",
        stuck.unread()
    );
    let updates = ready_updates(&mut stuck);
    assert!(
        (1..=2).contains(&updates.len()),
        "a stuck watcher held {} updates of {} changes",
        updates.len(),
        UPDATES + 1
    );
    let values: Vec<Vec<u16>> = updates
        .iter()
        .filter_map(WatchUpdate::value)
        .map(|v| ports_of(v))
        .collect();
    assert_eq!(
        values,
        vec![vec![(1000 + UPDATES) as u16]],
        "the newest value"
    );

    // A watcher that reads again sees every change from then on.
    server.set_resources(EDS, "last", vec![endpoints("cluster-1", &[999])]);
    let newest = next_value(&rt, &mut stuck).await;
    assert_eq!(ports_of(&newest), vec![999]);
    client.shutdown().await;
}

/// A runtime on which the client's driver alone is slow: each clock read it makes
/// takes 20 ms, and it reads the clock about once per input, so it handles at most
/// about 50 inputs a second, far slower than a loopback server.
///
/// The driver is the first task the client spawns. Its stream tasks and hyper's
/// connection tasks run at full speed: hyper's keepalive reads the clock for each DATA
/// frame, and a slow clock there blocked a worker thread for seconds at a time, with
/// the driver queued behind it (a shutdown then waited 2.5–3.4 s, 4 runs in 48).
#[derive(Clone, Debug)]
pub struct SlowDriver<R> {
    rt: R,
    driver_spawned: Arc<AtomicBool>,
}

impl<R> SlowDriver<R> {
    /// Wraps `rt`: the next task spawned on it (the driver) reads a slow clock.
    pub fn new(rt: R) -> SlowDriver<R> {
        SlowDriver {
            rt,
            driver_spawned: Arc::new(AtomicBool::new(false)),
        }
    }
}

const SLOW_CLOCK: Duration = Duration::from_millis(20);

thread_local! {
    /// Set while this thread polls the driver.
    static POLLING_DRIVER: Cell<bool> = const { Cell::new(false) };
}

/// Clears [`POLLING_DRIVER`] when the driver's poll returns, or unwinds.
struct PollingDriver;

impl PollingDriver {
    fn enter() -> PollingDriver {
        POLLING_DRIVER.set(true);
        PollingDriver
    }
}

impl Drop for PollingDriver {
    fn drop(&mut self) {
        POLLING_DRIVER.set(false);
    }
}

impl<R: Runtime> Runtime for SlowDriver<R> {
    type TcpStream = R::TcpStream;

    fn current() -> Result<Self, String> {
        R::current().map(SlowDriver::new)
    }

    fn spawn(&self, mut task: BoxFuture<()>) {
        if self.driver_spawned.swap(true, Ordering::SeqCst) {
            return self.rt.spawn(task);
        }
        self.rt.spawn(Box::pin(future::poll_fn(move |cx| {
            let _polling = PollingDriver::enter();
            task.as_mut().poll(cx)
        })));
    }

    fn now(&self) -> Instant {
        if POLLING_DRIVER.get() {
            std::thread::sleep(SLOW_CLOCK);
        }
        self.rt.now()
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<()> {
        self.rt.sleep(duration)
    }

    fn connect_tcp(&self, host: &str, port: u16) -> BoxFuture<io::Result<Self::TcpStream>> {
        self.rt.connect_tcp(host, port)
    }
}

/// Item 13: a server that pushes 0.84 MB responses as fast as HTTP/2 takes them,
/// against a client whose driver handles one input per 20 ms. The responses HTTP/2
/// took from the server but the driver has not handled stay a handful (flow control
/// holds the rest in the server), and `shutdown()` returns within a second while the
/// server is still pushing.
pub async fn slow_driver_slows_a_fast_server<R: Runtime>() {
    const PUSHES: u64 = 300;
    const PAD: usize = 840_000;
    const MOST_IN_FLIGHT: u64 = 16;
    let rt = R::current().expect("a runtime");
    let server = Arc::new(LoopbackServer::start());
    server.record_requests(false);
    server.set_resources(CDS, "0", vec![padded_cluster("cluster-1", PAD)]);
    let client = builder::<SlowDriver<R>>(&server.bootstrap_json("slow-node", None))
        .runtime(SlowDriver::new(rt.clone()))
        .build()
        .expect("a client");
    let mut events = client.channel_events();
    let mut watch = client.watch::<Cds>("cluster-1").await.expect("the watch");
    within(&rt, super::PROMPT, "the first value", watch.next()).await;

    let pushing = Arc::new(AtomicBool::new(true));
    rt.spawn(Box::pin(push_while(
        server.clone(),
        pushing.clone(),
        PUSHES,
        PAD,
    )));

    let mut handled = 0u64;
    let mut most_in_flight = 0u64;
    let deadline = rt.now() + Duration::from_secs(3);
    while rt.now() < deadline {
        match future::select(events.next(), rt.sleep(Duration::from_millis(20))).await {
            Either::Left((Some(ChannelEvent::ResponseReceived { .. }), _)) => handled += 1,
            Either::Left((Some(_), _)) | Either::Right(_) => {}
            Either::Left((None, _)) => panic!("the client stopped"),
        }
        let taken = server.stats().responses_taken;
        most_in_flight = most_in_flight.max(taken.saturating_sub(handled));
    }
    let stats = server.stats();
    let still_pushing = pushing.load(Ordering::SeqCst);

    let started = rt.now();
    within(&rt, Duration::from_secs(5), "shutdown", client.shutdown()).await;
    let took = rt.now().saturating_duration_since(started);
    pushing.store(false, Ordering::SeqCst);
    assert!(
        most_in_flight <= MOST_IN_FLIGHT,
        "{most_in_flight} responses of {PAD} bytes were in flight to the client at once \
         (handled {handled}, server {stats:?})"
    );
    assert!(
        took < Duration::from_secs(1),
        "shutdown took {took:?} behind the responses"
    );
    assert!(
        still_pushing,
        "the server finished its {PUSHES} pushes: the driver was not slow enough ({stats:?})"
    );
}

/// Pushes a new version of the padded cluster each time HTTP/2 has taken the response
/// of the last one, until `pushes` are done or `pushing` is cleared.
async fn push_while(
    server: Arc<LoopbackServer>,
    pushing: Arc<AtomicBool>,
    pushes: u64,
    pad: usize,
) {
    for version in 1..=pushes {
        if !pushing.load(Ordering::SeqCst) {
            return;
        }
        let sent = server.stats().responses;
        server.set_resources(
            CDS,
            &version.to_string(),
            vec![padded_cluster("cluster-1", pad)],
        );
        let stop = pushing.clone();
        server
            .wait_for(|_, s| {
                let taken = s.responses > sent && s.responses_taken >= s.responses;
                (taken || !stop.load(Ordering::SeqCst)).then_some(())
            })
            .await;
    }
    pushing.store(false, Ordering::SeqCst);
}
