//! Tests of A29's transport socket validation through the CDS and LDS decoders: every
//! rule, accepted, ignored or NACKed, with the exact error and the field it names.
//! The deprecated Envoy fields are set on purpose: gRPC still reads some of them.
#![allow(deprecated)]

use prost::Message;

use crate::bootstrap::Bootstrap;
use crate::pb::envoy::config::cluster::v3 as cluster_pb;
use crate::pb::envoy::config::core::v3 as core_pb;
use crate::pb::envoy::config::listener::v3 as listener_pb;
use crate::pb::envoy::extensions::transport_sockets::tls::v3 as tls_pb;
use crate::pb::envoy::r#type::matcher::v3 as matcher_pb;
use crate::pb::google::protobuf as pbuf;
use crate::resource::listener::{FilterChain, ListenerKind};
use crate::resource::route::StringMatcher;
use crate::resource::{ClusterResource, DecodeContext, cluster, listener};
use crate::security::{CertificateProviderInstance, DownstreamTls, RootCertificates, UpstreamTls};
use tls_pb::common_tls_context::{
    CertificateProviderInstance as LegacyInstance, CombinedCertificateValidationContext,
    ValidationContextType,
};

const UNSUPPORTED: &str = "not supported (A29: ignoring it would weaken security)";

/// A bootstrap with the provider instances "identity" and "roots".
fn bootstrap() -> Bootstrap {
    Bootstrap::from_json_str(
        r#"{
        "xds_servers": [{"server_uri": "xds.example:443", "channel_creds": [{"type": "insecure"}]}],
        "certificate_providers": {
            "identity": {"plugin_name": "file_watcher",
                         "config": {"certificate_file": "/c.pem", "private_key_file": "/k.pem"}},
            "roots": {"plugin_name": "file_watcher", "config": {"ca_certificate_file": "/ca.pem"}}
        }
    }"#,
    )
    .unwrap()
}

fn plugin(instance: &str, certificate: &str) -> Option<tls_pb::CertificateProviderPluginInstance> {
    Some(tls_pb::CertificateProviderPluginInstance {
        instance_name: instance.to_owned(),
        certificate_name: certificate.to_owned(),
    })
}

fn legacy(instance: &str, certificate: &str) -> LegacyInstance {
    LegacyInstance {
        instance_name: instance.to_owned(),
        certificate_name: certificate.to_owned(),
    }
}

fn instance(name: &str, certificate: &str) -> CertificateProviderInstance {
    CertificateProviderInstance {
        instance_name: name.into(),
        certificate_name: certificate.into(),
    }
}

/// A validation context whose roots come from "roots".
fn ca_context() -> tls_pb::CertificateValidationContext {
    tls_pb::CertificateValidationContext {
        ca_certificate_provider_instance: plugin("roots", "ROOTCA"),
        ..Default::default()
    }
}

/// A common context with the identity "identity" and this validation context.
fn common(vc: Option<ValidationContextType>) -> tls_pb::CommonTlsContext {
    tls_pb::CommonTlsContext {
        tls_certificate_provider_instance: plugin("identity", "default"),
        validation_context_type: vc,
        ..Default::default()
    }
}

fn direct(vc: tls_pb::CertificateValidationContext) -> Option<ValidationContextType> {
    Some(ValidationContextType::ValidationContext(vc))
}

fn upstream(common: tls_pb::CommonTlsContext) -> tls_pb::UpstreamTlsContext {
    tls_pb::UpstreamTlsContext {
        common_tls_context: Some(common),
        ..Default::default()
    }
}

fn socket(type_name: &str, msg: &impl Message) -> core_pb::TransportSocket {
    core_pb::TransportSocket {
        name: "envoy.transport_sockets.tls".to_owned(),
        config_type: Some(core_pb::transport_socket::ConfigType::TypedConfig(
            pbuf::Any {
                type_url: format!("type.googleapis.com/{type_name}"),
                value: msg.encode_to_vec().into(),
            },
        )),
    }
}

fn tls_cluster(tls: &tls_pb::UpstreamTlsContext) -> cluster_pb::Cluster {
    use cluster_pb::cluster::{ClusterDiscoveryType, DiscoveryType, EdsClusterConfig};
    cluster_pb::Cluster {
        name: "c".to_owned(),
        cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32)),
        eds_cluster_config: Some(EdsClusterConfig {
            eds_config: Some(core_pb::ConfigSource {
                config_source_specifier: Some(core_pb::config_source::ConfigSourceSpecifier::Ads(
                    Default::default(),
                )),
                ..Default::default()
            }),
            service_name: String::new(),
        }),
        transport_socket: Some(socket(cluster::UPSTREAM_TLS_CONTEXT_TYPE, tls)),
        ..Default::default()
    }
}

fn decode_cds_in(
    context: &DecodeContext<'_>,
    c: &cluster_pb::Cluster,
) -> Result<ClusterResource, String> {
    cluster::decode_in(context, &c.encode_to_vec())
        .map(|(_, value)| value)
        .map_err(|e| {
            assert_eq!(e.name.as_deref(), Some("c"));
            e.message
        })
}

