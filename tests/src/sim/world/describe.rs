//! How the simulator writes its trace: short names for type URLs, and one line for
//! each request, response, action and event. Also the bootstrap JSON of one server.

use super::*;

pub(super) fn short(type_url: &str) -> &str {
    type_url.rsplit('.').next().unwrap_or(type_url)
}

pub(super) fn type_path(type_url: &str) -> &str {
    type_url.rsplit('/').next().unwrap_or(type_url)
}

pub(super) fn prefix(type_url: &str) -> &'static str {
    match short(type_url) {
        "Listener" => "l",
        "RouteConfiguration" => "r",
        "Cluster" => "c",
        _ => "e",
    }
}

pub(super) fn server_json(uri: &str, f: Features, delta: bool) -> String {
    let mut features = Vec::new();
    if f.fail_on_data_errors {
        features.push("\"fail_on_data_errors\"");
    }
    if f.transient_timer {
        features.push("\"resource_timer_is_transient_error\"");
    }
    let api_type = if delta {
        "AGGREGATED_DELTA_GRPC"
    } else {
        "AGGREGATED_GRPC"
    };
    format!(
        r#"{{"server_uri": "{uri}", "channel_creds": [{{"type": "insecure"}}], "server_features": [{}], "api_type": "{api_type}"}}"#,
        features.join(", ")
    )
}

fn describe_request(r: &DiscoveryRequest) -> String {
    format!(
        "{} {:?} v={:?} n={:?}{}{}",
        short(&r.type_url),
        r.resource_names,
        r.version_info,
        r.response_nonce,
        if r.node.is_some() { " +node" } else { "" },
        r.error_detail
            .as_ref()
            .map(|e| format!(" NACK({})", e.message))
            .unwrap_or_default()
    )
}

fn describe_response(bytes: &Bytes) -> String {
    match DiscoveryResponse::decode(bytes.clone()) {
        Ok(r) => format!(
            "{} v={:?} n={:?} {} resource(s) {} error(s) [{} bytes]",
            short(&r.type_url),
            r.version_info,
            r.nonce,
            r.resources.len(),
            r.resource_errors.len(),
            bytes.len()
        ),
        Err(_) => format!("junk {bytes:?}"),
    }
}

pub(super) fn describe_action(a: &Action) -> String {
    match a {
        Action::StartStream {
            server,
            config,
            stream,
        } => {
            format!("StartStream {stream:?} {server:?} {}", config.server_uri)
        }
        Action::SendRequest { stream, request } => {
            format!(
                "SendRequest {stream:?} {}",
                describe_request(&request.to_proto())
            )
        }
        Action::Notify(n) => format!(
            "Notify {:?} {} {:?} {:?}",
            n.watcher,
            short(n.type_url),
            n.name,
            n.event
        ),
        other => format!("{other:?}"),
    }
}

pub(super) fn describe_event(e: &Event) -> String {
    match e {
        Event::ResponseReceived { stream, bytes } => {
            format!("Response {stream:?} {}", describe_response(bytes))
        }
        other => format!("{other:?}"),
    }
}
