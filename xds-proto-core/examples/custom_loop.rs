//! Embedding the core in a loop of your own, in virtual time: the gRFC A74 dependency
//! manager follows a listener to its endpoints, served by the testing kit's sans-IO
//! management server over a "network" with 5 ms latency. The loop is every adapter's:
//! one mutation, drain `poll_action`, wait for the next delivery or `poll_timeout`.

use prost::Message;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;
use xds_proto_core::dependency::{ClusterResolution, XdsConfig, XdsDependencyManager};
use xds_proto_core::pb::envoy::service::discovery::v3::DiscoveryRequest;
use xds_proto_core::{Action, Bootstrap, Event, Instant, ServerId, StreamId};
use xds_proto_core::{XdsClient, XdsClientConfig, bytes::Bytes};
use xds_proto_testing::peer::{CDS, EDS, LDS, RDS};
use xds_proto_testing::server::{ManagementServer, ServerPolicy, SimResource};

const BOOTSTRAP: &str = r#"{
    "xds_servers": [{"server_uri": "xds.example:443", "channel_creds": [{"type": "insecure"}]}],
    "node": {"id": "custom-loop"}
}"#;
const LATENCY: Duration = Duration::from_millis(5);

/// The embedder's side: the client, the dependency manager, the server and the wire.
struct Loop {
    client: XdsClient,
    manager: XdsDependencyManager,
    server: ManagementServer,
    /// Responses on their way: (arrival, stream, bytes).
    wire: VecDeque<(Instant, StreamId, Bytes)>,
    now: Instant,
}

impl Loop {
    /// Step 2 of the drive loop: carry out every action the last mutation produced.
    fn drain(&mut self) {
        while let Some(action) = self.client.poll_action() {
            match action {
                Action::StartStream { stream, .. } => {
                    self.server.open_stream(stream.into_raw());
                    self.client
                        .handle_event(self.now, Event::StreamStarted { stream });
                }
                Action::SendRequest { stream, request } => {
                    // The transport has taken it: report it sent; then the server reads it.
                    self.client
                        .handle_event(self.now, Event::RequestSent { stream });
                    let request = DiscoveryRequest::decode(&request.encode_to_vec()[..])
                        .expect("the client's requests are valid protobuf");
                    if self.server.on_request(stream.into_raw(), &request) {
                        self.serve(stream);
                    }
                }
                // Every watch here is the manager's; another one would be ours to handle.
                Action::Notify(n) => {
                    assert!(self.manager.handle_notification(&mut self.client, &n))
                }
                Action::CloseStream { stream } => self.server.close_stream(stream.into_raw()),
                _ => {} // DropChannel: we hold no channels
            }
        }
    }

    /// The server answers what is due on `stream`; the answers arrive after `LATENCY`.
    fn serve(&mut self, stream: StreamId) {
        for response in self.server.flush(stream.into_raw(), |_| 0) {
            let bytes = Bytes::from(response.encode_to_vec());
            self.wire.push_back((self.now + LATENCY, stream, bytes));
        }
    }

    /// Step 3 (and the next step 1): move virtual time to the next thing that happens,
    /// feed it to the client, drain. Returns false when nothing is left to happen.
    fn step(&mut self) -> bool {
        let delivery = self.wire.front().map(|(at, _, _)| *at);
        match (delivery, self.client.poll_timeout()) {
            (None, None) => return false,
            (Some(at), timer) if timer.is_none_or(|t| at <= t) => {
                let (_, stream, bytes) = self.wire.pop_front().expect("peeked");
                self.now = at;
                self.client
                    .handle_event(at, Event::ResponseReceived { stream, bytes });
            }
            (_, timer) => {
                self.now = timer.expect("no delivery comes first, so a timer does");
                self.client.handle_timeout(self.now);
            }
        }
        self.drain();
        true
    }

    /// Runs until the manager emits a configuration.
    fn next_config(&mut self) -> XdsConfig {
        loop {
            if let Some(update) = self.manager.poll_update() {
                return (*update.expect("the listener resolves")).clone();
            }
            assert!(self.step(), "the loop went idle without a configuration");
        }
    }
}

/// The endpoint addresses of `cluster-1` in a configuration.
fn addresses(config: &XdsConfig) -> Vec<SocketAddr> {
    match config
        .cluster("cluster-1")
        .map(|c| &c.as_ref().expect("resolved").children)
    {
        Some(ClusterResolution::Endpoints {
            endpoints: Some(e), ..
        }) => {
            let localities = e.priorities.iter().flat_map(|p| &p.localities);
            localities
                .flat_map(|l| l.endpoints.iter().map(|e| e.address))
                .collect()
        }
        other => panic!("cluster-1 resolves to {other:?}"),
    }
}

fn main() {
    // The control plane: listener → route-1 → cluster-1 → its endpoints.
    let mut server = ManagementServer::new("xds.example:443", ServerPolicy::default());
    server.set(LDS, "demo.example", SimResource::Valid(1));
    server.set(RDS, "route-1", SimResource::Valid(1));
    server.set(CDS, "cluster-1", SimResource::Valid(1));
    server.set(EDS, "cluster-1", SimResource::Valid(1));
    let bootstrap = Bootstrap::from_json_str(BOOTSTRAP).expect("valid bootstrap");
    let mut l = Loop {
        client: XdsClient::new(XdsClientConfig::new(bootstrap), 7),
        manager: XdsDependencyManager::new("demo.example", "demo.example"),
        server,
        wire: VecDeque::new(),
        now: Instant::ZERO,
    };
    // Step 1: one mutation (the manager watches the listener), then drain.
    l.manager.start(&mut l.client).unwrap();
    l.drain();
    let first = addresses(&l.next_config());
    println!("[{}] cluster-1 endpoints: {first:?}", l.now);
    assert_eq!(l.now, Instant::from_millis(20)); // LDS, RDS, CDS, EDS: 4 round trips

    // The control plane moves the endpoints: one EDS push, one new configuration.
    l.server.set(EDS, "cluster-1", SimResource::Valid(2));
    l.serve(l.client.current_stream(ServerId::from_raw(0)).unwrap());
    let second = addresses(&l.next_config());
    println!("[{}] cluster-1 endpoints: {second:?}", l.now);
    assert_ne!(first, second, "the endpoints moved");
    assert_eq!(l.now, Instant::from_millis(25)); // one more delivery
}
