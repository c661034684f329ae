//! The mTLS half of the gRPC-Go interop (gRFC A29): one control plane and one set of
//! certificate files (the security suite's mesh PKI, read by `file_watcher` providers
//! `mesh` for clients and `server` for servers, in one bootstrap) drive a gRPC-Go xDS
//! server with `XdsServerCredentials` and a tonic server with this project's
//! `XdsServerCredentials`; `XdsChannel` with xDS credentials calls the first, gRPC-Go's
//! xDS client with `XdsCredentials` the second. Then the cluster's SAN matcher is
//! changed to one the servers' certificate does not satisfy, and both clients fail
//! with UNAVAILABLE.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use xds_adapter_tokio::{
    CertificateProviders, ClientPool, FallbackCredentials, TokioRuntime, XdsChannel,
    XdsServerCredentials,
};
use xds_proto_core::Bootstrap;
use xds_proto_core::pb::google::protobuf::Any;
use xds_proto_core::resource::listener::ListenerKind;
use xds_proto_core::resource::{DecodeContext, Lds, XdsResourceType, type_url};
use xds_test_server::LoopbackServer;
use xds_test_server::echo::{EchoBackend, call_echo, echo_request};
use xds_test_server::resources::{
    SERVER_LISTENER_TEMPLATE, any, downstream_tls_context, endpoints, listener, mtls_cluster,
    route_config, server_listener_name, tls_server_listener_msg,
};
use xds_test_server::security_suite::{INSTANCE, MeshPki, SERVER_ID};

use super::peer::{BootstrapFile, ClientReport, GoServer, run_client};

const TARGET: &str = "xds:///secure.example.com";
const LISTENER: &str = "secure.example.com";
const ROUTES: &str = "secure-routes";
const CLUSTER: &str = "secure-echo";
const RPCS: u64 = 20;
const WRONG_SAN: &str = "spiffe://mesh.test/ns/default/sa/other";

/// The server listener of a server on `port`, with mTLS from provider `server`.
fn mtls_server_listener(port: u16) -> Any {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let context = downstream_tls_context("server", Some("server"), true);
    let name = server_listener_name(SERVER_LISTENER_TEMPLATE, addr);
    any(
        type_url::LISTENER,
        &tls_server_listener_msg(&name, "127.0.0.1", u32::from(port), Some(&context)),
    )
}

/// The control plane, the PKI, the bootstrap, and the two mTLS servers.
pub struct MtlsMesh {
    go: GoServer,
    rust: EchoBackend,
    bootstrap: BootstrapFile,
    control_plane: LoopbackServer,
    _pki: MeshPki,
}

impl MtlsMesh {
    pub async fn start(binary: &Path) -> MtlsMesh {
        let pki = MeshPki::generate();
        let server_providers = pki.write_server(&pki.server(false, false));
        let mut providers: Value = serde_json::from_str(&pki.provider_json()).expect("JSON");
        let server: Value = serde_json::from_str(&server_providers).expect("JSON");
        providers["server"] = server["server"].clone();
        let control_plane = LoopbackServer::start();
        let bootstrap = BootstrapFile::new(&control_plane, "grpc-go-mtls", Some(providers));
        let mut go = GoServer::start(binary, &bootstrap, "go-tls", &[]).await;
        let rust = rust_server(&bootstrap);
        control_plane.set_resources(
            type_url::LISTENER,
            "1",
            vec![
                listener(LISTENER, ROUTES),
                mtls_server_listener(go.addr().port()),
            ],
        );
        control_plane.set_resources(
            type_url::ROUTE_CONFIGURATION,
            "1",
            vec![route_config(ROUTES, CLUSTER)],
        );
        go.wait_serving().await;
        MtlsMesh {
            go,
            rust,
            bootstrap,
            control_plane,
            _pki: pki,
        }
    }

    /// Serves the cluster with `sans` accepted, its endpoint on `port`.
    fn serve(&self, version: &str, sans: &[&str], port: u16) {
        self.control_plane.set_resources(
            type_url::CLUSTER,
            version,
            vec![mtls_cluster(CLUSTER, INSTANCE, sans)],
        );
        self.control_plane.set_resources(
            type_url::CLUSTER_LOAD_ASSIGNMENT,
            version,
            vec![endpoints(CLUSTER, &[u32::from(port)])],
        );
    }
}