/// The cluster's security config, decoded with [`bootstrap`].
fn cds(tls: &tls_pb::UpstreamTlsContext) -> Result<Option<UpstreamTls>, String> {
    let b = bootstrap();
    decode_cds_in(&DecodeContext::new(&b), &tls_cluster(tls)).map(|c| c.tls)
}

/// The NACK of a cluster with this context, without the common prefix
/// `transport_socket.typed_config.value.`.
fn cds_err(tls: &tls_pb::UpstreamTlsContext) -> String {
    let message = cds(tls).expect_err("expected a NACK");
    message
        .strip_prefix("transport_socket.typed_config.value.")
        .unwrap_or_else(|| panic!("unexpected path: {message}"))
        .to_owned()
}

fn exact(value: &str) -> matcher_pb::StringMatcher {
    matcher_pb::StringMatcher {
        match_pattern: Some(matcher_pb::string_matcher::MatchPattern::Exact(
            value.to_owned(),
        )),
        ignore_case: false,
    }
}

// ----- CDS: what is kept ---------------------------------------------------

#[test]
fn a_client_s_configs_share_the_bootstrap_s_instance_names() {
    use std::sync::Arc;
    let b = bootstrap();
    let key = |name: &str| b.certificate_providers.get_key_value(name).unwrap().0;
    let tls = upstream(common(direct(ca_context())));
    let decoded = |context: &DecodeContext<'_>| {
        decode_cds_in(context, &tls_cluster(&tls))
            .unwrap()
            .tls
            .unwrap()
    };
    let [first, second] = [(); 2].map(|()| decoded(&DecodeContext::new(&b)));
    for out in [&first, &second] {
        let identity = &out.identity.as_ref().unwrap().instance_name;
        assert!(
            Arc::ptr_eq(identity, key("identity")),
            "not the bootstrap's name"
        );
        let RootCertificates::Provider(roots) = &out.roots else {
            panic!("provider roots expected")
        };
        assert!(Arc::ptr_eq(&roots.instance_name, key("roots")));
    }
    // Without a bootstrap the name is a copy, of the same text.
    let alone = decoded(&DecodeContext::default());
    let identity = &alone.identity.as_ref().unwrap().instance_name;
    assert!(!Arc::ptr_eq(identity, key("identity")));
    assert_eq!(alone, first);
}

#[test]
fn an_upstream_context_keeps_identity_roots_matchers_and_sni() {
    use matcher_pb::string_matcher::MatchPattern;
    let pattern = |p: MatchPattern, ignore_case: bool| matcher_pb::StringMatcher {
        match_pattern: Some(p),
        ignore_case,
    };
    let vc = tls_pb::CertificateValidationContext {
        match_subject_alt_names: vec![
            exact("backend.example.com"),
            pattern(MatchPattern::Prefix("spiffe://td/".into()), false),
            pattern(MatchPattern::Suffix(".EXAMPLE.org".into()), true),
            pattern(MatchPattern::Contains("mesh".into()), false),
            pattern(
                MatchPattern::SafeRegex(matcher_pb::RegexMatcher {
                    regex: "spiffe://td/ns/[a-z]+/sa/.*".into(),
                    ..Default::default()
                }),
                false,
            ),
        ],
        ..ca_context()
    };
    let tls = tls_pb::UpstreamTlsContext {
        sni: "backend.example.com".into(),
        auto_host_sni: true,
        auto_sni_san_validation: true,
        ..upstream(common(direct(vc)))
    };
    let out = cds(&tls).unwrap().expect("a TLS config");
    assert_eq!(out.identity, Some(instance("identity", "default")));
    assert_eq!(
        out.roots,
        RootCertificates::Provider(instance("roots", "ROOTCA"))
    );
    assert_eq!(out.sni.as_deref(), Some("backend.example.com"));
    assert!(out.auto_host_sni && out.auto_sni_san_validation);
    let kinds: Vec<String> = out
        .match_subject_alt_names
        .iter()
        .map(crate::security::san::describe_matcher)
        .collect();
    assert_eq!(
        kinds,
        [
            r#"exact "backend.example.com""#,
            r#"prefix "spiffe://td/""#,
            r#"suffix ".EXAMPLE.org" (ignore_case)"#,
            r#"contains "mesh""#,
            r#"safe_regex "spiffe://td/ns/[a-z]+/sa/.*""#,
        ]
    );
}

#[test]
fn a_cluster_without_transport_socket_has_no_tls_and_plain_tls_has_no_identity() {
    let b = bootstrap();
    let mut c = tls_cluster(&upstream(common(None)));
    c.transport_socket = None;
    assert_eq!(
        decode_cds_in(&DecodeContext::new(&b), &c).unwrap().tls,
        None
    );
    let plain = tls_pb::CommonTlsContext {
        tls_certificate_provider_instance: None,
        ..common(direct(ca_context()))
    };
    let out = cds(&upstream(plain)).unwrap().unwrap();
    assert_eq!(out.identity, None);
    assert_eq!(out.sni, None, "an empty sni is no SNI (A101)");
}

