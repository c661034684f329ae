//! SPIFFE (gRFC A87): SPIFFE IDs, the trust bundle map a `file_watcher` provider may
//! load instead of CA certificates, and the choice of roots for a peer by the trust
//! domain of its SPIFFE ID.
//!
//! The bundle map is the JSON of A87: `{"trust_domains": {"<td>": <bundle>}}`, each
//! bundle a JWK set of which only `keys` (and in each key `kty`, `use` and `x5c`) is
//! read. A problem anywhere rejects the whole map, as A87 asks. Two choices where the
//! implementations differ: a key whose `use` is `jwt-svid` is skipped (it is a JWT
//! authority, not an X.509 root; SPIRE publishes both in one bundle, and go-spiffe
//! accepts them, where C-core rejects the map), and `kty` is not restricted to `RSA`
//! (C-core's restriction would refuse SPIRE's default EC P-256 CAs; go-spiffe accepts
//! them). An `x5c` entry must be exactly one base64 DER certificate; it is decoded
//! here, and parsed as X.509 by the adapter when it builds its root store.

use std::collections::BTreeMap;
use std::fmt;

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use serde_json::Value;

use super::san::SubjectAltName;

/// The longest SPIFFE ID, in bytes (SPIFFE-ID §2.3; C-core's limit).
pub const MAX_SPIFFE_ID_LEN: usize = 2048;

/// The longest trust domain name, in bytes.
pub const MAX_TRUST_DOMAIN_LEN: usize = 255;

/// A well-formed SPIFFE ID: `spiffe://<trust domain>[/<path>]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SpiffeId {
    trust_domain: String,
    path: String,
}

impl SpiffeId {
    /// Parses a SPIFFE ID by the SPIFFE-ID rules (as C-core checks them): at most 2048
    /// ASCII bytes, no query or fragment, scheme `spiffe` (any case), a non-empty trust
    /// domain of lowercase letters, digits, `.`, `-` and `_`, and path segments of
    /// letters, digits, `.`, `-` and `_` (not `.` or `..`), without a trailing `/`.
    ///
    /// # Errors
    /// What is wrong with `uri`.
    pub fn parse(uri: &str) -> Result<SpiffeId, String> {
        if uri.is_empty() {
            return Err("a SPIFFE ID cannot be empty".into());
        }
        if uri.len() > MAX_SPIFFE_ID_LEN {
            return Err(format!(
                "a SPIFFE ID is at most {MAX_SPIFFE_ID_LEN} bytes, got {}",
                uri.len()
            ));
        }
        if !uri.is_ascii() {
            return Err("a SPIFFE ID cannot contain non-ASCII characters".into());
        }
        if uri.contains(['#', '?']) {
            return Err("a SPIFFE ID cannot contain a query or a fragment".into());
        }
        let scheme = "spiffe://";
        if uri.len() < scheme.len() || !uri[..scheme.len()].eq_ignore_ascii_case(scheme) {
            return Err("a SPIFFE ID must start with spiffe://".into());
        }
        if uri.ends_with('/') {
            return Err("a SPIFFE ID cannot end with /".into());
        }
        let rest = &uri[scheme.len()..];
        let (trust_domain, path) = match rest.split_once('/') {
            Some((td, path)) => (td, Some(path)),
            None => (rest, None),
        };
        check_trust_domain(trust_domain)?;
        if let Some(path) = path {
            for segment in path.split('/') {
                check_path_segment(segment)?;
            }
        }
        Ok(SpiffeId {
            trust_domain: trust_domain.to_owned(),
            path: path.map(|p| format!("/{p}")).unwrap_or_default(),
        })
    }

    /// The SPIFFE ID of a leaf certificate (A87, step 1): it must have exactly one URI
    /// SAN, and that must be a well-formed SPIFFE ID.
    ///
    /// # Errors
    /// Why the certificate is not a SPIFFE leaf.
    pub fn of_leaf(sans: &[SubjectAltName]) -> Result<SpiffeId, String> {
        let mut uris = sans.iter().filter_map(|san| match san {
            SubjectAltName::Uri(uri) => Some(uri.as_str()),
            _ => None,
        });
        match (uris.next(), uris.next()) {
            (Some(uri), None) => {
                SpiffeId::parse(uri).map_err(|e| format!("invalid SPIFFE ID {uri:?}: {e}"))
            }
            (None, _) => Err("the certificate has no URI SAN (a SPIFFE ID is required)".into()),
            (Some(_), Some(_)) => Err(
                "the certificate has several URI SANs (a SPIFFE certificate has exactly one)"
                    .into(),
            ),
        }
    }

    /// The trust domain, e.g. `example.org`.
    pub fn trust_domain(&self) -> &str {
        &self.trust_domain
    }

    /// The path, with its leading `/`, or empty.
    pub fn path(&self) -> &str {
        &self.path
    }
}

impl fmt::Display for SpiffeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "spiffe://{}{}", self.trust_domain, self.path)
    }
}

fn check_trust_domain(td: &str) -> Result<(), String> {
    if td.is_empty() {
        return Err("the trust domain cannot be empty".into());
    }
    if td.len() > MAX_TRUST_DOMAIN_LEN {
        return Err(format!(
            "a trust domain is at most {MAX_TRUST_DOMAIN_LEN} bytes"
        ));
    }
    match td
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '-' | '_')))
    {
        Some(c) => Err(format!(
            "the trust domain contains {c:?}: only lowercase letters, digits, '.', '-' and \
             '_' are allowed"
        )),
        None => Ok(()),
    }
}

