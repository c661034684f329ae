//! The set-up the mTLS scenarios share: the mesh PKI's server providers written, a
//! loopback control plane serving the client's `xds:///` target (listener, routes, an
//! mTLS cluster whose one endpoint is the xDS-enabled server) beside the server's own
//! Listener, an `XdsChannel` presenting `client-1`, and the server's `Client` with the
//! listener name template and its certificate providers.

use std::net::SocketAddr;

use xds_adapter_common::{
    CertificateProviders, Client, ClientPool, FallbackCredentials, Runtime, XdsChannel,
};
use xds_proto_core::pb::google::protobuf::Any;
use xds_proto_core::resource::type_url;

use super::{CLIENT_LISTENER, CLIENT_ROUTES, CLUSTER, TARGET, free_port};
use crate::LoopbackServer;
use crate::resources::{SERVER_LISTENER_TEMPLATE, endpoints, listener, mtls_cluster, route_config};
use crate::security_suite::{INSTANCE, MeshPki, SERVER_ID, bootstrap_with_providers};

/// What a scenario drives: keep `control` and `pool` for as long as the channel runs.
pub(super) struct Mesh<R: Runtime> {
    pub(super) control: LoopbackServer,
    pub(super) addr: SocketAddr,
    pub(super) pool: ClientPool<R>,
    pub(super) channel: XdsChannel<R>,
    pub(super) server_client: Client<R>,
}

/// The mesh on a free loopback port, the server's Listener made by `server_listener`
/// for that address; the channel's node is `channel_node`.
pub(super) fn mesh<R: Runtime>(
    rt: &R,
    pki: &MeshPki,
    channel_node: &str,
    server_listener: impl FnOnce(SocketAddr) -> Any,
) -> Mesh<R> {
    let server_providers = pki.write_server(&pki.server(false, false));
    let control = LoopbackServer::start();
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    control.set_resources(
        type_url::LISTENER,
        "1",
        vec![
            listener(CLIENT_LISTENER, CLIENT_ROUTES),
            server_listener(addr),
        ],
    );
    control.set_resources(
        type_url::ROUTE_CONFIGURATION,
        "1",
        vec![route_config(CLIENT_ROUTES, CLUSTER)],
    );
    control.set_resources(
        type_url::CLUSTER,
        "1",
        vec![mtls_cluster(CLUSTER, INSTANCE, &[SERVER_ID])],
    );
    control.set_resources(
        type_url::CLUSTER_LOAD_ASSIGNMENT,
        "1",
        vec![endpoints(CLUSTER, &[u32::from(addr.port())])],
    );
    let client_bootstrap = bootstrap_with_providers(&control, channel_node, &pki.provider_json());
    let providers = CertificateProviders::start(rt, &client_bootstrap).expect("providers");
    let pool = ClientPool::<R>::builder(client_bootstrap)
        .build_pool()
        .expect("a pool");
    let channel = XdsChannel::<R>::builder(TARGET)
        .pool(&pool)
        .xds_credentials_with(FallbackCredentials::Insecure, providers)
        .build()
        .expect("a channel");
    let server_json = control.bootstrap_json("xds-server", None).replacen(
        r#""node""#,
        &format!(
            r#""server_listener_resource_name_template": "{SERVER_LISTENER_TEMPLATE}", "certificate_providers": {server_providers}, "node""#
        ),
        1,
    );
    let server_client = Client::<R>::from_bootstrap_json(&server_json).expect("server client");
    Mesh {
        control,
        addr,
        pool,
        channel,
        server_client,
    }
}
