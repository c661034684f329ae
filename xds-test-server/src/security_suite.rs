//! The A29 scenarios of `XdsChannel` with xDS credentials, generic over the
//! [`Runtime`] like [`crate::channel_suite`]: a throwaway mesh PKI (rcgen), echo
//! backends terminating TLS on loopback, the loopback control plane serving one
//! cluster, `secure`, whose `transport_socket` and endpoints each step changes, and a
//! bootstrap whose `file_watcher` provider `mesh` reads the client's files.
//!
//! The steps, in order, on one channel: mTLS end to end; a SAN mismatch, an unknown
//! CA, an expired server certificate and a missing client certificate, each failing
//! the RPC with UNAVAILABLE naming the cause; a CDS update turning TLS off and on
//! again (the same address re-dialled with the new config, an RPC in flight across
//! the change finishing); and rotation of the client certificate by rewriting its
//! files (new connections present the new one, an RPC in flight is unaffected).

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
    SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use xds_adapter_common::{
    CertificateProviders, ClientPool, FallbackCredentials, Runtime, XdsChannel,
    XdsServerCredentials,
};
use xds_proto_core::Bootstrap;
use xds_proto_core::pb::google::protobuf::Any;
use xds_proto_core::resource::listener::ListenerKind;
use xds_proto_core::resource::type_url;
use xds_proto_core::resource::{DecodeContext, Lds, XdsResourceType};

use crate::LoopbackServer;
use crate::echo::{EchoBackend, EchoRequest, call_echo, echo_request};
use crate::resources::{
    any, cluster_msg, downstream_tls_context, endpoints, file_watcher_provider_json, listener,
    mtls_cluster, route_config, tls_cluster, tls_server_listener_msg, upstream_tls_context,
};
use crate::suite::within;

const TARGET: &str = "xds:///secure.example.com";
const LISTENER: &str = "secure.example.com";
const ROUTES: &str = "secure-routes";
const CLUSTER: &str = "secure";
/// The bootstrap's certificate provider instance.
pub const INSTANCE: &str = "mesh";
/// The echo backends' SPIFFE ID, the SAN the cluster accepts.
pub const SERVER_ID: &str = "spiffe://mesh.test/ns/default/sa/echo";
/// The backends' DNS SAN.
pub const SERVER_DNS: &str = "echo.mesh.test";

fn generated<T>(r: Result<T, rcgen::Error>) -> T {
    r.expect("rcgen generates the test PKI")
}

/// A mesh CA, a rogue CA, and the certificates of the scenarios, with the client's
/// files (`ca.pem`, `client.pem`, `client.key`) in a directory removed on drop.
pub struct MeshPki {
    dir: PathBuf,
    ca: CertifiedIssuer<'static, KeyPair>,
    rogue: CertifiedIssuer<'static, KeyPair>,
}

/// A leaf certificate and its key.
pub struct Leaf {
    /// The certificate (DER).
    pub cert: CertificateDer<'static>,
    /// PEM of the certificate.
    pub cert_pem: String,
    /// PEM of the key (PKCS#8).
    pub key_pem: String,
    key_der: Vec<u8>,
}

fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = generated(CertificateParams::new(Vec::<String>::new()));
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    generated(CertifiedIssuer::self_signed(
        params,
        generated(KeyPair::generate()),
    ))
}

impl MeshPki {
    /// Generates the CAs and writes the client's files (identity `client-1`).
    ///
    /// # Panics
    /// When generation or writing fails.
    pub fn generate() -> MeshPki {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "xds-mesh-pki-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&dir).expect("create the PKI directory");
        let pki = MeshPki {
            dir,
            ca: ca("xds-proto mesh CA"),
            rogue: ca("rogue CA"),
        };
        std::fs::write(pki.path("ca.pem"), pki.ca.pem()).expect("write ca.pem");
        pki.write_client(&pki.client("client-1"));
        pki
    }

