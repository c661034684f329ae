//! RBAC (A41) on an `XdsServer`, end to end over mTLS: the server's one filter chain
//! requires the mesh CA's client certificates and runs two RBAC filters, a DENY on a
//! header and an ALLOW of the echo method to `client-1`'s SPIFFE ID (audited on deny
//! with A59's stdout logger, written to a buffer). Its routes pick per-route overrides
//! by an `x-route` header: `open` disables the ALLOW filter, `client-2` allows the echo
//! method only to another identity (audited on deny too), `other-path` allows only
//! another method, `subject` allows the echo method to the client certificate's
//! subject. An
//! `XdsChannel` presenting `client-1` calls it; every case's status is checked, and
//! the audit lines of the ALLOW filter's refusals.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use http::uri::PathAndQuery;
use tonic_prost::ProstCodec;
use xds_adapter_common::server::StdoutAuditLogger;
use xds_adapter_common::{Runtime, XdsChannel, XdsServer, XdsServerBuilder};
use xds_proto_core::pb::envoy::config::route::v3 as route_pb;
use xds_proto_core::pb::envoy::r#type::matcher::v3::string_matcher::MatchPattern;
use xds_proto_core::resource::type_url;

use super::{SERVICE_NAME, SuiteEcho, until};
use crate::echo::{ECHO_PATH, EchoReply, EchoRequest, echo_request};
use crate::resources::{
    DOWNSTREAM_TLS_CONTEXT_TYPE_URL, RbacAction, SERVER_LISTENER_TEMPLATE, any, any_principal,
    audited_on_deny, downstream_tls_context, header, header_permission, non_forwarding,
    path_permission, prefix, principal_name, rbac_filter, rbac_filter_chain, rbac_per_route,
    rbac_policy, rbac_rules, routes_config, server_listener_msg, string_match,
    tls_transport_socket, with_header,
};
use crate::security_suite::MeshPki;
use crate::suite::within;

/// The client certificate's SPIFFE ID (`MeshPki`'s `client-1`).
pub const CLIENT_1: &str = "spiffe://mesh.test/ns/default/sa/client-1";
/// The client certificate's subject, as gRPC-Go writes it.
const CLIENT_1_SUBJECT: &str = "CN=client-1";
const CLIENT_2: &str = "spiffe://mesh.test/ns/default/sa/client-2";
/// A method the echo service does not have: an RPC RBAC lets through fails
/// UNIMPLEMENTED in the service, one it refuses PERMISSION_DENIED before it.
const OTHER_PATH: &str = "/xds.test.Other/Method";

/// What the RBAC scenarios saw, for the test to print.
#[derive(Debug, Default)]
pub struct RbacFigures {
    /// Each case (path, headers) and the RPC's status code and message.
    pub cases: Vec<(String, String)>,
    /// The audit lines A59's stdout logger wrote.
    pub audit_lines: Vec<String>,
}

/// A writer tests read back.
#[derive(Clone, Default)]
struct SharedBuffer(Arc<Mutex<Vec<u8>>>);

impl Write for SharedBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A route for RPCs whose `x-route` header is `value`.
fn routed_by(value: &str) -> route_pb::Route {
    non_forwarding(with_header(
        prefix("/"),
        header(
            "x-route",
            string_match(MatchPattern::Exact(value.to_owned()), false),
            false,
        ),
    ))
}

