//! Per-RPC overhead of an mTLS `XdsChannel` (xDS credentials, gRFC A29) against a plain
//! tonic TLS channel with the same certificates, to the same loopback echo backend,
//! side by side in one run (issue 21).
//!
//! The backend terminates TLS and requires a client certificate of the mesh CA (the
//! security suite's throwaway PKI). The xDS channel resolves `xds:///bench.example.com`
//! through the loopback control plane to a one-endpoint cluster whose
//! `UpstreamTlsContext` names the bootstrap's `file_watcher` provider (identity, roots,
//! the server's SPIFFE ID as the SAN accepted); the plain channel is tonic's `Channel`
//! over a tokio-rustls connector with the same CA and client certificate (webpki's
//! hostname check on the server's DNS SAN). Both hold one HTTP/2 connection made before
//! the measurement, so the figure is the per-RPC cost: routing, the pick, the call
//! accounting, and the TLS record layer on both sides.
//!
//! Sequential unary RPCs; rounds alternate between the channels and the p50 of each
//! side is taken over all its rounds.
//!
//! Run: `cargo bench -p xds-adapter-tokio --bench channel_mtls` (about 20 s).

mod support;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use support::{latencies, p50};
use tonic::transport::{Channel, Endpoint};
use xds_adapter_tokio::xds_proto_core::resource::type_url;
use xds_adapter_tokio::{ClientPool, FallbackCredentials, XdsChannel};
use xds_test_server::LoopbackServer;
use xds_test_server::echo::EchoBackend;
use xds_test_server::resources::{endpoints, listener, mtls_cluster, route_config};
use xds_test_server::security_suite::{
    INSTANCE, MeshPki, SERVER_DNS, SERVER_ID, bootstrap_with_providers,
};

const ROUNDS: usize = 10;
const RPCS_PER_ROUND: usize = 2_000;

/// tonic's connector for the plain TLS channel: TCP, then tokio-rustls.
#[derive(Clone)]
struct TlsConnector {
    config: Arc<rustls::ClientConfig>,
    addr: std::net::SocketAddr,
}

type Io = hyper_util::rt::TokioIo<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>;

impl tower_service::Service<http::Uri> for TlsConnector {
    type Response = Io;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = std::io::Result<Io>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _uri: http::Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let tcp = tokio::net::TcpStream::connect(this.addr).await?;
            tcp.set_nodelay(true)?;
            let name = ServerName::try_from(SERVER_DNS).expect("a DNS name");
            let tls = tokio_rustls::TlsConnector::from(this.config)
                .connect(name, tcp)
                .await?;
            Ok(hyper_util::rt::TokioIo::new(tls))
        })
    }
}

/// The plain channel's rustls config: the mesh CA, the client's certificate, `h2`.
fn plain_tls_config(pki: &MeshPki) -> Arc<rustls::ClientConfig> {
    let read = |name: &str| std::fs::read(pki.path(name)).expect("a PKI file");
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(&read("ca.pem")) {
        roots.add(ca.expect("a CA certificate")).expect("a root");
    }
    let chain = CertificateDer::pem_slice_iter(&read("client.pem"))
        .collect::<Result<Vec<_>, _>>()
        .expect("the client's chain");
    let key = PrivateKeyDer::from_pem_slice(&read("client.key")).expect("the client's key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .expect("the client certificate");
    config.alpn_protocols = vec![b"h2".to_vec()];
    Arc::new(config)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    rt.block_on(async {
        let pki = MeshPki::generate();
        let backend = EchoBackend::start_tls("bench", pki.server_config(&pki.server(false, false)));
        let server = LoopbackServer::start();
        server.set_resources(
            type_url::LISTENER,
            "1",
            vec![listener("bench.example.com", "bench-routes")],
        );
        server.set_resources(
            type_url::ROUTE_CONFIGURATION,
            "1",
            vec![route_config("bench-routes", "bench")],
        );
        server.set_resources(
            type_url::CLUSTER,
            "1",
            vec![mtls_cluster("bench", INSTANCE, &[SERVER_ID])],
        );
        server.set_resources(
            type_url::CLUSTER_LOAD_ASSIGNMENT,
            "1",
            vec![endpoints("bench", &[u32::from(backend.port())])],
        );
        let bootstrap = bootstrap_with_providers(&server, "bench", &pki.provider_json());
        let pool = ClientPool::builder(bootstrap).build_pool().expect("a pool");
        let xds = XdsChannel::builder("xds:///bench.example.com")
            .pool(&pool)
            .seed(1)
            .xds_credentials(FallbackCredentials::Insecure)
            .build()
            .expect("an xDS channel");
        let connector = TlsConnector {
            config: plain_tls_config(&pki),
            addr: backend.addr(),
        };
        let plain: Channel = Endpoint::from_shared(format!("https://{SERVER_DNS}"))
            .expect("an endpoint")
            .connect_with_connector(connector)
            .await
            .expect("a plain tonic TLS channel");

        // Warm both up (connections, the xDS configuration).
        latencies(&plain, 500).await;
        latencies(&xds, 500).await;

        let (mut plain_lat, mut xds_lat) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            plain_lat.extend(latencies(&plain, RPCS_PER_ROUND).await);
            xds_lat.extend(latencies(&xds, RPCS_PER_ROUND).await);
        }
        let (plain_p50, xds_p50) = (p50(plain_lat), p50(xds_lat));
        println!("per-RPC overhead of an mTLS XdsChannel vs a plain tonic TLS channel (same mTLS backend)");
        println!(
            "p50 latency   tonic TLS {:>8.1} µs   xds mTLS {:>8.1} µs   ratio {:.3}x (target <= 1.1x)",
            plain_p50.as_secs_f64() * 1e6,
            xds_p50.as_secs_f64() * 1e6,
            xds_p50.as_secs_f64() / plain_p50.as_secs_f64()
        );
        let connections = backend.tls_client_certificates();
        println!(
            "backend served {} RPCs on {} TLS connections, each with a client certificate: {}",
            backend.served(),
            connections.len(),
            connections.iter().all(|c| !c.is_empty())
        );
    });
}