fn check_path_segment(segment: &str) -> Result<(), String> {
    if segment.is_empty() {
        return Err("a path segment cannot be empty".into());
    }
    if segment == "." || segment == ".." {
        return Err("a path segment cannot be . or ..".into());
    }
    match segment
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')))
    {
        Some(c) => Err(format!(
            "a path segment contains {c:?}: only letters, digits, '.', '-' and '_' are \
             allowed"
        )),
        None => Ok(()),
    }
}

/// A SPIFFE trust bundle map (A87): the X.509 roots of each trust domain.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpiffeBundleMap {
    bundles: BTreeMap<String, Vec<CertificateDer<'static>>>,
}

impl SpiffeBundleMap {
    /// A map from trust domains to their roots (for tests and SDS-fed providers).
    ///
    /// # Errors
    /// The first trust domain that is not well formed.
    pub fn new(
        bundles: impl IntoIterator<Item = (String, Vec<CertificateDer<'static>>)>,
    ) -> Result<SpiffeBundleMap, String> {
        let bundles: BTreeMap<_, _> = bundles.into_iter().collect();
        for td in bundles.keys() {
            check_trust_domain(td).map_err(|e| format!("trust domain {td:?}: {e}"))?;
        }
        Ok(SpiffeBundleMap { bundles })
    }

    /// Parses the JSON of a bundle map file. An empty `trust_domains` is a valid, empty
    /// map.
    ///
    /// # Errors
    /// The JSON path of the first problem and what it is, e.g.
    /// `trust_domains["example.org"].keys[0].x5c: array length must be 1, got 2`.
    pub fn from_json(text: &[u8]) -> Result<SpiffeBundleMap, String> {
        let value: Value =
            serde_json::from_slice(text).map_err(|e| format!("invalid JSON: {e}"))?;
        let domains = value
            .get("trust_domains")
            .ok_or("trust_domains: missing")?
            .as_object()
            .ok_or("trust_domains: expected an object")?;
        let mut bundles = BTreeMap::new();
        for (td, bundle) in domains {
            let path = format!("trust_domains[{td:?}]");
            check_trust_domain(td).map_err(|e| format!("{path}: invalid trust domain: {e}"))?;
            bundles.insert(td.clone(), parse_bundle(bundle, &path)?);
        }
        Ok(SpiffeBundleMap { bundles })
    }

    /// The trust domains, in order.
    pub fn trust_domains(&self) -> impl Iterator<Item = &str> {
        self.bundles.keys().map(String::as_str)
    }

    /// The roots of `trust_domain`, if the map has it.
    pub fn roots(&self, trust_domain: &str) -> Option<&[CertificateDer<'static>]> {
        self.bundles.get(trust_domain).map(Vec::as_slice)
    }

    /// The roots that verify a peer (A87, steps 1 and 2): the peer's leaf must carry one
    /// SPIFFE ID, and the map must have its trust domain.
    ///
    /// # Errors
    /// Why the peer cannot be verified with this map.
    pub fn roots_for_peer(
        &self,
        sans: &[SubjectAltName],
    ) -> Result<(SpiffeId, &[CertificateDer<'static>]), String> {
        let id = SpiffeId::of_leaf(sans)?;
        match self.roots(id.trust_domain()) {
            Some(roots) => Ok((id, roots)),
            None => Err(format!(
                "no SPIFFE trust bundle for trust domain {:?} (of {id})",
                id.trust_domain()
            )),
        }
    }
}

/// One trust domain's bundle at `path`: the X.509 roots of its `keys`.
fn parse_bundle(bundle: &Value, path: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let keys = bundle
        .get("keys")
        .ok_or_else(|| format!("{path}.keys: missing"))?
        .as_array()
        .ok_or_else(|| format!("{path}.keys: expected an array"))?;
    let mut roots = Vec::with_capacity(keys.len());
    for (i, key) in keys.iter().enumerate() {
        let key_path = format!("{path}.keys[{i}]");
        let field = |name: &str| -> Result<&str, String> {
            key.get(name)
                .ok_or_else(|| format!("{key_path}.{name}: missing"))?
                .as_str()
                .ok_or_else(|| format!("{key_path}.{name}: expected a string"))
        };
        field("kty")?;
        match field("use")? {
            "x509-svid" => roots.push(parse_x5c(key, &key_path)?),
            "jwt-svid" => {}
            other => {
                return Err(format!(
                    "{key_path}.use: must be \"x509-svid\" (or \"jwt-svid\", skipped), got \
                     {other:?}"
                ));
            }
        }
    }
    Ok(roots)
}

/// The single certificate of a key's `x5c` (standard base64 DER).
fn parse_x5c(key: &Value, key_path: &str) -> Result<CertificateDer<'static>, String> {
    let x5c = key
        .get("x5c")
        .ok_or_else(|| format!("{key_path}.x5c: missing"))?
        .as_array()
        .ok_or_else(|| format!("{key_path}.x5c: expected an array"))?;
    let [cert] = x5c.as_slice() else {
        return Err(format!(
            "{key_path}.x5c: array length must be 1, got {}",
            x5c.len()
        ));
    };
    let b64 = cert
        .as_str()
        .ok_or_else(|| format!("{key_path}.x5c[0]: expected a string"))?;
    // The PEM decoder is the base64 decoder at hand: armor the value as C-core does.
    if b64.is_empty() || b64.contains('-') {
        return Err(format!("{key_path}.x5c[0]: not a base64 certificate"));
    }
    let pem = format!("-----BEGIN CERTIFICATE-----\n{b64}\n-----END CERTIFICATE-----\n");
    CertificateDer::from_pem_slice(pem.as_bytes())
        .map_err(|e| format!("{key_path}.x5c[0]: not a base64 certificate: {e}"))
}
