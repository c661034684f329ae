//! Delta (incremental) xDS costs at mesh scale (issue 13 item 7), beside the SotW
//! workloads of `ads.rs`:
//! - W6: 10,000 clusters cached over delta; a response with one changed cluster is
//!   applied (decode, validate, cache, one notification) and ACKed (the request built
//!   and reported sent). Target: at most 20 µs per update, independent of the 10,000.
//! - W7: reconnect with 10,000 clusters cached over delta: the stream closes after a
//!   response and the new stream's first request, subscribing every name with its
//!   `initial_resource_versions`, is built (timed: the close and taking the actions;
//!   not the wire encoding, nor the checks). Target: at most 2 ms. Beside the timing,
//!   each round checks that the testing kit's delta server, given that request, has
//!   nothing new to send, and that the watchers hear nothing and no does-not-exist
//!   timer runs.
//!
//! Run: `cargo bench -p xds-proto-core --bench delta`.

use std::hint::black_box;
use std::time::Duration;

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use prost::Message;
use xds_proto_core::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;
use xds_proto_core::resource::type_url;
use xds_proto_core::{
    Action, Bootstrap, Cds, Code, Event, Instant, ServerId, Status, StreamId, XdsClient,
    XdsClientConfig,
};
use xds_proto_testing::peer::{delta_on_the_wire, delta_response};
use xds_proto_testing::resources::any;
use xds_proto_testing::resources::mesh::{self, cluster_name, istio_cluster};
use xds_proto_testing::server::{ManagementServer, ServerPolicy, SimResource};

/// The bootstrap, with the certificate provider the mesh's mTLS clusters name (A29: a
/// cluster naming an instance the bootstrap lacks is NACKed).
fn bootstrap() -> Bootstrap {
    let json = r#"{"xds_servers": [{"server_uri": "istiod:15012", "channel_creds": [{"type": "insecure"}],
  "api_type": "AGGREGATED_DELTA_GRPC"}],
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

const N: usize = 10_000;

/// What one input made the client do.
#[derive(Default, Debug, PartialEq)]
struct Out {
    started: Option<StreamId>,
    notes: usize,
    requests: Vec<DeltaDiscoveryRequest>,
}

fn drain(client: &mut XdsClient) -> Out {
    summarize(std::iter::from_fn(|| client.poll_action()).collect())
}

/// What the actions say, each request as the server decodes it.
fn summarize(actions: Vec<Action>) -> Out {
    let mut out = Out::default();
    for a in actions {
        match a {
            Action::StartStream { stream, .. } => out.started = Some(stream),
            Action::Notify(_) => out.notes += 1,
            Action::SendDeltaRequest { request, .. } => {
                out.requests.push(delta_on_the_wire(&request))
            }
            _ => {}
        }
    }
    out
}

/// Reports each request sent until none is queued; returns them all.
fn send_all(
    client: &mut XdsClient,
    stream: StreamId,
    mut first: Vec<DeltaDiscoveryRequest>,
) -> Vec<DeltaDiscoveryRequest> {
    let mut all = Vec::new();
    while !first.is_empty() {
        all.append(&mut first);
        client.handle_event(Instant::ZERO, Event::RequestSent { stream });
        first = drain(client).requests;
    }
    all
}

fn deliver(client: &mut XdsClient, stream: StreamId, bytes: Bytes) -> Out {
    client.handle_event(Instant::ZERO, Event::ResponseReceived { stream, bytes });
    drain(client)
}

/// A client with `names` cached over delta from `server` (key `key` on the server).
fn cached_client(
    server: &mut ManagementServer,
    names: &[String],
    key: u64,
) -> (XdsClient, StreamId) {
    let mut client = XdsClient::new(XdsClientConfig::new(bootstrap()), 1);
    for n in names {
        client.watch::<Cds>(n).unwrap();
    }
    let out = drain(&mut client);
    let stream = out.started.unwrap();
    client.handle_event(Instant::ZERO, Event::StreamStarted { stream });
    server.open_delta_stream(key);
    for r in send_all(&mut client, stream, out.requests) {
        server.on_delta_request(key, &r);
    }
    for response in server.flush_delta(key, |_| 0) {
        let out = deliver(&mut client, stream, response.encode_to_vec().into());
        assert_eq!(out.notes, names.len());
        for r in send_all(&mut client, stream, out.requests) {
            server.on_delta_request(key, &r);
        }
    }
    (client, stream)
}

