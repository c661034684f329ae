//! The client's `tracing` events, read by a minimal subscriber that records each
//! event's message and fields.

use std::sync::{Arc, Mutex};

use prost::Message;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event as TracingEvent, Level, Metadata, Subscriber};

use super::{Action, Event, XdsClient, XdsClientConfig};
use crate::bootstrap::Bootstrap;
use crate::pb::envoy::service::discovery::v3::DiscoveryResponse;
use crate::pb::google::protobuf::Any;
use crate::resource::{Cds, XdsResourceType};
use crate::time::Instant;

/// One event: its level and its fields as text, the message under "message".
type Recorded = (Level, Vec<(String, String)>);

#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Recorded>>>);

struct Fields<'a>(&'a mut Vec<(String, String)>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0
            .push((field.name().to_string(), format!("{value:?}")));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push((field.name().to_string(), value.to_string()));
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &TracingEvent<'_>) {
        let mut fields = Vec::new();
        event.record(&mut Fields(&mut fields));
        self.0
            .lock()
            .unwrap()
            .push((*event.metadata().level(), fields));
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

impl Recorder {
    /// The fields of the first event whose message is `message`, and its level.
    fn find(&self, message: &str) -> Option<Recorded> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .find(|(_, f)| f.iter().any(|(k, v)| k == "message" && v == message))
            .cloned()
    }
}

fn field<'a>(event: &'a Recorded, name: &str) -> &'a str {
    event
        .1
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no field {name} in {event:?}"))
}

#[test]
fn a_session_logs_its_stream_requests_response_and_nack() {
    let bootstrap = Bootstrap::from_json_str(
        r#"{"xds_servers": [{"server_uri": "xds.example:443", "channel_creds": [{"type": "insecure"}]}],
            "node": {"id": "n"}}"#,
    )
    .unwrap();
    let recorder = Recorder::default();
    tracing::subscriber::with_default(recorder.clone(), || {
        let mut client = XdsClient::new(XdsClientConfig::new(bootstrap), 1);
        client.watch::<Cds>("c1").unwrap();
        let stream = match client.poll_action() {
            Some(Action::StartStream { stream, .. }) => stream,
            other => panic!("{other:?}"),
        };
        while client.poll_action().is_some() {}
        let now = Instant::from_secs(1);
        client.handle_event(now, Event::StreamStarted { stream });
        client.handle_event(now, Event::RequestSent { stream });
        let response = DiscoveryResponse {
            version_info: "v1".into(),
            type_url: Cds::TYPE_URL.into(),
            nonce: "n1".into(),
            resources: vec![Any {
                type_url: Cds::TYPE_URL.into(),
                value: bytes::Bytes::from_static(b"\xff\xff"),
            }],
            ..Default::default()
        };
        let bytes = response.encode_to_vec().into();
        client.handle_event(now, Event::ResponseReceived { stream, bytes });
        while client.poll_action().is_some() {}
    });

    let started = recorder.find("ADS stream starting").expect("stream start");
    assert_eq!(field(&started, "server"), "xds.example:443");
    assert_eq!(field(&started, "stream"), "stream-1");
    let request = recorder.find("sending request").expect("first request");
    assert_eq!(field(&request, "type_url"), Cds::TYPE_URL);
    assert_eq!(field(&request, "resources"), "1");
    assert!(recorder.find("ADS stream connected").is_some());
    assert!(recorder.find("does-not-exist timer started").is_some());
    let received = recorder.find("response received").expect("response");
    assert_eq!(field(&received, "nonce"), "n1");
    let applied = recorder.find("response applied").expect("applied");
    assert_eq!(
        (field(&applied, "valid"), field(&applied, "invalid")),
        ("0", "1")
    );
    let nack = recorder.find("sending NACK").expect("NACK");
    assert_eq!(nack.0, Level::WARN);
    assert_eq!(field(&nack, "nonce"), "n1");
    assert!(field(&nack, "detail").starts_with("resource index 0: <unknown name>: "));
}

/// A burst of notifications (here a connectivity failure told to 1,000 watchers) grows
/// the action queue; drained, the queue gives that capacity back instead of keeping it
/// for the client's life.
#[test]
fn a_drained_burst_gives_the_queue_capacity_back() {
    let bootstrap = Bootstrap::from_json_str(
        r#"{"xds_servers": [{"server_uri": "xds.example:443", "channel_creds": [{"type": "insecure"}]}],
            "node": {"id": "n"}}"#,
    )
    .unwrap();
    let mut client = XdsClient::new(XdsClientConfig::new(bootstrap), 1);
    for i in 0..1000 {
        client.watch::<Cds>(&format!("c{i}")).unwrap();
    }
    let server = crate::ServerId::from_raw(0);
    while client.poll_action().is_some() {}
    let reason = "connection refused".to_string();
    client.handle_event(Instant::ZERO, Event::ConnectivityFailure { server, reason });
    let burst = client.actions.len();
    assert!(burst >= 1000, "every watcher is told: {burst} actions");
    while client.poll_action().is_some() {}
    assert!(
        client.actions.capacity() <= super::ACTIONS_KEPT,
        "{} slots kept after a burst of {burst}",
        client.actions.capacity()
    );
}
