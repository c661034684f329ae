//! The `file_watcher` state and the certificate store: parsing, the refresh schedule,
//! the last good material kept through bad reloads, errors that name the field and the
//! file, generations, and the provider trait through a lock.

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use super::*;
use crate::bootstrap::FileWatcherConfig;
use crate::security::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use crate::security::{
    CertificateError, CertificateProvider, CertificateStore, FileWatcherState, Identity, Material,
    Roots,
};
use crate::time::Instant;

/// A fake file system: path → contents (absent paths fail as NotFound).
#[derive(Default)]
struct Files(BTreeMap<String, Vec<u8>>);

impl Files {
    fn put(&mut self, path: &str, contents: impl Into<Vec<u8>>) {
        self.0.insert(path.to_owned(), contents.into());
    }
    fn read(&self, path: &str) -> io::Result<Vec<u8>> {
        self.0
            .get(path)
            .cloned()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "No such file or directory"))
    }
}

fn config(identity: bool, roots: Option<&str>) -> FileWatcherConfig {
    FileWatcherConfig {
        certificate_file: identity.then(|| "/certs/cert.pem".to_owned()),
        private_key_file: identity.then(|| "/certs/key.pem".to_owned()),
        ca_certificate_file: (roots == Some("ca")).then(|| "/certs/ca.pem".to_owned()),
        spiffe_trust_bundle_map_file: (roots == Some("spiffe"))
            .then(|| "/certs/bundles.json".to_owned()),
        refresh_interval: Duration::from_secs(60),
    }
}

fn cert_pem(tag: &str) -> String {
    pem("CERTIFICATE", format!("leaf-{tag}").as_bytes())
        + &pem("CERTIFICATE", format!("intermediate-{tag}").as_bytes())
}

fn key_pem(tag: &str) -> String {
    pem("PRIVATE KEY", format!("key-{tag}").as_bytes())
}

fn identity_of(tag: &str) -> Identity {
    Identity {
        cert_chain: vec![
            CertificateDer::from(format!("leaf-{tag}").into_bytes()),
            CertificateDer::from(format!("intermediate-{tag}").into_bytes()),
        ],
        private_key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
            format!("key-{tag}").into_bytes(),
        )),
    }
}

fn files_with(tag: &str) -> Files {
    let mut files = Files::default();
    files.put("/certs/cert.pem", cert_pem(tag));
    files.put("/certs/key.pem", key_pem(tag));
    files.put(
        "/certs/ca.pem",
        pem("CERTIFICATE", format!("ca-{tag}").as_bytes()),
    );
    files
}

fn refresh(state: &mut FileWatcherState, now: Instant, files: &Files) -> bool {
    state.refresh_with(now, |path| files.read(path))
}

#[test]
fn first_read_is_due_at_once_then_every_refresh_interval() {
    let mut state = FileWatcherState::new(config(true, Some("ca")));
    assert_eq!(state.poll_timeout(), Instant::ZERO);
    assert_eq!(
        state.identity("").unwrap_err(),
        CertificateError::NotLoaded(Material::Identity)
    );
    let files = files_with("1");
    let t0 = Instant::from_secs(5);
    assert!(refresh(&mut state, t0, &files));
    assert_eq!(state.poll_timeout(), t0 + Duration::from_secs(60));
    assert_eq!(*state.identity("any name").unwrap(), identity_of("1"));
    assert_eq!(
        *state.roots("").unwrap(),
        Roots::Certificates(vec![CertificateDer::from(b"ca-1".to_vec())])
    );
    // Unchanged files: nothing changes, the next read is rescheduled.
    let generation = state.generation();
    let t1 = t0 + Duration::from_secs(60);
    assert!(!refresh(&mut state, t1, &files));
    assert_eq!(state.generation(), generation);
    assert_eq!(state.poll_timeout(), t1 + Duration::from_secs(60));
}

#[test]
fn a_rotation_installs_the_new_material_and_moves_the_generation() {
    let mut state = FileWatcherState::new(config(true, Some("ca")));
    refresh(&mut state, Instant::ZERO, &files_with("1"));
    let before = state.generation();
    let held = state.identity("").unwrap();
    assert!(refresh(
        &mut state,
        Instant::from_secs(60),
        &files_with("2")
    ));
    assert!(state.generation() > before);
    assert_eq!(*state.identity("").unwrap(), identity_of("2"));
    // What a handshake took before stays valid for it.
    assert_eq!(*held, identity_of("1"));
}

