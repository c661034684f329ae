//! SPIFFE IDs and trust bundle maps (A87).

use super::*;
use crate::security::pki_types::CertificateDer;
use crate::security::{SpiffeBundleMap, SpiffeId, SubjectAltName};

#[test]
fn spiffe_ids_parse_by_the_spiffe_rules() {
    let id = SpiffeId::parse("spiffe://example.org/ns/default/sa/api").unwrap();
    assert_eq!(id.trust_domain(), "example.org");
    assert_eq!(id.path(), "/ns/default/sa/api");
    assert_eq!(id.to_string(), "spiffe://example.org/ns/default/sa/api");
    let bare = SpiffeId::parse("SPIFFE://td").unwrap();
    assert_eq!((bare.trust_domain(), bare.path()), ("td", ""));
    let long_ok = format!("spiffe://td/{}", "a".repeat(2048 - 12));
    assert!(SpiffeId::parse(&long_ok).is_ok());
    let cases = [
        ("", "a SPIFFE ID cannot be empty"),
        ("https://td/a", "a SPIFFE ID must start with spiffe://"),
        ("spiffe:/", "a SPIFFE ID must start with spiffe://"),
        ("spiffe://td/a/", "a SPIFFE ID cannot end with /"),
        ("spiffe:///a", "the trust domain cannot be empty"),
        (
            "spiffe://td/a?x=1",
            "a SPIFFE ID cannot contain a query or a fragment",
        ),
        (
            "spiffe://td/a#f",
            "a SPIFFE ID cannot contain a query or a fragment",
        ),
        (
            "spiffe://tdé/a",
            "a SPIFFE ID cannot contain non-ASCII characters",
        ),
        (
            "spiffe://Example.org/a",
            "the trust domain contains 'E': only lowercase letters, digits, '.', '-' and '_' \
             are allowed",
        ),
        ("spiffe://td//a", "a path segment cannot be empty"),
        ("spiffe://td/a/../b", "a path segment cannot be . or .."),
        ("spiffe://td/./b", "a path segment cannot be . or .."),
        (
            "spiffe://td/a%20b",
            "a path segment contains '%': only letters, digits, '.', '-' and '_' are allowed",
        ),
    ];
    for (uri, expected) in cases {
        assert_eq!(SpiffeId::parse(uri).unwrap_err(), expected, "{uri}");
    }
    let too_long = format!("spiffe://td/{}", "a".repeat(2048));
    assert_eq!(
        SpiffeId::parse(&too_long).unwrap_err(),
        "a SPIFFE ID is at most 2048 bytes, got 2060"
    );
    let long_td = format!("spiffe://{}", "a".repeat(256));
    assert_eq!(
        SpiffeId::parse(&long_td).unwrap_err(),
        "a trust domain is at most 255 bytes"
    );
}

#[test]
fn a_spiffe_leaf_has_exactly_one_uri_san() {
    let uri = |s: &str| SubjectAltName::Uri(s.to_owned());
    let dns = SubjectAltName::Dns("a.example".into());
    assert_eq!(
        SpiffeId::of_leaf(&[dns.clone(), uri("spiffe://td/a")])
            .unwrap()
            .trust_domain(),
        "td"
    );
    assert_eq!(
        SpiffeId::of_leaf(std::slice::from_ref(&dns)).unwrap_err(),
        "the certificate has no URI SAN (a SPIFFE ID is required)"
    );
    assert_eq!(
        SpiffeId::of_leaf(&[uri("spiffe://td/a"), uri("spiffe://td/b")]).unwrap_err(),
        "the certificate has several URI SANs (a SPIFFE certificate has exactly one)"
    );
    assert_eq!(
        SpiffeId::of_leaf(&[uri("https://td/a")]).unwrap_err(),
        "invalid SPIFFE ID \"https://td/a\": a SPIFFE ID must start with spiffe://"
    );
}

fn key(kty: &str, use_: &str, x5c: &[&[u8]]) -> String {
    let certs: Vec<String> = x5c.iter().map(|c| format!("\"{}\"", base64(c))).collect();
    format!(
        r#"{{"kty": "{kty}", "use": "{use_}", "x5c": [{}], "n": "ignored", "e": "AQAB"}}"#,
        certs.join(", ")
    )
}

