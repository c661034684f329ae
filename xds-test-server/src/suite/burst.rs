//! A burst of watches (issue 11 item 22, issue 24 item 4): watches registered one by
//! one in a loop, or each from a task of its own, as applications register them, reach
//! the server as one subscribing request per type, not as a subscription that grows
//! request by request.

use std::any::Any;
use std::collections::VecDeque;
use std::time::Duration;

use futures::channel::mpsc;
use futures::{StreamExt, future};
use xds_adapter_common::{Client, Runtime, WatchStream, WatchUpdate};
use xds_proto_core::Instant;
use xds_proto_core::resource::{Cds, Eds, Lds};

use super::{CDS, EDS, LDS, PROMPT, builder, server_saw, within};
use crate::resources::{cluster, endpoints, listener};
use crate::{LoopbackServer, RecordedRequest};

/// A fresh client watches a listener, `N` clusters and `N` endpoint sets, awaiting each
/// `watch()` in turn. Every watcher gets its value, and the server sees exactly one
/// request per type that changes the subscription, naming everything at once: four
/// responses in all, as a client that knew every name up front would get.
///
/// Run it on a single-threaded runtime: `watch()` never waits for the driver, so the
/// whole burst is queued before the driver runs, and the outcome does not depend on how
/// the threads are scheduled.
pub async fn a_burst_of_watches_is_one_request_per_type<R: Runtime>() {
    const N: usize = 500;
    let rt = R::current().expect("a runtime");
    let server = LoopbackServer::start();
    let names: Vec<String> = (0..N).map(|i| format!("cluster-{i}")).collect();
    server.set_resources(LDS, "1", vec![listener("listener-1", "routes-1")]);
    server.set_resources(CDS, "1", names.iter().map(|n| cluster(n)).collect());
    let sets = names.iter().map(|n| endpoints(n, &[8080])).collect();
    server.set_resources(EDS, "1", sets);
    let client = builder::<R>(&server.bootstrap_json("burst-node", None))
        .build()
        .expect("a client");

    // Each stream yields whether an update was a value.
    let mut streams = Vec::new();
    let lds = client.watch::<Lds>("listener-1").await.expect("watch LDS");
    streams.push(
        lds.map(|u| matches!(u, WatchUpdate::Changed(Ok(_))))
            .boxed(),
    );
    for name in &names {
        let cds = client.watch::<Cds>(name).await.expect("watch CDS");
        streams.push(
            cds.map(|u| matches!(u, WatchUpdate::Changed(Ok(_))))
                .boxed(),
        );
    }
    for name in &names {
        let eds = client.watch::<Eds>(name).await.expect("watch EDS");
        streams.push(
            eds.map(|u| matches!(u, WatchUpdate::Changed(Ok(_))))
                .boxed(),
        );
    }
    let firsts = future::join_all(streams.iter_mut().map(|s| s.next()));
    let firsts = within(&rt, PROMPT, "every watcher's value", firsts).await;
    assert_eq!(firsts.len(), 1 + 2 * N);
    assert!(
        firsts.iter().all(|f| *f == Some(true)),
        "every watcher's first update is its value"
    );

    let requests = server_saw(&rt, &server, "the ACKs of every type", |reqs, stats| {
        (stats.acks >= 3).then(|| reqs.to_vec())
    })
    .await;
    for (type_url, expected) in [(LDS, 1), (CDS, N), (EDS, N)] {
        let subscribing = subscribing_requests(&requests, type_url);
        assert_eq!(
            subscribing,
            vec![expected],
            "{type_url}: the name counts of the requests that changed the subscription"
        );
    }
    assert_eq!(server.stats().responses, 3, "one response per type");
    client.shutdown().await;
    server.stop().await;
}

/// The name counts of the requests of `type_url` whose names differ from the previous
/// request of that type.
fn subscribing_requests(requests: &[RecordedRequest], type_url: &str) -> Vec<usize> {
    let mut last: Option<&Vec<String>> = None;
    let mut counts = Vec::new();
    for r in requests.iter().filter(|r| r.type_url == type_url) {
        if last != Some(&r.resource_names) {
            counts.push(r.resource_names.len());
        }
        last = Some(&r.resource_names);
    }
    counts
}

/// How many clusters (and endpoint sets) the tasks scenario watches, one task each.
const TASKS: usize = 250;

