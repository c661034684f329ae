//! The `file_watcher` certificate provider (gRFC A29, A87), sans-IO: the adapter reads
//! the files when [`FileWatcherState::poll_timeout`] says so and feeds their contents
//! in; the state parses the PEM (or the SPIFFE bundle map), keeps the last good material
//! when a file is missing or bad, and serves handshakes as a [`CertificateProvider`].
//!
//! The drive loop an adapter runs for each instance (the state shared with its TLS
//! configs behind an `RwLock`, which is itself a `CertificateProvider`):
//! 1. sleep until `poll_timeout()` (the first read is due at once);
//! 2. read the files: `config().read_files(|path| std::fs::read(path))`, outside the
//!    lock (a blocking task in an async runtime);
//! 3. `write().on_files_read(now, reads)`; when it returns true, the material changed.
//!
//! [`FileWatcherState::refresh_with`] does 2 and 3 in one call where blocking is fine.
//! As in gRPC, a reload reads every file each time and installs what changed; the
//! certificate and its key are installed together or not at all, and an adapter may add
//! a check that they belong together ([`FileWatcherState::with_identity_check`]), which
//! needs a crypto library the core does not have.

use std::fmt;
use std::io;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::provider::{
    CertificateError, CertificateProvider, CertificateStore, Identity, Material, Roots,
};
use super::spiffe::SpiffeBundleMap;
use crate::bootstrap::{FileWatcherConfig, RootsFile};
use crate::time::Instant;

/// A check an adapter adds to a reload, e.g. that the key matches the certificate or
/// that every root parses: an `Err` keeps the previous material, with the message.
pub type MaterialCheck<T> = Box<dyn Fn(&T) -> Result<(), String> + Send + Sync>;

/// The contents of the files of one reload, as the adapter read them.
#[derive(Debug, Default)]
pub struct FileReads {
    /// `certificate_file` (when the config has one).
    pub certificate: Option<io::Result<Vec<u8>>>,
    /// `private_key_file` (when the config has one).
    pub private_key: Option<io::Result<Vec<u8>>>,
    /// The roots file: `spiffe_trust_bundle_map_file` if set, else
    /// `ca_certificate_file` (when the config has either).
    pub roots: Option<io::Result<Vec<u8>>>,
}

impl FileWatcherConfig {
    /// Reads the files this config names with `read` (the adapter's file system).
    pub fn read_files(&self, mut read: impl FnMut(&str) -> io::Result<Vec<u8>>) -> FileReads {
        let (certificate, private_key) = match self.identity_files() {
            Some((cert, key)) => (Some(read(cert)), Some(read(key))),
            None => (None, None),
        };
        let roots = self.roots_file().map(|file| match file {
            RootsFile::CaCertificates(path) | RootsFile::SpiffeBundleMap(path) => read(path),
        });
        FileReads {
            certificate,
            private_key,
            roots,
        }
    }
}

/// The state of one `file_watcher` provider instance.
pub struct FileWatcherState {
    config: FileWatcherConfig,
    store: CertificateStore,
    next_read: Instant,
    /// The file contents behind the current material, to skip parsing unchanged files.
    identity_bytes: Option<(Vec<u8>, Vec<u8>)>,
    roots_bytes: Option<Vec<u8>>,
    identity_check: Option<MaterialCheck<Identity>>,
    roots_check: Option<MaterialCheck<Roots>>,
}

impl fmt::Debug for FileWatcherState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileWatcherState")
            .field("config", &self.config)
            .field("next_read", &self.next_read)
            .field("generation", &self.store.generation())
            .field("identity_error", &self.store.last_error(Material::Identity))
            .field("roots_error", &self.store.last_error(Material::Roots))
            .finish_non_exhaustive()
    }
}

impl FileWatcherState {
    /// A provider for `config`, with nothing loaded; its first read is due at once.
    pub fn new(config: FileWatcherConfig) -> FileWatcherState {
        let store = CertificateStore::new(
            config.identity_files().is_some(),
            config.roots_file().is_some(),
        );
        FileWatcherState {
            config,
            store,
            next_read: Instant::ZERO,
            identity_bytes: None,
            roots_bytes: None,
            identity_check: None,
            roots_check: None,
        }
    }

    /// Adds a check of each new identity (e.g. with rustls: that the key signs for the
    /// certificate); a failing identity is refused like an unreadable file.
    pub fn with_identity_check(mut self, check: MaterialCheck<Identity>) -> FileWatcherState {
        self.identity_check = Some(check);
        self
    }

    /// Adds a check of new roots (e.g. that every certificate parses into a root store).
    pub fn with_roots_check(mut self, check: MaterialCheck<Roots>) -> FileWatcherState {
        self.roots_check = Some(check);
        self
    }

    /// The config.
    pub fn config(&self) -> &FileWatcherConfig {
        &self.config
    }

    /// The material and errors, as handshakes see them.
    pub fn store(&self) -> &CertificateStore {
        &self.store
    }

    /// When the files are due to be read next.
    pub fn poll_timeout(&self) -> Instant {
        self.next_read
    }

