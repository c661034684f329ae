//! Decoding a valid `RouteConfiguration` one route at a time. Decoding the whole
//! message first holds every route as a full prost `Route` (a large struct) at once:
//! for a configuration of 10,000 routes that is tens of megabytes of fresh memory, and
//! faulting it in cost more than the decoding itself. Here each virtual host keeps its
//! routes as their encoded bytes, and each route is decoded into one reused message,
//! with the recursion depth it has inside the whole message, and validated at once.
//!
//! Only the success path is taken here: at the first decode or validation error the
//! caller decodes the whole message as before, so errors (and which of several is
//! reported) are unchanged.

use bytes::{Buf, BufMut, Bytes};
use prost::Message;
use prost::encoding::{DecodeContext, WireType};

use super::RouteConfigResource;
use super::decode::{
    assemble, parse_cluster_specifier_plugins, parse_route, parse_virtual_host_settings,
};
use crate::pb::envoy::config::route::v3 as route_pb;

/// `RouteConfiguration.virtual_hosts`.
const VIRTUAL_HOSTS: u32 = 2;
/// `VirtualHost.routes`.
const ROUTES: u32 = 3;

/// The configuration and its name, if `bytes` decode and validate without error.
pub(super) fn decode_valid(bytes: &[u8]) -> Option<(String, RouteConfigResource)> {
    // One copy of the whole configuration, so that each route kept encoded is a slice
    // of it: decoded from a `&[u8]`, each route was its own allocation and copy.
    let shallow = ShallowConfiguration::decode(Bytes::copy_from_slice(bytes)).ok()?;
    let config = &shallow.config;
    let plugins = parse_cluster_specifier_plugins(&config.cluster_specifier_plugins).ok()?;
    let mut virtual_hosts = Vec::with_capacity(shallow.virtual_hosts.len());
    let mut route = route_pb::Route::default();
    for shallow_host in &shallow.virtual_hosts {
        let mut host = parse_virtual_host_settings(&shallow_host.host).ok()?;
        host.routes.reserve(shallow_host.routes.len());
        for raw in &shallow_host.routes {
            route.clear();
            shallow_host.decode_route(raw, &mut route).ok()?;
            if let Some(parsed) = parse_route(&route, &plugins).ok()? {
                host.routes.push(parsed);
            }
        }
        virtual_hosts.push(host);
    }
    let name = shallow.config.name;
    Some((name.clone(), assemble(name, virtual_hosts, plugins)))
}

/// A `RouteConfiguration` whose virtual hosts are [`ShallowHost`]s (its own
/// `virtual_hosts` stays empty).
#[derive(Debug, Default)]
struct ShallowConfiguration {
    config: route_pb::RouteConfiguration,
    virtual_hosts: Vec<ShallowHost>,
}

/// A `VirtualHost` whose routes are kept encoded (its own `routes` stays empty), with
/// the decode context its routes would be decoded in.
#[derive(Debug, Default)]
struct ShallowHost {
    host: route_pb::VirtualHost,
    routes: Vec<Bytes>,
    context: Option<DecodeContext>,
}

impl ShallowHost {
    /// Decodes one of its routes as decoding the whole message would: the same
    /// length-delimited field, in the same context (so the same recursion limit).
    fn decode_route(
        &self,
        raw: &Bytes,
        route: &mut route_pb::Route,
    ) -> Result<(), prost::DecodeError> {
        let mut length = [0u8; 10];
        let mut free = &mut length[..];
        prost::encoding::encode_varint(raw.len() as u64, &mut free);
        let used = 10 - free.len();
        let mut field = (&length[..used]).chain(raw.clone());
        let context = self.context.clone().unwrap_or_default();
        prost::encoding::message::merge(WireType::LengthDelimited, route, &mut field, context)
    }
}