#[test]
fn a_bad_or_missing_file_keeps_the_last_good_material_and_says_why() {
    let mut state = FileWatcherState::new(config(true, Some("ca")));
    refresh(&mut state, Instant::ZERO, &files_with("1"));
    let generation = state.generation();

    let mut broken = files_with("2");
    broken.0.remove("/certs/key.pem");
    broken.put("/certs/ca.pem", "not PEM at all");
    assert!(refresh(&mut state, Instant::from_secs(60), &broken));
    // The errors changed (so did the generation), the material did not.
    assert!(state.generation() > generation);
    assert_eq!(*state.identity("").unwrap(), identity_of("1"));
    assert_eq!(
        state
            .store()
            .last_error(Material::Identity)
            .unwrap()
            .to_string(),
        "private_key_file \"/certs/key.pem\": cannot read: No such file or directory"
    );
    assert_eq!(
        state
            .store()
            .last_error(Material::Roots)
            .unwrap()
            .to_string(),
        "ca_certificate_file \"/certs/ca.pem\": no CERTIFICATE in the PEM file"
    );
    // The same failure again changes nothing.
    let g = state.generation();
    assert!(!refresh(&mut state, Instant::from_secs(120), &broken));
    assert_eq!(state.generation(), g);
    // Fixed files clear the errors and install the new material.
    assert!(refresh(
        &mut state,
        Instant::from_secs(180),
        &files_with("3")
    ));
    assert_eq!(state.store().last_error(Material::Identity), None);
    assert_eq!(*state.identity("").unwrap(), identity_of("3"));
}

#[test]
fn without_good_material_the_handshake_gets_the_error() {
    let mut state = FileWatcherState::new(config(true, Some("ca")));
    refresh(&mut state, Instant::ZERO, &Files::default());
    assert_eq!(
        state.identity("").unwrap_err().to_string(),
        "certificate_file \"/certs/cert.pem\": cannot read: No such file or directory"
    );
    assert_eq!(
        state.roots("").unwrap_err(),
        CertificateError::File {
            field: "ca_certificate_file",
            path: "/certs/ca.pem".into(),
            reason: "cannot read: No such file or directory".into(),
        }
    );
    let mut files = files_with("1");
    files.put("/certs/cert.pem", pem("PRIVATE KEY", b"k"));
    files.put("/certs/key.pem", cert_pem("1"));
    refresh(&mut state, Instant::from_secs(60), &files);
    assert_eq!(
        state.identity("").unwrap_err().to_string(),
        "certificate_file \"/certs/cert.pem\": no CERTIFICATE in the PEM file"
    );
    files.put("/certs/cert.pem", cert_pem("1"));
    refresh(&mut state, Instant::from_secs(120), &files);
    assert_eq!(
        state.identity("").unwrap_err().to_string(),
        "private_key_file \"/certs/key.pem\": no PRIVATE KEY (PKCS#8, RSA or EC) in the PEM file"
    );
    files.put(
        "/certs/key.pem",
        "-----BEGIN PRIVATE KEY-----\nnot base64!\n-----END PRIVATE KEY-----\n",
    );
    refresh(&mut state, Instant::from_secs(180), &files);
    let message = state.identity("").unwrap_err().to_string();
    assert!(
        message.starts_with("private_key_file \"/certs/key.pem\": invalid PEM: "),
        "{message}"
    );
}

#[test]
fn pkcs1_and_sec1_keys_are_accepted() {
    let mut state = FileWatcherState::new(config(true, None));
    let mut files = files_with("1");
    files.put("/certs/key.pem", pem("RSA PRIVATE KEY", b"rsa"));
    refresh(&mut state, Instant::ZERO, &files);
    assert!(matches!(
        state.identity("").unwrap().private_key,
        PrivateKeyDer::Pkcs1(_)
    ));
    files.put("/certs/key.pem", pem("EC PRIVATE KEY", b"ec"));
    refresh(&mut state, Instant::from_secs(60), &files);
    assert!(matches!(
        state.identity("").unwrap().private_key,
        PrivateKeyDer::Sec1(_)
    ));
}

#[test]
fn a_provider_answers_only_for_what_it_is_configured_for() {
    let mut roots_only = FileWatcherState::new(config(false, Some("ca")));
    refresh(&mut roots_only, Instant::ZERO, &files_with("1"));
    assert_eq!(
        roots_only.identity("").unwrap_err().to_string(),
        "the provider supplies no identity certificate"
    );
    let mut identity_only = FileWatcherState::new(config(true, None));
    refresh(&mut identity_only, Instant::ZERO, &files_with("1"));
    assert_eq!(
        identity_only.roots("").unwrap_err(),
        CertificateError::NotConfigured(Material::Roots)
    );
}