/// W6: one changed cluster of 10,000, alternately two versions: applied and ACKed.
fn w6_one_changed(client: &mut XdsClient, stream: StreamId, flip: &mut bool, [a, b]: [&Bytes; 2]) {
    *flip = !*flip;
    let bytes = if *flip { a } else { b };
    client.handle_event(
        Instant::ZERO,
        Event::ResponseReceived {
            stream,
            bytes: bytes.clone(),
        },
    );
    let (mut notes, mut acks) = (0, 0);
    while let Some(action) = client.poll_action() {
        match action {
            Action::Notify(_) => notes += 1,
            Action::SendDeltaRequest { request, .. } => {
                acks += 1;
                black_box(request.encode_to_vec());
            }
            _ => {}
        }
    }
    client.handle_event(Instant::ZERO, Event::RequestSent { stream });
    assert_eq!((notes, acks), (1, 1));
}

/// W7, one round: the stream closes after a response; returns the time to build the
/// new stream's first request, after checking what follows it.
fn w7_reconnect(client: &mut XdsClient, server: &mut ManagementServer, key: &mut u64) -> Duration {
    let stream = client.current_stream(ServerId::from_raw(0)).unwrap();
    server.close_stream(*key);
    let start = std::time::Instant::now();
    client.handle_event(
        Instant::ZERO,
        Event::StreamClosed {
            stream,
            status: Status::new(Code::UNAVAILABLE, "goaway"),
        },
    );
    let actions: Vec<Action> = std::iter::from_fn(|| client.poll_action()).collect();
    let took = start.elapsed();
    let out = summarize(actions);
    let new = out.started.expect("a new stream at once");
    assert_eq!(out.notes, 0);
    let first = &out.requests[0];
    assert_eq!(first.resource_names_subscribe.len(), N);
    assert_eq!(first.initial_resource_versions.len(), N);
    // The server, told what the client holds, has nothing new to send.
    *key += 1;
    server.open_delta_stream(*key);
    server.on_delta_request(*key, first);
    assert!(
        server.flush_delta(*key, |_| 0).is_empty(),
        "the server sends nothing"
    );
    client.handle_event(Instant::ZERO, Event::StreamStarted { stream: new });
    assert!(send_all(client, new, Vec::new()).is_empty());
    client.handle_event(Instant::ZERO, Event::RequestSent { stream: new });
    let quiet = drain(client);
    assert_eq!(quiet, Out::default(), "the watchers hear nothing");
    assert_eq!(client.poll_timeout(), None, "no does-not-exist timer runs");
    // A response of a type never requested (ignored, not ACKed) marks the stream
    // answered, so that the next round's close reconnects at once, without backoff.
    let other = delta_response(type_url::LISTENER, "k", vec![], &[]);
    assert_eq!(
        deliver(client, new, other.encode_to_vec().into()),
        Out::default()
    );
    took
}

fn bench(c: &mut Criterion) {
    let names: Vec<String> = (0..N).map(cluster_name).collect();

    // ----- W6: one changed cluster of 10,000 over delta -----
    let mut w6_server = ManagementServer::new("istiod:15012", ServerPolicy::default());
    for n in &names {
        w6_server.set(type_url::CLUSTER, n, SimResource::Valid(1));
    }
    let (mut client, stream) = cached_client(&mut w6_server, &names, 1);
    let k = N / 2;
    let changed = |generation: u32, version: &str| -> Bytes {
        let cluster = any(type_url::CLUSTER, &istio_cluster(k, generation));
        let r = delta_response(
            type_url::CLUSTER,
            version,
            vec![(&names[k], version, cluster)],
            &[],
        );
        let bytes: Bytes = r.encode_to_vec().into();
        bytes
    };
    let (a, b) = (changed(7, "a"), changed(8, "b"));
    println!(
        "W6 fixture: {N} clusters cached, the update carries one of {} bytes",
        a.len()
    );
    let mut g = c.benchmark_group("delta_cds_10k");
    g.sample_size(20).measurement_time(Duration::from_secs(5));
    let mut flip = false;
    g.bench_function("W6_one_changed_with_ack", |bench| {
        bench.iter(|| w6_one_changed(&mut client, stream, &mut flip, [&a, &b]))
    });
    drop(client);

    // ----- W7: reconnect with 10,000 cached over delta -----
    let mut server = ManagementServer::new("istiod:15012", ServerPolicy::default());
    for n in &names {
        server.set(type_url::CLUSTER, n, SimResource::Valid(1));
    }
    let mut key = 1;
    // The stream had a response: the first close reconnects at once.
    let (mut client, _) = cached_client(&mut server, &names, key);
    g.sample_size(10).measurement_time(Duration::from_secs(8));
    g.bench_function("W7_reconnect_initial_versions", |bench| {
        bench.iter_custom(|iters| {
            (0..iters)
                .map(|_| w7_reconnect(&mut client, &mut server, &mut key))
                .sum()
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
