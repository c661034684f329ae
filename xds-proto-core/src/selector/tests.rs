//! Unit tests of the selector's private helpers; its behaviour is tested through the
//! public API in `tests/tests/config_selector.rs`.

use super::cluster_registry::base64;
use super::matchers::{
    contains_ignore_case, ends_with_ignore_case, starts_with_ignore_case, under_fraction,
};
use super::route_table::{regex_literal_prefix, service_key};

/// A source that always draws the same value (the testing kit's `Fixed` implements
/// the trait of the core it links, not this test build's).
struct Fixed(u32);

impl super::RandomSource for Fixed {
    fn next_u32(&mut self) -> u32 {
        self.0
    }
}

#[test]
fn service_keys() {
    assert_eq!(service_key("/pkg.Svc/Method"), Some("/pkg.Svc/"));
    assert_eq!(service_key("/pkg.Svc/"), Some("/pkg.Svc/"));
    assert_eq!(service_key("/pkg.Svc/a/b"), Some("/pkg.Svc/"));
    assert_eq!(service_key("/pkg.Svc"), None);
    assert_eq!(service_key("//x"), None);
    assert_eq!(service_key("pkg/x"), None);
    assert_eq!(service_key(""), None);
}

#[test]
fn regex_literal_prefixes_hold_for_every_match() {
    for (pattern, literal) in [
        ("/pkg\\.Svc/.*", "/pkg.Svc/"),
        ("^/pkg\\.Svc/Get[0-9]+", "/pkg.Svc/Get"),
        ("/a/bc*", "/a/b"),
        ("/a/bc?d", "/a/b"),
        ("/a/bc{0,2}", "/a/b"),
        ("/a/bc+d", "/a/bc"),
        ("/a\\/b\\d", "/a/b"),
        ("/a/(b)", "/a/b"),
        ("/a/[bc]", "/a/"),
        ("/a/b{2}/", "/a/bb/"),
        // Alternations and groups: the start every branch shares.
        ("/pkg\\.Svc/(Get|Put)", "/pkg.Svc/"),
        ("/pkg\\.A/x|/pkg\\.B/y", "/pkg."),
        ("/a/b|/c/d", "/"),
        ("(?i)/a/b", "/"),
        // A class whose characters share a UTF-8 lead byte: no half character.
        ("/[äö]/x", "/"),
        ("/ü/x", "/ü/x"),
        (".*/M", ""),
        ("(/a)?/b", "/"),
        ("", ""),
        // Not RE2 syntax the `regex` crate takes: route validation refused it already.
        ("\\Q/a", ""),
    ] {
        assert_eq!(regex_literal_prefix(pattern), literal, "{pattern}");
    }
}

#[test]
fn base64_matches_rfc4648_vectors() {
    for (input, out) in [
        ("", ""),
        ("f", "Zg=="),
        ("fo", "Zm8="),
        ("foo", "Zm9v"),
        ("foob", "Zm9vYg=="),
        ("fooba", "Zm9vYmE="),
        ("foobar", "Zm9vYmFy"),
    ] {
        assert_eq!(base64(input.as_bytes()), out);
    }
}

#[test]
fn ignore_case_helpers() {
    assert!(starts_with_ignore_case("/PKG.svc/M", "/pkg.SVC/"));
    assert!(!starts_with_ignore_case("/p", "/pkg"));
    assert!(ends_with_ignore_case("Value-ABC", "abc"));
    assert!(contains_ignore_case("xxHeLLoyy", "hello"));
    assert!(contains_ignore_case("x", ""));
    assert!(!contains_ignore_case("hel", "hello"));
}

#[test]
fn fraction_draw_bounds() {
    assert!(under_fraction(1, &mut Fixed(0)));
    assert!(!under_fraction(0, &mut Fixed(0)));
    assert!(under_fraction(1_000_000, &mut Fixed(u32::MAX)));
    assert!(!under_fraction(999_999, &mut Fixed(u32::MAX)));
}

/// Issue 24 item 5: the core's request hash (A42) combines the policies' hashes as
/// Envoy does, stops at the first terminal one once a hash exists, skips policies
/// that produce none, and reads headers as route matchers do.
#[test]
fn the_request_hash_combines_the_policies_as_a42_says() {
    use crate::lb::hash_header_value;
    use crate::resource::route::HashPolicy;
    use crate::selector::request_hash;

    let header = |name: &str, terminal: bool| HashPolicy::Header {
        header_name: name.to_string(),
        regex_rewrite: None,
        terminal,
    };
    let channel = |terminal: bool| HashPolicy::ChannelId { terminal };
    let headers = [
        ("x-user", "alice"),
        ("x-tag", "a"),
        ("x-tag", "b"),
        ("x-key-bin", "AAEC"),
        ("grpc-timeout", "1S"),
    ];
    let user = hash_header_value(b"alice");
    let id = 0x1234_5678_9abc_def0;
    let hash = |policies: &[HashPolicy]| request_hash(policies, &headers[..], id);
    assert_eq!(hash(&[]), None);
    assert_eq!(hash(&[header("x-user", false)]), Some(user));
    assert_eq!(hash(&[channel(false)]), Some(id));
    // Several hashes: rotate the running hash left by one and XOR the next.
    assert_eq!(
        hash(&[header("x-user", false), channel(false)]),
        Some(user.rotate_left(1) ^ id)
    );
    // A terminal policy ends the evaluation once a hash exists, whether it produced
    // one itself or an earlier policy did (Envoy's and gRPC-Go's rule); with no hash
    // yet, it does not.
    assert_eq!(hash(&[header("x-user", true), channel(false)]), Some(user));
    assert_eq!(hash(&[header("x-absent", true), channel(false)]), Some(id));
    assert_eq!(
        hash(&[
            header("x-user", false),
            header("x-absent", true),
            channel(false)
        ]),
        Some(user)
    );
    // Repeated values are joined with ","; binary and gRPC headers produce nothing;
    // content-type is always application/grpc.
    assert_eq!(
        hash(&[header("x-tag", false)]),
        Some(hash_header_value(b"a,b"))
    );
    assert_eq!(hash(&[header("x-key-bin", false)]), None);
    assert_eq!(hash(&[header("grpc-timeout", false)]), None);
    assert_eq!(
        hash(&[header("content-type", false)]),
        Some(hash_header_value(b"application/grpc"))
    );
}

/// Issue 24 item 5: the selector's random source is the core's own trait: a closure
/// adapts any generator, and `Seeded` expands one number per RPC deterministically
/// and evenly (as the load balancer expands `PickArgs::random`).
#[test]
fn random_sources_closures_and_seeds() {
    use super::{RandomSource, Seeded};
    let mut calls = 0u32;
    let mut closure = || {
        calls += 1;
        7
    };
    assert_eq!(RandomSource::next_u32(&mut closure), 7);
    assert_eq!(calls, 1);
    let draws = |seed: u64| {
        let mut s = Seeded(seed);
        [s.next_u32(), s.next_u32()]
    };
    assert_eq!(draws(42), draws(42), "the same seed draws the same numbers");
    assert_ne!(draws(42)[0], draws(42)[1]);
    assert_ne!(draws(42), draws(43));
    // Over 10,000 seeds an 80/20 split lands within a point of 80 %.
    let first = (0..10_000u64)
        .filter(|&seed| under_fraction(800_000, &mut Seeded(seed)))
        .count();
    assert!((7_900..=8_100).contains(&first), "{first}");
}