#[test]
fn the_spiffe_bundle_map_replaces_the_ca_file() {
    let mut c = config(false, Some("spiffe"));
    c.ca_certificate_file = Some("/certs/ca.pem".into());
    let mut state = FileWatcherState::new(c);
    let mut files = files_with("1");
    let bundle = format!(
        r#"{{"trust_domains": {{"example.org": {{"keys": [
            {{"kty": "EC", "use": "x509-svid", "x5c": ["{}"]}}]}}}}}}"#,
        base64(b"td-root")
    );
    files.put("/certs/bundles.json", bundle);
    refresh(&mut state, Instant::ZERO, &files);
    let Roots::SpiffeBundleMap(map) = &*state.roots("").unwrap() else {
        panic!("expected a bundle map")
    };
    assert_eq!(
        map.roots("example.org").unwrap(),
        &[CertificateDer::from(b"td-root".to_vec())]
    );
    // A bad map keeps the good one (A87: later load errors do not affect it).
    files.put(
        "/certs/bundles.json",
        r#"{"trust_domains": {"Bad": {"keys": []}}}"#,
    );
    refresh(&mut state, Instant::from_secs(60), &files);
    assert!(matches!(
        &*state.roots("").unwrap(),
        Roots::SpiffeBundleMap(_)
    ));
    assert_eq!(
        state
            .store()
            .last_error(Material::Roots)
            .unwrap()
            .to_string(),
        "spiffe_trust_bundle_map_file \"/certs/bundles.json\": trust_domains[\"Bad\"]: invalid \
         trust domain: the trust domain contains 'B': only lowercase letters, digits, '.', '-' \
         and '_' are allowed"
    );
}

#[test]
fn adapter_checks_refuse_material_like_a_bad_file() {
    let mut state = FileWatcherState::new(config(true, Some("ca")))
        .with_identity_check(Box::new(|identity| {
            if identity.cert_chain[0].as_ref() == b"leaf-bad" {
                Err("the private key does not match the certificate".into())
            } else {
                Ok(())
            }
        }))
        .with_roots_check(Box::new(|roots| match roots {
            Roots::Certificates(certs) if certs[0].as_ref() == b"ca-bad" => {
                Err("certificate 0 is not X.509".into())
            }
            _ => Ok(()),
        }));
    refresh(&mut state, Instant::ZERO, &files_with("1"));
    refresh(&mut state, Instant::from_secs(60), &files_with("bad"));
    assert_eq!(*state.identity("").unwrap(), identity_of("1"));
    assert_eq!(
        state
            .store()
            .last_error(Material::Identity)
            .unwrap()
            .to_string(),
        "private_key_file \"/certs/key.pem\": the private key does not match the certificate"
    );
    assert_eq!(
        state
            .store()
            .last_error(Material::Roots)
            .unwrap()
            .to_string(),
        "ca_certificate_file \"/certs/ca.pem\": certificate 0 is not X.509"
    );
}

#[test]
fn two_phase_reads_match_refresh_with() {
    let files = files_with("1");
    let mut a = FileWatcherState::new(config(true, Some("ca")));
    let mut b = FileWatcherState::new(config(true, Some("ca")));
    let mut paths = Vec::new();
    let reads = b.config().clone().read_files(|p| {
        paths.push(p.to_owned());
        files.read(p)
    });
    assert_eq!(
        paths,
        ["/certs/cert.pem", "/certs/key.pem", "/certs/ca.pem"]
    );
    assert!(b.on_files_read(Instant::ZERO, reads));
    refresh(&mut a, Instant::ZERO, &files);
    assert_eq!(a.identity("").unwrap(), b.identity("").unwrap());
    assert_eq!(a.roots("").unwrap(), b.roots("").unwrap());
}

#[test]
fn a_locked_state_is_a_shared_provider() {
    let shared = Arc::new(RwLock::new(FileWatcherState::new(config(true, Some("ca")))));
    let provider: Arc<dyn CertificateProvider> = shared.clone();
    assert!(provider.identity("").is_err());
    let g0 = provider.generation();
    refresh(
        &mut shared.write().unwrap(),
        Instant::ZERO,
        &files_with("1"),
    );
    assert_ne!(provider.generation(), g0);
    assert_eq!(*provider.identity("").unwrap(), identity_of("1"));
    // A reader panicking with the lock held poisons it; handshakes still get material.
    let poisoner = shared.clone();
    let _ = std::thread::spawn(move || {
        let _guard = poisoner.write().unwrap();
        panic!("poison the lock");
    })
    .join();
    assert!(shared.is_poisoned());
    assert_eq!(*provider.identity("").unwrap(), identity_of("1"));
}

#[test]
fn a_store_serves_fixed_material_and_updates() {
    let mut store = CertificateStore::with_material(Some(identity_of("1")), None);
    assert_eq!(*store.identity("").unwrap(), identity_of("1"));
    assert_eq!(
        store.roots("").unwrap_err(),
        CertificateError::NotConfigured(Material::Roots)
    );
    let g = store.generation();
    assert!(!store.set_identity(identity_of("1")), "the same identity");
    assert_eq!(store.generation(), g);
    // A store learns it supplies roots when given some (an SDS provider would).
    assert!(store.set_roots(Roots::Certificates(Vec::new())));
    assert!(store.roots("").is_ok());
    assert!(store.roots_failed(CertificateError::Other("SDS stream closed".into())));
    assert!(store.roots("").is_ok(), "the last good roots stay");
    assert_eq!(
        store.last_error(Material::Roots).unwrap().to_string(),
        "SDS stream closed"
    );
}