    /// Installs what `reads` holds, read at `now`: each half that parses (and passes
    /// its check) replaces the current one; a half that fails keeps the current one and
    /// records the error, naming the field and the file. The next read is due
    /// `refresh_interval` after `now`. Returns whether anything handshakes see changed.
    pub fn on_files_read(&mut self, now: Instant, reads: FileReads) -> bool {
        self.next_read = now + self.config.refresh_interval;
        let mut changed = false;
        if let (Some(cert), Some(key)) = (reads.certificate, reads.private_key) {
            changed |= self.load_identity(cert, key);
        }
        if let Some(roots) = reads.roots {
            changed |= self.load_roots(roots);
        }
        changed
    }

    /// Reads the files with `read` and installs them ([`on_files_read`](Self::on_files_read)).
    pub fn refresh_with(
        &mut self,
        now: Instant,
        read: impl FnMut(&str) -> io::Result<Vec<u8>>,
    ) -> bool {
        let reads = self.config.read_files(read);
        self.on_files_read(now, reads)
    }

    fn load_identity(&mut self, cert: io::Result<Vec<u8>>, key: io::Result<Vec<u8>>) -> bool {
        let (cert_path, key_path) = match self.config.identity_files() {
            Some((c, k)) => (c.to_owned(), k.to_owned()),
            None => return false,
        };
        let parsed = read_ok(cert, "certificate_file", &cert_path)
            .and_then(|cert| Ok((cert, read_ok(key, "private_key_file", &key_path)?)))
            .and_then(|(cert, key)| {
                if self
                    .identity_bytes
                    .as_ref()
                    .is_some_and(|(c, k)| *c == cert && *k == key)
                {
                    return Ok(None);
                }
                let identity = parse_identity(&cert, &cert_path, &key, &key_path)?;
                if let Some(check) = &self.identity_check {
                    check(&identity)
                        .map_err(|reason| file_error("private_key_file", &key_path, reason))?;
                }
                Ok(Some((identity, cert, key)))
            });
        match parsed {
            Ok(None) => false,
            Ok(Some((identity, cert, key))) => {
                self.identity_bytes = Some((cert, key));
                self.store.set_identity(identity)
            }
            Err(e) => self.store.identity_failed(e),
        }
    }

    fn load_roots(&mut self, contents: io::Result<Vec<u8>>) -> bool {
        let (field, path, spiffe) = match self.config.roots_file() {
            Some(RootsFile::CaCertificates(p)) => ("ca_certificate_file", p.to_owned(), false),
            Some(RootsFile::SpiffeBundleMap(p)) => {
                ("spiffe_trust_bundle_map_file", p.to_owned(), true)
            }
            None => return false,
        };
        let parsed = read_ok(contents, field, &path).and_then(|bytes| {
            if self.roots_bytes.as_ref() == Some(&bytes) {
                return Ok(None);
            }
            let roots = if spiffe {
                SpiffeBundleMap::from_json(&bytes)
                    .map(Roots::SpiffeBundleMap)
                    .map_err(|reason| file_error(field, &path, reason))?
            } else {
                Roots::Certificates(parse_certificates(&bytes, field, &path)?)
            };
            if let Some(check) = &self.roots_check {
                check(&roots).map_err(|reason| file_error(field, &path, reason))?;
            }
            Ok(Some((roots, bytes)))
        });
        match parsed {
            Ok(None) => false,
            Ok(Some((roots, bytes))) => {
                self.roots_bytes = Some(bytes);
                self.store.set_roots(roots)
            }
            Err(e) => self.store.roots_failed(e),
        }
    }
}

impl CertificateProvider for FileWatcherState {
    fn identity(
        &self,
        certificate_name: &str,
    ) -> Result<std::sync::Arc<Identity>, CertificateError> {
        self.store.identity(certificate_name)
    }
    fn roots(&self, certificate_name: &str) -> Result<std::sync::Arc<Roots>, CertificateError> {
        self.store.roots(certificate_name)
    }
    fn generation(&self) -> u64 {
        self.store.generation()
    }
}

fn file_error(field: &'static str, path: &str, reason: impl Into<String>) -> CertificateError {
    CertificateError::File {
        field,
        path: path.to_owned(),
        reason: reason.into(),
    }
}

fn read_ok(
    contents: io::Result<Vec<u8>>,
    field: &'static str,
    path: &str,
) -> Result<Vec<u8>, CertificateError> {
    contents.map_err(|e| file_error(field, path, format!("cannot read: {e}")))
}

/// Every CERTIFICATE section of a PEM file; at least one.
fn parse_certificates(
    pem: &[u8],
    field: &'static str,
    path: &str,
) -> Result<Vec<CertificateDer<'static>>, CertificateError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(field, path, format!("invalid PEM: {e}")))?;
    if certs.is_empty() {
        return Err(file_error(field, path, "no CERTIFICATE in the PEM file"));
    }
    Ok(certs)
}

fn parse_identity(
    cert: &[u8],
    cert_path: &str,
    key: &[u8],
    key_path: &str,
) -> Result<Identity, CertificateError> {
    let cert_chain = parse_certificates(cert, "certificate_file", cert_path)?;
    let private_key = PrivateKeyDer::from_pem_slice(key).map_err(|e| {
        let reason = match e {
            rustls_pki_types::pem::Error::NoItemsFound => {
                "no PRIVATE KEY (PKCS#8, RSA or EC) in the PEM file".to_owned()
            }
            other => format!("invalid PEM: {other}"),
        };
        file_error("private_key_file", key_path, reason)
    })?;
    Ok(Identity {
        cert_chain,
        private_key,
    })
}
