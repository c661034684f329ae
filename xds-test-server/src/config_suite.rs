//! The config-stream scenarios (gRFC A74 dependency manager, gRFC A31 config selector
//! in the driver), generic over the [`Runtime`] like [`crate::suite`]: each adapter's
//! `tests/config.rs` runs them on its own runtime against a [`LoopbackServer`].
//!
//! The mesh: listener `svc.example.com` → route configuration `svc-routes` (`/api`
//! split between `alpha` and `beta`, everything else to `alpha`) → two EDS clusters →
//! their endpoints; `gamma` is served but not routed.

use std::sync::Arc;

use futures::StreamExt;
use xds_adapter_common::{Client, ConfigStream, ConfigUpdate, Runtime};
use xds_proto_core::dependency::{ClusterResolution, XdsConfig};
use xds_proto_core::resource::route::{ClusterSpecifier, RouteAction};
use xds_proto_core::resource::{Cds, type_url};
use xds_proto_core::selector::Selection;
use xds_proto_core::{Bootstrap, Code, ErrorKind, Status, XdsError};
use xds_proto_testing::peer::Fixed;

use crate::resources::{
    PrefixRoute, RouteTarget, cluster, endpoints, forward, listener, plugin_action, prefix,
    prefix_routes_config, rc_any, rls_plugin, route_config_with,
};
use crate::suite::{PROMPT, server_saw, within};
use crate::{LoopbackServer, RecordedRequest};

const LDS: &str = type_url::LISTENER;
const RDS: &str = type_url::ROUTE_CONFIGURATION;
const CDS: &str = type_url::CLUSTER;
const EDS: &str = type_url::CLUSTER_LOAD_ASSIGNMENT;

const LISTENER: &str = "svc.example.com";
const ROUTES: &str = "svc-routes";

const NO_HEADERS: [(&str, &str); 0] = [];

fn routes(weights: Option<(u32, u32)>) -> xds_proto_core::pb::google::protobuf::Any {
    let mut routes = Vec::new();
    if let Some((alpha, beta)) = weights {
        routes.push(PrefixRoute {
            prefix: "/api".into(),
            target: RouteTarget::Weighted(vec![("alpha".into(), alpha), ("beta".into(), beta)]),
        });
    }
    routes.push(PrefixRoute {
        prefix: "/".into(),
        target: RouteTarget::Cluster("alpha".into()),
    });
    route_config_with(ROUTES, &[LISTENER], &routes)
}

fn serve_mesh(server: &LoopbackServer) {
    server.set_resources(LDS, "1", vec![listener(LISTENER, ROUTES)]);
    server.set_resources(RDS, "1", vec![routes(Some((70, 30)))]);
    server.set_resources(
        CDS,
        "1",
        vec![cluster("alpha"), cluster("beta"), cluster("gamma")],
    );
    server.set_resources(
        EDS,
        "1",
        vec![
            endpoints("alpha", &[1001, 1002]),
            endpoints("beta", &[2001]),
            endpoints("gamma", &[3001]),
        ],
    );
}

/// The next config that satisfies `done` (earlier ones are skipped: the stream
/// coalesces, so how many arrive in between is not fixed).
async fn config_where<R: Runtime>(
    rt: &R,
    stream: &mut ConfigStream,
    what: &str,
    mut done: impl FnMut(&ConfigUpdate) -> bool,
) -> ConfigUpdate {
    within(rt, PROMPT, what, async {
        loop {
            match stream.next().await {
                Some(Ok(update)) if done(&update) => return update,
                Some(_) => {}
                None => panic!("the config stream ended while waiting for {what}"),
            }
        }
    })
    .await
}

fn cluster_names(config: &XdsConfig) -> Vec<&str> {
    config.clusters.keys().map(String::as_str).collect()
}

fn ports(config: &XdsConfig, cluster: &str) -> Vec<u16> {
    let Some(Ok(c)) = config.cluster(cluster) else {
        panic!(
            "cluster {cluster:?} is not resolved: {:?}",
            config.cluster(cluster)
        )
    };
    let ClusterResolution::Endpoints {
        endpoints: Some(e), ..
    } = &c.children
    else {
        panic!("cluster {cluster:?} has no endpoints: {c:?}")
    };
    e.priorities
        .iter()
        .flat_map(|p| &p.localities)
        .flat_map(|l| &l.endpoints)
        .map(|e| e.address.port())
        .collect()
}

