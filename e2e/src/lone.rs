//! A lone watch's latency (`--lone N`): what holding requests for a burst costs a watch
//! that is no part of one. Each round builds a fresh client and times, from the
//! `watch()` call to the `RequestSent` channel event of its type and to its value:
//! 1. its first watch (the listener), which also connects;
//! 2. one cluster watched once the stream is up and idle.

use std::time::{Duration, Instant};

use futures::StreamExt;
use xds_adapter_tokio::xds_proto_core::XdsResourceType;
use xds_adapter_tokio::{Cds, ChannelEvent, ChannelEventStream, Client, Lds, WatchStream};

use crate::table::median;
use crate::{Api, Workload, ms};

/// Times `rounds` lone watches of each kind against the server at `port` and prints
/// the medians and ranges.
pub fn run(
    runtime: &tokio::runtime::Runtime,
    port: u16,
    workload: &Workload,
    api: Api,
    rounds: usize,
) {
    let mut first = (Vec::new(), Vec::new());
    let mut idle = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let ((a, b), (c, d)) = runtime.block_on(round(port, workload, api));
        first.0.push(a);
        first.1.push(b);
        idle.0.push(c);
        idle.1.push(d);
    }
    let show = |what: &str, (sent, value): &(Vec<Duration>, Vec<Duration>)| {
        let range = |v: &[Duration]| {
            format!(
                "median {:.3} ms ({:.3}–{:.3})",
                ms(median(v.iter().copied())),
                ms(*v.iter().min().expect("a round")),
                ms(*v.iter().max().expect("a round"))
            )
        };
        println!(
            "{what} ({}, {rounds} rounds): request sent {}; value {}",
            api.name(),
            range(sent),
            range(value)
        );
    };
    show("lone watch, fresh client (connects)", &first);
    show("lone watch, connected idle stream", &idle);
}

/// One fresh client: (first watch's request, value), (an idle stream's watch's
/// request, value).
async fn round(
    port: u16,
    workload: &Workload,
    api: Api,
) -> ((Duration, Duration), (Duration, Duration)) {
    let client = crate::client::build(port, api);
    let mut events = client.channel_events();
    let (first, _listener) = timed::<Lds>(&client, &mut events, &workload.listener).await;
    let (idle, _cluster) = timed::<Cds>(&client, &mut events, &workload.clusters[0]).await;
    // The watches are kept until the client stops: dropping one sends a request.
    client.shutdown().await;
    (first, idle)
}

/// From `watch()` to the request of its type sent, and to its value; and the watch.
async fn timed<T: XdsResourceType>(
    client: &Client,
    events: &mut ChannelEventStream,
    name: &str,
) -> ((Duration, Duration), WatchStream<T>) {
    let start = Instant::now();
    let mut stream = client.watch::<T>(name).await.expect("a valid watch");
    let sent = loop {
        match events.next().await.expect("the client runs") {
            ChannelEvent::RequestSent { type_url, .. } if type_url == T::TYPE_URL => {
                break start.elapsed();
            }
            _ => {}
        }
    };
    stream.next().await.expect("a value");
    ((sent, start.elapsed()), stream)
}
