//! Peer certificate checks for A29 handshakes, as rustls verifiers: the chain against
//! the provider's roots (webpki, through rustls; for a SPIFFE bundle map, the roots of
//! the peer's trust domain, A87), then, on a client, the SAN check of the cluster's
//! [`UpstreamTls`] instead of the hostname check (A29 replaces it).
//!
//! rustls reports a refused certificate as a terse error (`UnknownIssuer`); the
//! verifier also records why in words in a [`FailureNote`], which the connection
//! attempt puts into its error, so that the RPC's UNAVAILABLE names the cause.

use std::sync::{Arc, Mutex};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, Error, RootCertStore, SignatureScheme};
use x509_parser::extensions::GeneralName;
use xds_proto_core::security::{Roots, SubjectAltName, UpstreamTls};

/// Why the last handshake's certificate check failed, in words.
#[derive(Clone, Debug, Default)]
pub(crate) struct FailureNote(Arc<Mutex<Option<String>>>);

impl FailureNote {
    fn record(&self, why: String) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
    }

    /// The recorded reason, if a check failed.
    pub(crate) fn take(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// Where the roots of a handshake come from.
#[derive(Debug)]
pub(crate) enum TrustRoots {
    /// A fixed store: CA certificates, or the system's.
    Store(Arc<RootCertStore>),
    /// A SPIFFE trust bundle map: the store of the peer's trust domain.
    Spiffe(xds_proto_core::security::SpiffeBundleMap),
}

impl TrustRoots {
    /// The roots a provider handed out.
    pub(crate) fn from_provider(roots: &Roots) -> Result<TrustRoots, String> {
        match roots {
            Roots::Certificates(certs) => Ok(TrustRoots::Store(Arc::new(store_of(certs)?))),
            Roots::SpiffeBundleMap(map) => Ok(TrustRoots::Spiffe(map.clone())),
            other => Err(format!("unsupported roots {other:?}")),
        }
    }

    /// The platform's trust store (A82's `system_root_certs`).
    pub(crate) fn system() -> Result<TrustRoots, String> {
        let native = rustls_native_certs::load_native_certs();
        let mut store = RootCertStore::empty();
        let (added, _) = store.add_parsable_certificates(native.certs);
        if added == 0 {
            return Err("system_root_certs: no system root certificates found".into());
        }
        Ok(TrustRoots::Store(Arc::new(store)))
    }

    /// The store that verifies a peer whose leaf has `sans`.
    pub(crate) fn store_for(&self, sans: &[SubjectAltName]) -> Result<Arc<RootCertStore>, String> {
        match self {
            TrustRoots::Store(store) => Ok(store.clone()),
            TrustRoots::Spiffe(map) => {
                let (_, roots) = map.roots_for_peer(sans)?;
                Ok(Arc::new(store_of(roots)?))
            }
        }
    }
}

fn store_of(certs: &[CertificateDer<'static>]) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    for cert in certs {
        store
            .add(cert.clone())
            .map_err(|e| format!("not a usable CA certificate: {e}"))?;
    }
    Ok(store)
}

/// The leaf's subject alternative names, typed as the core's SAN matchers read them.
pub(crate) fn leaf_sans(leaf: &CertificateDer<'_>) -> Result<Vec<SubjectAltName>, String> {
    let (_, cert) = x509_parser::parse_x509_certificate(leaf)
        .map_err(|e| format!("the certificate does not parse: {e}"))?;
    let Some(ext) = cert
        .subject_alternative_name()
        .map_err(|e| format!("the certificate's subjectAltName does not parse: {e}"))?
    else {
        return Ok(Vec::new());
    };
    let mut sans = Vec::new();
    for name in &ext.value.general_names {
        sans.push(match name {
            GeneralName::DNSName(dns) => SubjectAltName::Dns((*dns).to_owned()),
            GeneralName::URI(uri) => SubjectAltName::Uri((*uri).to_owned()),
            GeneralName::RFC822Name(email) => SubjectAltName::Email((*email).to_owned()),
            GeneralName::IPAddress(bytes) => match ip_of(bytes) {
                Some(ip) => SubjectAltName::Ip(ip),
                None => continue,
            },
            _ => continue,
        });
    }
    Ok(sans)
}

fn ip_of(bytes: &[u8]) -> Option<std::net::IpAddr> {
    match bytes.len() {
        4 => Some(<[u8; 4]>::try_from(bytes).ok()?.into()),
        16 => Some(<[u8; 16]>::try_from(bytes).ok()?.into()),
        _ => None,
    }
}

/// A rustls error of a chain check, in the words an RPC's status carries.
pub(crate) fn describe(error: &Error) -> String {
    match error {
        Error::InvalidCertificate(CertificateError::UnknownIssuer) => {
            "unknown issuer: the certificate chain does not lead to a trusted root".into()
        }
        Error::InvalidCertificate(CertificateError::Expired) => "certificate expired".into(),
        // "certificate expired: verification time ..., but certificate is not valid after"
        Error::InvalidCertificate(e @ CertificateError::ExpiredContext { .. }) => e.to_string(),
        Error::InvalidCertificate(e) => format!("invalid certificate: {e}"),
        other => other.to_string(),
    }
}

/// A TLS alert the server sent after the handshake (TLS 1.3 servers refuse a client
/// certificate only then, so the client learns it as the connection ends), explained.
pub(crate) fn explain_alert(reason: &str) -> Option<&'static str> {
    if reason.contains("CertificateRequired") {
        Some(
            "the server requires a client certificate and none was sent (peer sent no certificate)",
        )
    } else if reason.contains("alert: UnknownCA") || reason.contains("alert: BadCertificate") {
        Some("the server refused the client certificate")
    } else {
        None
    }
}