    /// The path of a file of the PKI.
    pub fn path(&self, name: &str) -> String {
        self.dir.join(name).to_string_lossy().into_owned()
    }

    /// The bootstrap's `certificate_providers` entry of [`INSTANCE`] for the client's
    /// files, reread every second.
    pub fn provider_json(&self) -> String {
        let entry = file_watcher_provider_json(
            Some(&self.path("client.pem")),
            Some(&self.path("client.key")),
            Some(&self.path("ca.pem")),
            Duration::from_secs(1),
        );
        format!(r#"{{"{INSTANCE}": {entry}}}"#)
    }

    /// Rewrites the client's certificate and key files (rotation).
    pub fn write_client(&self, leaf: &Leaf) {
        // The key first: a reload between the two writes sees a mismatched pair, which
        // the provider refuses (keeping the last good one) until both are written.
        std::fs::write(self.path("client.key"), &leaf.key_pem).expect("write client.key");
        std::fs::write(self.path("client.pem"), &leaf.cert_pem).expect("write client.pem");
    }

    /// Writes a server's certificate and key files (`server.pem`, `server.key`) and
    /// returns the bootstrap's `certificate_providers` object with instance `server`
    /// for them and the mesh CA (the roots that verify clients).
    pub fn write_server(&self, leaf: &Leaf) -> String {
        std::fs::write(self.path("server.key"), &leaf.key_pem).expect("write server.key");
        std::fs::write(self.path("server.pem"), &leaf.cert_pem).expect("write server.pem");
        let entry = file_watcher_provider_json(
            Some(&self.path("server.pem")),
            Some(&self.path("server.key")),
            Some(&self.path("ca.pem")),
            Duration::from_secs(1),
        );
        format!(r#"{{"server": {entry}}}"#)
    }

    /// A client certificate `name` of the mesh CA (SPIFFE ID `.../sa/<name>`).
    pub fn client(&self, name: &str) -> Leaf {
        let id = format!("spiffe://mesh.test/ns/default/sa/{name}");
        leaf(&self.ca, name, vec![uri_san(&id)], false)
    }

    /// A server certificate of the mesh CA (or, `rogue`, of the rogue CA; `expired`,
    /// valid only in 2020) for [`SERVER_ID`], [`SERVER_DNS`] and 127.0.0.1.
    pub fn server(&self, rogue: bool, expired: bool) -> Leaf {
        let issuer = if rogue { &self.rogue } else { &self.ca };
        let sans = vec![
            uri_san(SERVER_ID),
            SanType::DnsName(SERVER_DNS.try_into().expect("a DNS name")),
            SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        ];
        leaf(issuer, "echo", sans, expired)
    }

    /// A rustls server config presenting `leaf`, requiring a client certificate of the
    /// mesh CA, ALPN `h2`.
    ///
    /// # Panics
    /// When rustls refuses the material.
    pub fn server_config(&self, leaf: &Leaf) -> Arc<rustls::ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca.der().clone()).expect("the mesh CA");
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .build()
        .expect("a client verifier");
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf.key_der.clone()));
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![leaf.cert.clone()], key)
            .expect("the server certificate");
        config.alpn_protocols = vec![b"h2".to_vec()];
        Arc::new(config)
    }
}

impl Drop for MeshPki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn uri_san(uri: &str) -> SanType {
    SanType::URI(uri.try_into().expect("a URI"))
}

fn leaf(
    issuer: &CertifiedIssuer<'static, KeyPair>,
    name: &str,
    sans: Vec<SanType>,
    expired: bool,
) -> Leaf {
    let mut params = generated(CertificateParams::new(Vec::<String>::new()));
    params.subject_alt_names = sans;
    params.distinguished_name.push(DnType::CommonName, name);
    if expired {
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2020, 12, 31);
    }
    let key = generated(KeyPair::generate());
    let cert = generated(params.signed_by(&key, issuer));
    Leaf {
        cert: cert.der().clone(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        key_der: key.serialize_der(),
    }
}

