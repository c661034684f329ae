//! The per-target [`ClientPool`] on async-std against the loopback management server
//! (which runs its own tokio runtime on a thread of its own): shared clients per
//! target, one parsed bootstrap, and the pool's CSDS response with `client_scope`.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use xds_adapter_async_std::xds_proto_core::pb::envoy::admin::v3::ClientResourceStatus;
use xds_adapter_async_std::{Bootstrap, Cds, ClientPool, SERVER_TARGET};
use xds_test_server::LoopbackServer;
use xds_test_server::resources::cluster_with;

const CDS: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";

#[async_std::test]
async fn one_shared_client_per_target_and_csds_scoped_by_target() {
    let server = LoopbackServer::start();
    server.set_resources(CDS, "v7", vec![cluster_with("c1", 7)]);
    let bootstrap = Bootstrap::from_json_str(&server.bootstrap_json("async-std-pool", None))
        .expect("bootstrap");
    let pool = ClientPool::builder(bootstrap).build_pool().expect("pool");

    let a = pool.get_or_create("xds:///a");
    assert!(a.same_client(&pool.get_or_create("xds:///a")));
    let servers = pool.server_client();
    assert!(!a.same_client(&servers));
    assert!(Arc::ptr_eq(a.bootstrap(), servers.bootstrap()));

    let mut watches = Vec::new();
    for client in [&a, &servers] {
        let mut watch = client.watch::<Cds>("c1").await.expect("watch");
        let update = async_std::future::timeout(Duration::from_secs(10), watch.next())
            .await
            .expect("an update in time")
            .expect("an update");
        assert_eq!(update.value().expect("a value").max_requests, 7);
        watches.push(watch);
    }
    assert_eq!(server.stats().streams, 2, "one ADS stream per target");

    let csds = pool.csds_response().await;
    let scopes: Vec<&str> = csds
        .config
        .iter()
        .map(|c| c.client_scope.as_str())
        .collect();
    assert_eq!(scopes, [SERVER_TARGET, "xds:///a"]);
    for config in &csds.config {
        assert_eq!(
            config.node.as_ref().map(|n| n.id.as_str()),
            Some("async-std-pool")
        );
        let g = &config.generic_xds_configs[0];
        assert_eq!((g.name.as_str(), g.version_info.as_str()), ("c1", "v7"));
        assert_eq!(g.client_status, ClientResourceStatus::Acked as i32);
    }

    drop(watches);
    pool.shutdown().await;
    assert!(!a.is_running());
    server.stop().await;
}
