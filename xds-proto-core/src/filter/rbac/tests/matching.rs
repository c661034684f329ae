//! Each rule kind matched and not matched, as A41 maps it onto an RPC.

use super::*;
use route_pb::header_matcher::HeaderMatchSpecifier as Spec;

fn header_rule(h: route_pb::HeaderMatcher) -> rbac_pb::Permission {
    perm(Rule::Header(h))
}

#[test]
fn any_matches_everything() {
    assert!(permission_matches(any_perm(), &Req::default()));
    assert!(principal_matches(any_princ(), &Req::default()));
}

#[test]
fn and_or_not_nest() {
    let port = |p| perm(Rule::DestinationPort(p));
    let set = |rules| rbac_pb::permission::Set { rules };
    let req = Req::default(); // local port 8080
    assert!(permission_matches(
        perm(Rule::AndRules(set(vec![port(8080), any_perm()]))),
        &req
    ));
    assert!(!permission_matches(
        perm(Rule::AndRules(set(vec![port(8080), port(1)]))),
        &req
    ));
    assert!(permission_matches(
        perm(Rule::OrRules(set(vec![port(1), port(8080)]))),
        &req
    ));
    assert!(!permission_matches(
        perm(Rule::OrRules(set(vec![port(1), port(2)]))),
        &req
    ));
    assert!(permission_matches(
        perm(Rule::NotRule(Box::new(port(1)))),
        &req
    ));
    assert!(!permission_matches(
        perm(Rule::NotRule(Box::new(port(8080)))),
        &req
    ));
    // not(and(8080, not(or(1, 2)))) = not(true) = false.
    let inner = perm(Rule::NotRule(Box::new(perm(Rule::OrRules(set(vec![
        port(1),
        port(2),
    ]))))));
    let rule = perm(Rule::NotRule(Box::new(perm(Rule::AndRules(set(vec![
        port(8080),
        inner,
    ]))))));
    assert!(!permission_matches(rule, &req));

    let ids = |ids| rbac_pb::principal::Set { ids };
    let peer = |c| princ(Id::DirectRemoteIp(cidr(c, Some(32))));
    assert!(principal_matches(
        princ(Id::AndIds(ids(vec![peer("192.168.1.7"), any_princ()]))),
        &req
    ));
    assert!(!principal_matches(
        princ(Id::AndIds(ids(vec![peer("192.168.1.7"), peer("1.1.1.1")]))),
        &req
    ));
    assert!(principal_matches(
        princ(Id::OrIds(ids(vec![peer("1.1.1.1"), peer("192.168.1.7")]))),
        &req
    ));
    assert!(!principal_matches(
        princ(Id::OrIds(ids(vec![peer("1.1.1.1")]))),
        &req
    ));
    assert!(principal_matches(
        princ(Id::NotId(Box::new(peer("1.1.1.1")))),
        &req
    ));
    assert!(!principal_matches(
        princ(Id::NotId(Box::new(peer("192.168.1.7")))),
        &req
    ));
}

#[test]
fn headers_match_custom_metadata_and_multiple_values_joined_by_comma() {
    let req = Req::default()
        .header("x-user", "alice")
        .header("x-role", "a")
        .header("X-Role", "b");
    assert!(permission_matches(
        header_rule(header_exact("x-user", "alice")),
        &req
    ));
    assert!(!permission_matches(
        header_rule(header_exact("x-user", "bob")),
        &req
    ));
    assert!(permission_matches(
        header_rule(header_exact("x-role", "a,b")),
        &req
    ));
    assert!(!permission_matches(
        header_rule(header_exact("x-role", "a")),
        &req
    ));
    assert!(permission_matches(
        header_rule(header("x-role", Spec::SuffixMatch(",b".into()))),
        &req
    ));
    // The principal side reads headers the same way.
    assert!(principal_matches(
        princ(Id::Header(header_exact("x-role", "a,b"))),
        &req
    ));
    assert!(!principal_matches(
        princ(Id::Header(header_exact("x-role", "b"))),
        &req
    ));
    // Several multi-valued lookups in one evaluation reuse one buffer correctly.
    let req = req.header("x-n", "1").header("x-n", "2").header("x-n", "3");
    let both = rbac_pb::permission::Set {
        rules: vec![
            header_rule(header_exact("x-role", "a,b")),
            header_rule(header_exact("x-n", "1,2,3")),
            header_rule(header_exact("x-role", "a,b")),
        ],
    };
    assert!(permission_matches(perm(Rule::AndRules(both)), &req));
}

