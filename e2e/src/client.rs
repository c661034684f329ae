//! xds-proto's tokio client, used as an application would: one watch per resource,
//! registered one by one in a loop ([`Registration::Loop`]) or each from a task of its
//! own ([`Registration::Tasks`]), then every watch's first value awaited.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use xds_adapter_tokio::xds_proto_core::XdsResourceType;
use xds_adapter_tokio::{
    Bootstrap, Cds, ChannelEvent, Client, Eds, Lds, Rds, WatchStream, WatchUpdate,
};

use crate::{Api, Run, Workload};

/// How the application registers its watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Registration {
    /// `watch().await` for each resource, one by one in one loop.
    Loop,
    /// One task per watcher, spawned in a loop from the caller (outside the runtime's
    /// workers, as an application's `main` would): each task watches its resource and
    /// awaits its first value.
    Tasks,
}

impl Registration {
    pub fn name(self) -> &'static str {
        match self {
            Registration::Loop => "loop",
            Registration::Tasks => "tasks",
        }
    }

    pub fn parse(s: &str) -> Registration {
        match s {
            "loop" => Registration::Loop,
            "tasks" => Registration::Tasks,
            other => panic!("unknown registration {other:?}: loop or tasks"),
        }
    }
}

/// A fresh client of the server at `port`, speaking `api`.
pub fn build(port: u16, api: Api) -> Client {
    let api_type = match api {
        Api::Sotw => "",
        Api::Delta => r#", "api_type": "AGGREGATED_DELTA_GRPC""#,
    };
    let bootstrap = Bootstrap::from_json_str(&format!(
        r#"{{"xds_servers": [{{"server_uri": "127.0.0.1:{port}", "channel_creds": [{{"type": "insecure"}}],
              "server_features": ["xds_v3"]{api_type}}}],
            "node": {{"id": "e2e-client"}}}}"#
    ))
    .expect("a valid bootstrap");
    Client::builder(bootstrap)
        // Longer than any run: a slow run must not become does-not-exist errors.
        .resource_timeout(Duration::from_secs(600))
        .build()
        .expect("the client starts")
}

/// One client run against the server at `port`.
pub async fn run(port: u16, workload: &Workload, api: Api, registration: Registration) -> Run {
    let client = build(port, api);
    // The CPU time is read first: reading it allocates, which may make the allocator
    // tidy up after the previous run, and that is no part of this one.
    let cpu = crate::process_cpu();
    let start = Instant::now();
    let (responses, bytes) = count_responses(&client, start);

    // Per-type value times only for the timeline: the probe keeps no such books.
    let phases = std::env::var_os("XDS_E2E_PHASES").is_some();
    let done = phases.then(|| Arc::new(Done::new(start)));
    let (streams, registered) = match registration {
        Registration::Loop => in_a_loop(&client, workload, &done).await,
        Registration::Tasks => in_tasks(&client, workload, &done, start).await,
    };
    let registered = registered.saturating_duration_since(start);
    let elapsed = start.elapsed();
    let cpu = crate::process_cpu() - cpu;
    if let Some(done) = &done {
        println!(
            "  phases (ms, first/last value per type L R C E): {}",
            done.report()
        );
    }
    assert_eq!(streams.len(), workload.resource_count());
    client.shutdown().await;
    Run {
        cpu,
        elapsed,
        registered,
        responses: responses.load(Ordering::Relaxed),
        bytes: bytes.load(Ordering::Relaxed),
    }
}

/// Watches every resource from this task, one by one, then awaits every first value.
/// Returns the streams (kept until the run ends) and when the last watch was queued.
async fn in_a_loop(
    client: &Client,
    workload: &Workload,
    done: &Option<Arc<Done>>,
) -> (Vec<Held>, Instant) {
    let mut firsts = FuturesUnordered::new();
    firsts.push(first_value(
        watch::<Lds>(client, &workload.listener).await,
        done,
        0,
    ));
    firsts.push(first_value(
        watch::<Rds>(client, &workload.route).await,
        done,
        1,
    ));
    for name in &workload.clusters {
        firsts.push(first_value(watch::<Cds>(client, name).await, done, 2));
    }
    for name in &workload.clusters {
        firsts.push(first_value(watch::<Eds>(client, name).await, done, 3));
    }
    let registered = Instant::now();
    // Keep every stream (dropping one cancels its watch) until all have a value.
    let mut streams = Vec::with_capacity(firsts.len());
    while let Some(stream) = firsts.next().await {
        streams.push(stream);
    }
    (streams, registered)
}

