//! Serializes a parsed [`Bootstrap`] back to the JSON the parser reads, so properties
//! and fuzzers can check `parse(serialize(b)) == b`. Only what the parser keeps is
//! written: the chosen channel credentials, the recognised server features, the API type.

use serde_json::{Map, Value, json};
use xds_proto_core::Bootstrap;
use xds_proto_core::bootstrap::{ChannelCredentials, ServerConfig};

fn server(s: &ServerConfig) -> Value {
    let creds = match &s.channel_creds {
        ChannelCredentials::Insecure => json!({"type": "insecure"}),
        ChannelCredentials::GoogleDefault => json!({"type": "google_default"}),
        ChannelCredentials::Tls(tls) => {
            let mut config = Map::new();
            let files = [
                ("ca_certificate_file", &tls.ca_certificate_file),
                ("certificate_file", &tls.certificate_file),
                ("private_key_file", &tls.private_key_file),
            ];
            for (key, value) in files {
                if let Some(v) = value {
                    config.insert(key.to_string(), json!(v));
                }
            }
            if let Some(d) = tls.refresh_interval {
                config.insert(
                    "refresh_interval".to_string(),
                    json!(format!("{}.{:09}s", d.as_secs(), d.subsec_nanos())),
                );
            }
            json!({"type": "tls", "config": config})
        }
        other => panic!("the bootstrap generator does not know {other:?}"),
    };
    let f = s.server_features;
    let features: Vec<&str> = [
        (f.ignore_resource_deletion, "ignore_resource_deletion"),
        (f.fail_on_data_errors, "fail_on_data_errors"),
        (
            f.resource_timer_is_transient_error,
            "resource_timer_is_transient_error",
        ),
        (f.trusted_xds_server, "trusted_xds_server"),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect();
    let mut server =
        json!({"server_uri": s.server_uri, "channel_creds": [creds], "server_features": features});
    // The default is written only sometimes: absent and explicit must parse the same.
    if s.is_delta() || s.server_uri.len().is_multiple_of(2) {
        server["api_type"] = json!(s.api_type.as_str());
    }
    server
}

/// The JSON text of `b`.
pub fn to_json(b: &Bootstrap) -> String {
    let mut node = Map::new();
    node.insert("id".to_string(), json!(b.node.id));
    node.insert("cluster".to_string(), json!(b.node.cluster));
    if let Some(l) = &b.node.locality {
        node.insert(
            "locality".to_string(),
            json!({"region": l.region, "zone": l.zone, "sub_zone": l.sub_zone}),
        );
    }
    node.insert(
        "metadata".to_string(),
        Value::Object(b.node.metadata.clone()),
    );
    let authorities: Map<String, Value> = b
        .authorities
        .iter()
        .map(|(name, a)| {
            let servers: Vec<Value> = a.xds_servers.iter().map(server).collect();
            (
                name.clone(),
                json!({
                    "client_listener_resource_name_template": a.client_listener_resource_name_template,
                    "xds_servers": servers,
                }),
            )
        })
        .collect();
    let providers: Map<String, Value> = b
        .certificate_providers
        .iter()
        .map(|(name, p)| (name.to_string(), p.to_json()))
        .collect();
    let mut root = Map::new();
    root.insert(
        "xds_servers".to_string(),
        Value::Array(b.xds_servers.iter().map(server).collect()),
    );
    root.insert("node".to_string(), Value::Object(node));
    root.insert("authorities".to_string(), Value::Object(authorities));
    root.insert(
        "client_default_listener_resource_name_template".to_string(),
        json!(b.client_default_listener_resource_name_template),
    );
    if let Some(t) = &b.server_listener_resource_name_template {
        root.insert(
            "server_listener_resource_name_template".to_string(),
            json!(t),
        );
    }
    root.insert(
        "certificate_providers".to_string(),
        Value::Object(providers),
    );
    Value::Object(root).to_string()
}