/// How long each type's part of the tasks scenario's burst must last for an attempt
/// to count: longer than the 20 ms the driver once held a type's requests at most.
const LONG_BURST: Duration = Duration::from_millis(30);

/// The shortest time the driver holds a type's requests after its last command: a
/// split of the burst needs a gap between two watches of a type at least this long.
const SETTLE: Duration = Duration::from_micros(500);

/// How many chains of tasks the tasks scenario runs at once.
const CHAINS: usize = 4;

/// One task per watcher: once its listener is in, an application spawns a task for
/// each cluster and endpoint set it needs, and each task does some work of its own,
/// then watches its resource and awaits its value. The watches reach the driver from
/// many tasks on every thread of the runtime, interleaved with the driver's own runs,
/// each type's over more than 30 ms (`LONG_BURST`), and the server still sees exactly one
/// subscribing request per type.
///
/// The attempts check their premises and are run again (a few times at most) when one
/// fails: a burst shorter than `LONG_BURST` (a fast machine, many threads) is run
/// again with twice the work per task; a split after a gap of `SETTLE` (0.5 ms) or more
/// between two watches of a type (a machine that stalled every thread of the runtime
/// that long) is no failure of the rule. Run it on a multi-threaded runtime.
pub async fn a_burst_from_many_tasks_is_one_request_per_type<R: Runtime>() {
    const ATTEMPTS: usize = 12;
    // Rounds of a multiply-add per task (debug build, quiet machine: about 0.1 ms).
    let mut work = 20_000;
    let mut why = Vec::new();
    for _ in 0..ATTEMPTS {
        match tasks_attempt::<R>(work).await {
            Attempt::Passed => return,
            Attempt::TooShort(span) => {
                why.push(format!("{work} rounds of work a task: a burst of {span:?}"));
                work *= 2;
            }
            Attempt::Stalled(split) => why.push(split),
        }
        eprintln!("attempt not counted, run again: {}", why[why.len() - 1]);
    }
    panic!("no attempt could be judged: {why:#?}");
}

/// How an attempt of the tasks scenario went.
enum Attempt {
    Passed,
    /// A type's part of the burst lasted this long only.
    TooShort(Duration),
    /// The burst was split after a gap that explains it.
    Stalled(String),
}

/// One attempt, each task doing `work` rounds of arithmetic before it watches.
async fn tasks_attempt<R: Runtime>(work: u64) -> Attempt {
    let rt = R::current().expect("a runtime");
    let server = LoopbackServer::start();
    let names: Vec<String> = (0..TASKS).map(|i| format!("cluster-{i}")).collect();
    server.set_resources(LDS, "1", vec![listener("listener-1", "routes-1")]);
    server.set_resources(CDS, "1", names.iter().map(|n| cluster(n)).collect());
    let sets = names.iter().map(|n| endpoints(n, &[8080])).collect();
    server.set_resources(EDS, "1", sets);
    let client = builder::<R>(&server.bootstrap_json("burst-tasks-node", None))
        .build()
        .expect("a client");

    // The listener first, so that the stream is up and idle when the burst begins: a
    // request in flight (its ACK not yet written) holds back every other type's, and
    // the burst's tasks may keep the stream's task from running until they are done.
    let mut lds = client.watch::<Lds>("listener-1").await.expect("watch LDS");
    let first = within(&rt, PROMPT, "the listener", lds.next()).await;
    assert!(matches!(first, Some(WatchUpdate::Changed(Ok(_)))));
    server_saw(&rt, &server, "the listener's ACK", |_, stats| {
        (stats.acks >= 1).then_some(())
    })
    .await;

    // CHAINS chains of tasks, all the clusters', then all the endpoint sets': each task
    // does its work, watches its resource, spawns the next task of its chain, and sends
    // when it queued its watch and its stream (kept, so that no cancel changes the
    // subscription) with whether its first update was a value. The chains keep the
    // runtime's queues short, so the driver runs between the watches, as it does when
    // an application spawns its watchers one after another.
    let resources: Vec<(usize, String)> = (names.iter().map(|n| (1, n.clone())))
        .chain(names.iter().map(|n| (2, n.clone())))
        .collect();
    let (done_tx, done) = mpsc::unbounded();
    for chain in 0..CHAINS {
        let mine = resources
            .iter()
            .skip(chain)
            .step_by(CHAINS)
            .cloned()
            .collect();
        spawn_chain(&rt, client.clone(), mine, work, done_tx.clone());
    }
    drop(done_tx);
    let firsts: Vec<(usize, FirstUpdate)> =
        within(&rt, PROMPT, "every watcher's value", done.collect()).await;
    assert_eq!(firsts.len(), 2 * TASKS);
    assert!(
        firsts.iter().all(|(_, first)| first.value),
        "every watcher's first update is its value"
    );

    let requests = server_saw(&rt, &server, "the ACKs of every type", |reqs, stats| {
        (stats.acks >= 3).then(|| reqs.to_vec())
    })
    .await;
    let counts: Vec<Vec<usize>> = [LDS, CDS, EDS]
        .iter()
        .map(|t| subscribing_requests(&requests, t))
        .collect();
    let responses = server.stats().responses;
    client.shutdown().await;
    server.stop().await;
    let expected = vec![vec![1], vec![TASKS], vec![TASKS]];
    let (span, gap) = burst_shape(&firsts);
    let split = counts != expected || responses != 3;
    if split && gap >= SETTLE {
        return Attempt::Stalled(format!(
            "LDS, CDS, EDS requests of {counts:?} names after a {gap:?} gap"
        ));
    }
    if !split && span < LONG_BURST {
        return Attempt::TooShort(span);
    }
    assert_eq!(
        counts, expected,
        "LDS, CDS, EDS: the name counts of the requests that changed the subscription \
         (each type's burst lasted {span:?} or more; the largest gap between two of its \
         watches: {gap:?})"
    );
    assert_eq!(responses, 3, "one response per type");
    Attempt::Passed
}

