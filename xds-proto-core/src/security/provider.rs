//! Certificate providers (gRFC A29's plugin framework), as a trait any runtime
//! implements: the `file_watcher` state of this crate behind a lock, a proxy that gets
//! its certificates over SDS, a test's fixed certificates.
//!
//! The API is fetch-style, as gRPC-Go's: a TLS handshake asks the provider for the
//! current identity or roots, and gets the last good material even when a later reload
//! failed (C-core's and Java's watchers see the same thing pushed). A generation
//! counter, which changes whenever what the provider would return changes, lets an
//! adapter cache what it builds from the material (a rustls config, a root store) and
//! rebuild it only when needed. [`CertificateStore`] is the one implementation of
//! "last good material, latest error, generation" that providers share.

use std::fmt;
use std::sync::{Arc, RwLock};

use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::spiffe::SpiffeBundleMap;

/// An identity: a certificate chain (leaf first) and the leaf's private key.
#[derive(Debug, PartialEq, Eq)]
pub struct Identity {
    /// The chain, leaf first, never empty.
    pub cert_chain: Vec<CertificateDer<'static>>,
    /// The leaf's private key (PKCS#8, PKCS#1 or SEC1 DER).
    pub private_key: PrivateKeyDer<'static>,
}

/// What verifies a peer's certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Roots {
    /// X.509 CA certificates: standard chain verification.
    Certificates(Vec<CertificateDer<'static>>),
    /// A SPIFFE trust bundle map (A87): the peer must have exactly one URI SAN, a SPIFFE
    /// ID, and its chain is verified against the roots of that ID's trust domain; a peer
    /// without one is refused.
    SpiffeBundleMap(SpiffeBundleMap),
}

/// Which half of a provider's material.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Material {
    /// The identity certificate chain and key.
    Identity,
    /// The roots.
    Roots,
}

impl fmt::Display for Material {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Material::Identity => "identity certificate",
            Material::Roots => "root certificates",
        })
    }
}

/// Why a provider cannot hand out material.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CertificateError {
    /// The provider does not supply this material at all (a `file_watcher` without
    /// `certificate_file` asked for an identity).
    NotConfigured(Material),
    /// The material has not been loaded yet.
    NotLoaded(Material),
    /// A file could not be read or holds no valid material.
    File {
        /// The config field naming the file (`certificate_file`, ...).
        field: &'static str,
        /// The file's path.
        path: String,
        /// What is wrong, e.g. `cannot read: No such file or directory (os error 2)`.
        reason: String,
    },
    /// Any other failure, in the provider's words (an SDS provider's, say).
    Other(String),
}