#[test]
fn the_combined_context_and_the_deprecated_fields_give_the_same_config() {
    let expected = cds(&upstream(common(direct(
        tls_pb::CertificateValidationContext {
            match_subject_alt_names: vec![exact("a")],
            ..ca_context()
        },
    ))))
    .unwrap();
    // combined_validation_context.default_validation_context.
    let combined = |default: Option<tls_pb::CertificateValidationContext>,
                    legacy_roots: Option<LegacyInstance>| {
        Some(ValidationContextType::CombinedValidationContext(
            CombinedCertificateValidationContext {
                default_validation_context: default,
                validation_context_certificate_provider_instance: legacy_roots,
                ..Default::default()
            },
        ))
    };
    let with_default = combined(
        Some(tls_pb::CertificateValidationContext {
            match_subject_alt_names: vec![exact("a")],
            ..ca_context()
        }),
        None,
    );
    assert_eq!(cds(&upstream(common(with_default))).unwrap(), expected);
    // Istio's proxyless form: deprecated identity and roots fields, matchers in the
    // default context.
    let istio = tls_pb::CommonTlsContext {
        tls_certificate_provider_instance: None,
        tls_certificate_certificate_provider_instance: Some(legacy("identity", "default")),
        ..common(combined(
            Some(tls_pb::CertificateValidationContext {
                match_subject_alt_names: vec![exact("a")],
                ..Default::default()
            }),
            Some(legacy("roots", "ROOTCA")),
        ))
    };
    assert_eq!(cds(&upstream(istio)).unwrap(), expected);
    // The new fields win over the deprecated ones.
    let both = tls_pb::CommonTlsContext {
        tls_certificate_certificate_provider_instance: Some(legacy("unknown", "x")),
        ..common(combined(
            Some(tls_pb::CertificateValidationContext {
                match_subject_alt_names: vec![exact("a")],
                ..ca_context()
            }),
            Some(legacy("unknown", "y")),
        ))
    };
    assert_eq!(cds(&upstream(both)).unwrap(), expected);
    // The deprecated roots beat system_root_certs (C-core's order).
    let system_and_legacy = common(combined(
        Some(tls_pb::CertificateValidationContext {
            system_root_certs: Some(Default::default()),
            match_subject_alt_names: vec![exact("a")],
            ..Default::default()
        }),
        Some(legacy("roots", "ROOTCA")),
    ));
    assert_eq!(cds(&upstream(system_and_legacy)).unwrap(), expected);
    // The deprecated oneof member alone gives roots without matchers (as gRPC-Go).
    let member = common(Some(
        ValidationContextType::ValidationContextCertificateProviderInstance(legacy(
            "roots", "ROOTCA",
        )),
    ));
    let out = cds(&upstream(member)).unwrap().unwrap();
    assert_eq!(
        out.roots,
        RootCertificates::Provider(instance("roots", "ROOTCA"))
    );
    assert!(out.match_subject_alt_names.is_empty());
}

#[test]
fn system_root_certs_are_the_roots_when_no_provider_is_named() {
    let system = tls_pb::CertificateValidationContext {
        system_root_certs: Some(Default::default()),
        ..Default::default()
    };
    let out = cds(&upstream(common(direct(system.clone()))))
        .unwrap()
        .unwrap();
    assert_eq!(out.roots, RootCertificates::System);
    // A82: a provider instance, when set, wins.
    let both = tls_pb::CertificateValidationContext {
        ca_certificate_provider_instance: plugin("roots", ""),
        ..system
    };
    assert_eq!(
        cds(&upstream(common(direct(both)))).unwrap().unwrap().roots,
        RootCertificates::Provider(instance("roots", ""))
    );
}

#[test]
fn ignored_upstream_fields_change_nothing() {
    let base = upstream(common(direct(ca_context())));
    let expected = cds(&base).unwrap();
    let mut noisy = base.clone();
    noisy.allow_renegotiation = true;
    noisy.max_session_keys = Some(pbuf::UInt32Value { value: 3 });
    noisy.enforce_rsa_key_usage = Some(pbuf::BoolValue { value: true });
    let c = noisy.common_tls_context.as_mut().unwrap();
    c.alpn_protocols = vec!["h2".into()];
    c.key_log = Some(tls_pb::TlsKeyLog {
        path: "/tmp/keys".into(),
        ..Default::default()
    });
    c.custom_tls_certificate_selector = Some(Default::default());
    c.tls_certificate_certificate_provider = Some(Default::default());
    // Inline certificates beside a provider instance are ignored.
    c.tls_certificates = vec![Default::default()];
    c.tls_certificate_sds_secret_configs = vec![Default::default()];
    let Some(ValidationContextType::ValidationContext(vc)) = &mut c.validation_context_type else {
        unreachable!()
    };
    vc.trusted_ca = Some(core_pb::DataSource::default());
    vc.watched_directory = Some(Default::default());
    vc.allow_expired_certificate = true;
    vc.max_verify_depth = Some(pbuf::UInt32Value { value: 1 });
    vc.only_verify_leaf_cert_crl = true;
    vc.trust_chain_verification = 1;
    vc.require_signed_certificate_timestamp = Some(pbuf::BoolValue { value: false });
    assert_eq!(cds(&noisy).unwrap(), expected);
    // Typed SAN matchers beside untyped ones are ignored, as gRPC does.
    let with_untyped = |typed: bool| {
        let mut vc = tls_pb::CertificateValidationContext {
            match_subject_alt_names: vec![exact("untyped")],
            ..ca_context()
        };
        if typed {
            vc.match_typed_subject_alt_names = vec![typed_san("typed")];
        }
        upstream(common(direct(vc)))
    };
    assert_eq!(
        cds(&with_untyped(true)).unwrap(),
        cds(&with_untyped(false)).unwrap()
    );
}

