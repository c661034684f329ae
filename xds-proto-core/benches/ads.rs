//! ADS response processing cost against its floors, measured in the same run so that
//! the results are ratios independent of the machine (issue 7).
//!
//! Floors:
//! - A: decode the `DiscoveryResponse` envelope only;
//! - B: A + a full prost decode of every resource into its complete Envoy message;
//! - C: A + compare each resource's bytes with a cached copy.
//!
//! Workloads (fixtures from the testing kit's `resources::mesh`, shaped like an Istio
//! mesh):
//! - W1: CDS SotW, 10,000 clusters (~700 bytes each: TLS transport socket, circuit
//!   breakers, metadata), first delivery to 10,000 watchers: decode, validate, cache,
//!   ACK, notify;
//! - W2: the same response again with one cluster changed: one notification, one ACK;
//! - W3: EDS, 1,000 resources × 100 endpoints, and one resource with 100,000 endpoints;
//! - W5: reconnect with 10,000 cached clusters: the resubscription is built and the new
//!   stream's identical response is applied with zero notifications.
//!
//! Before measuring, a counting allocator reports the bytes a cached cluster's
//! validated form takes beyond its raw bytes. After each group, every workload is
//! measured again alternately with its floor, round by round, and the medians' ratio is
//! printed (`ratio: ...` lines): a load change on the machine then hits both sides.
//!
//! Run: `cargo bench -p xds-proto-core --bench ads`.

use std::hint::black_box;
use std::time::Duration;

use bytes::Bytes;
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use prost::Message;
use xds_proto_core::pb::envoy::config::cluster::v3 as cluster;
use xds_proto_core::pb::envoy::config::endpoint::v3 as endpoint;
use xds_proto_core::pb::envoy::service::discovery::v3::DiscoveryResponse;
use xds_proto_core::pb::google::protobuf::Any;
use xds_proto_core::resource::type_url;
use xds_proto_core::{
    Action, Bootstrap, Cds, Code, Eds, Event, Instant, Status, StreamId, XdsClient,
    XdsClientConfig, XdsResourceType,
};
use xds_proto_testing::alloc::{self, CountingAlloc};
use xds_proto_testing::peer;
use xds_proto_testing::resources::any;
use xds_proto_testing::resources::mesh::{self, cluster_name, istio_cluster, istio_endpoints};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// The bootstrap, with the certificate provider the mesh's mTLS clusters name (A29: a
/// cluster naming an instance the bootstrap lacks is NACKed).
fn bootstrap() -> Bootstrap {
    let json = r#"{"xds_servers": [{"server_uri": "istiod:15010", "channel_creds": [{"type": "insecure"}]}],
  "node": {"id": "sidecar~10.0.0.1~bench.default~default.svc.cluster.local"}}"#;
    let json = json.replacen(
        r#""node""#,
        &format!(
            r#""certificate_providers": {}, "node""#,
            mesh::certificate_providers_json()
        ),
        1,
    );
    Bootstrap::from_json_str(&json).unwrap()
}

fn response(url: &str, version: &str, nonce: &str, resources: Vec<Any>) -> Bytes {
    peer::response(url, version, nonce, resources)
        .encode_to_vec()
        .into()
}

/// A client watching `names` of `url`, on a connected stream with the subscription sent.
fn subscribed_client<T: XdsResourceType>(names: &[String]) -> (XdsClient, StreamId) {
    let mut client = XdsClient::new(XdsClientConfig::new(bootstrap()), 1);
    for n in names {
        client.watch::<T>(n).unwrap();
    }
    let mut stream = None;
    while let Some(a) = client.poll_action() {
        if let Action::StartStream { stream: s, .. } = a {
            stream = Some(s);
        }
    }
    let stream = stream.unwrap();
    client.handle_event(Instant::ZERO, Event::StreamStarted { stream });
    // Report every queued request sent, so that none is outstanding.
    loop {
        client.handle_event(Instant::ZERO, Event::RequestSent { stream });
        let mut sent = false;
        while let Some(a) = client.poll_action() {
            sent |= matches!(a, Action::SendRequest { .. });
        }
        if !sent {
            break;
        }
    }
    (client, stream)
}