/// The loopback bootstrap of `server` (insecure ADS, node `node_id`) with
/// `certificate_providers` (a JSON object, e.g. [`MeshPki::provider_json`]).
///
/// # Panics
/// When the result is no valid bootstrap.
pub fn bootstrap_with_providers(
    server: &LoopbackServer,
    node_id: &str,
    providers_json: &str,
) -> Bootstrap {
    let bootstrap = server.bootstrap_json(node_id, None);
    let bootstrap = format!(
        r#"{}, "certificate_providers": {providers_json}}}"#,
        bootstrap
            .trim_end()
            .strip_suffix('}')
            .expect("a JSON object"),
    );
    Bootstrap::from_json_str(&bootstrap).expect("the bootstrap")
}

/// What the scenarios measured, for the report.
#[derive(Clone, Debug, Default)]
pub struct SecurityFigures {
    /// The status message of each failing case, by case.
    pub failures: Vec<(&'static str, String)>,
    /// From rewriting the client's files to the provider serving the new certificate.
    pub rotation_pickup: Duration,
    /// RPCs in flight across a security change or a rotation, all of which succeeded.
    pub in_flight_ok: u32,
}

/// The control plane, the backends and a channel with xDS credentials.
struct Mesh {
    pki: MeshPki,
    server: LoopbackServer,
    /// mTLS backend with a good certificate.
    good: EchoBackend,
    /// A second good backend (a fresh connection after rotation).
    good_2: EchoBackend,
    rogue: EchoBackend,
    expired: EchoBackend,
    plain: EchoBackend,
    bootstrap: Bootstrap,
    providers: CertificateProviders,
}

impl Mesh {
    fn start<R: Runtime>(rt: &R) -> Mesh {
        let pki = MeshPki::generate();
        let good_leaf = pki.server(false, false);
        let good = EchoBackend::start_tls("good", pki.server_config(&good_leaf));
        let good_2 = EchoBackend::start_tls("good-2", pki.server_config(&good_leaf));
        let rogue = EchoBackend::start_tls("rogue", pki.server_config(&pki.server(true, false)));
        let expired =
            EchoBackend::start_tls("expired", pki.server_config(&pki.server(false, true)));
        let plain = EchoBackend::start("plain");
        let server = LoopbackServer::start();
        server.set_resources(type_url::LISTENER, "1", vec![listener(LISTENER, ROUTES)]);
        server.set_resources(
            type_url::ROUTE_CONFIGURATION,
            "1",
            vec![route_config(ROUTES, CLUSTER)],
        );
        let bootstrap = bootstrap_with_providers(&server, "secure-channel", &pki.provider_json());
        let providers = CertificateProviders::start(rt, &bootstrap).expect("the providers");
        Mesh {
            pki,
            server,
            good,
            good_2,
            rogue,
            expired,
            plain,
            bootstrap,
            providers,
        }
    }

    fn channel<R: Runtime>(&self) -> XdsChannel<R> {
        let pool = ClientPool::<R>::builder(self.bootstrap.clone())
            .build_pool()
            .expect("a pool");
        XdsChannel::builder(TARGET)
            .pool(&pool)
            .seed(29)
            .xds_credentials_with(FallbackCredentials::Insecure, self.providers.clone())
            .build()
            .expect("a channel")
    }

