//! What parsing accepts, ignores and refuses, with the field path of each refusal.

use super::*;

fn one(permission: rbac_pb::Permission, principal: rbac_pb::Principal) -> rbac_pb::Rbac {
    rules(
        ALLOW,
        vec![("p", policy(vec![permission], vec![principal]))],
    )
}

fn expr() -> crate::pb::google::api::expr::v1alpha1::Expr {
    Default::default()
}

#[test]
fn cel_conditions_are_refused() {
    let mut with_condition = policy(vec![any_perm()], vec![any_princ()]);
    with_condition.condition = Some(expr());
    assert_eq!(
        refusal(rules(ALLOW, vec![("p", with_condition)])),
        r#"rules.policies["p"].condition: CEL conditions are not supported (A41)"#
    );
    let mut checked = policy(vec![any_perm()], vec![any_princ()]);
    checked.checked_condition = Some(Default::default());
    assert_eq!(
        refusal(rules(DENY, vec![("q", checked)])),
        r#"rules.policies["q"].checked_condition: CEL conditions are not supported (A41)"#
    );
}

#[test]
fn grpc_and_scheme_header_matchers_are_refused_at_any_depth() {
    let nested = perm(Rule::AndRules(rbac_pb::permission::Set {
        rules: vec![
            any_perm(),
            perm(Rule::Header(header_exact("grpc-timeout", "1S"))),
        ],
    }));
    assert_eq!(
        refusal(one(nested, any_princ())),
        r#"rules.policies["p"].permissions[0].and_rules.rules[1].header.name: "grpc-timeout": grpc- headers are not allowed (A41)"#
    );
    let scheme = princ(Id::NotId(Box::new(princ(Id::Header(header_exact(
        ":scheme", "https",
    ))))));
    assert_eq!(
        refusal(one(any_perm(), scheme)),
        r#"rules.policies["p"].principals[0].not_id.header.name: ":scheme" is not allowed (A41)"#
    );
    let upper = perm(Rule::Header(header_exact("GRPC-Encoding", "gzip")));
    assert!(refusal(one(upper, any_princ())).contains("grpc- headers are not allowed"));
    // Other pseudo-headers and ordinary names are accepted.
    for name in [
        ":authority",
        ":path",
        ":method",
        "host",
        "x-grpc-user",
        "te",
    ] {
        let ok = perm(Rule::Header(header_exact(name, "v")));
        assert!(
            RbacConfig::parse(&filter_bytes(Some(one(ok, any_princ())))).is_ok(),
            "{name}"
        );
    }
}

#[test]
fn unknown_action_and_unset_rules_are_refused() {
    let mut unknown = rules(ALLOW, vec![]);
    unknown.action = 7;
    assert_eq!(refusal(unknown), "rules.action: unknown action 7");
    assert_eq!(
        refusal(one(rbac_pb::Permission { rule: None }, any_princ())),
        r#"rules.policies["p"].permissions[0]: no rule is set"#
    );
    assert_eq!(
        refusal(one(any_perm(), rbac_pb::Principal { identifier: None })),
        r#"rules.policies["p"].principals[0]: no identifier is set"#
    );
}

