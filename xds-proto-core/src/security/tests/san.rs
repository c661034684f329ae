//! A29's SAN check and A101's SNI rules, case by case.

use std::net::IpAddr;

use super::*;
use crate::security::config::strip_port;
use crate::security::{
    CertificateProviderInstance, RootCertificates, SubjectAltName, UpstreamTls, dns_name_matches,
    sans_match,
};
use matcher_pb::string_matcher::MatchPattern;

fn dns(s: &str) -> SubjectAltName {
    SubjectAltName::Dns(s.to_owned())
}

fn uri(s: &str) -> SubjectAltName {
    SubjectAltName::Uri(s.to_owned())
}

fn ip(s: &str) -> SubjectAltName {
    SubjectAltName::Ip(s.parse::<IpAddr>().unwrap())
}

#[test]
fn dns_wildcard_table() {
    // (SAN in the certificate, name in the exact matcher, matches)
    let table = [
        ("foo.example.com", "foo.example.com", true),
        ("foo.example.com", "FOO.Example.COM", true),
        ("foo.example.com.", "foo.example.com", true),
        ("foo.example.com", "foo.example.com.", true),
        ("foo.example.com", "bar.example.com", false),
        ("*.example.com", "test.example.com", true),
        ("*.example.com", "TEST.example.com.", true),
        ("*.Example.com", "test.example.COM", true),
        // A wildcard matches one label, not several, and not none.
        ("*.example.com", "sub.test.example.com", false),
        ("*.example.com", "example.com", false),
        ("*.example.com", ".example.com", false),
        // Only a whole left-most label may be a wildcard.
        ("*a.example.com", "ba.example.com", false),
        ("a*.example.com", "ab.example.com", false),
        ("a*b.example.com", "axb.example.com", false),
        ("a.*.example.com", "a.b.example.com", false),
        ("*.*.example.com", "a.b.example.com", false),
        ("**.example.com", "a.example.com", false),
        // No wildcard for a single label, nor a bare star.
        ("*.", "com.", false),
        ("*", "com", false),
        ("*.com", "example.com", true),
        // A matcher's '*' is not a wildcard.
        ("foo.example.com", "*.example.com", false),
        ("*.example.com", "*.example.com", true),
        // Empty or dot-led names match nothing.
        ("", "", false),
        ("", "a", false),
        ("a", "", false),
        (".example.com", ".example.com", false),
    ];
    for (san, name, expected) in table {
        assert_eq!(
            dns_name_matches(san, name),
            expected,
            "SAN {san:?} against {name:?}"
        );
    }
}

#[test]
fn a29_rules() {
    // An empty matcher list accepts anything, even a certificate without SANs.
    assert!(sans_match(&[], &[]));
    assert!(sans_match(&[], &[dns("a")]));
    // Matchers but no SANs: refused.
    assert!(!sans_match(&[exact("a")], &[]));
    // Any SAN matching any matcher is enough.
    assert!(sans_match(
        &[exact("x"), exact("b.example.com")],
        &[uri("spiffe://td/a"), dns("*.example.com")]
    ));
    // An empty SAN never matches, not even an empty prefix.
    let empty_prefix = matcher(MatchPattern::Prefix(String::new()), false);
    assert!(!sans_match(
        std::slice::from_ref(&empty_prefix),
        &[dns(""), uri("")]
    ));
    assert!(sans_match(&[empty_prefix], &[dns(""), uri("u")]));
}

#[test]
fn exact_matches_dns_sans_by_dns_rules_and_other_sans_literally() {
    // DNS: case-insensitive whatever ignore_case says; wildcards in the SAN.
    assert!(sans_match(
        &[exact("A.EXAMPLE.com")],
        &[dns("a.example.com")]
    ));
    assert!(sans_match(
        &[exact("a.example.com")],
        &[dns("*.example.com")]
    ));
    // URI: literal; ignore_case applies (gRPC-Go; C-core would apply DNS rules).
    let id = "spiffe://td/ns/Default/sa/Api";
    assert!(sans_match(&[exact(id)], &[uri(id)]));
    assert!(!sans_match(
        &[exact("spiffe://td/ns/default/sa/api")],
        &[uri(id)]
    ));
    let ignoring = matcher(
        MatchPattern::Exact("spiffe://td/ns/default/sa/api".into()),
        true,
    );
    assert!(sans_match(&[ignoring], &[uri(id)]));
    // A URI SAN is never a wildcard.
    assert!(!sans_match(
        &[exact("spiffe://td/x")],
        &[uri("spiffe://td/*")]
    ));
    // Email.
    let email = SubjectAltName::Email("ops@example.com".into());
    assert!(sans_match(
        &[exact("ops@example.com")],
        std::slice::from_ref(&email)
    ));
    assert!(!sans_match(&[exact("OPS@example.com")], &[email]));
}

#[test]
fn every_matcher_kind_applies_to_every_san_type() {
    let sans = [
        dns("api.prod.example.com"),
        uri("spiffe://cluster.local/ns/prod/sa/api"),
        SubjectAltName::Email("api@example.com".into()),
        ip("10.1.2.3"),
    ];
    let cases = [
        (MatchPattern::Prefix("api.prod".into()), false, true),
        (MatchPattern::Prefix("API.PROD".into()), false, false),
        (MatchPattern::Prefix("API.PROD".into()), true, true),
        (MatchPattern::Suffix("/sa/api".into()), false, true),
        (MatchPattern::Suffix("/SA/API".into()), true, true),
        (MatchPattern::Contains("@example".into()), false, true),
        (MatchPattern::Contains("@EXAMPLE".into()), true, true),
        (MatchPattern::Contains("staging".into()), true, false),
        (MatchPattern::Prefix("10.1.".into()), false, true),
        (
            MatchPattern::SafeRegex(matcher_pb::RegexMatcher {
                regex: "spiffe://cluster\\.local/ns/[a-z]+/sa/api".into(),
                ..Default::default()
            }),
            false,
            true,
        ),
        // A regex must match the whole SAN.
        (
            MatchPattern::SafeRegex(matcher_pb::RegexMatcher {
                regex: "ns/prod".into(),
                ..Default::default()
            }),
            false,
            false,
        ),
    ];
    for (pattern, ignore_case, expected) in cases {
        let m = matcher(pattern.clone(), ignore_case);
        assert_eq!(
            sans_match(&[m], &sans),
            expected,
            "{pattern:?} {ignore_case}"
        );
    }
}

