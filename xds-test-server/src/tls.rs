//! A throwaway PKI for TLS tests: a CA, a server certificate for 127.0.0.1 and
//! `localhost`, and a client certificate, generated with rcgen and written as PEM
//! files to a fresh directory that is removed on drop.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
    SanType,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A test CA with one server and one client certificate, as PEM files.
#[derive(Debug)]
pub struct TestPki {
    dir: PathBuf,
    ca_der: CertificateDer<'static>,
    server_chain: Vec<CertificateDer<'static>>,
    server_key: Vec<u8>,
}

fn generated<T>(r: Result<T, rcgen::Error>) -> T {
    r.expect("rcgen generates the test PKI")
}

impl TestPki {
    /// Generates the CA and the certificates, and writes `ca.pem`, `server.pem`,
    /// `server.key`, `client.pem` and `client.key` into a new directory.
    ///
    /// # Panics
    /// When generation or writing fails.
    pub fn generate() -> TestPki {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "xds-test-pki-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&dir).expect("create the PKI directory");

        let mut ca_params = generated(CertificateParams::new(Vec::<String>::new()));
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "xds-proto test CA");
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = generated(CertifiedIssuer::self_signed(
            ca_params,
            generated(KeyPair::generate()),
        ));

        let mut server_params = generated(CertificateParams::new(vec!["localhost".to_string()]));
        server_params
            .subject_alt_names
            .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        server_params
            .distinguished_name
            .push(DnType::CommonName, "loopback xDS server");
        let server_key = generated(KeyPair::generate());
        let server_cert = generated(server_params.signed_by(&server_key, &ca));

        let mut client_params =
            generated(CertificateParams::new(vec!["xds-client.test".to_string()]));
        client_params
            .distinguished_name
            .push(DnType::CommonName, "xds test client");
        let client_key = generated(KeyPair::generate());
        let client_cert = generated(client_params.signed_by(&client_key, &ca));

        let write = |name: &str, text: String| {
            std::fs::write(dir.join(name), text).expect("write a PEM file")
        };
        write("ca.pem", ca.pem());
        write("server.pem", server_cert.pem());
        write("server.key", server_key.serialize_pem());
        write("client.pem", client_cert.pem());
        write("client.key", client_key.serialize_pem());

        TestPki {
            dir,
            ca_der: ca.der().clone(),
            server_chain: vec![server_cert.der().clone()],
            server_key: server_key.serialize_der(),
        }
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of a file of the PKI (`ca.pem`, `client.pem`, `client.key`, ...).
    pub fn path(&self, name: &str) -> String {
        self.dir.join(name).to_string_lossy().into_owned()
    }

    /// A rustls server configuration with the server certificate, ALPN `h2`, and, with
    /// `require_client_cert`, mTLS against the test CA.
    ///
    /// # Panics
    /// When rustls rejects the generated material.
    pub fn server_config(&self, require_client_cert: bool) -> Arc<rustls::ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("protocol versions");
        let builder = if require_client_cert {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(self.ca_der.clone()).expect("the test CA");
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .expect("a client verifier");
            builder.with_client_cert_verifier(verifier)
        } else {
            builder.with_no_client_auth()
        };
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.server_key.clone()));
        let mut config = builder
            .with_single_cert(self.server_chain.clone(), key)
            .expect("the server certificate");
        config.alpn_protocols = vec![b"h2".to_vec()];
        Arc::new(config)
    }
}

impl Drop for TestPki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