#[test]
fn absent_headers_match_only_presence_checks_that_ask_for_absence() {
    let req = Req::default();
    let mut inverted = header_exact("x-missing", "v");
    inverted.invert_match = true;
    assert!(!permission_matches(header_rule(inverted), &req));
    assert!(!permission_matches(
        header_rule(header_exact("x-missing", "")),
        &req
    ));
    let present = |p, invert| {
        let mut h = header("x-missing", Spec::PresentMatch(p));
        h.invert_match = invert;
        header_rule(h)
    };
    // A41: matches when present_match == invert_match.
    assert!(!permission_matches(present(true, false), &req));
    assert!(permission_matches(present(true, true), &req));
    assert!(permission_matches(present(false, false), &req));
    assert!(!permission_matches(present(false, true), &req));
    let with = Req::default().header("x-missing", "here");
    assert!(permission_matches(present(true, false), &with));
    let mut inverted = header_exact("x-missing", "v");
    inverted.invert_match = true;
    assert!(permission_matches(header_rule(inverted), &with));
    let range = header(
        "x-n",
        Spec::RangeMatch(crate::pb::envoy::r#type::v3::Int64Range { start: 10, end: 20 }),
    );
    assert!(permission_matches(
        header_rule(range.clone()),
        &Req::default().header("x-n", "19")
    ));
    assert!(!permission_matches(
        header_rule(range.clone()),
        &Req::default().header("x-n", "20")
    ));
    assert!(!permission_matches(header_rule(range), &req));
}

#[test]
fn pseudo_headers_come_from_the_request_and_host_is_authority() {
    let req = Req::path("/pkg.Svc/Get");
    assert!(permission_matches(
        header_rule(header_exact(":path", "/pkg.Svc/Get")),
        &req
    ));
    assert!(permission_matches(
        header_rule(header_exact(":method", "POST")),
        &req
    ));
    assert!(!permission_matches(
        header_rule(header_exact(":method", "GET")),
        &req
    ));
    for name in [":authority", "host", "Host"] {
        assert!(
            permission_matches(header_rule(header_exact(name, "svc.example.com")), &req),
            "{name}"
        );
        assert!(
            !permission_matches(header_rule(header_exact(name, "other")), &req),
            "{name}"
        );
    }
    let no_authority = Req {
        authority: None,
        ..Req::default()
    };
    assert!(!permission_matches(
        header_rule(header("host", Spec::PresentMatch(true))),
        &no_authority
    ));
    // Pseudo-headers and host inside the metadata are not what RBAC reads.
    let spoofed = Req::default()
        .header(":path", "/evil")
        .header(":authority", "evil")
        .header("host", "evil");
    assert!(!permission_matches(
        header_rule(header_exact(":path", "/evil")),
        &spoofed
    ));
    assert!(!permission_matches(
        header_rule(header_exact(":authority", "evil")),
        &spoofed
    ));
    assert!(!permission_matches(
        header_rule(header_exact("host", "evil")),
        &spoofed
    ));
    assert!(!permission_matches(
        header_rule(header(":unknown", Spec::PresentMatch(true))),
        &spoofed
    ));
}

#[test]
fn hop_by_hop_headers_are_absent_and_content_type_and_binary_headers_are_as_sent() {
    let req = Req {
        headers: vec![
            ("te".into(), "trailers".into()),
            ("connection".into(), "close".into()),
            ("content-type".into(), "application/grpc+proto".into()),
            ("x-token-bin".into(), "AAEC".into()),
        ],
        ..Req::default()
    };
    for name in ["te", "TE", "connection"] {
        assert!(
            !permission_matches(header_rule(header(name, Spec::PresentMatch(true))), &req),
            "{name}"
        );
    }
    assert!(permission_matches(
        header_rule(header_exact("content-type", "application/grpc+proto")),
        &req
    ));
    assert!(!permission_matches(
        header_rule(header_exact("content-type", "application/grpc")),
        &req
    ));
    assert!(permission_matches(
        header_rule(header_exact("x-token-bin", "AAEC")),
        &req
    ));
}

#[test]
fn url_path_matches_the_method_path() {
    let req = Req::path("/pkg.Svc/Get");
    assert!(permission_matches(
        perm(Rule::UrlPath(url_path(exact("/pkg.Svc/Get")))),
        &req
    ));
    assert!(permission_matches(
        perm(Rule::UrlPath(url_path(prefix("/pkg.Svc/")))),
        &req
    ));
    assert!(!permission_matches(
        perm(Rule::UrlPath(url_path(exact("/pkg.Svc/Put")))),
        &req
    ));
    assert!(principal_matches(
        princ(Id::UrlPath(url_path(prefix("/pkg.")))),
        &req
    ));
    assert!(!principal_matches(
        princ(Id::UrlPath(url_path(prefix("/other.")))),
        &req
    ));
}

#[test]
fn ip_prefixes_v4_and_v6_and_mapped_addresses() {
    let dest = |c: &str, l| perm(Rule::DestinationIp(cidr(c, l)));
    let v4 = Req::default(); // local 10.0.0.1, peer 192.168.1.7
    assert!(permission_matches(dest("10.0.0.0", Some(24)), &v4));
    assert!(permission_matches(dest("10.0.0.1", Some(32)), &v4));
    assert!(!permission_matches(dest("10.0.1.0", Some(24)), &v4));
    assert!(permission_matches(dest("0.0.0.0", None), &v4)); // unset prefix_len: 0
    assert!(!permission_matches(dest("::", Some(0)), &v4)); // families differ
    let v6 = Req {
        local: "[2001:db8:1::5]:443".parse().unwrap(),
        peer: "[::ffff:192.168.1.7]:5000".parse().unwrap(),
        ..Req::default()
    };
    assert!(permission_matches(dest("2001:db8:1::", Some(48)), &v6));
    assert!(!permission_matches(dest("2001:db8:2::", Some(48)), &v6));
    // A mapped IPv4 peer matches IPv4 ranges (and mapped ranges).
    for id in [Id::SourceIp, Id::DirectRemoteIp, Id::RemoteIp] {
        assert!(principal_matches(
            princ(id(cidr("192.168.0.0", Some(16)))),
            &v6
        ));
        assert!(principal_matches(
            princ(id(cidr("192.168.0.0", Some(16)))),
            &v4
        ));
        assert!(!principal_matches(
            princ(id(cidr("192.169.0.0", Some(16)))),
            &v4
        ));
        assert!(principal_matches(
            princ(id(cidr("::ffff:192.168.1.0", Some(120)))),
            &v4
        ));
    }
}

#[test]
fn destination_ports_and_ranges() {
    let req = Req::default(); // local port 8080
    assert!(permission_matches(perm(Rule::DestinationPort(8080)), &req));
    assert!(!permission_matches(perm(Rule::DestinationPort(8081)), &req));
    let range = |start, end| {
        perm(Rule::DestinationPortRange(
            crate::pb::envoy::r#type::v3::Int32Range { start, end },
        ))
    };
    assert!(permission_matches(range(8080, 8081), &req));
    assert!(permission_matches(range(0, 65536), &req));
    assert!(!permission_matches(range(8000, 8080), &req)); // end is exclusive
    assert!(!permission_matches(range(8081, 9000), &req));
}

#[test]
fn metadata_never_matches_and_server_name_is_empty() {
    let meta = || perm(Rule::Metadata(Default::default()));
    assert!(!permission_matches(meta(), &Req::default()));
    assert!(permission_matches(
        perm(Rule::NotRule(Box::new(meta()))),
        &Req::default()
    ));
    assert!(!principal_matches(
        princ(Id::Metadata(Default::default())),
        &Req::default()
    ));
    assert!(permission_matches(
        perm(Rule::RequestedServerName(exact(""))),
        &Req::default()
    ));
    assert!(!permission_matches(
        perm(Rule::RequestedServerName(exact("svc.example.com"))),
        &Req::default()
    ));
}

fn authenticated(name: Option<matcher_pb::StringMatcher>) -> rbac_pb::Principal {
    princ(Id::Authenticated(rbac_pb::principal::Authenticated {
        principal_name: name,
    }))
}

#[test]
fn authenticated_needs_tls_and_a_name_reads_uri_then_dns_then_subject() {
    let plaintext = Req::default();
    assert!(!principal_matches(authenticated(None), &plaintext));
    assert!(!principal_matches(
        authenticated(Some(exact(""))),
        &plaintext
    ));
    let no_cert = Req {
        tls: Some(None),
        ..Req::default()
    };
    assert!(principal_matches(authenticated(None), &no_cert));
    assert!(principal_matches(authenticated(Some(exact(""))), &no_cert));
    assert!(!principal_matches(
        authenticated(Some(prefix("spiffe://"))),
        &no_cert
    ));

    let uri = SubjectAltName::Uri("spiffe://td/ns/a/sa/b".into());
    let dns = SubjectAltName::Dns("b.example.com".into());
    let subject = "CN=b,O=Example";
    let full = Req::default().cert(vec![dns.clone(), uri.clone()], subject);
    assert!(principal_matches(authenticated(None), &full));
    assert!(principal_matches(
        authenticated(Some(exact("spiffe://td/ns/a/sa/b"))),
        &full
    ));
    assert!(!principal_matches(
        authenticated(Some(exact("spiffe://td/ns/a/sa/c"))),
        &full
    ));
    // As Envoy, C-core and gRPC-Go: DNS SANs and the subject are tried after the URIs.
    assert!(principal_matches(
        authenticated(Some(exact("b.example.com"))),
        &full
    ));
    assert!(principal_matches(
        authenticated(Some(exact(subject))),
        &full
    ));
    assert!(!principal_matches(authenticated(Some(exact(""))), &full));
    let dns_only = Req::default().cert(vec![dns], subject);
    assert!(principal_matches(
        authenticated(Some(exact("b.example.com"))),
        &dns_only
    ));
    assert!(!principal_matches(
        authenticated(Some(prefix("spiffe://"))),
        &dns_only
    ));
    let subject_only =
        Req::default().cert(vec![SubjectAltName::Email("b@example.com".into())], subject);
    assert!(principal_matches(
        authenticated(Some(exact(subject))),
        &subject_only
    ));
    // Email SANs are not identities here.
    assert!(!principal_matches(
        authenticated(Some(exact("b@example.com"))),
        &subject_only
    ));
}