fn typed_san(value: &str) -> tls_pb::SubjectAltNameMatcher {
    tls_pb::SubjectAltNameMatcher {
        san_type: tls_pb::subject_alt_name_matcher::SanType::Dns as i32,
        matcher: Some(exact(value)),
        ..Default::default()
    }
}

#[test]
fn typed_san_matchers_alone_are_nacked() {
    let vc = tls_pb::CertificateValidationContext {
        match_typed_subject_alt_names: vec![typed_san("backend")],
        ..ca_context()
    };
    let expected = "match_typed_subject_alt_names: not supported (gRPC reads \
                    match_subject_alt_names; ignoring these alone would skip the SAN check)";
    assert_eq!(
        cds_err(&upstream(common(direct(vc.clone())))),
        format!("common_tls_context.validation_context.{expected}")
    );
    assert_eq!(
        lds_err(&downstream(Some(common(direct(vc))), Some(true))),
        format!("common_tls_context.validation_context.{expected}")
    );
}

// ----- CDS: what is NACKed ---------------------------------------------------

#[test]
fn unsupported_common_fields_are_nacked() {
    let mut c = common(direct(ca_context()));
    c.tls_params = Some(Default::default());
    assert_eq!(
        cds_err(&upstream(c)),
        format!("common_tls_context.tls_params: {UNSUPPORTED}")
    );
    let mut c = common(direct(ca_context()));
    c.custom_handshaker = Some(Default::default());
    assert_eq!(
        cds_err(&upstream(c)),
        format!("common_tls_context.custom_handshaker: {UNSUPPORTED}")
    );
    // Identity from anything but a provider instance.
    let mut c = common(direct(ca_context()));
    c.tls_certificate_provider_instance = None;
    c.tls_certificates = vec![Default::default()];
    assert_eq!(
        cds_err(&upstream(c)),
        format!("common_tls_context.tls_certificates: {UNSUPPORTED}")
    );
    let mut c = common(direct(ca_context()));
    c.tls_certificate_provider_instance = None;
    c.tls_certificate_sds_secret_configs = vec![Default::default()];
    assert_eq!(
        cds_err(&upstream(c)),
        format!("common_tls_context.tls_certificate_sds_secret_configs: {UNSUPPORTED}")
    );
    // Roots over SDS, or from an inline provider config.
    let c = common(Some(
        ValidationContextType::ValidationContextSdsSecretConfig(Default::default()),
    ));
    assert_eq!(
        cds_err(&upstream(c)),
        format!("common_tls_context.validation_context_sds_secret_config: {UNSUPPORTED}")
    );
    let c = common(Some(
        ValidationContextType::ValidationContextCertificateProvider(Default::default()),
    ));
    assert_eq!(
        cds_err(&upstream(c)),
        format!("common_tls_context.validation_context_certificate_provider: {UNSUPPORTED}")
    );
}

#[test]
fn unsupported_validation_fields_are_nacked() {
    type Set = fn(&mut tls_pb::CertificateValidationContext);
    let cases: [(&str, Set); 5] = [
        ("verify_certificate_spki", |vc| {
            vc.verify_certificate_spki = vec!["x".into()]
        }),
        ("verify_certificate_hash", |vc| {
            vc.verify_certificate_hash = vec!["x".into()]
        }),
        ("require_signed_certificate_timestamp", |vc| {
            vc.require_signed_certificate_timestamp = Some(pbuf::BoolValue { value: true })
        }),
        ("crl", |vc| vc.crl = Some(Default::default())),
        ("custom_validator_config", |vc| {
            vc.custom_validator_config = Some(Default::default())
        }),
    ];
    for (field, set) in cases {
        let mut vc = ca_context();
        set(&mut vc);
        assert_eq!(
            cds_err(&upstream(common(direct(vc.clone())))),
            format!("common_tls_context.validation_context.{field}: {UNSUPPORTED}")
        );
        let combined = Some(ValidationContextType::CombinedValidationContext(
            CombinedCertificateValidationContext {
                default_validation_context: Some(vc),
                ..Default::default()
            },
        ));
        assert_eq!(
            cds_err(&upstream(common(combined))),
            format!(
                "common_tls_context.combined_validation_context.default_validation_context.\
                 {field}: {UNSUPPORTED}"
            )
        );
    }
}

