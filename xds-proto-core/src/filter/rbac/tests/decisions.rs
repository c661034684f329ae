//! Decisions: ALLOW and DENY, no policies, which policy is named, LOG and absent rules,
//! per-route overrides, and A59's audit conditions with the events a logger gets.

use super::parse::{STDOUT, logger};
use super::*;

fn path_policy(p: &str) -> rbac_pb::Policy {
    policy(
        vec![perm(Rule::UrlPath(url_path(exact(p))))],
        vec![any_princ()],
    )
}

#[test]
fn allow_allows_only_matches_and_deny_denies_only_matches() {
    let allow = config(rules(ALLOW, vec![("get", path_policy("/pkg.Svc/Get"))]));
    let get = Req::path("/pkg.Svc/Get");
    let put = Req::path("/pkg.Svc/Put");
    let decision = allow.evaluate(&get.view());
    assert!(decision.allowed);
    assert_eq!(decision.matched_policy, Some("get"));
    assert_eq!(decision.denial_message(), None);
    let decision = allow.evaluate(&put.view());
    assert!(!decision.allowed);
    assert_eq!(decision.matched_policy, None);
    assert_eq!(
        decision.denial_message().as_deref(),
        Some("incoming RPC did not match an allow policy")
    );

    let deny = config(rules(DENY, vec![("no-get", path_policy("/pkg.Svc/Get"))]));
    let decision = deny.evaluate(&get.view());
    assert!(!decision.allowed);
    assert_eq!(decision.matched_policy, Some("no-get"));
    assert_eq!(
        decision.denial_message().as_deref(),
        Some(r#"incoming RPC matched a deny policy "no-get""#)
    );
    assert!(allows(&deny, &put));
}

#[test]
fn a_policy_needs_a_permission_and_a_principal() {
    let both = policy(
        vec![
            perm(Rule::DestinationPort(1)),
            perm(Rule::DestinationPort(8080)),
        ],
        vec![princ(Id::RemoteIp(cidr("1.2.3.4", Some(32)))), any_princ()],
    );
    assert!(allows(
        &config(rules(ALLOW, vec![("p", both)])),
        &Req::default()
    ));
    let no_principal = policy(
        vec![any_perm()],
        vec![princ(Id::RemoteIp(cidr("1.2.3.4", Some(32))))],
    );
    assert!(!allows(
        &config(rules(ALLOW, vec![("p", no_principal)])),
        &Req::default()
    ));
    let no_permission = policy(vec![perm(Rule::DestinationPort(1))], vec![any_princ()]);
    assert!(!allows(
        &config(rules(ALLOW, vec![("p", no_permission)])),
        &Req::default()
    ));
}

#[test]
fn no_policies_deny_under_allow_and_allow_under_deny() {
    assert!(!allows(&config(rules(ALLOW, vec![])), &Req::default()));
    assert!(allows(&config(rules(DENY, vec![])), &Req::default()));
}

#[test]
fn the_first_matching_policy_in_name_order_is_named() {
    let config = config(rules(
        DENY,
        vec![
            ("c", path_policy("/pkg.Svc/Get")),
            ("b", policy(vec![any_perm()], vec![any_princ()])),
            ("a", path_policy("/other/X")),
        ],
    ));
    assert_eq!(
        config
            .evaluate(&Req::path("/pkg.Svc/Get").view())
            .matched_policy,
        Some("b")
    );
}

#[test]
fn log_and_absent_rules_let_everything_through_unaudited() {
    let mut log = rules(
        LOG,
        vec![("deny-all", policy(vec![any_perm()], vec![any_princ()]))],
    );
    log.audit_logging_options = Some(rbac_pb::rbac::AuditLoggingOptions {
        audit_condition: 3,
        logger_configs: vec![logger(STDOUT, "out", false)],
    });
    let log = config(log);
    let none = RbacConfig::parse(&filter_bytes(None)).unwrap();
    for config in [log, none] {
        let decision = config.evaluate(&Req::default().view());
        assert_eq!(
            decision,
            RbacDecision {
                allowed: true,
                matched_policy: None,
                audit: false
            }
        );
    }
}

#[test]
fn a_route_override_replaces_the_config_and_an_empty_one_disables_it() {
    let top = config(rules(
        DENY,
        vec![("all", policy(vec![any_perm()], vec![any_princ()]))],
    ));
    let req = Req::default();
    assert!(!top.for_route(None).unwrap().evaluate(&req.view()).allowed);
    let disabled =
        RbacPerRoute::parse(&filter_pb::RbacPerRoute { rbac: None }.encode_to_vec()).unwrap();
    assert_eq!(top.for_route(Some(&disabled)), None);
    let allow_get = filter_pb::RbacPerRoute {
        rbac: Some(filter_pb::Rbac {
            rules: Some(rules(ALLOW, vec![("get", path_policy("/pkg.Svc/Get"))])),
            ..Default::default()
        }),
    };
    let per_route = RbacPerRoute::parse(&allow_get.encode_to_vec()).unwrap();
    let effective = top.for_route(Some(&per_route)).unwrap();
    assert!(
        effective
            .evaluate(&Req::path("/pkg.Svc/Get").view())
            .allowed
    );
    assert!(
        !effective
            .evaluate(&Req::path("/pkg.Svc/Put").view())
            .allowed
    );
    // An override whose RBAC has no rules enforces nothing.
    let no_rules = filter_pb::RbacPerRoute {
        rbac: Some(Default::default()),
    };
    let per_route = RbacPerRoute::parse(&no_rules.encode_to_vec()).unwrap();
    assert!(
        top.for_route(Some(&per_route))
            .unwrap()
            .evaluate(&req.view())
            .allowed
    );
}

/// Records what an audit logger is given.
#[derive(Default)]
struct Recorder(Vec<(AuditLoggerConfig, String)>);

impl AuditLogger for Recorder {
    fn log(&mut self, config: &AuditLoggerConfig, event: &AuditEvent<'_>) {
        self.0.push((config.clone(), event.stdout_line("T")));
    }
}

fn audited(action: i32, condition: i32, loggers: usize) -> RbacConfig {
    let mut r = rules(action, vec![("get", path_policy("/pkg.Svc/Get"))]);
    r.audit_logging_options = Some(rbac_pb::rbac::AuditLoggingOptions {
        audit_condition: condition,
        logger_configs: (0..loggers)
            .map(|i| logger(STDOUT, &format!("l{i}"), false))
            .collect(),
    });
    config(r)
}

#[test]
fn audit_conditions_follow_the_decision_not_the_action() {
    // (condition, audited when allowed, audited when denied)
    let table = [
        (0, false, false),
        (1, false, true),
        (2, true, false),
        (3, true, true),
    ];
    let get = Req::path("/pkg.Svc/Get");
    let put = Req::path("/pkg.Svc/Put");
    for (condition, on_allow, on_deny) in table {
        for action in [ALLOW, DENY] {
            let config = audited(action, condition, 1);
            for req in [&get, &put] {
                let decision = config.evaluate(&req.view());
                let expected = if decision.allowed { on_allow } else { on_deny };
                assert_eq!(
                    decision.audit, expected,
                    "condition {condition} action {action} {}",
                    req.path
                );
                let mut recorder = Recorder::default();
                assert_eq!(config.authorize(&req.view(), "", &mut recorder), decision);
                assert_eq!(recorder.0.len(), usize::from(expected));
            }
        }
    }
    // A condition without loggers audits nothing.
    assert!(!audited(ALLOW, 3, 0).evaluate(&get.view()).audit);
}

#[test]
fn audit_events_carry_the_rpc_principal_and_matched_rule_to_every_logger() {
    let config = audited(DENY, 3, 2);
    let get = Req::path("/pkg.Svc/Get").cert(
        vec![
            SubjectAltName::Dns("a.example.com".into()),
            SubjectAltName::Uri("spiffe://td/a".into()),
            SubjectAltName::Uri("spiffe://td/b".into()),
        ],
        "CN=a",
    );
    let mut recorder = Recorder::default();
    let decision = config.authorize(&get.view(), "rbac-filter", &mut recorder);
    assert!(!decision.allowed);
    let line = r#"{"grpc_audit_log":{"timestamp":"T","rpc_method":"/pkg.Svc/Get","principal":"spiffe://td/a","policy_name":"rbac-filter","matched_rule":"get","authorized":false}}"#;
    assert_eq!(
        recorder.0,
        vec![
            (
                AuditLoggerConfig::Stdout { name: "l0".into() },
                line.to_owned()
            ),
            (
                AuditLoggerConfig::Stdout { name: "l1".into() },
                line.to_owned()
            ),
        ]
    );
    let mut recorder = Recorder::default();
    let quoted = Req::path("/x\"y");
    config.authorize(&quoted.view(), "", &mut recorder);
    assert_eq!(
        recorder.0[0].1,
        r#"{"grpc_audit_log":{"timestamp":"T","rpc_method":"/x\"y","principal":"","policy_name":"","matched_rule":"","authorized":true}}"#
    );
}
