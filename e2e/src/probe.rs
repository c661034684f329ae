//! The raw ADS probe, the floor the client is measured against: one tonic stream that
//! subscribes to every name at once (the listener, the route configuration, all
//! clusters, all endpoint sets), ACKs each response, and counts the resources and
//! bytes it receives, decoding no resource, until every one is in. It speaks state of
//! the world or delta ADS ([`Api`]).
//!
//! The decoding probe ([`Decode::Messages`]) does the same and also decodes every
//! resource into its Envoy message with prost, keeping them all until the run ends:
//! the least any client that reads its resources does, with no validation, no cache,
//! no watcher told.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::channel::mpsc;
use http::uri::PathAndQuery;
use prost::Message;
use xds_adapter_tokio::xds_proto_core::pb::envoy::config::core::v3::Node;
use xds_adapter_tokio::xds_proto_core::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};

use crate::{Api, Run, Workload};

/// What the probe does with the resources it receives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Decode {
    /// Counts them.
    Nothing,
    /// Decodes each into its Envoy message and keeps it.
    Messages,
}

/// The resources a decoding probe has decoded, kept until its run ends (a client keeps
/// what it receives).
#[derive(Default)]
struct Kept {
    messages: Vec<Box<dyn std::any::Any + Send>>,
}

impl Kept {
    /// Decodes one resource's payload by its type URL into its Envoy message.
    fn decode(&mut self, type_url: &str, value: &[u8]) {
        use xds_adapter_tokio::xds_proto_core::pb::envoy::config;
        fn one<M: Message + Default + Send + 'static>(
            value: &[u8],
        ) -> Box<dyn std::any::Any + Send> {
            Box::new(M::decode(value).expect("a valid resource"))
        }
        let message = match type_url.rsplit('.').next() {
            Some("Listener") => one::<config::listener::v3::Listener>(value),
            Some("RouteConfiguration") => one::<config::route::v3::RouteConfiguration>(value),
            Some("Cluster") => one::<config::cluster::v3::Cluster>(value),
            Some("ClusterLoadAssignment") => {
                one::<config::endpoint::v3::ClusterLoadAssignment>(value)
            }
            _ => panic!("a resource of an unexpected type: {type_url}"),
        };
        self.messages.push(message);
    }
}

const ADS_PATH: &str =
    "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources";
const DELTA_ADS_PATH: &str =
    "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources";

/// One probe run against the server at `port`.
pub async fn run(port: u16, workload: &Workload, api: Api, decode: Decode) -> Run {
    match api {
        Api::Sotw => run_sotw(port, workload, decode).await,
        Api::Delta => run_delta(port, workload, decode).await,
    }
}

/// A tonic client on a fresh connection to the server at `port`, with no message size
/// limit.
async fn connect(port: u16) -> tonic::client::Grpc<tonic::transport::Channel> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .expect("a valid URI")
        .connect()
        .await
        .expect("the probe connects");
    let mut grpc = tonic::client::Grpc::new(channel)
        .max_decoding_message_size(usize::MAX)
        .max_encoding_message_size(usize::MAX);
    grpc.ready().await.expect("the channel is ready");
    grpc
}

fn probe_node() -> Node {
    Node {
        id: "e2e-probe".to_string(),
        ..Default::default()
    }
}

