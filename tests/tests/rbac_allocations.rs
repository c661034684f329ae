//! The RBAC engine's allocations per evaluation, counted by the testing kit's global
//! allocator: none for a request whose headers are each sent once, one (the buffer the
//! values are joined in, reused by every later lookup) when a matcher meets a header
//! sent several times. One test in this binary, so the process-wide counter sees only
//! it.

#![allow(deprecated)] // the plain exact_match of route.v3.HeaderMatcher

use prost::Message;
use xds_proto_core::filter::rbac::{ConnectionSecurity, PeerCertificate, RbacConfig, RbacRequest};
use xds_proto_core::pb::envoy::config::core::v3::CidrRange;
use xds_proto_core::pb::envoy::config::rbac::v3 as rbac_pb;
use xds_proto_core::pb::envoy::config::route::v3::{HeaderMatcher, header_matcher};
use xds_proto_core::pb::envoy::extensions::filters::http::rbac::v3 as filter_pb;
use xds_proto_core::pb::envoy::r#type::matcher::v3::{StringMatcher, string_matcher};
use xds_proto_core::pb::google::protobuf::UInt32Value;
use xds_proto_core::security::SubjectAltName;
use xds_proto_core::selector::Metadata;
use xds_proto_testing::alloc::{CountingAlloc, allocations};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

fn header(name: &str, value: &str) -> rbac_pb::Permission {
    rbac_pb::Permission {
        rule: Some(rbac_pb::permission::Rule::Header(HeaderMatcher {
            name: name.into(),
            header_match_specifier: Some(header_matcher::HeaderMatchSpecifier::ExactMatch(
                value.into(),
            )),
            ..Default::default()
        })),
    }
}

/// Istio-like: a few policies on headers, the peer's SPIFFE ID and its address.
fn config() -> RbacConfig {
    let spiffe = rbac_pb::Principal {
        identifier: Some(rbac_pb::principal::Identifier::Authenticated(
            rbac_pb::principal::Authenticated {
                principal_name: Some(StringMatcher {
                    match_pattern: Some(string_matcher::MatchPattern::Exact(
                        "spiffe://td/ns/a/sa/client".into(),
                    )),
                    ignore_case: false,
                }),
            },
        )),
    };
    let peer = rbac_pb::Principal {
        identifier: Some(rbac_pb::principal::Identifier::DirectRemoteIp(CidrRange {
            address_prefix: "10.0.0.0".into(),
            prefix_len: Some(UInt32Value { value: 8 }),
        })),
    };
    let policy = |permissions, principals| rbac_pb::Policy {
        permissions,
        principals,
        ..Default::default()
    };
    let rules = rbac_pb::Rbac {
        action: rbac_pb::rbac::Action::Allow as i32,
        policies: [
            (
                "a-role".to_owned(),
                policy(vec![header("x-role", "admin,ops")], vec![spiffe.clone()]),
            ),
            (
                "b-user".to_owned(),
                policy(
                    vec![header("x-user", "alice"), header("x-role", "ops")],
                    vec![peer],
                ),
            ),
            (
                "c-authority".to_owned(),
                policy(vec![header(":authority", "svc")], vec![spiffe]),
            ),
        ]
        .into(),
        audit_logging_options: None,
    };
    let bytes = filter_pb::Rbac {
        rules: Some(rules),
        ..Default::default()
    }
    .encode_to_vec();
    RbacConfig::parse(&bytes).expect("valid")
}

#[test]
fn evaluation_allocates_only_to_join_repeated_headers() {
    let config = config();
    let sans = [SubjectAltName::Uri("spiffe://td/ns/a/sa/client".into())];
    static SINGLE: [(&str, &str); 3] = [
        ("x-user", "bob"),
        ("x-role", "dev"),
        ("content-type", "application/grpc"),
    ];
    static REPEATED: [(&str, &str); 3] =
        [("x-user", "bob"), ("x-role", "admin"), ("x-role", "ops")];
    let (single, repeated): (&dyn Metadata, &dyn Metadata) = (&SINGLE, &REPEATED);
    let request = |headers: &'static dyn Metadata| RbacRequest {
        authority: Some("other"),
        security: ConnectionSecurity::Tls(Some(PeerCertificate {
            sans: &sans,
            subject: "CN=client",
        })),
        ..RbacRequest::new(
            "/pkg.Svc/Get",
            headers,
            "10.1.2.3:443".parse().unwrap(),
            "192.168.0.9:5555".parse().unwrap(),
        )
    };
    // Warm up, then count over many evaluations.
    assert!(!config.evaluate(&request(single)).allowed);
    let decision = config.evaluate(&request(repeated));
    assert_eq!(decision.matched_policy, Some("a-role"));

    let before = allocations();
    for _ in 0..1_000 {
        assert!(!config.evaluate(&request(single)).allowed);
    }
    assert_eq!(
        allocations() - before,
        0,
        "single-valued headers allocate nothing"
    );

    let before = allocations();
    for _ in 0..1_000 {
        assert!(config.evaluate(&request(repeated)).allowed);
    }
    assert_eq!(
        allocations() - before,
        1_000,
        "one buffer per evaluation that meets a repeated header"
    );
}