#[test]
fn bad_san_matchers_are_nacked() {
    use matcher_pb::string_matcher::MatchPattern;
    let with = |m: matcher_pb::StringMatcher| {
        upstream(common(direct(tls_pb::CertificateValidationContext {
            match_subject_alt_names: vec![exact("ok"), m],
            ..ca_context()
        })))
    };
    let regex = |regex: &str, ignore_case: bool| matcher_pb::StringMatcher {
        match_pattern: Some(MatchPattern::SafeRegex(matcher_pb::RegexMatcher {
            regex: regex.into(),
            ..Default::default()
        })),
        ignore_case,
    };
    let p = "common_tls_context.validation_context.match_subject_alt_names[1]";
    assert_eq!(
        cds_err(&with(regex("a.*", true))),
        format!("{p}.ignore_case: not supported with safe_regex")
    );
    let bad = cds_err(&with(regex("(", false)));
    assert!(
        bad.starts_with(&format!("{p}.safe_regex.regex: invalid regex \"(\"")),
        "{bad}"
    );
    assert_eq!(
        cds_err(&with(matcher_pb::StringMatcher::default())),
        format!("{p}: no match pattern is set")
    );
}

#[test]
fn a_client_without_roots_is_nacked() {
    assert_eq!(
        cds_err(&tls_pb::UpstreamTlsContext::default()),
        "common_tls_context: field not present"
    );
    assert_eq!(
        cds_err(&upstream(common(None))),
        "common_tls_context: no validation context: a client needs root certificates: set \
         ca_certificate_provider_instance or system_root_certs in the validation context"
    );
    let no_ca = tls_pb::CertificateValidationContext {
        match_subject_alt_names: vec![exact("a")],
        ..Default::default()
    };
    assert_eq!(
        cds_err(&upstream(common(direct(no_ca.clone())))),
        "common_tls_context.validation_context: a client needs root certificates: set \
         ca_certificate_provider_instance or system_root_certs in the validation context"
    );
    let combined = Some(ValidationContextType::CombinedValidationContext(
        CombinedCertificateValidationContext::default(),
    ));
    assert_eq!(
        cds_err(&upstream(common(combined))),
        "common_tls_context.combined_validation_context: a client needs root certificates: \
         set ca_certificate_provider_instance or system_root_certs in the validation context"
    );
}

#[test]
fn provider_instances_must_be_in_the_bootstrap() {
    let unknown = "unrecognized certificate provider instance name \"nope\" (the bootstrap's \
                   certificate_providers has no such instance)";
    let mut c = common(direct(ca_context()));
    c.tls_certificate_provider_instance = plugin("nope", "");
    assert_eq!(
        cds_err(&upstream(c)),
        format!("common_tls_context.tls_certificate_provider_instance.instance_name: {unknown}")
    );
    let mut c = common(direct(ca_context()));
    c.tls_certificate_provider_instance = None;
    c.tls_certificate_certificate_provider_instance = Some(legacy("nope", ""));
    assert_eq!(
        cds_err(&upstream(c)),
        format!(
            "common_tls_context.tls_certificate_certificate_provider_instance.instance_name: \
             {unknown}"
        )
    );
    let vc = tls_pb::CertificateValidationContext {
        ca_certificate_provider_instance: plugin("nope", ""),
        ..Default::default()
    };
    assert_eq!(
        cds_err(&upstream(common(direct(vc)))),
        format!(
            "common_tls_context.validation_context.ca_certificate_provider_instance.\
             instance_name: {unknown}"
        )
    );
    let combined = Some(ValidationContextType::CombinedValidationContext(
        CombinedCertificateValidationContext {
            validation_context_certificate_provider_instance: Some(legacy("nope", "")),
            ..Default::default()
        },
    ));
    assert_eq!(
        cds_err(&upstream(common(combined))),
        format!(
            "common_tls_context.combined_validation_context.\
             validation_context_certificate_provider_instance.instance_name: {unknown}"
        )
    );
    let member = Some(
        ValidationContextType::ValidationContextCertificateProviderInstance(legacy("nope", "")),
    );
    assert_eq!(
        cds_err(&upstream(common(member))),
        format!(
            "common_tls_context.validation_context_certificate_provider_instance.\
             instance_name: {unknown}"
        )
    );
}

#[test]
fn without_a_bootstrap_only_empty_instance_names_are_refused() {
    let mut c = common(direct(ca_context()));
    c.tls_certificate_provider_instance = plugin("elsewhere", "");
    let cluster = tls_cluster(&upstream(c));
    let out = decode_cds_in(&DecodeContext::default(), &cluster).unwrap();
    assert_eq!(out.tls.unwrap().identity, Some(instance("elsewhere", "")));
    // cluster::decode is the same as a context without a bootstrap.
    assert_eq!(
        cluster::decode(&cluster.encode_to_vec()).unwrap().1,
        decode_cds_in(&DecodeContext::default(), &cluster).unwrap()
    );
    let mut c = common(direct(ca_context()));
    c.tls_certificate_provider_instance = plugin("", "");
    let message = decode_cds_in(&DecodeContext::default(), &tls_cluster(&upstream(c))).unwrap_err();
    assert_eq!(
        message,
        "transport_socket.typed_config.value.common_tls_context.\
         tls_certificate_provider_instance.instance_name: must be non-empty"
    );
}