/// State of the world: each type's newest response holds all its subscribed resources.
async fn run_sotw(port: u16, workload: &Workload, decode: Decode) -> Run {
    // Timed from before the connection, as the client is (its first watch connects).
    // The CPU time is read first: reading it allocates, which may make the allocator
    // tidy up after the previous run, and that is no part of this one.
    let cpu = crate::process_cpu();
    let start = Instant::now();
    let mut grpc = connect(port).await;
    let subscriptions = workload.subscriptions();
    let (requests, outbound) = mpsc::unbounded::<DiscoveryRequest>();
    for (i, (type_url, names)) in subscriptions.iter().enumerate() {
        let node = (i == 0).then(probe_node);
        let _ = requests.unbounded_send(DiscoveryRequest {
            node,
            type_url: type_url.to_string(),
            resource_names: names.clone(),
            ..Default::default()
        });
    }
    let codec = tonic_prost::ProstCodec::<DiscoveryRequest, DiscoveryResponse>::default();
    let mut inbound = grpc
        .streaming(
            tonic::Request::new(outbound),
            PathAndQuery::from_static(ADS_PATH),
            codec,
        )
        .await
        .expect("the ADS stream starts")
        .into_inner();
    // SotW: each type's newest response holds all its subscribed resources.
    let mut held: HashMap<String, usize> = HashMap::new();
    let mut kept = Kept::default();
    let (mut responses, mut bytes) = (0, 0);
    let mut timeline = Vec::new();
    let expected = workload.resource_count();
    while held.values().sum::<usize>() < expected {
        let response = match inbound.next().await {
            Some(Ok(response)) => response,
            Some(Err(status)) => panic!("the probe's stream failed: {status}"),
            None => panic!("the probe's stream ended"),
        };
        responses += 1;
        bytes += response.encoded_len();
        if let Some(dir) = std::env::var_os("XDS_E2E_DUMP") {
            let path = std::path::Path::new(&dir).join(format!("response-{responses}.pb"));
            std::fs::write(path, response.encode_to_vec()).expect("dump");
        }
        timeline.push((start.elapsed(), response.encoded_len()));
        held.insert(response.type_url.clone(), response.resources.len());
        if decode == Decode::Messages {
            for any in &response.resources {
                kept.decode(&any.type_url, &any.value);
            }
        }
        let names = subscriptions
            .iter()
            .find(|(t, _)| *t == response.type_url)
            .map(|(_, names)| names.clone())
            .unwrap_or_default();
        let _ = requests.unbounded_send(DiscoveryRequest {
            version_info: response.version_info,
            resource_names: names,
            type_url: response.type_url,
            response_nonce: response.nonce,
            ..Default::default()
        });
    }
    finish(start, cpu, timeline, responses, bytes, kept).await
}

/// Delta: every resource arrives once; the probe counts them per type.
async fn run_delta(port: u16, workload: &Workload, decode: Decode) -> Run {
    let cpu = crate::process_cpu();
    let start = Instant::now();
    let mut grpc = connect(port).await;
    let (requests, outbound) = mpsc::unbounded::<DeltaDiscoveryRequest>();
    for (i, (type_url, names)) in workload.subscriptions().into_iter().enumerate() {
        let _ = requests.unbounded_send(DeltaDiscoveryRequest {
            node: (i == 0).then(probe_node),
            type_url: type_url.to_string(),
            resource_names_subscribe: names,
            ..Default::default()
        });
    }
    let codec = tonic_prost::ProstCodec::<DeltaDiscoveryRequest, DeltaDiscoveryResponse>::default();
    let mut inbound = grpc
        .streaming(
            tonic::Request::new(outbound),
            PathAndQuery::from_static(DELTA_ADS_PATH),
            codec,
        )
        .await
        .expect("the delta ADS stream starts")
        .into_inner();
    let (mut received, mut responses, mut bytes) = (0, 0, 0);
    let mut kept = Kept::default();
    let mut timeline = Vec::new();
    while received < workload.resource_count() {
        let response = match inbound.next().await {
            Some(Ok(response)) => response,
            Some(Err(status)) => panic!("the probe's delta stream failed: {status}"),
            None => panic!("the probe's delta stream ended"),
        };
        responses += 1;
        bytes += response.encoded_len();
        timeline.push((start.elapsed(), response.encoded_len()));
        received += response.resources.len();
        if decode == Decode::Messages {
            for any in response
                .resources
                .iter()
                .filter_map(|r| r.resource.as_ref())
            {
                kept.decode(&any.type_url, &any.value);
            }
        }
        let _ = requests.unbounded_send(DeltaDiscoveryRequest {
            type_url: response.type_url,
            response_nonce: response.nonce,
            ..Default::default()
        });
    }
    finish(start, cpu, timeline, responses, bytes, kept).await
}

/// The run's figures, once every resource is in; prints the timeline if asked.
async fn finish(
    start: Instant,
    cpu: Duration,
    timeline: Vec<(Duration, usize)>,
    responses: usize,
    bytes: usize,
    kept: Kept,
) -> Run {
    let elapsed = start.elapsed();
    let cpu = crate::process_cpu() - cpu;
    drop(kept);
    if std::env::var_os("XDS_E2E_PHASES").is_some() {
        for (at, len) in timeline {
            println!("  {:8.1} ms response {len} B", at.as_secs_f64() * 1e3);
        }
    }
    // Let the last ACKs go out before the stream is dropped.
    tokio::time::sleep(Duration::from_millis(10)).await;
    Run {
        cpu,
        elapsed,
        registered: Duration::ZERO,
        responses,
        bytes,
    }
}
