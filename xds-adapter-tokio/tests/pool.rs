//! The per-target [`ClientPool`] on tokio against a loopback management server: which
//! client each caller gets, what the clients share, and when a client stops.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use prost::Message;
use xds_adapter_tokio::xds_proto_core::pb::google::protobuf::{Any, StringValue};
use xds_adapter_tokio::xds_proto_core::{DecodeError, XdsResourceType};
use xds_adapter_tokio::{
    Bootstrap, Cds, ClientPool, Error, SERVER_TARGET, WatchStream, WatchUpdate,
};
use xds_test_server::LoopbackServer;
use xds_test_server::resources::cluster_with;

const CDS: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
const PROMPT: Duration = Duration::from_secs(10);

async fn next<T: XdsResourceType>(watch: &mut WatchStream<T>) -> WatchUpdate<T::Value> {
    let name = watch.name().to_string();
    tokio::time::timeout(PROMPT, watch.next())
        .await
        .unwrap_or_else(|_| panic!("no update of {name}"))
        .unwrap_or_else(|| panic!("the watch of {name} ended"))
}

fn pool_on(server: &LoopbackServer) -> ClientPool {
    let bootstrap = Bootstrap::from_json_str(&server.bootstrap_json("pool-node", None)).unwrap();
    ClientPool::builder(bootstrap)
        .seed(5)
        .build_pool()
        .expect("pool")
}

async fn streams_become(server: &LoopbackServer, streams: u64, open: u64) {
    let reached = tokio::time::timeout(
        PROMPT,
        server.wait_for(|_, s| (s.streams == streams && s.open_streams == open).then_some(())),
    )
    .await;
    assert!(
        reached.is_ok(),
        "expected {streams} streams ({open} open), have {:?}",
        server.stats()
    );
}

/// The same target gives the same client (one driver, one ADS stream, one cache);
/// another target gives another client; all of them share the pool's one parsed
/// bootstrap; xDS-enabled servers have their own key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_per_target_sharing_one_bootstrap() {
    let server = LoopbackServer::start();
    server.set_resources(CDS, "1", vec![cluster_with("c1", 7)]);
    let pool = pool_on(&server);

    let t1 = pool.get_or_create("xds:///one");
    let t1_again = pool.get_or_create("xds:///one");
    let t2 = pool.get_or_create("xds:///two");
    let servers = pool.server_client();
    assert!(t1.same_client(&t1_again));
    assert!(!t1.same_client(&t2));
    assert!(!t1.same_client(&servers));
    assert!(servers.same_client(&pool.get_or_create(SERVER_TARGET)));
    assert_eq!(t1.target(), Some("xds:///one"));
    assert_eq!(servers.target(), Some("#server"));
    for c in [&t1, &t2, &servers] {
        assert!(
            Arc::ptr_eq(c.bootstrap(), pool.bootstrap()),
            "one parsed bootstrap"
        );
    }
    assert_eq!(pool.targets(), ["#server", "xds:///one", "xds:///two"]);

    // Two handles of one target share its cache and its stream.
    let mut w1 = t1.watch::<Cds>("c1").await.unwrap();
    assert_eq!(next(&mut w1).await.value().unwrap().max_requests, 7);
    let mut w1_again = t1_again.watch::<Cds>("c1").await.unwrap();
    assert_eq!(
        next(&mut w1_again).await.value().unwrap().max_requests,
        7,
        "the second watcher gets the cached value at once"
    );
    let mut w2 = t2.watch::<Cds>("c1").await.unwrap();
    assert_eq!(next(&mut w2).await.value().unwrap().max_requests, 7);
    streams_become(&server, 2, 2).await;
    let subscriptions = server
        .requests()
        .iter()
        .filter(|r| r.response_nonce.is_empty())
        .count();
    assert_eq!(subscriptions, 2, "one subscription per target");

    drop((w1, w1_again, w2));
    pool.shutdown().await;
    assert!(!t1.is_running() && !t2.is_running() && !servers.is_running());
    server.stop().await;
}