    /// Serves `cluster` with its endpoint at `backend`, as version `version`.
    fn serve(&self, version: &str, cluster: Any, backend: &EchoBackend) {
        let port = u32::from(backend.port());
        self.server.set_resources(
            type_url::CLUSTER_LOAD_ASSIGNMENT,
            version,
            vec![endpoints(CLUSTER, &[port])],
        );
        self.server
            .set_resources(type_url::CLUSTER, version, vec![cluster]);
    }
}

fn mtls(sans: &[&str]) -> Any {
    mtls_cluster(CLUSTER, INSTANCE, sans)
}

fn plaintext() -> Any {
    any(type_url::CLUSTER, &cluster_msg(CLUSTER, 1024))
}

/// Calls until an RPC is answered by `backend` (the channel has the new config).
async fn until_served<R: Runtime>(rt: &R, channel: &XdsChannel<R>, backend: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let last = call_echo(channel.clone(), echo_request("until served")).await;
        match last {
            Ok(reply) if reply.backend == backend => return,
            last if Instant::now() > deadline => {
                panic!("no RPC reached {backend} within 10 s; the last: {last:?}")
            }
            _ => rt.sleep(Duration::from_millis(20)).await,
        }
    }
}

/// Calls until an RPC fails; returns its status.
async fn until_failed<R: Runtime>(rt: &R, channel: &XdsChannel<R>, case: &str) -> tonic::Status {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match call_echo(channel.clone(), echo_request(case)).await {
            Err(status) => return status,
            Ok(_) if Instant::now() > deadline => panic!("{case}: RPCs still succeed after 10 s"),
            Ok(_) => rt.sleep(Duration::from_millis(20)).await,
        }
    }
}

/// `XdsServerCredentials` from a static LDS: a server listener built with the kit
/// (its filter chain's `DownstreamTlsContext` naming provider instance `server`),
/// decoded through the core with the server's bootstrap, its chain's TLS turned into
/// a rustls server config for an echo backend. The channel with xDS credentials
/// reaches it with mTLS; a cluster without an identity is refused while the chain
/// requires a client certificate, and accepted once it does not. Returns the refusal.
pub async fn server_credentials_scenarios<R: Runtime>() -> String {
    let rt = R::current().expect("a runtime");
    let mesh = Mesh::start(&rt);
    let channel = mesh.channel::<R>();
    let providers_json = mesh.pki.write_server(&mesh.pki.server(false, false));
    let server_bootstrap = format!(
        r#"{{"xds_servers": [{{"server_uri": "localhost:1", "channel_creds": [{{"type": "insecure"}}]}}],
            "node": {{"id": "xds-server"}}, "certificate_providers": {providers_json}}}"#
    );
    let server_bootstrap = Bootstrap::from_json_str(&server_bootstrap).expect("the bootstrap");
    let server_providers =
        CertificateProviders::start(&rt, &server_bootstrap).expect("the server's providers");
    let credentials = |require_client_certificate: bool| {
        let context = downstream_tls_context("server", Some("server"), require_client_certificate);
        let lds = any(
            type_url::LISTENER,
            &tls_server_listener_msg("server-lds", "127.0.0.1", 0, Some(&context)),
        );
        let decode_context = DecodeContext::new(&server_bootstrap);
        let (_, listener) = Lds::decode_in(&decode_context, &lds.value).expect("the LDS decodes");
        let ListenerKind::Server(xds_proto_core::resource::ServerListener {
            filter_chains, ..
        }) = &listener.kind
        else {
            panic!("a server listener: {listener:?}")
        };
        let tls = filter_chains[0]
            .tls
            .clone()
            .expect("the chain's DownstreamTls");
        assert_eq!(tls.require_client_certificate, require_client_certificate);
        XdsServerCredentials::new(tls, server_providers.clone())
    };
    let mut refusal = String::new();
    within(
        &rt,
        Duration::from_secs(30),
        "the server credentials",
        async {
            let strict = credentials(true);
            let config = strict.server_config().expect("a server config");
            assert!(
                Arc::ptr_eq(&config, &strict.server_config().expect("again")),
                "built once per provider generation"
            );
            let server = EchoBackend::start_tls("xds-server", config);
            mesh.serve("1", mtls(&[SERVER_ID]), &server);
            until_served(&rt, &channel, "xds-server").await;
            let seen = server.tls_client_certificates();
            assert!(
                seen.last().is_some_and(|c| !c.is_empty()),
                "mTLS: the client's certificate"
            );
            let no_identity =
                tls_cluster(CLUSTER, &upstream_tls_context(INSTANCE, None, &[SERVER_ID]));
            mesh.serve("2", no_identity.clone(), &server);
            let status = until_failed(&rt, &channel, "no client certificate").await;
            assert!(
                status.message().contains("requires a client certificate"),
                "{}",
                status.message()
            );
            refusal = status.message().to_owned();
            let lenient = EchoBackend::start_tls(
                "lenient",
                credentials(false).server_config().expect("a server config"),
            );
            mesh.serve("3", no_identity, &lenient);
            until_served(&rt, &channel, "lenient").await;
            let seen = lenient.tls_client_certificates();
            assert_eq!(
                seen.last().map(Vec::len),
                Some(0),
                "no client certificate, accepted"
            );
        },
    )
    .await;
    refusal
}