impl Message for ShallowConfiguration {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        self.config.encode_raw(buf);
        prost::encoding::message::encode_repeated(VIRTUAL_HOSTS, &self.virtual_hosts, buf);
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        if tag == VIRTUAL_HOSTS {
            prost::encoding::message::merge_repeated(wire_type, &mut self.virtual_hosts, buf, ctx)
        } else {
            self.config.merge_field(tag, wire_type, buf, ctx)
        }
    }

    fn encoded_len(&self) -> usize {
        self.config.encoded_len()
            + prost::encoding::message::encoded_len_repeated(VIRTUAL_HOSTS, &self.virtual_hosts)
    }

    fn clear(&mut self) {
        self.config.clear();
        self.virtual_hosts.clear();
    }
}

impl Message for ShallowHost {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        self.host.encode_raw(buf);
        prost::encoding::bytes::encode_repeated(ROUTES, &self.routes, buf);
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        if tag == ROUTES {
            self.context = Some(ctx.clone());
            prost::encoding::bytes::merge_repeated(wire_type, &mut self.routes, buf, ctx)
        } else {
            self.host.merge_field(tag, wire_type, buf, ctx)
        }
    }

    fn encoded_len(&self) -> usize {
        self.host.encoded_len() + prost::encoding::bytes::encoded_len_repeated(ROUTES, &self.routes)
    }

    fn clear(&mut self) {
        self.host.clear();
        self.routes.clear();
        self.context = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A configuration with two virtual hosts of a few routes each, one of them ignored
    /// (a query parameter matcher), one plugin left unused.
    fn configuration() -> route_pb::RouteConfiguration {
        use crate::pb::envoy::config::route::v3::route::Action;
        use crate::pb::envoy::config::route::v3::route_action::ClusterSpecifier;
        use crate::pb::envoy::config::route::v3::route_match::PathSpecifier;
        let route = |prefix: &str, cluster: &str| route_pb::Route {
            r#match: Some(route_pb::RouteMatch {
                path_specifier: Some(PathSpecifier::Prefix(prefix.to_owned())),
                ..Default::default()
            }),
            action: Some(Action::Route(Box::new(route_pb::RouteAction {
                cluster_specifier: Some(ClusterSpecifier::Cluster(cluster.to_owned())),
                ..Default::default()
            }))),
            ..Default::default()
        };
        let mut ignored = route("/q", "c");
        ignored
            .r#match
            .as_mut()
            .unwrap()
            .query_parameters
            .push(Default::default());
        route_pb::RouteConfiguration {
            name: "rc".to_owned(),
            virtual_hosts: vec![
                route_pb::VirtualHost {
                    name: "a".to_owned(),
                    domains: vec!["*.example.com".to_owned()],
                    routes: vec![route("/a", "ca"), ignored, route("/", "cb")],
                    ..Default::default()
                },
                route_pb::VirtualHost {
                    name: "b".to_owned(),
                    domains: vec!["*".to_owned()],
                    routes: vec![route("", "cc")],
                    ..Default::default()
                },
            ],
            ..Default::default()
        }
    }

    #[test]
    fn route_by_route_gives_what_the_whole_message_gives() {
        let bytes = configuration().encode_to_vec();
        let whole = super::super::decode::parse_route_configuration(
            &route_pb::RouteConfiguration::decode(&bytes[..]).unwrap(),
        )
        .unwrap();
        let (name, by_route) = decode_valid(&bytes).expect("a valid configuration");
        assert_eq!(name, "rc");
        assert_eq!(by_route, whole);
        assert_eq!(
            by_route.virtual_hosts[0].routes.len(),
            2,
            "one route ignored"
        );
    }

    #[test]
    fn an_invalid_configuration_is_left_to_the_whole_message_path() {
        let mut invalid = configuration();
        invalid.virtual_hosts[1].domains[0] = "a*b*".to_owned();
        assert!(decode_valid(&invalid.encode_to_vec()).is_none());
        let mut bytes = configuration().encode_to_vec();
        bytes.truncate(bytes.len() - 3);
        assert!(decode_valid(&bytes).is_none());
        assert!(super::super::decode(&bytes).is_err());
    }
}