#[test]
fn sni_is_at_most_255_bytes() {
    let with_sni = |sni: String| tls_pb::UpstreamTlsContext {
        sni,
        ..upstream(common(direct(ca_context())))
    };
    let max = "a".repeat(255);
    assert_eq!(
        cds(&with_sni(max.clone())).unwrap().unwrap().sni,
        Some(max.into())
    );
    assert_eq!(
        cds_err(&with_sni("a".repeat(256))),
        "sni: must be at most 255 bytes, got 256"
    );
}

#[test]
fn transport_socket_matches_and_other_socket_types_are_nacked() {
    let b = bootstrap();
    let context = DecodeContext::new(&b);
    let mut c = tls_cluster(&upstream(common(direct(ca_context()))));
    c.transport_socket_matches = vec![Default::default()];
    assert_eq!(
        decode_cds_in(&context, &c).unwrap_err(),
        "transport_socket_matches: not supported"
    );
    let mut c = tls_cluster(&upstream(common(direct(ca_context()))));
    c.transport_socket = Some(socket(
        listener_tls_type(),
        &tls_pb::DownstreamTlsContext::default(),
    ));
    assert_eq!(
        decode_cds_in(&context, &c).unwrap_err(),
        format!(
            "transport_socket.typed_config.type_url: unsupported transport socket type \
             \"type.googleapis.com/{}\"",
            listener_tls_type()
        )
    );
}

fn listener_tls_type() -> &'static str {
    super::DOWNSTREAM_TLS_CONTEXT_TYPE
}

// ----- LDS -----------------------------------------------------------------

fn server_listener(
    chains: Vec<listener_pb::FilterChain>,
    default: Option<listener_pb::FilterChain>,
) -> listener_pb::Listener {
    listener_pb::Listener {
        name: "lis".to_owned(),
        address: Some(core_pb::Address {
            address: Some(core_pb::address::Address::SocketAddress(
                core_pb::SocketAddress {
                    address: "0.0.0.0".to_owned(),
                    port_specifier: Some(core_pb::socket_address::PortSpecifier::PortValue(8443)),
                    ..Default::default()
                },
            )),
        }),
        filter_chains: chains,
        default_filter_chain: default,
        ..Default::default()
    }
}

fn chain(name: &str, tls: Option<&tls_pb::DownstreamTlsContext>) -> listener_pb::FilterChain {
    use crate::pb::envoy::extensions::filters::http::router::v3 as router_pb;
    use crate::pb::envoy::extensions::filters::network::http_connection_manager::v3 as hcm_pb;
    let router = hcm_pb::HttpFilter {
        name: "router".to_owned(),
        config_type: Some(hcm_pb::http_filter::ConfigType::TypedConfig(pbuf::Any {
            type_url: listener::ROUTER_FILTER_TYPE_URL.to_owned(),
            value: router_pb::Router::default().encode_to_vec().into(),
        })),
        ..Default::default()
    };
    let hcm = hcm_pb::HttpConnectionManager {
        http_filters: vec![router],
        route_specifier: Some(hcm_pb::http_connection_manager::RouteSpecifier::Rds(
            hcm_pb::Rds {
                config_source: Some(core_pb::ConfigSource {
                    config_source_specifier: Some(
                        core_pb::config_source::ConfigSourceSpecifier::Ads(Default::default()),
                    ),
                    ..Default::default()
                }),
                route_config_name: "routes".to_owned(),
            },
        )),
        ..Default::default()
    };
    listener_pb::FilterChain {
        name: name.to_owned(),
        filters: vec![listener_pb::Filter {
            name: "hcm".to_owned(),
            config_type: Some(listener_pb::filter::ConfigType::TypedConfig(pbuf::Any {
                type_url: listener::HTTP_CONNECTION_MANAGER_TYPE_URL.to_owned(),
                value: hcm.encode_to_vec().into(),
            })),
        }],
        transport_socket: tls.map(|t| socket(listener_tls_type(), t)),
        ..Default::default()
    }
}

fn downstream(
    common: Option<tls_pb::CommonTlsContext>,
    require_client_certificate: Option<bool>,
) -> tls_pb::DownstreamTlsContext {
    tls_pb::DownstreamTlsContext {
        common_tls_context: common,
        require_client_certificate: require_client_certificate
            .map(|value| pbuf::BoolValue { value }),
        ..Default::default()
    }
}

/// The filter chains of a listener with one chain of this context.
fn lds(tls: &tls_pb::DownstreamTlsContext) -> Result<Option<DownstreamTls>, String> {
    let b = bootstrap();
    let l = server_listener(vec![chain("fc", Some(tls))], None);
    let (_, value) =
        listener::decode_in(&DecodeContext::new(&b), &l.encode_to_vec()).map_err(|e| e.message)?;
    match value.kind {
        ListenerKind::Server(server) => Ok(server.filter_chains[0].tls.clone()),
        other => panic!("expected a server listener, got {other:?}"),
    }
}

fn lds_err(tls: &tls_pb::DownstreamTlsContext) -> String {
    let message = lds(tls).expect_err("expected a NACK");
    message
        .strip_prefix("filter_chains[0].transport_socket.typed_config.value.")
        .or_else(|| message.strip_prefix("filter_chains[0].transport_socket.typed_config.value"))
        .unwrap_or_else(|| panic!("unexpected path: {message}"))
        .trim_start_matches(": ")
        .to_owned()
}