/// Runs every scenario in order and returns the figures.
pub async fn security_scenarios<R: Runtime>() -> SecurityFigures {
    let rt = R::current().expect("a runtime");
    let mesh = Mesh::start(&rt);
    let channel = mesh.channel::<R>();
    let debug = format!("{channel:?}");
    assert!(
        debug.contains("Xds"),
        "the channel's Debug shows its credentials: {debug}"
    );
    let mut figures = SecurityFigures::default();
    within(
        &rt,
        Duration::from_secs(60),
        "the security scenarios",
        async {
            mtls_end_to_end(&rt, &mesh, &channel).await;
            failures(&rt, &mesh, &channel, &mut figures).await;
            tls_off_and_on(&rt, &mesh, &channel, &mut figures).await;
            rotation(&rt, &mesh, &channel, &mut figures).await;
        },
    )
    .await;
    figures
}

/// mTLS through the channel: the backend saw the client's certificate.
async fn mtls_end_to_end<R: Runtime>(rt: &R, mesh: &Mesh, channel: &XdsChannel<R>) {
    mesh.serve("1", mtls(&[SERVER_ID]), &mesh.good);
    until_served(rt, channel, "good").await;
    let seen = mesh.good.tls_client_certificates();
    let client = std::fs::read(mesh.pki.path("client.pem")).expect("client.pem");
    let client = CertificateDer::from_pem_slice(&client).expect("a PEM certificate");
    assert_eq!(
        seen.last(),
        Some(&client.to_vec()),
        "the backend saw client-1's certificate"
    );
}

