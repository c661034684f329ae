//! The bare core (`XdsClient`, no adapter, no I/O) fed go-control-plane's four
//! responses as the raw probe recorded them: 20,002 watches, the four subscribing
//! requests reported sent, then the listener, route configuration, cluster and
//! endpoint responses, each applied and ACKed, their notifications drained. Prints
//! each step's time per round.
//!
//! ```sh
//! mkdir -p /tmp/dump
//! XDS_E2E_DUMP=/tmp/dump cargo run --release --manifest-path e2e/Cargo.toml -- --iterations 1
//! cargo run --release --manifest-path e2e/Cargo.toml --bin replay -- /tmp/dump
//! ```

use std::time::Instant as Clock;

use bytes::Bytes;
use prost::Message;
use xds_adapter_tokio::xds_proto_core::pb::envoy::service::discovery::v3::DiscoveryResponse;
use xds_adapter_tokio::xds_proto_core::resource::{Cds, Eds, Lds, Rds};
use xds_adapter_tokio::xds_proto_core::{
    Action, Bootstrap, Event, Instant, StreamId, XdsClient, XdsClientConfig,
};

/// The types in the order the client requests them (the dumps are in arrival order).
const ORDER: [&str; 4] = [
    "Listener",
    "RouteConfiguration",
    "Cluster",
    "ClusterLoadAssignment",
];

fn main() {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "/tmp/dump".to_string());
    let mut responses: Vec<(&str, Bytes)> = (1..=4)
        .map(|i| {
            let path = format!("{dir}/response-{i}.pb");
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            let type_url = DiscoveryResponse::decode(&bytes[..])
                .expect("a response")
                .type_url;
            let kind = ORDER
                .into_iter()
                .find(|k| type_url.ends_with(&format!(".{k}")))
                .expect("one of the four types");
            (kind, Bytes::from(bytes))
        })
        .collect();
    responses.sort_by_key(|(kind, _)| ORDER.iter().position(|k| k == kind));
    let names: Vec<String> = (0..10_000).map(|i| format!("cluster-{i:05}")).collect();
    // REPLAY_ROUNDS=1: the first, cold round alone (page faults, allocator growth).
    let rounds =
        std::env::var("REPLAY_ROUNDS").map_or(10, |r| r.parse().expect("a number of rounds"));
    for _ in 0..rounds {
        let bootstrap = Bootstrap::from_json_str(
            r#"{"xds_servers": [{"server_uri": "127.0.0.1:1", "channel_creds": [{"type": "insecure"}],
                "server_features": ["xds_v3"]}], "node": {"id": "e2e-replay"}}"#,
        )
        .expect("a valid bootstrap");
        let mut client = XdsClient::new(XdsClientConfig::new(bootstrap), 1);
        let now = Instant::ZERO;
        let clock = Clock::now();
        client
            .watch::<Lds>("scale.example.com")
            .expect("a valid watch");
        client.watch::<Rds>("scale-route").expect("a valid watch");
        for name in &names {
            client.watch::<Cds>(name).expect("a valid watch");
        }
        for name in &names {
            client.watch::<Eds>(name).expect("a valid watch");
        }
        // The stream and its first request (the listener's) are queued with the first
        // watch; the rest follow as each request is reported sent.
        let opened = drain(&mut client);
        let mut line = format!("20,002 watches {:.2} ms", ms(clock));
        let stream = opened.stream.expect("a stream was opened");
        let clock = Clock::now();
        client.handle_event(now, Event::StreamStarted { stream });
        let mut requests = opened.requests + drain(&mut client).requests;
        for _ in 0..ORDER.len() {
            client.handle_event(now, Event::RequestSent { stream });
            requests += drain(&mut client).requests;
        }
        line += &format!(", {requests} requests sent {:.2} ms", ms(clock));
        for (kind, bytes) in &responses {
            let clock = Clock::now();
            let bytes = bytes.clone();
            client.handle_event(now, Event::ResponseReceived { stream, bytes });
            let notified = drain(&mut client).notifications;
            client.handle_event(now, Event::RequestSent { stream });
            drain(&mut client);
            line += &format!(", {kind} {:.2} ms ({notified} notified)", ms(clock));
        }
        println!("{line}");
    }
}

#[derive(Default)]
struct Drained {
    stream: Option<StreamId>,
    requests: usize,
    notifications: usize,
}

fn drain(client: &mut XdsClient) -> Drained {
    let mut drained = Drained::default();
    while let Some(action) = client.poll_action() {
        match action {
            Action::StartStream { stream, .. } => drained.stream = Some(stream),
            Action::SendRequest { .. } => drained.requests += 1,
            Action::Notify(_) => drained.notifications += 1,
            _ => {}
        }
    }
    drained
}

fn ms(since: Clock) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}