/// Spawns one task per resource, in the loop's order; each watches its resource and
/// returns its stream once it has yielded its value. Returns the streams and when the
/// last watch was queued.
async fn in_tasks(
    client: &Client,
    workload: &Workload,
    done: &Option<Arc<Done>>,
    start: Instant,
) -> (Vec<Held>, Instant) {
    // Microseconds from `start` to the latest watch queued.
    let last_queued = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::with_capacity(workload.resource_count());
    let mut spawn = |kind: usize, name: &str| {
        let (client, name, done) = (client.clone(), name.to_owned(), done.clone());
        let last_queued = last_queued.clone();
        tasks.push(tokio::spawn(async move {
            let first = match kind {
                0 => first_value(watch::<Lds>(&client, &name).await, &done, kind),
                1 => first_value(watch::<Rds>(&client, &name).await, &done, kind),
                2 => first_value(watch::<Cds>(&client, &name).await, &done, kind),
                _ => first_value(watch::<Eds>(&client, &name).await, &done, kind),
            };
            let queued = start.elapsed().as_micros() as u64;
            last_queued.fetch_max(queued, Ordering::Relaxed);
            first.await
        }));
    };
    spawn(0, &workload.listener);
    spawn(1, &workload.route);
    for name in &workload.clusters {
        spawn(2, name);
    }
    for name in &workload.clusters {
        spawn(3, name);
    }
    let mut streams = Vec::with_capacity(tasks.len());
    for task in tasks {
        streams.push(task.await.expect("a watcher task"));
    }
    let registered = start + Duration::from_micros(last_queued.load(Ordering::Relaxed));
    (streams, registered)
}

async fn watch<T: XdsResourceType>(client: &Client, name: &str) -> WatchStream<T> {
    client
        .watch::<T>(name)
        .await
        .unwrap_or_else(|e| panic!("watch {name}: {e}"))
}

/// The stream back (to be kept) once it has yielded its resource; any error fails the
/// run.
fn first_value<T: XdsResourceType>(
    mut stream: WatchStream<T>,
    done: &Option<Arc<Done>>,
    kind: usize,
) -> BoxFuture<'static, Held> {
    let done = done.clone();
    Box::pin(async move {
        match stream.next().await {
            Some(WatchUpdate::Changed(Ok(_))) => {
                if let Some(done) = &done {
                    done.mark(kind);
                }
                Box::new(stream) as Held
            }
            Some(WatchUpdate::Changed(Err(e)) | WatchUpdate::AmbientError(e)) => {
                panic!("a watch failed: {e}")
            }
            None => panic!("a watch stream ended"),
        }
    })
}

/// A watch stream of any type, kept alive.
type Held = Box<dyn std::any::Any + Send>;

/// Counts the responses the client receives and their bytes, from its channel events.
fn count_responses(client: &Client, start: Instant) -> (Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let phases = std::env::var_os("XDS_E2E_PHASES").is_some();
    let (responses, bytes) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut events = client.channel_events();
    let (r, b) = (responses.clone(), bytes.clone());
    let task = async move {
        while let Some(event) = events.next().await {
            if phases {
                let what = match &event {
                    ChannelEvent::RequestSent {
                        type_url,
                        resource_names,
                        nonce,
                        ..
                    } => {
                        format!(
                            "sent {type_url} names={} nonce={nonce}",
                            resource_names.len()
                        )
                    }
                    ChannelEvent::ResponseReceived { bytes, .. } => format!("response {bytes} B"),
                    other => format!("{other:?}"),
                };
                println!("    {:7.1} ms {what}", start.elapsed().as_secs_f64() * 1e3);
            }
            if let ChannelEvent::ResponseReceived { bytes, .. } = event {
                r.fetch_add(1, Ordering::Relaxed);
                b.fetch_add(bytes, Ordering::Relaxed);
            }
        }
    };
    if phases {
        // A thread of its own, so the timeline shows when the driver published each
        // event rather than when a busy runtime got round to printing it.
        std::thread::spawn(move || futures::executor::block_on(task));
    } else {
        tokio::spawn(task);
    }
    (responses, bytes)
}

/// When each type's first and last watcher got its value (for XDS_E2E_PHASES=1).
struct Done {
    start: Instant,
    first: [AtomicUsize; 4],
    last: [AtomicUsize; 4],
}

impl Done {
    fn new(start: Instant) -> Done {
        Done {
            start,
            first: Default::default(),
            last: Default::default(),
        }
    }

    fn mark(&self, kind: usize) {
        let us = self.start.elapsed().as_micros() as usize;
        let _ = self.first[kind].compare_exchange(0, us, Ordering::Relaxed, Ordering::Relaxed);
        self.last[kind].fetch_max(us, Ordering::Relaxed);
    }

    fn report(&self) -> String {
        (0..4)
            .map(|k| {
                let ms = |a: &AtomicUsize| a.load(Ordering::Relaxed) as f64 / 1e3;
                format!("{:.1}/{:.1}", ms(&self.first[k]), ms(&self.last[k]))
            })
            .collect::<Vec<_>>()
            .join("  ")
    }
}
