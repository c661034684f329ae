//! `XdsChannel::new` on the process's default client pool, whose bootstrap comes from
//! `GRPC_XDS_BOOTSTRAP_CONFIG`. Its own test binary with a single test: the variable
//! is set once, before the default pool is first used, and nothing else in the process
//! reads or writes the environment.
//!
//! The bootstrap's `client_default_listener_resource_name_template` puts every
//! listener under `xds.test/listeners/`, and the loopback server serves only those
//! names: RPCs succeed only if the channel applied the template (gRFC A47).

use xds_adapter_tokio::xds_proto_core::bootstrap::TargetError;
use xds_adapter_tokio::xds_proto_core::resource::type_url;
use xds_adapter_tokio::{Error, Runtime, TokioRuntime, XdsChannel};
use xds_test_server::LoopbackServer;
use xds_test_server::echo::{EchoBackend, call_echo, echo_request};
use xds_test_server::resources::{cluster, endpoints, listener, route_config};
use xds_test_server::suite::{PROMPT, within};

const TEMPLATE: &str = "xds.test/listeners/%s";
const ROUTES: &str = "echo-routes";

/// The bootstrap: the loopback server, and the listener name template.
fn bootstrap_json(server: &LoopbackServer) -> String {
    format!(
        r#"{{"xds_servers": [{{"server_uri": "{}", "channel_creds": [{{"type": "insecure"}}],
              "server_features": ["xds_v3"]}}],
            "node": {{"id": "default-pool", "cluster": "loopback-test"}},
            "client_default_listener_resource_name_template": "{TEMPLATE}"}}"#,
        server.uri()
    )
}

/// Sends `n` echo RPCs through `channel` and returns the backends that answered.
async fn echo_backends(channel: &XdsChannel, n: usize) -> Vec<String> {
    let rt = TokioRuntime::current().expect("a runtime");
    let mut backends = Vec::new();
    for i in 0..n {
        let reply = within(
            &rt,
            PROMPT,
            "an echo RPC",
            call_echo(channel.clone(), echo_request(&format!("rpc {i}"))),
        )
        .await
        .expect("the RPC reaches a backend");
        backends.push(reply.backend);
    }
    backends
}

#[test]
fn default_pool_reads_the_environment_applies_the_template_and_shares_clients() {
    let server = LoopbackServer::start();
    // SAFETY: the only other threads are the loopback server's, which never touch the
    // environment; the default pool reads it later, on this thread.
    unsafe { std::env::set_var("GRPC_XDS_BOOTSTRAP_CONFIG", bootstrap_json(&server)) };
    let backends = ["echo-1", "echo-2"].map(EchoBackend::start);
    let ports: Vec<u32> = backends.iter().map(|b| u32::from(b.port())).collect();
    let templated = |name: &str| TEMPLATE.replace("%s", name);
    server.set_resources(
        type_url::LISTENER,
        "1",
        vec![
            listener(&templated("echo.example.com"), ROUTES),
            listener(&templated("other.example.com"), ROUTES),
        ],
    );
    server.set_resources(
        type_url::ROUTE_CONFIGURATION,
        "1",
        vec![route_config(ROUTES, "echo")],
    );
    server.set_resources(type_url::CLUSTER, "1", vec![cluster("echo")]);
    server.set_resources(
        type_url::CLUSTER_LOAD_ASSIGNMENT,
        "1",
        vec![endpoints("echo", &ports)],
    );
    server.record_requests(true);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    rt.block_on(async {
        let first = XdsChannel::new("xds:///echo.example.com").expect("a channel");
        let answered = echo_backends(&first, 10).await;
        assert!(answered.iter().any(|b| b == "echo-1"), "{answered:?}");
        assert!(answered.iter().any(|b| b == "echo-2"), "{answered:?}");
        assert_eq!(backends[0].served() + backends[1].served(), 10);

        // The client asked for the templated listener name, never the bare one.
        let lds_names: Vec<String> = server
            .requests()
            .into_iter()
            .filter(|r| r.type_url == type_url::LISTENER)
            .flat_map(|r| r.resource_names)
            .collect();
        assert!(
            lds_names.contains(&templated("echo.example.com")),
            "{lds_names:?}"
        );
        assert!(
            !lds_names.iter().any(|n| n == "echo.example.com"),
            "{lds_names:?}"
        );

        // A second channel to the same target shares the first one's client: the
        // server still sees one connection and one ADS stream.
        let second = XdsChannel::new("xds:///echo.example.com").expect("a channel");
        assert_eq!(echo_backends(&second, 4).await.len(), 4);
        let stats = server.stats();
        assert_eq!((stats.connections, stats.streams), (1, 1), "{stats:?}");

        // Another target gets its own client (gRFC A71): a second stream.
        let other = XdsChannel::new("xds:///other.example.com").expect("a channel");
        assert_eq!(echo_backends(&other, 4).await.len(), 4);
        let stats = server.stats();
        assert_eq!((stats.connections, stats.streams), (2, 2), "{stats:?}");

        // Bad targets are typed errors when the channel is built.
        match XdsChannel::new("http://x") {
            Err(Error::Target {
                error: TargetError::NotXds(scheme),
                ..
            }) => assert_eq!(scheme, "http"),
            other => panic!("{other:?}"),
        }
        match XdsChannel::new("xds://nowhere.example/svc") {
            Err(Error::Target {
                error: TargetError::UnknownAuthority(authority),
                ..
            }) => assert_eq!(authority, "nowhere.example"),
            other => panic!("{other:?}"),
        }
        assert_eq!(backends[0].served() + backends[1].served(), 18);
    });
}