/// The server's listener on `addr`: see the module documentation.
fn rbac_listener(addr: SocketAddr) -> xds_proto_core::pb::google::protobuf::Any {
    let allow_override = |rules| {
        [("allow".to_owned(), rbac_per_route(rules))]
            .into_iter()
            .collect()
    };
    let mut open = routed_by("open");
    open.typed_per_filter_config = allow_override(None);
    let mut client_2 = routed_by("client-2");
    client_2.typed_per_filter_config = allow_override(Some(audited_on_deny(rbac_rules(
        RbacAction::Allow,
        vec![(
            "echo-from-client-2",
            rbac_policy(
                vec![path_permission(ECHO_PATH)],
                vec![principal_name(CLIENT_2)],
            ),
        )],
    ))));
    let mut other_path = routed_by("other-path");
    other_path.typed_per_filter_config = allow_override(Some(rbac_rules(
        RbacAction::Allow,
        vec![(
            "other-method",
            rbac_policy(vec![path_permission(OTHER_PATH)], vec![any_principal()]),
        )],
    )));
    let mut subject = routed_by("subject");
    subject.typed_per_filter_config = allow_override(Some(rbac_rules(
        RbacAction::Allow,
        vec![(
            "echo-by-subject",
            rbac_policy(
                vec![path_permission(ECHO_PATH)],
                vec![principal_name(CLIENT_1_SUBJECT)],
            ),
        )],
    )));
    let routes = routes_config(
        "rbac-routes",
        vec![
            open,
            client_2,
            other_path,
            subject,
            non_forwarding(prefix("/")),
        ],
    );
    let filters = vec![
        rbac_filter(
            "deny-header",
            rbac_rules(
                RbacAction::Deny,
                vec![(
                    "blocked-header",
                    rbac_policy(
                        vec![header_permission("x-blocked", "yes")],
                        vec![any_principal()],
                    ),
                )],
            ),
        ),
        rbac_filter(
            "allow",
            audited_on_deny(rbac_rules(
                RbacAction::Allow,
                vec![(
                    "echo-from-client-1",
                    rbac_policy(
                        vec![path_permission(ECHO_PATH)],
                        vec![principal_name(CLIENT_1)],
                    ),
                )],
            )),
        ),
    ];
    let mut chain = rbac_filter_chain("rbac", routes, filters);
    let context = downstream_tls_context("server", Some("server"), true);
    chain.transport_socket = Some(tls_transport_socket(
        DOWNSTREAM_TLS_CONTEXT_TYPE_URL,
        &context,
    ));
    let name = crate::resources::server_listener_name(SERVER_LISTENER_TEMPLATE, addr);
    any(
        type_url::LISTENER,
        &server_listener_msg(&name, addr, vec![chain]),
    )
}

/// One RPC to `path` with `headers`.
fn call_path<R: Runtime>(
    channel: &XdsChannel<R>,
    path: &'static str,
    headers: &[(&'static str, &'static str)],
) -> BoxFuture<'static, Result<EchoReply, tonic::Status>> {
    let channel = channel.clone();
    let mut request = echo_request("rbac");
    request.set_timeout(Duration::from_secs(5));
    for (name, value) in headers {
        request
            .metadata_mut()
            .insert(*name, value.parse().expect("an ASCII value"));
    }
    async move {
        let mut grpc = tonic::client::Grpc::new(channel);
        grpc.ready()
            .await
            .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
        let codec = ProstCodec::<EchoRequest, EchoReply>::default();
        grpc.unary(request, PathAndQuery::from_static(path), codec)
            .await
            .map(tonic::Response::into_inner)
    }
    .boxed()
}