#[test]
fn rule_kinds_grpc_cannot_evaluate_are_refused() {
    let ext = core_pb::TypedExtensionConfig::default;
    let cases = [
        (
            one(perm(Rule::Matcher(ext())), any_princ()),
            "permissions[0].matcher",
        ),
        (
            one(perm(Rule::UriTemplate(ext())), any_princ()),
            "permissions[0].uri_template",
        ),
        (
            one(perm(Rule::SourcedMetadata(Default::default())), any_princ()),
            "permissions[0].sourced_metadata",
        ),
        (
            one(any_perm(), princ(Id::FilterState(Default::default()))),
            "principals[0].filter_state",
        ),
        (
            one(any_perm(), princ(Id::Custom(ext()))),
            "principals[0].custom",
        ),
        (
            one(any_perm(), princ(Id::SourcedMetadata(Default::default()))),
            "principals[0].sourced_metadata",
        ),
    ];
    for (rules, field) in cases {
        assert_eq!(
            refusal(rules),
            format!(r#"rules.policies["p"].{field}: not supported by gRPC's RBAC (A41)"#)
        );
    }
}

#[test]
fn the_matcher_tree_is_refused_and_shadow_rules_and_stats_are_ignored() {
    let with_matcher = filter_pb::Rbac {
        matcher: Some(Default::default()),
        ..Default::default()
    };
    assert_eq!(
        RbacConfig::parse(&with_matcher.encode_to_vec())
            .unwrap_err()
            .to_string(),
        "matcher: not supported (gRPC supports rules, A41)"
    );
    // Shadow rules that would be refused as rules, a shadow matcher and the stats
    // fields change nothing.
    let mut bad_shadow = policy(vec![any_perm()], vec![any_princ()]);
    bad_shadow.condition = Some(expr());
    let msg = filter_pb::Rbac {
        rules: Some(rules(
            DENY,
            vec![("deny-all", policy(vec![any_perm()], vec![any_princ()]))],
        )),
        shadow_rules: Some(rules(ALLOW, vec![("s", bad_shadow)])),
        shadow_matcher: Some(Default::default()),
        rules_stat_prefix: "x".into(),
        shadow_rules_stat_prefix: "y".into(),
        track_per_rule_stats: true,
        ..Default::default()
    };
    let parsed = RbacConfig::parse(&msg.encode_to_vec()).unwrap();
    assert!(!allows(&parsed, &Req::default()));
}

#[test]
fn absent_rules_and_log_enforce_nothing_but_log_is_validated() {
    let none = RbacConfig::parse(&filter_bytes(None)).unwrap();
    assert_eq!(none.rules(), None);
    let log = config(rules(
        LOG,
        vec![("p", policy(vec![any_perm()], vec![any_princ()]))],
    ));
    assert_eq!(log.rules(), None);
    let mut bad = policy(vec![any_perm()], vec![any_princ()]);
    bad.condition = Some(expr());
    assert!(refusal(rules(LOG, vec![("p", bad)])).contains("condition"));
}

/// `depth` levels of `not` around `any`: the innermost rule is at depth `depth`.
fn nested_not(depth: usize) -> rbac_pb::Permission {
    (0..depth).fold(any_perm(), |inner, _| perm(Rule::NotRule(Box::new(inner))))
}

#[test]
fn nesting_deeper_than_the_limit_is_refused() {
    let deepest = config(rules(
        ALLOW,
        vec![(
            "p",
            policy(vec![nested_not(MAX_RULE_DEPTH)], vec![any_princ()]),
        )],
    ));
    // An even number of nots around `any` matches.
    assert_eq!(
        allows(&deepest, &Req::default()),
        MAX_RULE_DEPTH.is_multiple_of(2)
    );
    let too_deep = refusal(rules(
        ALLOW,
        vec![(
            "p",
            policy(vec![nested_not(MAX_RULE_DEPTH + 1)], vec![any_princ()]),
        )],
    ));
    assert!(
        too_deep.starts_with(r#"rules.policies["p"].permissions[0].not_rule.not_rule"#)
            && too_deep.ends_with(&format!("rules nest deeper than {MAX_RULE_DEPTH} levels")),
        "{too_deep}"
    );
    let deep_ids = (0..=MAX_RULE_DEPTH).fold(any_princ(), |inner, _| {
        princ(Id::OrIds(rbac_pb::principal::Set { ids: vec![inner] }))
    });
    assert!(refusal(one(any_perm(), deep_ids)).contains("nest deeper"));
}

#[test]
fn more_rules_than_the_limit_are_refused() {
    let at_limit = rules(
        ALLOW,
        vec![(
            "p",
            policy(vec![any_perm(); MAX_RULES - 1], vec![any_princ()]),
        )],
    );
    assert!(RbacConfig::parse(&filter_bytes(Some(at_limit))).is_ok());
    let over = rules(
        ALLOW,
        vec![
            (
                "a",
                policy(vec![any_perm(); MAX_RULES - 1], vec![any_princ()]),
            ),
            ("b", policy(vec![any_perm()], vec![any_princ()])),
        ],
    );
    assert_eq!(
        refusal(over),
        format!(r#"rules.policies["b"].permissions[0]: more than {MAX_RULES} rules in one config"#)
    );
}

#[test]
fn ports_and_ranges_are_bounded() {
    let port = |p| one(perm(Rule::DestinationPort(p)), any_princ());
    assert!(RbacConfig::parse(&filter_bytes(Some(port(65535)))).is_ok());
    assert_eq!(
        refusal(port(65536)),
        r#"rules.policies["p"].permissions[0].destination_port: invalid port 65536"#
    );
    let range = |start, end| {
        one(
            perm(Rule::DestinationPortRange(
                crate::pb::envoy::r#type::v3::Int32Range { start, end },
            )),
            any_princ(),
        )
    };
    assert!(RbacConfig::parse(&filter_bytes(Some(range(0, 65536)))).is_ok());
    let field = r#"rules.policies["p"].permissions[0].destination_port_range"#;
    assert_eq!(
        refusal(range(-1, 10)),
        format!("{field}: [-1, 10) is out of the port range [0, 65536]")
    );
    assert_eq!(
        refusal(range(0, 65537)),
        format!("{field}: [0, 65537) is out of the port range [0, 65536]")
    );
    assert_eq!(
        refusal(range(80, 80)),
        format!("{field}: start 80 must be less than end 80")
    );
}

#[test]
fn cidr_ranges_are_validated() {
    let peer = |c| one(any_perm(), princ(Id::DirectRemoteIp(c)));
    assert_eq!(
        refusal(peer(cidr("10.0.0", Some(8)))),
        r#"rules.policies["p"].principals[0].direct_remote_ip.address_prefix: "10.0.0" is not an IP address"#
    );
    assert_eq!(
        refusal(peer(cidr("10.0.0.0", Some(33)))),
        r#"rules.policies["p"].principals[0].direct_remote_ip.prefix_len: 33 is longer than the address 10.0.0.0"#
    );
    assert!(
        refusal(one(
            perm(Rule::DestinationIp(cidr("::", Some(129)))),
            any_princ()
        ))
        .contains("destination_ip.prefix_len: 129 is longer")
    );
    assert!(refusal(peer(cidr("", None))).contains("address_prefix"));
    assert!(RbacConfig::parse(&filter_bytes(Some(peer(cidr("::", Some(128)))))).is_ok());
}

#[test]
fn matchers_are_validated_where_they_sit() {
    let bad_regex = matcher_pb::StringMatcher {
        match_pattern: Some(matcher_pb::string_matcher::MatchPattern::SafeRegex(
            matcher_pb::RegexMatcher {
                regex: "(".into(),
                ..Default::default()
            },
        )),
        ignore_case: false,
    };
    let sni = refusal(one(
        perm(Rule::RequestedServerName(bad_regex.clone())),
        any_princ(),
    ));
    assert!(
        sni.starts_with(r#"rules.policies["p"].permissions[0].requested_server_name.safe_regex.regex: invalid regex"#),
        "{sni}"
    );
    let authn = princ(Id::Authenticated(rbac_pb::principal::Authenticated {
        principal_name: Some(bad_regex),
    }));
    assert!(
        refusal(one(any_perm(), authn))
            .contains("principals[0].authenticated.principal_name.safe_regex.regex")
    );
    assert_eq!(
        refusal(one(
            perm(Rule::UrlPath(matcher_pb::PathMatcher { rule: None })),
            any_princ()
        )),
        r#"rules.policies["p"].permissions[0].url_path.path: field not present"#
    );
    let empty_name = perm(Rule::Header(header_exact("", "v")));
    assert_eq!(
        refusal(one(empty_name, any_princ())),
        r#"rules.policies["p"].permissions[0].header.name: must be non-empty"#
    );
}

fn audited(options: rbac_pb::rbac::AuditLoggingOptions) -> rbac_pb::Rbac {
    let mut r = rules(
        ALLOW,
        vec![("p", policy(vec![any_perm()], vec![any_princ()]))],
    );
    r.audit_logging_options = Some(options);
    r
}

pub(super) fn logger(
    type_name: &str,
    name: &str,
    is_optional: bool,
) -> rbac_pb::rbac::audit_logging_options::AuditLoggerConfig {
    rbac_pb::rbac::audit_logging_options::AuditLoggerConfig {
        audit_logger: Some(core_pb::TypedExtensionConfig {
            name: name.to_owned(),
            typed_config: Some(pbuf::Any {
                type_url: format!("type.googleapis.com/{type_name}"),
                value: Default::default(),
            }),
        }),
        is_optional,
    }
}

pub(super) const STDOUT: &str = "envoy.extensions.rbac.audit_loggers.stream.v3.StdoutAuditLog";

#[test]
fn audit_loggers_unknown_types_are_refused_unless_optional() {
    let options = |condition, loggers| rbac_pb::rbac::AuditLoggingOptions {
        audit_condition: condition,
        logger_configs: loggers,
    };
    let parsed = config(audited(options(
        1,
        vec![
            logger("acme.Logger", "opt", true),
            logger(STDOUT, "out", false),
        ],
    )));
    let audit = &parsed.rules().unwrap().audit;
    assert_eq!(audit.condition, AuditCondition::OnDeny);
    assert_eq!(
        &*audit.loggers,
        &[AuditLoggerConfig::Stdout { name: "out".into() }]
    );
    assert_eq!(
        refusal(audited(options(0, vec![logger("acme.Logger", "l", false)]))),
        r#"rules.audit_logging_options.logger_configs[0].audit_logger.typed_config: unsupported audit logger type "type.googleapis.com/acme.Logger" (and not is_optional)"#
    );
    assert_eq!(
        refusal(audited(options(4, vec![]))),
        "rules.audit_logging_options.audit_condition: unknown audit condition 4"
    );
    let missing = rbac_pb::rbac::audit_logging_options::AuditLoggerConfig {
        audit_logger: None,
        is_optional: true,
    };
    assert_eq!(
        refusal(audited(options(0, vec![missing]))),
        "rules.audit_logging_options.logger_configs[0].audit_logger: field not present"
    );
    let mut garbage = logger(STDOUT, "g", false);
    garbage
        .audit_logger
        .as_mut()
        .unwrap()
        .typed_config
        .as_mut()
        .unwrap()
        .value = vec![0xff].into();
    assert!(refusal(audited(options(0, vec![garbage])))
        .starts_with("rules.audit_logging_options.logger_configs[0].audit_logger.typed_config.value: can't decode StdoutAuditLog"));
}

#[test]
fn per_route_without_rbac_disables_and_errors_are_under_rbac() {
    let disabled =
        RbacPerRoute::parse(&filter_pb::RbacPerRoute { rbac: None }.encode_to_vec()).unwrap();
    assert_eq!(disabled.config(), None);
    let mut bad = policy(vec![any_perm()], vec![any_princ()]);
    bad.checked_condition = Some(Default::default());
    let msg = filter_pb::RbacPerRoute {
        rbac: Some(filter_pb::Rbac {
            rules: Some(rules(ALLOW, vec![("p", bad)])),
            ..Default::default()
        }),
    };
    assert_eq!(
        RbacPerRoute::parse(&msg.encode_to_vec())
            .unwrap_err()
            .to_string(),
        r#"rbac.rules.policies["p"].checked_condition: CEL conditions are not supported (A41)"#
    );
}

#[test]
fn undecodable_bytes_are_refused() {
    let e = RbacConfig::parse(&[0x0a, 0x05, 0x01])
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("can't decode RBAC: "), "{e}");
    let e = RbacPerRoute::parse(&[0x12, 0x7f]).unwrap_err().to_string();
    assert!(e.starts_with("can't decode RBACPerRoute: "), "{e}");
}

#[test]
fn policies_are_kept_in_name_order_with_their_rules() {
    let parsed = config(rules(
        DENY,
        vec![
            ("zeta", policy(vec![any_perm()], vec![any_princ()])),
            (
                "alpha",
                policy(
                    vec![perm(Rule::DestinationPort(443))],
                    vec![princ(Id::RemoteIp(cidr("10.1.2.3", Some(16))))],
                ),
            ),
        ],
    ));
    let r = parsed.rules().unwrap();
    assert_eq!(r.action, Action::Deny);
    let names: Vec<&str> = r.policies.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["alpha", "zeta"]);
    assert_eq!(
        &*r.policies[0].permissions,
        &[Permission::DestinationPort(443)]
    );
    assert_eq!(
        &*r.policies[0].principals,
        &[Principal::PeerIp(
            CidrRange::new("10.1.0.0".parse().unwrap(), 16).unwrap()
        )]
    );
}