#[test]
fn a_bundle_map_gives_the_roots_of_each_trust_domain() {
    let json = format!(
        r#"{{"trust_domains": {{
            "example.org": {{"spiffe_sequence": 12, "keys": [{}, {}, {}]}},
            "other.test": {{"keys": []}}
        }}}}"#,
        key("RSA", "x509-svid", &[b"root-a"]),
        key("EC", "x509-svid", &[b"root-b"]),
        r#"{"kty": "EC", "use": "jwt-svid", "kid": "k", "crv": "P-256", "x": "x", "y": "y"}"#,
    );
    let map = SpiffeBundleMap::from_json(json.as_bytes()).unwrap();
    assert_eq!(
        map.trust_domains().collect::<Vec<_>>(),
        ["example.org", "other.test"]
    );
    assert_eq!(
        map.roots("example.org").unwrap(),
        &[
            CertificateDer::from(b"root-a".to_vec()),
            CertificateDer::from(b"root-b".to_vec())
        ]
    );
    assert_eq!(
        map.roots("other.test").unwrap(),
        &[] as &[CertificateDer<'_>]
    );
    assert_eq!(map.roots("absent.test"), None);
    // A87 steps 1-2: the peer's trust domain picks the roots.
    let peer = [SubjectAltName::Uri("spiffe://example.org/ns/a/sa/b".into())];
    let (id, roots) = map.roots_for_peer(&peer).unwrap();
    assert_eq!(id.path(), "/ns/a/sa/b");
    assert_eq!(roots.len(), 2);
    let stranger = [SubjectAltName::Uri("spiffe://absent.test/x".into())];
    assert_eq!(
        map.roots_for_peer(&stranger).unwrap_err(),
        "no SPIFFE trust bundle for trust domain \"absent.test\" (of spiffe://absent.test/x)"
    );
    assert_eq!(
        SpiffeBundleMap::from_json(br#"{"trust_domains": {}}"#).unwrap(),
        SpiffeBundleMap::default(),
        "an empty map is valid"
    );
}

#[test]
fn any_bad_entry_rejects_the_whole_map() {
    let with_key = |k: &str| format!(r#"{{"trust_domains": {{"td": {{"keys": [{k}]}}}}}}"#);
    let p = "trust_domains[\"td\"].keys[0]";
    let cases = [
        (
            "not json".to_owned(),
            "invalid JSON: expected ident at line 1 column 2".to_owned(),
        ),
        ("{}".to_owned(), "trust_domains: missing".to_owned()),
        (
            r#"{"trust_domains": []}"#.to_owned(),
            "trust_domains: expected an object".to_owned(),
        ),
        (
            r#"{"trust_domains": {"td": {}}}"#.to_owned(),
            "trust_domains[\"td\"].keys: missing".to_owned(),
        ),
        (
            r#"{"trust_domains": {"td": {"keys": {}}}}"#.to_owned(),
            "trust_domains[\"td\"].keys: expected an array".to_owned(),
        ),
        (
            r#"{"trust_domains": {"": {"keys": []}}}"#.to_owned(),
            "trust_domains[\"\"]: invalid trust domain: the trust domain cannot be empty"
                .to_owned(),
        ),
        (
            with_key(r#"{"use": "x509-svid", "x5c": []}"#),
            format!("{p}.kty: missing"),
        ),
        (
            with_key(r#"{"kty": "RSA", "x5c": []}"#),
            format!("{p}.use: missing"),
        ),
        (
            with_key(r#"{"kty": "RSA", "use": "enc"}"#),
            format!("{p}.use: must be \"x509-svid\" (or \"jwt-svid\", skipped), got \"enc\""),
        ),
        (
            with_key(r#"{"kty": "RSA", "use": "x509-svid"}"#),
            format!("{p}.x5c: missing"),
        ),
        (
            with_key(&key("RSA", "x509-svid", &[b"a", b"b"])),
            format!("{p}.x5c: array length must be 1, got 2"),
        ),
        (
            with_key(&key("RSA", "x509-svid", &[])),
            format!("{p}.x5c: array length must be 1, got 0"),
        ),
        (
            with_key(r#"{"kty": "RSA", "use": "x509-svid", "x5c": [7]}"#),
            format!("{p}.x5c[0]: expected a string"),
        ),
        (
            with_key(r#"{"kty": "RSA", "use": "x509-svid", "x5c": ["-----END"]}"#),
            format!("{p}.x5c[0]: not a base64 certificate"),
        ),
    ];
    for (json, expected) in cases {
        assert_eq!(
            SpiffeBundleMap::from_json(json.as_bytes()).unwrap_err(),
            expected,
            "{json}"
        );
    }
    let bad_base64 = with_key(r#"{"kty": "RSA", "use": "x509-svid", "x5c": ["@@@@"]}"#);
    let message = SpiffeBundleMap::from_json(bad_base64.as_bytes()).unwrap_err();
    assert!(
        message.starts_with(&format!("{p}.x5c[0]: not a base64 certificate: ")),
        "{message}"
    );
}

#[test]
fn a_map_built_in_code_checks_its_trust_domains() {
    assert!(SpiffeBundleMap::new([("td".to_owned(), Vec::new())]).is_ok());
    assert_eq!(
        SpiffeBundleMap::new([("TD".to_owned(), Vec::new())]).unwrap_err(),
        "trust domain \"TD\": the trust domain contains 'T': only lowercase letters, digits, \
         '.', '-' and '_' are allowed"
    );
}