/// A watch's first update, and when the watch was queued.
struct FirstUpdate {
    queued: Instant,
    value: bool,
    /// The stream, kept until the end of the attempt.
    _stream: Box<dyn Any + Send>,
}

/// The shortest time from the first to the last watch of a type (of the clusters and
/// the endpoint sets), and the longest between two consecutive watches of a type.
fn burst_shape(firsts: &[(usize, FirstUpdate)]) -> (Duration, Duration) {
    let (mut span, mut gap) = (Duration::MAX, Duration::ZERO);
    for kind in 1..=2 {
        let mut times: Vec<Instant> = (firsts.iter())
            .filter(|(k, _)| *k == kind)
            .map(|(_, first)| first.queued)
            .collect();
        times.sort();
        for pair in times.windows(2) {
            gap = gap.max(pair[1].saturating_duration_since(pair[0]));
        }
        span = span.min(times[times.len() - 1].saturating_duration_since(times[0]));
    }
    (span, gap)
}

/// Spawns a task for the first of `resources` (kind 1 a cluster, 2 an endpoint set):
/// it does `work` rounds of arithmetic, watches its resource, spawns the chain's next
/// task the same way, and sends its first update to `done`.
fn spawn_chain<R: Runtime>(
    rt: &R,
    client: Client<R>,
    mut resources: VecDeque<(usize, String)>,
    work: u64,
    done: mpsc::UnboundedSender<(usize, FirstUpdate)>,
) {
    let Some((kind, name)) = resources.pop_front() else {
        return;
    };
    let rt2 = rt.clone();
    rt.spawn(Box::pin(async move {
        let mut x = kind as u64;
        for _ in 0..work {
            x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
        }
        let mut watch = match kind {
            1 => Watch::Cds(client.watch::<Cds>(&name).await.expect("a valid watch")),
            _ => Watch::Eds(client.watch::<Eds>(&name).await.expect("a valid watch")),
        };
        let queued = rt2.now();
        spawn_chain(&rt2, client, resources, work, done.clone());
        let value = watch.first_is_value().await;
        let first = FirstUpdate {
            queued,
            value,
            _stream: Box::new(watch),
        };
        let _ = done.unbounded_send((kind, first));
    }));
}

/// A watch of the tasks scenario.
enum Watch {
    Cds(WatchStream<Cds>),
    Eds(WatchStream<Eds>),
}

impl Watch {
    /// Whether the first update is a value.
    async fn first_is_value(&mut self) -> bool {
        match self {
            Watch::Cds(w) => matches!(w.next().await, Some(WatchUpdate::Changed(Ok(_)))),
            Watch::Eds(w) => matches!(w.next().await, Some(WatchUpdate::Changed(Ok(_)))),
        }
    }
}
