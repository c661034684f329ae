//! Embedding the core in a loop of your own, in virtual time: the whole path from a
//! watch to the endpoint an RPC goes to. The gRFC A74 dependency manager follows a
//! listener to its endpoints, served by the testing kit's sans-IO management server
//! over a "network" with 5 ms latency; the config selector (A31) routes an RPC to its
//! cluster, and the load balancer picks the endpoint, once the "runtime" has connected
//! it. Every layer is driven alike: one mutation, drain its actions, then wait for the
//! next delivery or `poll_timeout`.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use xds_proto_core::dependency::{XdsConfig, XdsDependencyManager};
use xds_proto_core::lb::{CallOutcome, ConnectivityState, LbAction, LbSettings, LoadBalancer};
use xds_proto_core::lb::{Pick, PickArgs, SubchannelId};
use xds_proto_core::prost::Message;
use xds_proto_core::selector::{ClusterRegistry, ConfigSelector, Seeded};
use xds_proto_core::{Action, Bootstrap, Event, Instant, StreamId};
use xds_proto_core::{XdsClient, XdsClientConfig, bytes::Bytes};
use xds_proto_testing::peer::{CDS, EDS, LDS, RDS};
use xds_proto_testing::server::{ManagementServer, ServerPolicy, SimResource};

const BOOTSTRAP: &str = r#"{
    "xds_servers": [{"server_uri": "xds.example:443", "channel_creds": [{"type": "insecure"}]}],
    "node": {"id": "custom-loop"}
}"#;
const LATENCY: Duration = Duration::from_millis(5);
const PATH: &str = "/demo.Echo/Say";

/// The embedder's side of the xDS client: the client, the dependency manager, the
/// server, the stream open to it and the wire.
struct Loop {
    client: XdsClient,
    manager: XdsDependencyManager,
    server: ManagementServer,
    stream: Option<StreamId>,
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
                    self.stream = Some(stream);
                    self.client
                        .handle_event(self.now, Event::StreamStarted { stream });
                }
                Action::SendRequest { stream, request } => {
                    // The transport has taken it (a real one writes `encode_to_vec()`):
                    // report it sent; then the server reads it.
                    self.client
                        .handle_event(self.now, Event::RequestSent { stream });
                    if self
                        .server
                        .on_request(stream.into_raw(), &request.to_proto())
                    {
                        self.serve();
                    }
                }
                // Every watch here is the manager's; another one would be ours to handle.
                Action::Notify(n) => {
                    assert!(self.manager.handle_notification(&mut self.client, &n))
                }
                Action::CloseStream { stream } => {
                    self.server.close_stream(stream.into_raw());
                    self.stream = None;
                }
                _ => {} // DropChannel: we hold no channels
            }
        }
    }

    /// The server answers what is due on the stream; the answers arrive after `LATENCY`.
    fn serve(&mut self) {
        let stream = self.stream.expect("a stream is open");
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
    fn next_config(&mut self) -> Arc<XdsConfig> {
        loop {
            if let Some(update) = self.manager.poll_update() {
                return update.expect("the listener resolves");
            }
            assert!(self.step(), "the loop went idle without a configuration");
        }
    }
}

/// The runtime's side of the load balancer: dial what it asks for (here every dial
/// succeeds at once) and close what it lets go; `open` is the connections.
fn carry_out(lb: &mut LoadBalancer, now: Instant, open: &mut BTreeMap<SubchannelId, SocketAddr>) {
    while let Some(action) = lb.poll_action() {
        match action {
            LbAction::Connect {
                subchannel,
                address,
            } => {
                lb.subchannel_state(now, subchannel, ConnectivityState::Connecting);
                // ... dial `address`; READY once the backend's HTTP/2 SETTINGS arrived.
                open.insert(subchannel, address);
                lb.subchannel_state(now, subchannel, ConnectivityState::Ready);
            }
            LbAction::Disconnect { subchannel } => {
                open.remove(&subchannel);
            }
            _ => {} // PickerChanged: queued RPCs pick again; no DNS clusters here
        }
    }
}

/// Routes one RPC and picks its endpoint: the cluster from the config's selector, the
/// address from the balancer. `None` while the pick has to wait.
fn route_and_pick(config: &XdsConfig, lb: &mut LoadBalancer, now: Instant) -> Option<SocketAddr> {
    let mut registry = ClusterRegistry::new(); // an adapter keeps one per channel
    let selector = ConfigSelector::new(config, &mut registry);
    let headers = [("x-user", "alice")];
    let selection = (selector.select(PATH, &headers, &mut Seeded(1))).expect("a route");
    let cluster = selection
        .cluster()
        .cluster()
        .expect("a cluster, not a plugin");
    assert_eq!(cluster, "cluster-1");
    let hash = selection.request_hash(&headers[..], /* channel id */ 0);
    match lb.pick(
        now,
        cluster,
        &PickArgs {
            hash,
            random: 1,
            override_host: None,
        },
    ) {
        Pick::Complete { address, call, .. } => {
            // ... send the RPC to `address`; when it ends:
            lb.call_finished(now, call, CallOutcome::Success);
            Some(address)
        }
        Pick::Queue => None,
        other => panic!("{PATH} cannot be sent: {other:?}"),
    }
}

fn main() {
    // The control plane: listener → route-1 → cluster-1 → 127.0.0.1:10001 (the kit's
    // generated resources, generation 1).
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
        stream: None,
        wire: VecDeque::new(),
        now: Instant::ZERO,
    };
    // Step 1: one mutation (the manager watches the listener), then drain.
    l.manager.start(&mut l.client).unwrap();
    l.drain();
    let config = l.next_config();
    assert_eq!(l.now, Instant::from_millis(20)); // LDS, RDS, CDS, EDS: 4 round trips

    // The first RPC starts the cluster: it waits while the runtime connects.
    let mut lb = LoadBalancer::new(LbSettings::new(/* seed */ 3));
    let mut open = BTreeMap::new();
    lb.update(l.now, &config);
    assert_eq!(route_and_pick(&config, &mut lb, l.now), None);
    carry_out(&mut lb, l.now, &mut open);
    let first = route_and_pick(&config, &mut lb, l.now).expect("READY");
    println!("[{}] {PATH} → cluster-1 → {first}", l.now);
    assert_eq!(first, "127.0.0.1:10001".parse().unwrap());

    // The control plane moves the endpoints: one EDS push, one new configuration, and
    // the balancer lets the old endpoint go and connects the new one.
    l.server.set(EDS, "cluster-1", SimResource::Valid(2));
    l.serve();
    let config = l.next_config();
    assert_eq!(l.now, Instant::from_millis(25)); // one more delivery
    lb.update(l.now, &config);
    carry_out(&mut lb, l.now, &mut open);
    let second = route_and_pick(&config, &mut lb, l.now).expect("READY");
    println!("[{}] {PATH} → cluster-1 → {second}", l.now);
    assert_eq!(second, "127.0.0.1:10002".parse().unwrap());
    assert_eq!(open.into_values().collect::<Vec<_>>(), [second]);
}