/// Verifies a chain against `roots`, recording a failure in `note`; returns the
/// leaf's SANs.
pub(crate) fn verify_chain(
    roots: &TrustRoots,
    leaf: &CertificateDer<'_>,
    intermediates: &[CertificateDer<'_>],
    now: UnixTime,
    provider: &CryptoProvider,
    note: &FailureNote,
) -> Result<Vec<SubjectAltName>, Error> {
    let fail = |why: String, error: Error| {
        note.record(why);
        error
    };
    let sans = leaf_sans(leaf).map_err(|why| fail(why, CertificateError::BadEncoding.into()))?;
    let store = roots
        .store_for(&sans)
        .map_err(|why| fail(why, CertificateError::UnknownIssuer.into()))?;
    let parsed = rustls::server::ParsedCertificate::try_from(leaf)?;
    rustls::client::verify_server_cert_signed_by_trust_anchor(
        &parsed,
        &store,
        intermediates,
        now,
        provider.signature_verification_algorithms.all,
    )
    .map_err(|e| fail(describe(&e), e))?;
    Ok(sans)
}

/// A client's check of the server (A29, A101): the chain against the cluster's roots,
/// then `UpstreamTls::check_server_sans` with the SNI sent.
#[derive(Debug)]
pub(crate) struct XdsServerVerifier {
    pub(crate) tls: Arc<UpstreamTls>,
    pub(crate) roots: TrustRoots,
    pub(crate) sni: Option<String>,
    pub(crate) provider: Arc<CryptoProvider>,
    pub(crate) note: FailureNote,
}

impl ServerCertVerifier for XdsServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        let sans = verify_chain(
            &self.roots,
            end_entity,
            intermediates,
            now,
            &self.provider,
            &self.note,
        )?;
        if let Err(mismatch) = self.tls.check_server_sans(self.sni.as_deref(), &sans) {
            self.note
                .record(format!("certificate SANs do not match: {mismatch}"));
            return Err(CertificateError::ApplicationVerificationFailure.into());
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