/// Delivers a response and drains the actions; returns (notifications, requests).
fn deliver(client: &mut XdsClient, stream: StreamId, bytes: &Bytes) -> (usize, usize) {
    client.handle_event(
        Instant::ZERO,
        Event::ResponseReceived {
            stream,
            bytes: bytes.clone(),
        },
    );
    let (mut notes, mut reqs) = (0, 0);
    while let Some(a) = client.poll_action() {
        match a {
            Action::Notify(_) => notes += 1,
            Action::SendRequest { .. } => reqs += 1,
            _ => {}
        }
    }
    client.handle_event(Instant::ZERO, Event::RequestSent { stream });
    (notes, reqs)
}

/// W2: the 10k response again with one cluster changed (alternately two versions), on
/// the client's current stream.
fn w2_one_changed(client: &mut XdsClient, flip: &mut bool, [a, b]: [&Bytes; 2]) {
    let stream = client
        .current_stream(xds_proto_core::ServerId::from_raw(0))
        .unwrap();
    *flip = !*flip;
    let (notes, reqs) = deliver(client, stream, if *flip { a } else { b });
    assert_eq!((notes, reqs), (1, 1));
}

/// W5: the stream ends after responses; the resubscription of all `n` names is built
/// and the new stream's identical response is applied with no notification.
fn w5_reconnect(client: &mut XdsClient, n: usize, current: &Bytes) {
    let stream = client
        .current_stream(xds_proto_core::ServerId::from_raw(0))
        .unwrap();
    client.handle_event(
        Instant::ZERO,
        Event::StreamClosed {
            stream,
            status: Status::new(Code::UNAVAILABLE, "goaway"),
        },
    );
    let mut new_stream = None;
    let mut names_sent = 0;
    while let Some(a) = client.poll_action() {
        match a {
            Action::StartStream { stream, .. } => new_stream = Some(stream),
            Action::SendRequest { request, .. } => names_sent = request.resource_names.len(),
            _ => {}
        }
    }
    assert_eq!(names_sent, n);
    let s = new_stream.unwrap();
    client.handle_event(Instant::ZERO, Event::StreamStarted { stream: s });
    client.handle_event(Instant::ZERO, Event::RequestSent { stream: s });
    let (notes, reqs) = deliver(client, s, current);
    assert_eq!((notes, reqs), (0, 1));
}

/// How long `f` takes once (the bench may read the clock; the core never does).
fn timed<T>(f: impl FnOnce() -> T) -> Duration {
    let start = std::time::Instant::now();
    black_box(f());
    start.elapsed()
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// Medians of `floor` and `work`, measured alternately for `rounds` rounds.
fn interleaved(
    rounds: usize,
    mut floor: impl FnMut() -> Duration,
    mut work: impl FnMut() -> Duration,
) -> (Duration, Duration) {
    let (mut f, mut w) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        f.push(floor());
        w.push(work());
    }
    (median(f), median(w))
}

fn report_ratio(what: &str, work: Duration, floor_name: &str, floor: Duration, target: f64) {
    let ratio = work.as_secs_f64() / floor.as_secs_f64();
    println!(
        "ratio: {what}: {:.2} ms / {floor_name} {:.2} ms = {ratio:.2}× (target ≤ {target}×){}",
        work.as_secs_f64() * 1e3,
        floor.as_secs_f64() * 1e3,
        if ratio <= target {
            ""
        } else {
            "  ABOVE TARGET"
        }
    );
}

fn floor_a(bytes: &Bytes) -> usize {
    DiscoveryResponse::decode(bytes.clone())
        .unwrap()
        .resources
        .len()
}

fn floor_b<M: Message + Default>(bytes: &Bytes) -> usize {
    let r = DiscoveryResponse::decode(bytes.clone()).unwrap();
    let mut n = 0;
    for any in r.resources {
        let m = M::decode(any.value).unwrap();
        black_box(&m);
        n += 1;
    }
    n
}