/// A client lives while a handle or a watch stream of it does: a watch stream alone
/// keeps the pool handing out the same client; when the last one goes, the client
/// stops (its ADS stream closes) and the pool starts a fresh one on the next request.
/// A client that was shut down is replaced too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unused_clients_stop_and_are_replaced_on_demand() {
    let server = LoopbackServer::start();
    server.set_resources(CDS, "1", vec![cluster_with("c1", 3)]);
    let pool = pool_on(&server);

    let client = pool.get_or_create("xds:///t");
    let mut watch = client.watch::<Cds>("c1").await.unwrap();
    assert_eq!(next(&mut watch).await.value().unwrap().max_requests, 3);
    drop(client);
    let kept = pool
        .get("xds:///t")
        .expect("kept alive by its watch stream");
    let mut second = kept.watch::<Cds>("c1").await.unwrap();
    assert_eq!(next(&mut second).await.value().unwrap().max_requests, 3);
    drop(kept);
    streams_become(&server, 1, 1).await;

    drop((watch, second));
    assert!(pool.get("xds:///t").is_none(), "nothing uses it any more");
    assert!(pool.targets().is_empty());
    streams_become(&server, 1, 0).await;

    let fresh = pool.get_or_create("xds:///t");
    let mut watch = fresh.watch::<Cds>("c1").await.unwrap();
    assert_eq!(next(&mut watch).await.value().unwrap().max_requests, 3);
    streams_become(&server, 2, 1).await;

    fresh.shutdown().await;
    assert!(
        pool.get("xds:///t").is_none(),
        "a stopped client is not handed out"
    );
    let replacement = pool.get_or_create("xds:///t");
    assert!(replacement.is_running());
    assert!(!replacement.same_client(&fresh));
    let ended = tokio::time::timeout(PROMPT, watch.next()).await;
    assert!(matches!(ended, Ok(None)), "the stopped client's watch ends");

    drop(replacement);
    pool.shutdown().await;
    server.stop().await;
}

/// `google.protobuf.StringValue` resources of the form `name=text`.
struct Greeting;

const GREETING: &str = "type.googleapis.com/google.protobuf.StringValue";

impl XdsResourceType for Greeting {
    type Value = String;

    const TYPE_URL: &'static str = GREETING;
    const ALL_RESOURCES_REQUIRED_IN_SOTW: bool = false;

    fn decode(bytes: &[u8]) -> Result<(String, String), DecodeError> {
        let v = StringValue::decode(bytes).map_err(|e| DecodeError::unnamed(e.to_string()))?;
        let (name, text) = v
            .value
            .split_once('=')
            .ok_or_else(|| DecodeError::unnamed("no '='"))?;
        Ok((name.to_string(), text.to_string()))
    }
}

/// A type registered on the builder is registered on every client the pool starts;
/// registering a type twice fails when the pool is built, not on first use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registered_types_apply_to_every_client_of_the_pool() {
    let server = LoopbackServer::start();
    server.set_resources(
        GREETING,
        "1",
        vec![Any {
            type_url: GREETING.to_string(),
            value: StringValue {
                value: "hello=world".into(),
            }
            .encode_to_vec()
            .into(),
        }],
    );
    let bootstrap = Bootstrap::from_json_str(&server.bootstrap_json("types-node", None)).unwrap();
    let pool = ClientPool::builder(bootstrap.clone())
        .register_type::<Greeting>()
        .build_pool()
        .unwrap();
    for target in ["xds:///a", "xds:///b"] {
        let client = pool.get_or_create(target);
        let mut watch = client.watch::<Greeting>("hello").await.unwrap();
        assert_eq!(
            next(&mut watch).await.value().map(|v| v.as_str()),
            Some("world"),
            "{target}"
        );
    }

    let clash = ClientPool::builder(bootstrap)
        .register_type::<Cds>()
        .build_pool();
    assert!(matches!(clash, Err(Error::DuplicateType(_))), "{clash:?}");
    pool.shutdown().await;
    server.stop().await;
}