/// The tonic (hyper) echo server with this project's `XdsServerCredentials`, from the
/// same server listener decoded through the core with the shared bootstrap.
fn rust_server(bootstrap: &BootstrapFile) -> EchoBackend {
    let parsed = Bootstrap::from_json_str(bootstrap.json()).expect("the bootstrap");
    let rt = TokioRuntime::new(tokio::runtime::Handle::current());
    let providers = CertificateProviders::start(&rt, &parsed).expect("the providers");
    let lds = mtls_server_listener(0);
    let (_, listener) =
        Lds::decode_in(&DecodeContext::new(&parsed), &lds.value).expect("the LDS decodes");
    let ListenerKind::Server(xds_proto_core::resource::ServerListener { filter_chains, .. }) =
        &listener.kind
    else {
        panic!("a server listener")
    };
    let tls = filter_chains[0]
        .tls
        .clone()
        .expect("the chain's DownstreamTls");
    let credentials = XdsServerCredentials::new(tls, providers);
    EchoBackend::start_tls("rust-tls", credentials.server_config().expect("a config"))
}

/// `RPCS` RPCs of `XdsChannel` with xDS credentials: replies by backend, and the
/// first failure.
async fn xds_channel_rpcs(mesh: &MtlsMesh) -> (u64, Option<tonic::Status>) {
    let pool = ClientPool::from_bootstrap_json(mesh.bootstrap.json()).expect("a pool");
    let channel = XdsChannel::builder(TARGET)
        .pool(&pool)
        .seed(29)
        .xds_credentials(FallbackCredentials::Insecure)
        .build()
        .expect("a channel");
    let mut ok = 0;
    let mut failure = None;
    for i in 0..RPCS {
        let call = call_echo(channel.clone(), echo_request(&format!("rust {i}")));
        match tokio::time::timeout(Duration::from_secs(20), call).await {
            Ok(Ok(reply)) => {
                assert_eq!(reply.backend, "go-tls");
                ok += 1;
            }
            Ok(Err(status)) => {
                failure.get_or_insert(status);
            }
            Err(_) => panic!("an RPC of XdsChannel took over 20 s"),
        }
    }
    (ok, failure)
}

async fn grpc_go_rpcs(binary: &Path, mesh: &MtlsMesh) -> ClientReport {
    let rpcs = RPCS.to_string();
    let args = [
        "-target",
        TARGET,
        "-rpcs",
        &rpcs,
        "-xds-creds",
        "-timeout",
        "5s",
    ];
    run_client(binary, &mesh.bootstrap, &args).await
}

/// Both directions with mTLS, then both with a SAN mismatch; prints the messages.
pub async fn both_directions(binary: &Path) {
    let mesh = MtlsMesh::start(binary).await;
    // XdsChannel (xDS credentials) -> gRPC-Go xDS server (XdsServerCredentials).
    mesh.serve("1", &[SERVER_ID], mesh.go.addr().port());
    let (ok, failure) = xds_channel_rpcs(&mesh).await;
    assert_eq!((ok, failure.as_ref().map(|s| s.message())), (RPCS, None));
    println!("XdsChannel -> gRPC-Go server, mTLS: {ok}/{RPCS} OK");

    // gRPC-Go xDS client (XdsCredentials) -> tonic server (XdsServerCredentials).
    mesh.serve("2", &[SERVER_ID], mesh.rust.port());
    let report = grpc_go_rpcs(binary, &mesh).await;
    println!("gRPC-Go client -> tonic server, mTLS: {report:?}");
    assert_eq!(report.backends.get("rust-tls"), Some(&RPCS), "{report:?}");
    let seen = mesh.rust.tls_client_certificates();
    assert!(
        !seen.is_empty() && seen.iter().all(|c| !c.is_empty()),
        "gRPC-Go presented its certificate on every connection"
    );

    // A SAN mismatch, both ways.
    mesh.serve("3", &[WRONG_SAN], mesh.go.addr().port());
    let (ok, failure) = xds_channel_rpcs(&mesh).await;
    let failure = failure.expect("XdsChannel refuses the gRPC-Go server");
    println!(
        "XdsChannel -> gRPC-Go server, SAN mismatch: {ok}/{RPCS} OK, {:?}: {}",
        failure.code(),
        failure.message()
    );
    assert_eq!(ok, 0);
    assert_eq!(failure.code(), tonic::Code::Unavailable);
    assert!(failure.message().contains("certificate SANs do not match"));

    mesh.serve("4", &[WRONG_SAN], mesh.rust.port());
    let report = grpc_go_rpcs(binary, &mesh).await;
    println!("gRPC-Go client -> tonic server, SAN mismatch: {report:?}");
    assert!(report.backends.is_empty(), "{report:?}");
    let unavailable = report.statuses.get(&14).expect("UNAVAILABLE");
    assert_eq!(unavailable.count, RPCS, "{report:?}");
}