fn floor_c(bytes: &Bytes, cached: &[Bytes]) -> usize {
    let r = DiscoveryResponse::decode(bytes.clone()).unwrap();
    r.resources
        .iter()
        .zip(cached)
        .filter(|(any, c)| any.value == **c)
        .count()
}

/// Heap bytes per cached cluster beyond its raw bytes: the growth of a client's heap
/// from "1,000 clusters watched" to "1,000 clusters cached", less the raw bytes.
fn report_cluster_memory() {
    let n = 1000;
    let names: Vec<String> = (0..n).map(cluster_name).collect();
    let resources: Vec<Any> = (0..n)
        .map(|i| any(type_url::CLUSTER, &istio_cluster(i, 0)))
        .collect();
    let raw_per_cluster = resources.iter().map(|a| a.value.len()).sum::<usize>() as f64 / n as f64;
    let bytes = response(type_url::CLUSTER, "1", "n1", resources);
    let response_len = bytes.len() as i64;
    let (mut client, stream) = subscribed_client::<Cds>(&names);
    let watched = alloc::live_bytes();
    deliver(&mut client, stream, &bytes);
    drop(bytes); // freed here but allocated before `watched`: added back below
    while client.poll_action().is_some() {}
    let cached = alloc::live_bytes() + response_len;
    let per_cluster = (cached - watched) as f64 / n as f64;
    println!(
        "memory: caching a cluster grows the heap by {per_cluster:.0} bytes; its raw bytes are \
         {raw_per_cluster:.0}; the validated form and bookkeeping take {:.0} bytes beyond them",
        per_cluster - raw_per_cluster
    );
    black_box(client);
}