#[test]
fn ip_sans_are_matched_in_canonical_form() {
    // A29's example: 2001:DB8:0::01 is 2001:db8::1.
    let v6 = ip("2001:DB8:0::01");
    assert_eq!(v6.text(), "2001:db8::1");
    assert!(sans_match(
        &[exact("2001:db8::1")],
        std::slice::from_ref(&v6)
    ));
    assert!(!sans_match(
        &[exact("2001:DB8:0::01")],
        std::slice::from_ref(&v6)
    ));
    // Longest run of zeros compressed, the first of equal runs; lower case.
    assert_eq!(ip("2001:0:0:1:0:0:0:1").text(), "2001:0:0:1::1");
    assert_eq!(ip("2001:db8:0:0:1:0:0:1").text(), "2001:db8::1:0:0:1");
    assert_eq!(ip("::FFFF:10.0.0.1").text(), "::ffff:10.0.0.1");
    assert!(sans_match(&[exact("10.0.0.1")], &[ip("10.0.0.1")]));
}

#[test]
fn mismatch_messages_list_the_sans_and_the_expectation() {
    let tls = upstream_tls(vec![
        exact("a.example.com"),
        matcher(MatchPattern::Prefix("spiffe://td/".into()), true),
    ]);
    let e = tls
        .check_server_sans(None, &[dns("b.example.com"), ip("::1")])
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "certificate check failure: subject alternative names [DNS:b.example.com, IP:::1] \
         match none of [exact \"a.example.com\", prefix \"spiffe://td/\" (ignore_case)]"
    );
    let e = tls.check_server_sans(None, &[]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "certificate check failure: the certificate has no subject alternative names \
         (expected a match for [exact \"a.example.com\", prefix \"spiffe://td/\" (ignore_case)])"
    );
}

fn upstream_tls(matchers: Vec<StringMatcher>) -> UpstreamTls {
    UpstreamTls {
        identity: None,
        roots: RootCertificates::Provider(CertificateProviderInstance {
            instance_name: "roots".into(),
            certificate_name: "".into(),
        }),
        match_subject_alt_names: matchers.into(),
        sni: None,
        auto_host_sni: false,
        auto_sni_san_validation: false,
    }
}

#[test]
fn a101_sni_selection() {
    let mut tls = upstream_tls(Vec::new());
    assert_eq!(
        tls.sni_for(Some("host.example")),
        None,
        "nothing configured"
    );
    tls.sni = Some("configured.example".into());
    assert_eq!(
        tls.sni_for(Some("host.example")).as_deref(),
        Some("configured.example")
    );
    tls.auto_host_sni = true;
    assert_eq!(
        tls.sni_for(Some("host.example:8443")).as_deref(),
        Some("host.example"),
        "the hostname wins, without its port"
    );
    assert_eq!(
        tls.sni_for(None).as_deref(),
        Some("configured.example"),
        "no hostname: sni"
    );
    assert_eq!(
        tls.sni_for(Some("")).as_deref(),
        Some("configured.example"),
        "an empty hostname is none"
    );
    tls.sni = None;
    assert_eq!(tls.sni_for(Some("")), None);
    for (host, stripped) in [
        ("a.example", "a.example"),
        ("a.example:443", "a.example"),
        ("[2001:db8::1]:443", "2001:db8::1"),
        ("[2001:db8::1]", "2001:db8::1"),
        ("2001:db8::1", "2001:db8::1"),
        ("a.example:", "a.example:"),
        ("a.example:https", "a.example:https"),
    ] {
        assert_eq!(strip_port(host), stripped, "{host}");
    }
}

#[test]
fn a101_san_validation_against_the_sni() {
    let mut tls = upstream_tls(vec![exact("only-this.example")]);
    let sans = [dns("*.svc.example"), uri("spiffe://td/x")];
    // Without auto_sni_san_validation the matchers decide, whatever the SNI.
    assert!(tls.check_server_sans(Some("a.svc.example"), &sans).is_err());
    tls.auto_sni_san_validation = true;
    // With it, the SNI replaces the matchers (wildcards apply to DNS SANs).
    assert_eq!(tls.check_server_sans(Some("a.svc.example"), &sans), Ok(()));
    assert_eq!(tls.check_server_sans(Some("A.SVC.example"), &sans), Ok(()));
    let e = tls
        .check_server_sans(Some("a.b.svc.example"), &sans)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "certificate check failure: subject alternative names [DNS:*.svc.example, \
         URI:spiffe://td/x] match none of the SNI \"a.b.svc.example\""
    );
    // No SNI sent (or an empty one): back to the matchers.
    assert!(tls.check_server_sans(None, &sans).is_err());
    assert!(tls.check_server_sans(Some(""), &sans).is_err());
    assert_eq!(
        tls.check_server_sans(None, &[dns("only-this.example")]),
        Ok(())
    );
}