/// Each bad certificate case fails the RPC with UNAVAILABLE naming the cause.
async fn failures<R: Runtime>(
    rt: &R,
    mesh: &Mesh,
    channel: &XdsChannel<R>,
    figures: &mut SecurityFigures,
) {
    let other = "spiffe://mesh.test/ns/default/sa/other";
    let cases: [(&'static str, Any, &EchoBackend, &str); 4] = [
        (
            "wrong SAN",
            mtls(&[other]),
            &mesh.good,
            "certificate SANs do not match",
        ),
        (
            "unknown CA",
            mtls(&[SERVER_ID]),
            &mesh.rogue,
            "unknown issuer",
        ),
        (
            "expired",
            mtls(&[SERVER_ID]),
            &mesh.expired,
            "certificate expired",
        ),
        (
            "no client certificate",
            tls_cluster(CLUSTER, &upstream_tls_context(INSTANCE, None, &[SERVER_ID])),
            &mesh.good,
            "the server requires a client certificate and none was sent",
        ),
    ];
    for (i, (case, cluster, backend, cause)) in cases.into_iter().enumerate() {
        mesh.serve(&format!("fail-{i}"), cluster, backend);
        let status = until_failed(rt, channel, case).await;
        assert_eq!(
            status.code(),
            tonic::Code::Unavailable,
            "{case}: {status:?}"
        );
        assert!(
            status.message().contains(cause),
            "{case}: the message names the cause ({cause:?}): {}",
            status.message()
        );
        figures.failures.push((case, status.message().to_owned()));
        // Back to the good config before the next case.
        mesh.serve(&format!("ok-{i}"), mtls(&[SERVER_ID]), &mesh.good);
        until_served(rt, channel, "good").await;
    }
}

/// An RPC of `delay` on the channel, spawned; its result comes on the receiver.
fn slow_rpc<R: Runtime>(
    rt: &R,
    channel: &XdsChannel<R>,
    delay: Duration,
) -> futures::channel::oneshot::Receiver<Result<String, tonic::Status>> {
    let (tx, rx) = futures::channel::oneshot::channel();
    let channel = channel.clone();
    let request = tonic::Request::new(EchoRequest {
        message: "in flight".into(),
        delay_ms: u32::try_from(delay.as_millis()).unwrap_or(u32::MAX),
    });
    rt.spawn(Box::pin(async move {
        let _ = tx.send(call_echo(channel, request).await.map(|r| r.backend));
    }));
    rx
}

/// TLS off on the same (TLS) address: new connections are plaintext and fail there,
/// while an RPC in flight on the TLS connection finishes; a plaintext backend then
/// serves; TLS on again re-dials the TLS backend with TLS.
async fn tls_off_and_on<R: Runtime>(
    rt: &R,
    mesh: &Mesh,
    channel: &XdsChannel<R>,
    figures: &mut SecurityFigures,
) {
    let connections = mesh.good.tls_client_certificates().len();
    let in_flight = slow_rpc(rt, channel, Duration::from_millis(400));
    rt.sleep(Duration::from_millis(100)).await;
    mesh.serve("off", plaintext(), &mesh.good);
    let status = until_failed(rt, channel, "plaintext to a TLS backend").await;
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert_eq!(
        in_flight
            .await
            .expect("the RPC ends")
            .expect("the RPC in flight finishes"),
        "good"
    );
    figures.in_flight_ok += 1;
    figures
        .failures
        .push(("TLS off, TLS backend", status.message().to_owned()));
    mesh.serve("off-plain", plaintext(), &mesh.plain);
    until_served(rt, channel, "plain").await;
    mesh.serve("on", mtls(&[SERVER_ID]), &mesh.good);
    until_served(rt, channel, "good").await;
    assert!(
        mesh.good.tls_client_certificates().len() > connections,
        "TLS on: a new TLS connection"
    );
}

/// Rewrites the client's files: the provider serves the new certificate within its
/// refresh interval, an RPC in flight finishes, and a new connection presents it.
async fn rotation<R: Runtime>(
    rt: &R,
    mesh: &Mesh,
    channel: &XdsChannel<R>,
    figures: &mut SecurityFigures,
) {
    let provider = mesh.providers.get(INSTANCE).expect("the instance").clone();
    let generation = provider.generation();
    let in_flight = slow_rpc(rt, channel, Duration::from_millis(300));
    rt.sleep(Duration::from_millis(50)).await;
    let client_2 = mesh.pki.client("client-2");
    let written = Instant::now();
    mesh.pki.write_client(&client_2);
    while provider.generation() == generation {
        assert!(
            written.elapsed() < Duration::from_secs(5),
            "the provider did not reload within 5 s"
        );
        rt.sleep(Duration::from_millis(10)).await;
    }
    figures.rotation_pickup = written.elapsed();
    assert_eq!(
        in_flight
            .await
            .expect("the RPC ends")
            .expect("the RPC in flight finishes"),
        "good"
    );
    figures.in_flight_ok += 1;
    // A new connection (a new endpoint) presents client-2's certificate.
    mesh.serve("rotated", mtls(&[SERVER_ID]), &mesh.good_2);
    until_served(rt, channel, "good-2").await;
    assert_eq!(
        mesh.good_2.tls_client_certificates().last(),
        Some(&client_2.cert.to_vec()),
        "the new connection presents the rotated certificate"
    );
}
