# use std::collections::BTreeMap;
# use std::sync::Arc;
# use xds_proto_core::dependency::{ClusterConfig, ClusterResolution};
# use xds_proto_core::resource::{
#     ClusterResource, ClusterType, Endpoint, EndpointsResource, HealthStatus, LbPolicy,
#     Locality, LocalityEndpoints, Priority,
# };
use xds_proto_core::Instant;
use xds_proto_core::lb::{
    CallOutcome, ConnectivityState, LbAction, LbSettings, LoadBalancer, Pick, PickArgs,
};
# /// One EDS cluster, "backend", with endpoints on these loopback ports.
# fn clusters(ports: &[u16]) -> BTreeMap<String, Result<ClusterConfig, xds_proto_core::XdsError>> {
#     let endpoints = ports.iter().map(|p| Endpoint {
#         address: ([127, 0, 0, 1], *p).into(),
#         additional_addresses: vec![],
#         health_status: HealthStatus::Healthy,
#         weight: 1,
#         hostname: String::new(),
#     });
#     let assignment = EndpointsResource {
#         cluster_name: "backend".into(),
#         priorities: vec![Priority { localities: vec![LocalityEndpoints {
#             locality: Locality::default(), weight: 1, endpoints: endpoints.collect(),
#         }] }],
#         drop_overloads: vec![],
#     };
#     let cluster = ClusterResource {
#         name: "backend".into(),
#         cluster_type: ClusterType::Eds { service_name: None },
#         lb_policy: LbPolicy::RoundRobin,
#         lrs_server: false,
#         max_requests: 1024,
#         tls: None,
#         outlier_detection: None,
#         override_host_status: Default::default(),
#     };
#     let config = ClusterConfig {
#         load_stats: None,
#         cluster: Arc::new(cluster),
#         children: ClusterResolution::Endpoints {
#             service_name: "backend".into(),
#             endpoints: Some(Arc::new(assignment)),
#             resolution_note: None,
#         },
#     };
#     BTreeMap::from([("backend".to_owned(), Ok(config))])
# }

let mut lb = LoadBalancer::new(LbSettings::new(/* seed */ 1));
let mut now = Instant::ZERO;
// Each config from the dependency manager: `lb.update(now, &xds_config)`; here, its
// clusters alone.
lb.update_clusters(now, &clusters(&[8080, 8081]));

// Per RPC: the cluster the config selector chose, a request hash (ring_hash) and a
// random number from the runtime's generator.
let args = |i: u64| PickArgs { hash: None, random: i.wrapping_mul(0x9e37_79b9_7f4a_7c15), override_host: None };
// The first pick starts the cluster: nothing is connected yet, so the RPC waits.
assert_eq!(lb.pick(now, "backend", &args(0)), Pick::Queue);

// Drain the actions. The runtime owns the connections; the core owns their backoff.
let mut connections = BTreeMap::new();
while let Some(action) = lb.poll_action() {
    match action {
        LbAction::Connect { subchannel, address } => {
            lb.subchannel_state(now, subchannel, ConnectivityState::Connecting);
            // ... dial `address`; once the server's HTTP/2 SETTINGS frame has been read
            // (not when the client's handshake is written: a server that accepts TCP
            // and never speaks HTTP/2 must stay CONNECTING):
            connections.insert(subchannel, address);
            lb.subchannel_state(now, subchannel, ConnectivityState::Ready);
            // (a failed dial reports TransientFailure; a closed connection, Idle)
        }
        LbAction::Disconnect { subchannel } => {
            connections.remove(&subchannel);
        }
        // Queued RPCs pick again.
        LbAction::PickerChanged => {}
        // Resolve the host, then `lb.dns_resolved(now, &cluster, Ok(addresses))`.
        LbAction::ResolveDns { .. } => {}
        _ => {}
    }
}
assert_eq!(connections.len(), 2);

// Picking again: round robin over the two READY endpoints.
let mut used = Vec::new();
for i in 1..=4 {
    let Pick::Complete { subchannel, address, call } = lb.pick(now, "backend", &args(i)) else {
        panic!("both endpoints are ready");
    };
    assert_eq!(connections[&subchannel], address);
    used.push(address.port());
    // ... send the RPC on that connection; when it ends, report how:
    lb.call_finished(now, call, CallOutcome::Success);
}
used.sort();
assert_eq!(used, [8080, 8080, 8081, 8081]);

// A connection fails: the core schedules its reconnect (gRPC's backoff) ...
let (&lost, _) = connections.iter().next().unwrap();
lb.subchannel_state(now, lost, ConnectivityState::TransientFailure);
// ... and the runtime sleeps until the next deadline, then lets the core act.
let deadline = lb.poll_timeout().expect("the reconnect backoff");
now = deadline;
lb.handle_timeout(now);
assert!(matches!(lb.poll_action(), Some(LbAction::Connect { subchannel, .. }) if subchannel == lost));