impl fmt::Display for CertificateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CertificateError::NotConfigured(m) => write!(f, "the provider supplies no {m}"),
            CertificateError::NotLoaded(m) => write!(f, "no {m} loaded yet"),
            CertificateError::File {
                field,
                path,
                reason,
            } => write!(f, "{field} {path:?}: {reason}"),
            CertificateError::Other(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for CertificateError {}

/// A source of certificates for TLS handshakes (A29's `CertificateProvider`).
///
/// Called on every handshake, from any thread: implementations answer from memory
/// (never block on I/O). `certificate_name` is the `certificate_name` of the
/// `CertificateProviderPluginInstance` that named this provider; a provider that has
/// one set of certificates (as `file_watcher`) ignores it.
pub trait CertificateProvider: Send + Sync + fmt::Debug {
    /// The current identity: the last good one, even if a later reload failed.
    ///
    /// # Errors
    /// When there is none: not configured, not loaded yet, or the load error.
    fn identity(&self, certificate_name: &str) -> Result<Arc<Identity>, CertificateError>;

    /// The current roots, as for [`identity`](Self::identity).
    ///
    /// # Errors
    /// When there are none: not configured, not loaded yet, or the load error.
    fn roots(&self, certificate_name: &str) -> Result<Arc<Roots>, CertificateError>;

    /// A number that changes whenever what [`identity`](Self::identity) or
    /// [`roots`](Self::roots) would return changes (material or error).
    fn generation(&self) -> u64;
}

impl<P: CertificateProvider + ?Sized> CertificateProvider for Arc<P> {
    fn identity(&self, certificate_name: &str) -> Result<Arc<Identity>, CertificateError> {
        (**self).identity(certificate_name)
    }
    fn roots(&self, certificate_name: &str) -> Result<Arc<Roots>, CertificateError> {
        (**self).roots(certificate_name)
    }
    fn generation(&self) -> u64 {
        (**self).generation()
    }
}

/// A provider that a reload task updates (`write()`) while handshakes read it. A
/// poisoned lock still serves: the state is replaced whole by each update, never left
/// half-written.
impl<P: CertificateProvider> CertificateProvider for RwLock<P> {
    fn identity(&self, certificate_name: &str) -> Result<Arc<Identity>, CertificateError> {
        self.read()
            .unwrap_or_else(|e| e.into_inner())
            .identity(certificate_name)
    }
    fn roots(&self, certificate_name: &str) -> Result<Arc<Roots>, CertificateError> {
        self.read()
            .unwrap_or_else(|e| e.into_inner())
            .roots(certificate_name)
    }
    fn generation(&self) -> u64 {
        self.read().unwrap_or_else(|e| e.into_inner()).generation()
    }
}

/// One half of a store: whether it is configured, its last good value, its last error.
#[derive(Debug)]
struct Slot<T> {
    configured: bool,
    value: Option<Arc<T>>,
    error: Option<CertificateError>,
}

impl<T: PartialEq> Slot<T> {
    fn new(configured: bool) -> Slot<T> {
        Slot {
            configured,
            value: None,
            error: None,
        }
    }

    fn get(&self, material: Material) -> Result<Arc<T>, CertificateError> {
        if let Some(value) = &self.value {
            return Ok(value.clone());
        }
        Err(match (&self.error, self.configured) {
            (_, false) => CertificateError::NotConfigured(material),
            (Some(e), true) => e.clone(),
            (None, true) => CertificateError::NotLoaded(material),
        })
    }

    /// Returns whether anything a reader sees changed.
    fn set(&mut self, value: T) -> bool {
        let same = self.value.as_deref() == Some(&value);
        let had_error = self.error.take().is_some();
        self.configured = true;
        if !same {
            self.value = Some(Arc::new(value));
        }
        !same || had_error
    }

    fn fail(&mut self, error: CertificateError) -> bool {
        let changed = self.error.as_ref() != Some(&error);
        self.error = Some(error);
        changed
    }
}

/// The last good identity and roots of a provider, the latest error of each, and the
/// generation (A29's distributor). Loading failures never drop good material: a reader
/// sees the error only while there is nothing better to give.
#[derive(Debug)]
pub struct CertificateStore {
    identity: Slot<Identity>,
    roots: Slot<Roots>,
    generation: u64,
}

impl CertificateStore {
    /// An empty store; `identity` and `roots` say whether the provider supplies each
    /// (a reader asking for one it does not gets [`CertificateError::NotConfigured`]).
    pub fn new(identity: bool, roots: bool) -> CertificateStore {
        CertificateStore {
            identity: Slot::new(identity),
            roots: Slot::new(roots),
            generation: 0,
        }
    }

    /// A store holding this material from the start (tests, fixed certificates).
    pub fn with_material(identity: Option<Identity>, roots: Option<Roots>) -> CertificateStore {
        let mut store = CertificateStore::new(identity.is_some(), roots.is_some());
        if let Some(identity) = identity {
            store.set_identity(identity);
        }
        if let Some(roots) = roots {
            store.set_roots(roots);
        }
        store
    }

    /// Installs a new identity (clearing the identity error). Returns whether anything
    /// changed; the generation moves when it did.
    pub fn set_identity(&mut self, identity: Identity) -> bool {
        let changed = self.identity.set(identity);
        self.bump(changed)
    }

    /// Installs new roots (clearing the roots error), as [`set_identity`](Self::set_identity).
    pub fn set_roots(&mut self, roots: Roots) -> bool {
        let changed = self.roots.set(roots);
        self.bump(changed)
    }

    /// Records a failure to load the identity; the last good one stays in use.
    pub fn identity_failed(&mut self, error: CertificateError) -> bool {
        let changed = self.identity.fail(error);
        self.bump(changed)
    }

    /// Records a failure to load the roots; the last good ones stay in use.
    pub fn roots_failed(&mut self, error: CertificateError) -> bool {
        let changed = self.roots.fail(error);
        self.bump(changed)
    }

    /// The latest load error of `material`, if its last load failed (even while older
    /// material is served): for logs and debug output.
    pub fn last_error(&self, material: Material) -> Option<&CertificateError> {
        match material {
            Material::Identity => self.identity.error.as_ref(),
            Material::Roots => self.roots.error.as_ref(),
        }
    }

    fn bump(&mut self, changed: bool) -> bool {
        if changed {
            self.generation += 1;
        }
        changed
    }
}

impl CertificateProvider for CertificateStore {
    fn identity(&self, _certificate_name: &str) -> Result<Arc<Identity>, CertificateError> {
        self.identity.get(Material::Identity)
    }
    fn roots(&self, _certificate_name: &str) -> Result<Arc<Roots>, CertificateError> {
        self.roots.get(Material::Roots)
    }
    fn generation(&self) -> u64 {
        self.generation
    }
}