#[test]
fn a_downstream_context_keeps_identity_client_roots_and_requirement() {
    let mtls = downstream(Some(common(direct(ca_context()))), Some(true));
    assert_eq!(
        lds(&mtls).unwrap(),
        Some(DownstreamTls {
            identity: instance("identity", "default"),
            client_roots: Some(instance("roots", "ROOTCA")),
            require_client_certificate: true,
        })
    );
    // A validation context without the requirement: optional client certificates.
    let optional = downstream(Some(common(direct(ca_context()))), Some(false));
    let out = lds(&optional).unwrap().unwrap();
    assert!(out.client_roots.is_some() && !out.require_client_certificate);
    // No validation context: TLS without client certificates.
    let tls = downstream(Some(common(None)), None);
    assert_eq!(
        lds(&tls).unwrap(),
        Some(DownstreamTls {
            identity: instance("identity", "default"),
            client_roots: None,
            require_client_certificate: false,
        })
    );
    // Istio's deprecated forms work on servers too.
    let istio = tls_pb::CommonTlsContext {
        tls_certificate_provider_instance: None,
        tls_certificate_certificate_provider_instance: Some(legacy("identity", "default")),
        ..common(Some(ValidationContextType::CombinedValidationContext(
            CombinedCertificateValidationContext {
                default_validation_context: Some(Default::default()),
                validation_context_certificate_provider_instance: Some(legacy("roots", "ROOTCA")),
                ..Default::default()
            },
        )))
    };
    assert_eq!(
        lds(&downstream(Some(istio), Some(true))).unwrap(),
        lds(&mtls).unwrap()
    );
}

#[test]
fn server_filter_chains_without_a_socket_use_the_fallback() {
    let b = bootstrap();
    let mtls = downstream(Some(common(direct(ca_context()))), Some(true));
    // Two chains need different matches (A36 NACKs duplicates).
    let secure = listener_pb::FilterChain {
        filter_chain_match: Some(listener_pb::FilterChainMatch {
            source_ports: vec![443],
            ..Default::default()
        }),
        ..chain("secure", Some(&mtls))
    };
    let l = server_listener(
        vec![chain("plain", None), secure],
        Some(chain("default", Some(&mtls))),
    );
    let (_, value) = listener::decode_in(&DecodeContext::new(&b), &l.encode_to_vec()).unwrap();
    let ListenerKind::Server(server) = value.kind else {
        panic!("a server listener")
    };
    let expected = lds(&mtls).unwrap();
    let named_tls = |c: &FilterChain| (c.name.clone(), c.tls.clone());
    assert_eq!(
        server
            .filter_chains
            .iter()
            .map(named_tls)
            .collect::<Vec<_>>(),
        vec![("plain".into(), None), ("secure".into(), expected.clone())]
    );
    assert_eq!(
        server.default_filter_chain.as_deref().map(named_tls),
        Some(("default".into(), expected))
    );
    // Errors name the chain.
    let bad = downstream(None, None);
    let l = server_listener(vec![chain("ok", Some(&mtls))], Some(chain("d", Some(&bad))));
    let e = listener::decode_in(&DecodeContext::new(&b), &l.encode_to_vec()).unwrap_err();
    assert_eq!(
        e.message,
        "default_filter_chain.transport_socket.typed_config.value.common_tls_context.\
         tls_certificate_provider_instance: field not present: a server needs an identity \
         certificate"
    );
}

#[test]
fn server_rules_are_nacked() {
    let identity_missing = "common_tls_context.tls_certificate_provider_instance: field not \
                            present: a server needs an identity certificate";
    assert_eq!(lds_err(&downstream(None, None)), identity_missing);
    let no_identity = tls_pb::CommonTlsContext {
        tls_certificate_provider_instance: None,
        ..common(direct(ca_context()))
    };
    assert_eq!(
        lds_err(&downstream(Some(no_identity), None)),
        identity_missing
    );
    assert_eq!(
        lds_err(&downstream(Some(common(None)), Some(true))),
        "require_client_certificate: a client certificate is required but there is no \
         validation context to verify it with"
    );
    let no_ca = tls_pb::CertificateValidationContext::default();
    assert_eq!(
        lds_err(&downstream(Some(common(direct(no_ca))), None)),
        "common_tls_context.validation_context.ca_certificate_provider_instance: field not \
         present: a server that validates client certificates needs it"
    );
    let sans = tls_pb::CertificateValidationContext {
        match_subject_alt_names: vec![exact("client")],
        ..ca_context()
    };
    assert_eq!(
        lds_err(&downstream(Some(common(direct(sans))), Some(true))),
        "common_tls_context.validation_context.match_subject_alt_names: not supported on \
         servers"
    );
    let system = tls_pb::CertificateValidationContext {
        system_root_certs: Some(Default::default()),
        ..Default::default()
    };
    assert_eq!(
        lds_err(&downstream(Some(common(direct(system))), Some(true))),
        "common_tls_context.validation_context.system_root_certs: not supported on servers \
         (A82)"
    );
    let require_sni = tls_pb::DownstreamTlsContext {
        require_sni: Some(pbuf::BoolValue { value: true }),
        ..downstream(Some(common(None)), None)
    };
    assert_eq!(lds_err(&require_sni), format!("require_sni: {UNSUPPORTED}"));
    for (policy, name) in [(1, "STRICT_STAPLING"), (2, "MUST_STAPLE"), (9, "9")] {
        let ocsp = tls_pb::DownstreamTlsContext {
            ocsp_staple_policy: policy,
            ..downstream(Some(common(None)), None)
        };
        assert_eq!(
            lds_err(&ocsp),
            format!("ocsp_staple_policy: must be LENIENT_STAPLING, got {name}")
        );
    }
    let mut unknown = common(direct(ca_context()));
    unknown.tls_certificate_provider_instance = plugin("nope", "");
    assert_eq!(
        lds_err(&downstream(Some(unknown), None)),
        "common_tls_context.tls_certificate_provider_instance.instance_name: unrecognized \
         certificate provider instance name \"nope\" (the bootstrap's certificate_providers \
         has no such instance)"
    );
    let mut tls_params = common(None);
    tls_params.tls_params = Some(Default::default());
    assert_eq!(
        lds_err(&downstream(Some(tls_params), None)),
        format!("common_tls_context.tls_params: {UNSUPPORTED}")
    );
}