fn bench(c: &mut Criterion) {
    report_cluster_memory();

    // ----- W1 / W2: CDS, 10,000 clusters -----
    let n = 10_000;
    let names: Vec<String> = (0..n).map(cluster_name).collect();
    let v1: Vec<Any> = (0..n)
        .map(|i| any(type_url::CLUSTER, &istio_cluster(i, 0)))
        .collect();
    let mean = v1.iter().map(|a| a.value.len()).sum::<usize>() / n;
    println!("W1 fixture: {n} clusters, {mean} bytes each on average");
    let cached: Vec<Bytes> = v1.iter().map(|a| a.value.clone()).collect();
    let w1 = response(type_url::CLUSTER, "1", "n1", v1.clone());
    let mut changed_a = v1.clone();
    changed_a[n / 2] = any(type_url::CLUSTER, &istio_cluster(n / 2, 7));
    let w2a = response(type_url::CLUSTER, "2", "n2", changed_a);
    let w2b = response(type_url::CLUSTER, "3", "n3", v1);

    let mut g = c.benchmark_group("cds_10k");
    g.sample_size(10).measurement_time(Duration::from_secs(8));
    g.bench_function("floor_A_envelope", |b| b.iter(|| floor_a(&w1)));
    g.bench_function("floor_B_full_decode", |b| {
        b.iter(|| floor_b::<cluster::Cluster>(&w1))
    });
    g.bench_function("floor_C_compare_bytes", |b| {
        b.iter(|| floor_c(&w1, &cached))
    });
    g.bench_function("W1_first_delivery", |b| {
        b.iter_batched(
            || subscribed_client::<Cds>(&names),
            |(mut client, stream)| {
                let (notes, reqs) = deliver(&mut client, stream, &w1);
                assert_eq!((notes, reqs), (n, 1));
                client
            },
            BatchSize::PerIteration,
        )
    });
    let (mut client, stream) = subscribed_client::<Cds>(&names);
    deliver(&mut client, stream, &w1);
    let mut flip = false;
    g.bench_function("W2_one_changed", |b| {
        b.iter(|| w2_one_changed(&mut client, &mut flip, [&w2a, &w2b]))
    });
    g.bench_function("W5_reconnect_identical", |b| {
        b.iter(|| w5_reconnect(&mut client, n, if flip { &w2a } else { &w2b }))
    });
    g.finish();

    // The same workloads again, each alternated with its floor round by round, so that
    // a load change on the machine hits both sides of a ratio alike.
    let rounds = 15;
    let (b, w1_t) = interleaved(
        rounds,
        || timed(|| floor_b::<cluster::Cluster>(&w1)),
        || {
            let (mut client, stream) = subscribed_client::<Cds>(&names);
            let t = timed(|| deliver(&mut client, stream, &w1));
            drop(client);
            t
        },
    );
    report_ratio("W1 CDS 10k first delivery", w1_t, "floor B", b, 1.0);
    let (c_t, w2_t) = interleaved(
        rounds,
        || timed(|| floor_c(&w1, &cached)),
        || timed(|| w2_one_changed(&mut client, &mut flip, [&w2a, &w2b])),
    );
    report_ratio("W2 CDS 10k resend, 1 changed", w2_t, "floor C", c_t, 1.3);
    let mut w5 = Vec::new();
    for _ in 0..rounds {
        let current = if flip { &w2a } else { &w2b };
        w5.push(timed(|| w5_reconnect(&mut client, n, current)));
    }
    println!(
        "ratio: W5 reconnect with 10,000 cached: {:.2} ms (target ≤ 5 ms)",
        median(w5).as_secs_f64() * 1e3
    );
    drop(client);

    // ----- W3: EDS -----
    let eds_names: Vec<String> = (0..1000).map(cluster_name).collect();
    let eds: Vec<Any> = eds_names
        .iter()
        .map(|name| {
            any(
                type_url::CLUSTER_LOAD_ASSIGNMENT,
                &istio_endpoints(name, 100, 0),
            )
        })
        .collect();
    let w3 = response(type_url::CLUSTER_LOAD_ASSIGNMENT, "1", "n1", eds);
    let big_name = vec!["big".to_string()];
    let w3_big = response(
        type_url::CLUSTER_LOAD_ASSIGNMENT,
        "1",
        "n1",
        vec![any(
            type_url::CLUSTER_LOAD_ASSIGNMENT,
            &istio_endpoints("big", 100_000, 0),
        )],
    );
    println!(
        "W3 fixtures: 1,000 × 100 endpoints = {} bytes; 1 × 100,000 endpoints = {} bytes",
        w3.len(),
        w3_big.len()
    );
    let mut g = c.benchmark_group("eds");
    g.sample_size(10).measurement_time(Duration::from_secs(8));
    g.bench_function("1k_x_100/floor_A_envelope", |b| b.iter(|| floor_a(&w3)));
    g.bench_function("1k_x_100/floor_B_full_decode", |b| {
        b.iter(|| floor_b::<endpoint::ClusterLoadAssignment>(&w3))
    });
    g.bench_function("1k_x_100/W3_first_delivery", |b| {
        b.iter_batched(
            || subscribed_client::<Eds>(&eds_names),
            |(mut client, stream)| {
                assert_eq!(deliver(&mut client, stream, &w3), (1000, 1));
                client
            },
            BatchSize::PerIteration,
        )
    });
    g.bench_function("1x100k/floor_A_envelope", |b| b.iter(|| floor_a(&w3_big)));
    g.bench_function("1x100k/floor_B_full_decode", |b| {
        b.iter(|| floor_b::<endpoint::ClusterLoadAssignment>(&w3_big))
    });
    g.bench_function("1x100k/W3_first_delivery", |b| {
        b.iter_batched(
            || subscribed_client::<Eds>(&big_name),
            |(mut client, stream)| {
                assert_eq!(deliver(&mut client, stream, &w3_big), (1, 1));
                client
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();

    for (what, names, bytes, count) in [
        ("W3 EDS 1,000 × 100 endpoints", &eds_names, &w3, 1000),
        ("W3 EDS 1 × 100,000 endpoints", &big_name, &w3_big, 1),
    ] {
        let (b, w) = interleaved(
            9,
            || timed(|| floor_b::<endpoint::ClusterLoadAssignment>(bytes)),
            || {
                let (mut client, stream) = subscribed_client::<Eds>(names);
                let t = timed(|| assert_eq!(deliver(&mut client, stream, bytes), (count, 1)));
                drop(client);
                t
            },
        );
        report_ratio(what, w, "floor B", b, 1.0);
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