fn api_weights(config: &XdsConfig) -> Option<Vec<(String, u32)>> {
    let route = config.virtual_host().routes.first()?;
    match &route.action {
        RouteAction::Forward(f) => match &f.cluster {
            ClusterSpecifier::WeightedClusters(ws) => {
                Some(ws.iter().map(|w| (w.name.clone(), w.weight)).collect())
            }
            _ => None,
        },
        _ => None,
    }
}

fn pick(update: &ConfigUpdate, path: &str, draw: u32) -> Result<Selection, Status> {
    update.selector.select(path, &NO_HEADERS, &mut Fixed(draw))
}

fn picked(update: &ConfigUpdate, path: &str, draw: u32) -> String {
    match pick(update, path, draw) {
        Ok(s) => s.cluster().cluster().unwrap_or_default().to_string(),
        Err(e) => panic!("no pick for {path}: {e}"),
    }
}

/// The names the last request of a type subscribed, sorted.
fn subscribed(requests: &[RecordedRequest], type_url: &str) -> Vec<String> {
    let mut names = requests
        .iter()
        .rev()
        .find(|r| r.type_url == type_url)
        .map(|r| r.resource_names.clone())
        .unwrap_or_default();
    names.sort();
    names
}

/// A loopback server serving the mesh, a client (with `fail_on_data_errors` when
/// `features` says so) and its config stream for the listener.
async fn start<R: Runtime>(features: &str) -> (LoopbackServer, Client<R>, ConfigStream) {
    let server = LoopbackServer::start();
    serve_mesh(&server);
    let json = server
        .bootstrap_json("config-node", None)
        .replace(r#""server_features": ["xds_v3"]"#, features);
    assert!(json.contains(features), "{json}");
    let client = Client::<R>::builder(Bootstrap::from_json_str(&json).expect("bootstrap"))
        .seed(7)
        .build()
        .expect("client");
    let stream = client.watch_config(LISTENER).await.expect("watch config");
    assert_eq!(stream.listener_name(), LISTENER);
    (server, client, stream)
}

/// The whole A74/A31 path over a real ADS stream: the first config holds the listener,
/// the routes and both clusters with their endpoints, and its selector routes by path
/// and weight; a new route weight and a removed cluster each give a new config (the
/// removed cluster as its error, and RPCs routed to it fail with UNAVAILABLE).
pub async fn config_stream<R: Runtime>() {
    let rt = R::current().expect("a runtime");
    // A88: a cluster the server stops sending is removed (not kept as an ambient error)
    // only under fail_on_data_errors.
    let (server, client, mut stream) =
        start::<R>(r#""server_features": ["xds_v3", "fail_on_data_errors"]"#).await;

    // The first config: everything resolved, consistently.
    let first = config_where(&rt, &mut stream, "the first config", |_| true).await;
    let config = &first.config;
    assert_eq!(config.listener.name, LISTENER);
    assert_eq!(config.route_config.name, ROUTES);
    assert_eq!(config.virtual_host().name, format!("{ROUTES}-vhost"));
    assert_eq!(
        cluster_names(config),
        ["alpha", "beta"],
        "gamma is not routed"
    );
    assert_eq!(ports(config, "alpha"), [1001, 1002]);
    assert_eq!(ports(config, "beta"), [2001]);
    assert_eq!(
        api_weights(config),
        Some(vec![("alpha".into(), 70), ("beta".into(), 30)])
    );
    assert_eq!(first.selector.children(), ["cluster:alpha", "cluster:beta"]);
    let children = &first.lb_config[0]["xds_cluster_manager_experimental"]["children"];
    assert_eq!(
        children["cluster:beta"]["childPolicy"][0]["cds_experimental"]["cluster"], "beta",
        "{}",
        first.lb_config
    );
    assert_eq!(picked(&first, "/api.Echo/Say", 0), "alpha");
    assert_eq!(picked(&first, "/api.Echo/Say", u32::MAX), "beta");
    assert_eq!(picked(&first, "/health.Check/Ping", u32::MAX), "alpha");
    assert_eq!(
        pick(&first, "/api.Echo/Say", 0).map(|s| s.route_index()),
        Ok(0)
    );

    // A new weight gives a new config with the same clusters.
    server.set_resources(RDS, "2", vec![routes(Some((20, 80)))]);
    let reweighted = config_where(&rt, &mut stream, "the new weights", |u| {
        api_weights(&u.config) == Some(vec![("alpha".into(), 20), ("beta".into(), 80)])
    })
    .await;
    assert_eq!(cluster_names(&reweighted.config), ["alpha", "beta"]);
    assert!(Arc::ptr_eq(
        &reweighted.config.listener,
        &first.config.listener
    ));

    // A removed cluster stays in the config as its error; RPCs routed to it fail.
    server.set_resources(CDS, "2", vec![cluster("alpha"), cluster("gamma")]);
    let removed = config_where(&rt, &mut stream, "beta's removal", |u| {
        matches!(u.config.cluster("beta"), Some(Err(_)))
    })
    .await;
    let Some(Err(e)) = removed.config.cluster("beta") else {
        unreachable!()
    };
    assert_eq!(e.kind, ErrorKind::DoesNotExist, "{e}");
    assert!(e.status.message.contains("\"beta\""), "{e}");
    assert_eq!(ports(&removed.config, "alpha"), [1001, 1002]);
    let failed = pick(&removed, "/api.Echo/Say", u32::MAX).expect_err("beta is gone");
    assert_eq!(failed.code, Code::UNAVAILABLE);
    assert!(failed.message.contains("beta"), "{failed}");
    assert_eq!(picked(&removed, "/api.Echo/Say", 0), "alpha");

    drop((first, reweighted, removed));
    client.shutdown().await;
    server.stop().await;
}

/// A31's two-step removal through the driver: the selector's picks and `hold_cluster`
/// keep clusters watched and in the config after the routes drop them, until released;
/// and dropping the stream unsubscribes everything it watched, leaving other watches
/// of the client alone.
pub async fn config_stream_holds_clusters<R: Runtime>() {
    let rt = R::current().expect("a runtime");
    let (server, client, mut stream) = start::<R>(r#""server_features": ["xds_v3"]"#).await;
    let first = config_where(&rt, &mut stream, "the first config", |_| true).await;
    // An RPC on beta.
    let rpc = pick(&first, "/api.Echo/Say", u32::MAX).expect("a pick");
    assert_eq!(rpc.cluster().cluster(), Some("beta"));
    drop(first);

    // The routes drop beta; the in-flight RPC keeps it watched and in the config.
    server.set_resources(RDS, "3", vec![routes(None)]);
    let narrowed = config_where(&rt, &mut stream, "routes without /api", |u| {
        api_weights(&u.config).is_none()
    })
    .await;
    assert_eq!(narrowed.selector.children(), ["cluster:alpha"]);
    assert!(
        narrowed.lb_config.to_string().contains("cluster:beta"),
        "the LB config keeps beta's child: {}",
        narrowed.lb_config
    );
    assert_eq!(
        cluster_names(&narrowed.config),
        ["alpha", "beta"],
        "the RPC on beta holds it"
    );
    assert_eq!(ports(&narrowed.config, "beta"), [2001]);

    // An explicit hold brings in a cluster no route uses.
    let gamma = stream.hold_cluster("gamma").await.expect("hold gamma");
    let held = config_where(&rt, &mut stream, "gamma held", |u| {
        u.config.cluster("gamma").is_some()
    })
    .await;
    assert_eq!(ports(&held.config, "gamma"), [3001]);
    assert_eq!(cluster_names(&held.config), ["alpha", "beta", "gamma"]);
    drop((narrowed, held));

    // Released: the RPC commits, the data plane lets go of gamma.
    drop(rpc);
    drop(gamma);
    let released = config_where(&rt, &mut stream, "beta and gamma released", |u| {
        cluster_names(&u.config) == ["alpha"]
    })
    .await;
    assert_eq!(picked(&released, "/api.Echo/Say", u32::MAX), "alpha");
    assert!(
        !released.lb_config.to_string().contains("cluster:beta"),
        "{}",
        released.lb_config
    );
    server_saw(&rt, &server, "only alpha subscribed", |reqs, _| {
        (subscribed(reqs, CDS) == ["alpha"] && subscribed(reqs, EDS) == ["alpha"]).then_some(())
    })
    .await;

    // Dropping the stream cancels every watch it caused, and only those: a plain watch
    // of the same client keeps its subscription (and the ADS stream) going.
    let plain = client.watch::<Cds>("gamma").await.expect("watch gamma");
    server_saw(&rt, &server, "the plain watch subscribed", |reqs, _| {
        (subscribed(reqs, CDS) == ["alpha", "gamma"]).then_some(())
    })
    .await;
    drop(released);
    drop(stream);
    server_saw(
        &rt,
        &server,
        "the config stream's subscriptions dropped",
        |reqs, _| {
            (subscribed(reqs, LDS).is_empty()
                && subscribed(reqs, RDS).is_empty()
                && subscribed(reqs, CDS) == ["gamma"]
                && subscribed(reqs, EDS).is_empty())
            .then_some(())
        },
    )
    .await;
    drop(plain);
    server_saw(
        &rt,
        &server,
        "nothing subscribed, the stream closed",
        |_, stats| (stats.open_streams == 0).then_some(()),
    )
    .await;
    client.shutdown().await;
    server.stop().await;
}

/// The route configuration: `/rls` to the cluster specifier plugin `rls-a` (declared)
/// when `with_plugin`, everything else to `alpha`.
fn plugin_routes(with_plugin: bool) -> xds_proto_core::pb::google::protobuf::Any {
    let mut rc = prefix_routes_config(ROUTES, &[LISTENER], &[PrefixRoute::cluster("/", "alpha")]);
    if with_plugin {
        let routes = &mut rc.virtual_hosts[0].routes;
        routes.insert(0, forward(prefix("/rls"), plugin_action("rls-a")));
        rc.cluster_specifier_plugins.push(rls_plugin("rls-a"));
    }
    rc_any(&rc)
}

/// A cluster specifier plugin child stays in the LB config while an RPC routed to it
/// is in flight, after the routes stopped naming it (A31), and leaves it, in a new
/// config, once that RPC ends.
pub async fn config_stream_releases_plugins<R: Runtime>() {
    let rt = R::current().expect("a runtime");
    let (server, client, mut stream) = start::<R>(r#""server_features": ["xds_v3"]"#).await;
    server.set_resources(RDS, "2", vec![plugin_routes(true)]);
    const CHILD: &str = "cluster_specifier_plugin:rls-a";
    let first = config_where(&rt, &mut stream, "routes with the plugin", |u| {
        u.selector.children().contains(&CHILD)
    })
    .await;
    let rpc = pick(&first, "/rls.Lookup/Get", 0).expect("a pick");
    assert_eq!(rpc.cluster().plugin(), Some("rls-a"));
    assert!(
        first.lb_config.to_string().contains(CHILD),
        "{}",
        first.lb_config
    );
    drop(first);

    // The routes drop the plugin; the RPC keeps its child in the LB config.
    server.set_resources(RDS, "3", vec![plugin_routes(false)]);
    let narrowed = config_where(&rt, &mut stream, "routes without the plugin", |u| {
        u.selector.children() == ["cluster:alpha"]
    })
    .await;
    assert!(
        narrowed.lb_config.to_string().contains(CHILD),
        "the in-flight RPC keeps the plugin's child: {}",
        narrowed.lb_config
    );
    drop(narrowed);

    // The RPC ends: a new config, same routes, LB config without the plugin's child.
    drop(rpc);
    let released = config_where(&rt, &mut stream, "the plugin's child released", |u| {
        !u.lb_config.to_string().contains(CHILD)
    })
    .await;
    assert_eq!(released.selector.children(), ["cluster:alpha"]);
    assert!(
        released.lb_config.to_string().contains("cluster:alpha"),
        "{}",
        released.lb_config
    );
    assert_eq!(picked(&released, "/rls.Lookup/Get", 0), "alpha");
    drop(released);
    drop(stream);
    client.shutdown().await;
    server.stop().await;
}

/// A listener that does not exist fails the target with the core's error, and a
/// listener that appears later gives a config; shutting the client down ends the
/// stream.
pub async fn config_stream_errors<R: Runtime>() {
    let rt = R::current().expect("a runtime");
    let server = LoopbackServer::start();
    serve_mesh(&server);
    server.set_resources(LDS, "1", vec![]);
    let json = server.bootstrap_json("config-node", None);
    let client = Client::<R>::builder(Bootstrap::from_json_str(&json).expect("bootstrap"))
        .seed(7)
        .resource_timeout(std::time::Duration::from_millis(300))
        .build()
        .expect("client");
    let mut stream = client.watch_config(LISTENER).await.expect("watch config");
    let error: XdsError = within(&rt, PROMPT, "the listener's error", stream.next())
        .await
        .expect("an item")
        .expect_err("no listener");
    assert_eq!(error.kind, ErrorKind::DoesNotExist, "{error}");
    assert_eq!(error.status.code, Code::UNAVAILABLE);
    assert!(error.status.message.contains(LISTENER), "{error}");

    server.set_resources(LDS, "2", vec![listener(LISTENER, ROUTES)]);
    let update = config_where(&rt, &mut stream, "a config", |_| true).await;
    assert_eq!(cluster_names(&update.config), ["alpha", "beta"]);

    client.shutdown().await;
    assert!(
        stream.next().await.is_none(),
        "shutdown ends the config stream"
    );
    assert!(matches!(
        stream.hold_cluster("alpha").await,
        Err(xds_adapter_common::Error::Shutdown)
    ));
    server.stop().await;
}