/// Runs the RBAC scenarios with `serve`, the adapter's way of binding an `XdsServer`.
pub async fn server_rbac_scenarios<R, F, Fut>(serve: F) -> RbacFigures
where
    R: Runtime,
    F: FnOnce(XdsServerBuilder<R>, SocketAddr, SuiteEcho<R>) -> Fut,
    Fut: std::future::Future<Output = Result<XdsServer, Box<dyn std::error::Error + Send + Sync>>>,
{
    let rt = R::current().expect("a runtime");
    let pki = MeshPki::generate();
    let super::mesh::Mesh {
        control: _control,
        addr,
        pool: _pool,
        channel,
        server_client,
    } = super::mesh::mesh(&rt, &pki, "rbac-channel", rbac_listener);
    let audit = SharedBuffer::default();
    let builder = XdsServerBuilder::new(server_client)
        .audit_logger(StdoutAuditLogger::to_writer(audit.clone()));
    let server = serve(builder, addr, SuiteEcho { rt: rt.clone() })
        .await
        .expect("the xDS server starts");
    let mut figures = RbacFigures::default();
    within(&rt, Duration::from_secs(60), "the RBAC scenarios", async {
        // The echo method from client-1: allowed.
        let reply = until(&rt, "an allowed RPC", || {
            call_path(&channel, ECHO_PATH, &[]).map(Result::ok).boxed()
        })
        .await;
        assert_eq!(reply.backend, SERVICE_NAME);
        type Case = (
            &'static str,
            &'static [(&'static str, &'static str)],
            tonic::Code,
            &'static str,
        );
        use tonic::Code::{Ok as Served, PermissionDenied as Denied, Unimplemented as Reached};
        let cases: [Case; 9] = [
            // By path: the ALLOW filter allows only the echo method.
            (ECHO_PATH, &[], Served, ""),
            (
                OTHER_PATH,
                &[],
                Denied,
                "incoming RPC did not match an allow policy",
            ),
            // By header: the DENY filter refuses it, whatever the route.
            (
                ECHO_PATH,
                &[("x-blocked", "yes")],
                Denied,
                "incoming RPC matched a deny policy \"blocked-header\"",
            ),
            (
                ECHO_PATH,
                &[("x-route", "open"), ("x-blocked", "yes")],
                Denied,
                "blocked-header",
            ),
            // A route that disables the ALLOW filter: any method reaches the service.
            (OTHER_PATH, &[("x-route", "open")], Reached, ""),
            // By client certificate identity: the route allows client-2 only.
            (
                ECHO_PATH,
                &[("x-route", "client-2")],
                Denied,
                "did not match an allow policy",
            ),
            // principal_name also reads the certificate's subject.
            (ECHO_PATH, &[("x-route", "subject")], Served, ""),
            // A route override that allows another method only.
            (OTHER_PATH, &[("x-route", "other-path")], Reached, ""),
            (
                ECHO_PATH,
                &[("x-route", "other-path")],
                Denied,
                "did not match an allow policy",
            ),
        ];
        for (path, headers, code, message) in cases {
            let (got, text) = match call_path(&channel, path, headers).await {
                Ok(_) => (tonic::Code::Ok, String::new()),
                Err(status) => (status.code(), status.message().to_owned()),
            };
            let case = format!("{path} {headers:?}");
            assert_eq!(got, code, "{case}: {text}");
            assert!(text.contains(message), "{case}: {text}");
            figures.cases.push((case, format!("{got:?} {text}")));
        }
    })
    .await;
    server.shutdown();
    let text = String::from_utf8(audit.0.lock().unwrap().clone()).expect("UTF-8 audit lines");
    figures.audit_lines = text.lines().map(str::to_owned).collect();
    // The refusals under audited rules, in order: the ALLOW filter's on the default
    // route and the client-2 override's (an override brings its own audit options;
    // the other-path override and the DENY filter audit nothing).
    let logged: Vec<(String, String, String, bool)> = figures
        .audit_lines
        .iter()
        .map(|line| {
            let json: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
            let log = &json["grpc_audit_log"];
            assert!(
                log["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')),
                "{line}"
            );
            (
                log["rpc_method"].as_str().unwrap_or_default().to_owned(),
                log["principal"].as_str().unwrap_or_default().to_owned(),
                log["policy_name"].as_str().unwrap_or_default().to_owned(),
                log["authorized"].as_bool().unwrap_or(true),
            )
        })
        .collect();
    let refusal = |path: &str| {
        (
            path.to_owned(),
            CLIENT_1.to_owned(),
            "allow".to_owned(),
            false,
        )
    };
    assert_eq!(logged, [refusal(OTHER_PATH), refusal(ECHO_PATH)]);
    figures
}