#[test]
fn ignored_downstream_fields_change_nothing() {
    let base = downstream(Some(common(direct(ca_context()))), Some(true));
    let expected = lds(&base).unwrap();
    let noisy = tls_pb::DownstreamTlsContext {
        require_sni: Some(pbuf::BoolValue { value: false }),
        ocsp_staple_policy: 0,
        session_timeout: Some(pbuf::Duration {
            seconds: 60,
            nanos: 0,
        }),
        disable_stateful_session_resumption: true,
        prefer_client_ciphers: true,
        session_ticket_keys_type: Some(
            tls_pb::downstream_tls_context::SessionTicketKeysType::DisableStatelessSessionResumption(
                true,
            ),
        ),
        ..base.clone()
    };
    assert_eq!(lds(&noisy).unwrap(), expected);
    let keys = tls_pb::DownstreamTlsContext {
        session_ticket_keys_type: Some(
            tls_pb::downstream_tls_context::SessionTicketKeysType::SessionTicketKeys(
                Default::default(),
            ),
        ),
        ..base
    };
    assert_eq!(lds(&keys).unwrap(), expected);
}

#[test]
fn a_server_socket_must_be_a_downstream_context() {
    let b = bootstrap();
    let mut fc = chain("fc", None);
    fc.transport_socket = Some(socket(
        cluster::UPSTREAM_TLS_CONTEXT_TYPE,
        &upstream(common(direct(ca_context()))),
    ));
    let l = server_listener(vec![fc], None);
    assert_eq!(
        listener::decode_in(&DecodeContext::new(&b), &l.encode_to_vec())
            .unwrap_err()
            .message,
        format!(
            "filter_chains[0].transport_socket.typed_config.type_url: unsupported transport \
             socket type \"type.googleapis.com/{}\"",
            cluster::UPSTREAM_TLS_CONTEXT_TYPE
        )
    );
    let mut fc = chain("fc", None);
    fc.transport_socket = Some(core_pb::TransportSocket {
        name: "envoy.transport_sockets.raw_buffer".into(),
        config_type: None,
    });
    let l = server_listener(vec![fc], None);
    assert_eq!(
        listener::decode_in(&DecodeContext::new(&b), &l.encode_to_vec())
            .unwrap_err()
            .message,
        "filter_chains[0].transport_socket.typed_config: field not present"
    );
}

#[test]
fn string_matchers_keep_their_types() {
    // The decoded matcher list is the route matchers' type, which the SAN check reads.
    let vc = tls_pb::CertificateValidationContext {
        match_subject_alt_names: vec![exact("x")],
        ..ca_context()
    };
    let out = cds(&upstream(common(direct(vc)))).unwrap().unwrap();
    assert_eq!(
        *out.match_subject_alt_names,
        [StringMatcher::Exact {
            value: "x".into(),
            ignore_case: false
        }]
    );
}

#[test]
fn mutated_tls_contexts_never_panic() {
    let mut vc = ca_context();
    vc.match_subject_alt_names = vec![exact("a")];
    let tls = tls_pb::UpstreamTlsContext {
        sni: "s".into(),
        ..upstream(common(direct(vc)))
    };
    let b = bootstrap();
    let context = DecodeContext::new(&b);
    crate::resource::validate::for_each_mutation(&tls_cluster(&tls).encode_to_vec(), |bytes| {
        let _ = cluster::decode_in(&context, bytes);
    });
    let mtls = downstream(Some(common(direct(ca_context()))), Some(true));
    let l = server_listener(vec![chain("fc", Some(&mtls))], None);
    crate::resource::validate::for_each_mutation(&l.encode_to_vec(), |bytes| {
        let _ = listener::decode_in(&context, bytes);
    });
}
