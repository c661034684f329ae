//! Config streams on tokio (gRFC A74 dependency manager and A31 config selector run by
//! the driver) against the loopback management server: the shared scenarios of
//! `xds_test_server::config_suite`.

use xds_adapter_tokio::TokioRuntime;
use xds_test_server::config_suite;

#[tokio::test]
async fn config_stream_follows_the_mesh_and_routes_rpcs() {
    config_suite::config_stream::<TokioRuntime>().await;
}

#[tokio::test]
async fn clusters_in_use_stay_until_released_and_dropping_the_stream_cancels_its_watches() {
    config_suite::config_stream_holds_clusters::<TokioRuntime>().await;
}

#[tokio::test]
async fn a_plugin_child_stays_in_the_lb_config_until_its_last_rpc_ends() {
    config_suite::config_stream_releases_plugins::<TokioRuntime>().await;
}

#[tokio::test]
async fn config_stream_reports_a_missing_listener_and_ends_on_shutdown() {
    config_suite::config_stream_errors::<TokioRuntime>().await;
}

/// gRFC A47 on a real ADS stream: `watch_config_for_target` names the listener through
/// the bootstrap's templates (the default one for `xds:///`, the authority's `xdstp:`
/// one, percent-encoded, for `xds://authority/`) and picks virtual hosts by the
/// target's path, which matches the routes' only domain while the listener names do not.
#[tokio::test]
async fn config_for_target_uses_the_listener_name_templates() {
    use std::time::Duration;

    use futures::StreamExt;
    use xds_adapter_tokio::xds_proto_core::resource::type_url;
    use xds_adapter_tokio::{Bootstrap, Client, ConfigStream, Error};
    use xds_test_server::LoopbackServer;
    use xds_test_server::resources::{
        PrefixRoute, cluster, endpoints, listener, route_config_with,
    };

    const DEFAULT_LISTENER: &str = "lds/svc.example.com:8443";
    const AUTHORITY_LISTENER: &str =
        "xdstp://a.example/envoy.config.listener.v3.Listener/svc.example.com:8443";

    async fn first_cluster(stream: &mut ConfigStream) -> Vec<String> {
        let update = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("a config in time")
            .expect("the stream is open")
            .expect("a resolved config");
        update.config.clusters.keys().cloned().collect()
    }

    let server = LoopbackServer::start();
    let routes = route_config_with(
        "routes",
        &["svc.example.com:8443"],
        &[PrefixRoute::cluster("", "alpha")],
    );
    server.set_resources(
        type_url::LISTENER,
        "1",
        vec![
            listener(DEFAULT_LISTENER, "routes"),
            listener(AUTHORITY_LISTENER, "routes"),
        ],
    );
    server.set_resources(type_url::ROUTE_CONFIGURATION, "1", vec![routes]);
    server.set_resources(type_url::CLUSTER, "1", vec![cluster("alpha")]);
    server.set_resources(
        type_url::CLUSTER_LOAD_ASSIGNMENT,
        "1",
        vec![endpoints("alpha", &[1001])],
    );
    let json = server.bootstrap_json("target-node", None).replacen(
        "{",
        r#"{"client_default_listener_resource_name_template": "lds/%s", "authorities": {"a.example": {}},"#,
        1,
    );
    let client = Client::builder(Bootstrap::from_json_str(&json).expect("bootstrap"))
        .build()
        .expect("client");

    let mut by_default = client
        .watch_config_for_target("xds:///svc.example.com:8443")
        .await
        .expect("watch the default template's listener");
    assert_eq!(by_default.listener_name(), DEFAULT_LISTENER);
    assert_eq!(first_cluster(&mut by_default).await, ["alpha"]);

    let mut by_authority = client
        .watch_config_for_target("xds://a.example/svc.example.com:8443")
        .await
        .expect("watch the authority's listener");
    assert_eq!(by_authority.listener_name(), AUTHORITY_LISTENER);
    assert_eq!(first_cluster(&mut by_authority).await, ["alpha"]);

    let refused = client
        .watch_config_for_target("xds://nope.example/svc")
        .await
        .expect_err("an unknown authority");
    assert!(matches!(refused, Error::Target { .. }), "{refused:?}");
    assert_eq!(
        refused.to_string(),
        r#"target "xds://nope.example/svc": authority "nope.example" is not in the bootstrap's authorities"#
    );

    drop((by_default, by_authority));
    client.shutdown().await;
    server.stop().await;
}
