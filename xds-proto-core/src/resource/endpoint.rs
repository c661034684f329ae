//! EDS: decoding and validating `envoy.config.endpoint.v3.ClusterLoadAssignment` into a
//! compact [`EndpointsResource`], following gRPC's rules (gRFCs A27, A52, A61).
//!
//! The module owns the endpoint types: priorities (contiguous from 0), weighted
//! localities, endpoints with their addresses (IP literals; A61 additional addresses
//! included), health status and weight, and the drop-overload policy. It also owns the
//! `envoy.config.core.v3.Address` → [`SocketAddr`] conversion.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};

use prost::Message;

use super::DecodeError;
use super::route::{FieldError, fraction_per_million};
use crate::pb::envoy::config::core::v3 as core_pb;
use crate::pb::envoy::config::endpoint::v3 as endpoint_pb;

/// A validated `ClusterLoadAssignment`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointsResource {
    /// The resource name (`cluster_name`).
    pub cluster_name: String,
    /// The priorities, index = priority (0 is the highest). Never has gaps; may be empty.
    pub priorities: Vec<Priority>,
    /// `policy.drop_overloads`, in order.
    pub drop_overloads: Vec<DropOverload>,
}

/// The localities of one priority.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Priority {
    /// The localities, in the order received; never empty, distinct, and their weights
    /// sum to at most `u32::MAX`.
    pub localities: Vec<LocalityEndpoints>,
}

/// A locality and its endpoints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalityEndpoints {
    /// The locality's identity.
    pub locality: Locality,
    /// `load_balancing_weight` (non-zero: localities without weight are dropped).
    pub weight: u32,
    /// The endpoints, in order (endpoints with an unknown health status value are
    /// dropped).
    pub endpoints: Vec<Endpoint>,
}

/// A locality's identity.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Locality {
    /// Region.
    pub region: String,
    /// Zone.
    pub zone: String,
    /// Sub-zone.
    pub sub_zone: String,
}

/// One endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The primary address.
    pub address: SocketAddr,
    /// `additional_addresses` (A61 dual-stack), in order.
    pub additional_addresses: Vec<SocketAddr>,
    /// The health status the control plane reported.
    pub health_status: HealthStatus,
    /// `load_balancing_weight` (default 1, never 0).
    pub weight: u32,
    /// `endpoint.hostname` (may be empty).
    pub hostname: String,
}

/// An endpoint's health status (`envoy.config.core.v3.HealthStatus`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HealthStatus {
    /// `UNKNOWN`: usable.
    Unknown,
    /// `HEALTHY`: usable.
    Healthy,
    /// `UNHEALTHY`.
    Unhealthy,
    /// `DRAINING`.
    Draining,
    /// `TIMEOUT`.
    Timeout,
    /// `DEGRADED`.
    Degraded,
}

impl HealthStatus {
    /// Whether gRPC sends new RPCs to an endpoint in this state (UNKNOWN or HEALTHY).
    pub fn is_usable(self) -> bool {
        matches!(self, HealthStatus::Unknown | HealthStatus::Healthy)
    }

    fn from_proto(value: i32) -> Option<HealthStatus> {
        Some(match core_pb::HealthStatus::try_from(value).ok()? {
            core_pb::HealthStatus::Unknown => HealthStatus::Unknown,
            core_pb::HealthStatus::Healthy => HealthStatus::Healthy,
            core_pb::HealthStatus::Unhealthy => HealthStatus::Unhealthy,
            core_pb::HealthStatus::Draining => HealthStatus::Draining,
            core_pb::HealthStatus::Timeout => HealthStatus::Timeout,
            core_pb::HealthStatus::Degraded => HealthStatus::Degraded,
        })
    }
}

/// A drop-overload category.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DropOverload {
    /// The category (non-empty).
    pub category: String,
    /// The drop rate in parts per million (at most 1,000,000).
    pub drop_per_million: u32,
}

/// Decodes and validates one serialized `ClusterLoadAssignment`.
pub fn decode(bytes: &[u8]) -> Result<(String, EndpointsResource), DecodeError> {
    let cla = endpoint_pb::ClusterLoadAssignment::decode(bytes).map_err(|e| {
        DecodeError::unnamed(format!("failed to decode ClusterLoadAssignment: {e}"))
    })?;
    let value =
        parse_cluster_load_assignment(&cla).map_err(|e| e.into_decode_error(&cla.cluster_name))?;
    Ok((cla.cluster_name, value))
}

fn parse_cluster_load_assignment(
    cla: &endpoint_pb::ClusterLoadAssignment,
) -> Result<EndpointsResource, FieldError> {
    // Localities by priority; a map, so that a huge priority value costs nothing.
    let mut by_priority: BTreeMap<u32, Vec<LocalityEndpoints>> = BTreeMap::new();
    let mut addresses = BTreeSet::new();
    for (i, lle) in cla.endpoints.iter().enumerate() {
        let at = |e: FieldError| e.at_index("endpoints", i);
        let Some(parsed) = parse_locality(lle, &mut addresses).map_err(at)? else {
            continue;
        };
        let localities = by_priority.entry(lle.priority).or_default();
        if localities.iter().any(|l| l.locality == parsed.locality) {
            let l = &parsed.locality;
            return Err(at(FieldError::new(
                "locality",
                format!(
                    "duplicate locality {{region={:?}, zone={:?}, sub_zone={:?}}} in priority {}",
                    l.region, l.zone, l.sub_zone, lle.priority
                ),
            )));
        }
        localities.push(parsed);
    }
    let mut priorities = Vec::with_capacity(by_priority.len());
    for (expected, (priority, localities)) in by_priority.into_iter().enumerate() {
        if usize::try_from(priority).ok() != Some(expected) {
            return Err(FieldError::new(
                "endpoints",
                format!(
                    "priorities are not contiguous: priority {expected} is missing but \
                     priority {priority} is set"
                ),
            ));
        }
        let total = localities
            .iter()
            .fold(0u64, |sum, l| sum.saturating_add(u64::from(l.weight)));
        if total > u64::from(u32::MAX) {
            return Err(FieldError::new(
                "endpoints",
                format!(
                    "sum of locality weights for priority {priority} ({total}) exceeds {}",
                    u32::MAX
                ),
            ));
        }
        priorities.push(Priority { localities });
    }
    let mut drop_overloads = Vec::new();
    if let Some(policy) = &cla.policy {
        for (i, drop) in policy.drop_overloads.iter().enumerate() {
            drop_overloads.push(
                parse_drop_overload(drop).map_err(|e| e.at_index("policy.drop_overloads", i))?,
            );
        }
    }
    Ok(EndpointsResource {
        cluster_name: cla.cluster_name.clone(),
        priorities,
        drop_overloads,
    })
}

/// Validates one locality; `Ok(None)` for a locality without weight (gRPC ignores it).
fn parse_locality(
    lle: &endpoint_pb::LocalityLbEndpoints,
    addresses: &mut BTreeSet<SocketAddr>,
) -> Result<Option<LocalityEndpoints>, FieldError> {
    let weight = lle.load_balancing_weight.as_ref().map_or(0, |w| w.value);
    if weight == 0 {
        return Ok(None);
    }
    let Some(locality) = &lle.locality else {
        return Err(FieldError::new("locality", "field not present"));
    };
    let mut endpoints = Vec::with_capacity(lle.lb_endpoints.len());
    for (i, lb_endpoint) in lle.lb_endpoints.iter().enumerate() {
        let at = |e: FieldError| e.at_index("lb_endpoints", i);
        let Some(endpoint) = parse_lb_endpoint(lb_endpoint).map_err(at)? else {
            continue;
        };
        for address in std::iter::once(&endpoint.address).chain(&endpoint.additional_addresses) {
            if !addresses.insert(*address) {
                return Err(at(FieldError::new(
                    "",
                    format!("duplicate endpoint address {address}"),
                )));
            }
        }
        endpoints.push(endpoint);
    }
    Ok(Some(LocalityEndpoints {
        locality: Locality {
            region: locality.region.clone(),
            zone: locality.zone.clone(),
            sub_zone: locality.sub_zone.clone(),
        },
        weight,
        endpoints,
    }))
}

/// Validates one endpoint; `Ok(None)` for an unknown health status value (skipped).
fn parse_lb_endpoint(lb: &endpoint_pb::LbEndpoint) -> Result<Option<Endpoint>, FieldError> {
    use endpoint_pb::lb_endpoint::HostIdentifier;
    let Some(health_status) = HealthStatus::from_proto(lb.health_status) else {
        return Ok(None);
    };
    let weight = lb.load_balancing_weight.as_ref().map_or(1, |w| w.value);
    if weight == 0 {
        return Err(FieldError::new(
            "load_balancing_weight",
            "must be greater than 0",
        ));
    }
    let endpoint = match &lb.host_identifier {
        Some(HostIdentifier::Endpoint(endpoint)) => endpoint,
        Some(HostIdentifier::EndpointName(_)) => {
            return Err(FieldError::new("endpoint_name", "not supported"));
        }
        None => return Err(FieldError::new("endpoint", "field not present")),
    };
    let address = socket_addr(endpoint.address.as_ref()).map_err(|e| e.at("endpoint.address"))?;
    let mut additional_addresses = Vec::with_capacity(endpoint.additional_addresses.len());
    for (i, additional) in endpoint.additional_addresses.iter().enumerate() {
        additional_addresses.push(
            socket_addr(additional.address.as_ref())
                .map_err(|e| e.at(format_args!("endpoint.additional_addresses[{i}].address")))?,
        );
    }
    Ok(Some(Endpoint {
        address,
        additional_addresses,
        health_status,
        weight,
        hostname: endpoint.hostname.clone(),
    }))
}

fn parse_drop_overload(
    drop: &endpoint_pb::cluster_load_assignment::policy::DropOverload,
) -> Result<DropOverload, FieldError> {
    if drop.category.is_empty() {
        return Err(FieldError::new("category", "must be non-empty"));
    }
    let Some(percentage) = &drop.drop_percentage else {
        return Err(FieldError::new("drop_percentage", "field not present"));
    };
    Ok(DropOverload {
        category: drop.category.clone(),
        drop_per_million: fraction_per_million(percentage).map_err(|e| e.at("drop_percentage"))?,
    })
}

/// Converts an `Address` that must be a `socket_address` with an IP literal and a
/// `port_value` of at most 65535. Error paths are relative to the `Address`.
pub(super) fn socket_addr(address: Option<&core_pb::Address>) -> Result<SocketAddr, FieldError> {
    use core_pb::address::Address;
    use core_pb::socket_address::PortSpecifier;
    let Some(address) = address else {
        return Err(FieldError::new("", "field not present"));
    };
    let Some(Address::SocketAddress(sa)) = &address.address else {
        return Err(FieldError::new("socket_address", "field not present"));
    };
    let port = match &sa.port_specifier {
        Some(PortSpecifier::PortValue(port)) => *port,
        Some(PortSpecifier::NamedPort(_)) => {
            return Err(FieldError::new(
                "socket_address.named_port",
                "not supported (use port_value)",
            ));
        }
        None => {
            return Err(FieldError::new(
                "socket_address.port_value",
                "field not present",
            ));
        }
    };
    let port = u16::try_from(port).map_err(|_| {
        FieldError::new("socket_address.port_value", format!("invalid port {port}"))
    })?;
    let ip: IpAddr = sa.address.parse().map_err(|_| {
        FieldError::new(
            "socket_address.address",
            format!("{:?} is not an IP address", sa.address),
        )
    })?;
    Ok(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::envoy::r#type::v3 as type_pb;
    use crate::pb::google::protobuf as pbuf;
    use core_pb::socket_address::PortSpecifier;
    use endpoint_pb::cluster_load_assignment::{Policy, policy::DropOverload as DropPb};

    fn address(host: &str, port: Option<PortSpecifier>) -> core_pb::Address {
        core_pb::Address {
            address: Some(core_pb::address::Address::SocketAddress(
                core_pb::SocketAddress {
                    address: host.to_owned(),
                    port_specifier: port,
                    ..Default::default()
                },
            )),
        }
    }

    fn lb_endpoint(host: &str, port: u32) -> endpoint_pb::LbEndpoint {
        endpoint_pb::LbEndpoint {
            host_identifier: Some(endpoint_pb::lb_endpoint::HostIdentifier::Endpoint(
                endpoint_pb::Endpoint {
                    address: Some(address(host, Some(PortSpecifier::PortValue(port)))),
                    ..Default::default()
                },
            )),
            ..Default::default()
        }
    }

    fn locality(
        zone: &str,
        weight: Option<u32>,
        priority: u32,
        endpoints: Vec<endpoint_pb::LbEndpoint>,
    ) -> endpoint_pb::LocalityLbEndpoints {
        endpoint_pb::LocalityLbEndpoints {
            locality: Some(core_pb::Locality {
                region: "r".to_owned(),
                zone: zone.to_owned(),
                sub_zone: String::new(),
            }),
            lb_endpoints: endpoints,
            load_balancing_weight: weight.map(|value| pbuf::UInt32Value { value }),
            priority,
            ..Default::default()
        }
    }

    fn cla(endpoints: Vec<endpoint_pb::LocalityLbEndpoints>) -> endpoint_pb::ClusterLoadAssignment {
        endpoint_pb::ClusterLoadAssignment {
            cluster_name: "eds".to_owned(),
            endpoints,
            ..Default::default()
        }
    }

    fn decode_cla(
        c: &endpoint_pb::ClusterLoadAssignment,
    ) -> Result<EndpointsResource, DecodeError> {
        decode(&c.encode_to_vec()).map(|(name, value)| {
            assert_eq!(name, c.cluster_name);
            value
        })
    }

    fn err(c: &endpoint_pb::ClusterLoadAssignment) -> String {
        let e = decode_cla(c).expect_err("expected an error");
        assert_eq!(e.name.as_deref(), Some("eds"));
        e.message
    }

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn full_assignment() {
        let mut ep = lb_endpoint("10.0.0.1", 80);
        ep.health_status = core_pb::HealthStatus::Draining as i32;
        ep.load_balancing_weight = Some(pbuf::UInt32Value { value: 7 });
        if let Some(endpoint_pb::lb_endpoint::HostIdentifier::Endpoint(e)) = &mut ep.host_identifier
        {
            e.hostname = "host-1".to_owned();
            e.additional_addresses = vec![endpoint_pb::endpoint::AdditionalAddress {
                address: Some(address("::1", Some(PortSpecifier::PortValue(80)))),
            }];
        }
        let mut c = cla(vec![
            locality("z1", Some(2), 1, vec![lb_endpoint("10.0.0.2", 81)]),
            locality("z0", Some(3), 0, vec![ep]),
            locality("skipped", None, 0, vec![lb_endpoint("10.0.0.9", 1)]),
            locality("zero", Some(0), 5, vec![]),
        ]);
        c.policy = Some(Policy {
            drop_overloads: vec![DropPb {
                category: "lb".to_owned(),
                drop_percentage: Some(type_pb::FractionalPercent {
                    numerator: 3,
                    denominator: type_pb::fractional_percent::DenominatorType::Hundred as i32,
                }),
            }],
            ..Default::default()
        });
        let loc = |zone: &str| Locality {
            region: "r".to_owned(),
            zone: zone.to_owned(),
            sub_zone: String::new(),
        };
        assert_eq!(
            decode_cla(&c).unwrap(),
            EndpointsResource {
                cluster_name: "eds".to_owned(),
                priorities: vec![
                    Priority {
                        localities: vec![LocalityEndpoints {
                            locality: loc("z0"),
                            weight: 3,
                            endpoints: vec![Endpoint {
                                address: addr("10.0.0.1:80"),
                                additional_addresses: vec![addr("[::1]:80")],
                                health_status: HealthStatus::Draining,
                                weight: 7,
                                hostname: "host-1".to_owned(),
                            }],
                        }],
                    },
                    Priority {
                        localities: vec![LocalityEndpoints {
                            locality: loc("z1"),
                            weight: 2,
                            endpoints: vec![Endpoint {
                                address: addr("10.0.0.2:81"),
                                additional_addresses: vec![],
                                health_status: HealthStatus::Unknown,
                                weight: 1,
                                hostname: String::new(),
                            }],
                        }],
                    },
                ],
                drop_overloads: vec![DropOverload {
                    category: "lb".to_owned(),
                    drop_per_million: 30_000,
                }],
            }
        );
    }

    #[test]
    fn mutated_bytes_never_panic() {
        let c = cla(vec![
            locality("a", Some(1), 0, vec![lb_endpoint("10.0.0.1", 80)]),
            locality("b", Some(2), 1, vec![lb_endpoint("::1", 443)]),
        ]);
        crate::resource::route::for_each_mutation(&c.encode_to_vec(), |b| {
            let _ = decode(b);
        });
    }

    #[test]
    fn garbage_and_truncated_bytes_are_unnamed_errors() {
        let e = decode(&[0x12, 0x05, 0x01]).unwrap_err();
        assert_eq!(e.name, None);
        assert!(
            e.message
                .starts_with("failed to decode ClusterLoadAssignment: "),
            "{e}"
        );
        let full = cla(vec![locality(
            "z",
            Some(1),
            0,
            vec![lb_endpoint("10.0.0.1", 80)],
        )])
        .encode_to_vec();
        for len in 0..full.len() {
            if let Err(e) = decode(&full[..len]) {
                assert!(matches!(e.name.as_deref(), None | Some("" | "eds")), "{e}");
            }
        }
    }

    #[test]
    fn empty_assignment_is_valid() {
        let out = decode_cla(&cla(vec![])).unwrap();
        assert!(out.priorities.is_empty());
    }

    #[test]
    fn health_statuses() {
        use core_pb::HealthStatus as H;
        for (proto, status) in [
            (H::Unknown, HealthStatus::Unknown),
            (H::Healthy, HealthStatus::Healthy),
            (H::Unhealthy, HealthStatus::Unhealthy),
            (H::Draining, HealthStatus::Draining),
            (H::Timeout, HealthStatus::Timeout),
            (H::Degraded, HealthStatus::Degraded),
        ] {
            let mut ep = lb_endpoint("10.0.0.1", 80);
            ep.health_status = proto as i32;
            let out = decode_cla(&cla(vec![locality("z", Some(1), 0, vec![ep])])).unwrap();
            assert_eq!(
                out.priorities[0].localities[0].endpoints[0].health_status,
                status
            );
        }
        assert!(HealthStatus::Healthy.is_usable());
        assert!(!HealthStatus::Draining.is_usable());
        // An unknown enum value: the endpoint is dropped.
        let mut ep = lb_endpoint("10.0.0.1", 80);
        ep.health_status = 42;
        let out = decode_cla(&cla(vec![locality("z", Some(1), 0, vec![ep])])).unwrap();
        assert!(out.priorities[0].localities[0].endpoints.is_empty());
    }

    #[test]
    fn locality_errors() {
        let mut no_locality = locality("z", Some(1), 0, vec![]);
        no_locality.locality = None;
        assert_eq!(
            err(&cla(vec![no_locality])),
            "endpoints[0].locality: field not present"
        );
        assert_eq!(
            err(&cla(vec![
                locality("a", Some(1), 0, vec![]),
                locality("a", Some(1), 0, vec![]),
            ])),
            "endpoints[1].locality: duplicate locality {region=\"r\", zone=\"a\", sub_zone=\"\"} \
             in priority 0"
        );
        // The same locality in two priorities is fine.
        assert!(
            decode_cla(&cla(vec![
                locality("a", Some(1), 0, vec![]),
                locality("a", Some(1), 1, vec![]),
            ]))
            .is_ok()
        );
    }

    #[test]
    fn priorities_must_be_contiguous() {
        assert_eq!(
            err(&cla(vec![
                locality("a", Some(1), 0, vec![]),
                locality("b", Some(1), 2, vec![]),
            ])),
            "endpoints: priorities are not contiguous: priority 1 is missing but priority 2 is \
             set"
        );
        assert_eq!(
            err(&cla(vec![locality("a", Some(1), u32::MAX, vec![])])),
            "endpoints: priorities are not contiguous: priority 0 is missing but priority \
             4294967295 is set"
        );
        // A gap left by a zero-weight locality counts as missing.
        assert_eq!(
            err(&cla(vec![
                locality("a", Some(0), 0, vec![]),
                locality("b", Some(1), 1, vec![]),
            ])),
            "endpoints: priorities are not contiguous: priority 0 is missing but priority 1 is \
             set"
        );
    }

    #[test]
    fn locality_weight_sum_must_fit_u32() {
        assert_eq!(
            err(&cla(vec![
                locality("a", Some(u32::MAX), 0, vec![]),
                locality("b", Some(1), 0, vec![]),
            ])),
            "endpoints: sum of locality weights for priority 0 (4294967296) exceeds 4294967295"
        );
        assert!(
            decode_cla(&cla(vec![
                locality("a", Some(u32::MAX), 0, vec![]),
                locality("b", Some(1), 1, vec![]),
            ]))
            .is_ok()
        );
    }

    #[test]
    fn endpoint_errors() {
        let p = "endpoints[0].lb_endpoints[0]";
        let with_addr = |a: Option<core_pb::Address>| endpoint_pb::LbEndpoint {
            host_identifier: Some(endpoint_pb::lb_endpoint::HostIdentifier::Endpoint(
                endpoint_pb::Endpoint {
                    address: a,
                    ..Default::default()
                },
            )),
            ..Default::default()
        };
        let mut zero_weight = lb_endpoint("10.0.0.1", 80);
        zero_weight.load_balancing_weight = Some(pbuf::UInt32Value { value: 0 });
        let cases = [
            (
                zero_weight,
                format!("{p}.load_balancing_weight: must be greater than 0"),
            ),
            (
                endpoint_pb::LbEndpoint::default(),
                format!("{p}.endpoint: field not present"),
            ),
            (
                endpoint_pb::LbEndpoint {
                    host_identifier: Some(endpoint_pb::lb_endpoint::HostIdentifier::EndpointName(
                        "n".to_owned(),
                    )),
                    ..Default::default()
                },
                format!("{p}.endpoint_name: not supported"),
            ),
            (
                with_addr(None),
                format!("{p}.endpoint.address: field not present"),
            ),
            (
                with_addr(Some(core_pb::Address {
                    address: Some(core_pb::address::Address::Pipe(Default::default())),
                })),
                format!("{p}.endpoint.address.socket_address: field not present"),
            ),
            (
                with_addr(Some(address("10.0.0.1", None))),
                format!("{p}.endpoint.address.socket_address.port_value: field not present"),
            ),
            (
                with_addr(Some(address(
                    "10.0.0.1",
                    Some(PortSpecifier::NamedPort("http".to_owned())),
                ))),
                format!(
                    "{p}.endpoint.address.socket_address.named_port: not supported (use \
                     port_value)"
                ),
            ),
            (
                lb_endpoint("10.0.0.1", 65_536),
                format!("{p}.endpoint.address.socket_address.port_value: invalid port 65536"),
            ),
            (
                lb_endpoint("example.com", 80),
                format!(
                    "{p}.endpoint.address.socket_address.address: \"example.com\" is not an IP \
                     address"
                ),
            ),
        ];
        for (ep, msg) in cases {
            assert_eq!(err(&cla(vec![locality("z", Some(1), 0, vec![ep])])), msg);
        }
        let mut bad_additional = lb_endpoint("10.0.0.1", 80);
        if let Some(endpoint_pb::lb_endpoint::HostIdentifier::Endpoint(e)) =
            &mut bad_additional.host_identifier
        {
            e.additional_addresses =
                vec![endpoint_pb::endpoint::AdditionalAddress { address: None }];
        }
        assert_eq!(
            err(&cla(vec![locality("z", Some(1), 0, vec![bad_additional])])),
            format!("{p}.endpoint.additional_addresses[0].address: field not present")
        );
    }

    #[test]
    fn duplicate_addresses_are_rejected() {
        assert_eq!(
            err(&cla(vec![
                locality("a", Some(1), 0, vec![lb_endpoint("10.0.0.1", 80)]),
                locality("b", Some(1), 1, vec![lb_endpoint("10.0.0.1", 80)]),
            ])),
            "endpoints[1].lb_endpoints[0]: duplicate endpoint address 10.0.0.1:80"
        );
        let mut ep = lb_endpoint("10.0.0.1", 80);
        if let Some(endpoint_pb::lb_endpoint::HostIdentifier::Endpoint(e)) = &mut ep.host_identifier
        {
            e.additional_addresses = vec![endpoint_pb::endpoint::AdditionalAddress {
                address: Some(address("10.0.0.1", Some(PortSpecifier::PortValue(80)))),
            }];
        }
        assert_eq!(
            err(&cla(vec![locality("a", Some(1), 0, vec![ep])])),
            "endpoints[0].lb_endpoints[0]: duplicate endpoint address 10.0.0.1:80"
        );
    }

    #[test]
    fn drop_overloads() {
        use type_pb::fractional_percent::DenominatorType as D;
        let with_drops = |drops: Vec<DropPb>| endpoint_pb::ClusterLoadAssignment {
            policy: Some(Policy {
                drop_overloads: drops,
                ..Default::default()
            }),
            ..cla(vec![])
        };
        let drop = |category: &str, numerator: u32, denominator: i32| DropPb {
            category: category.to_owned(),
            drop_percentage: Some(type_pb::FractionalPercent {
                numerator,
                denominator,
            }),
        };
        let out = decode_cla(&with_drops(vec![
            drop("a", 5, D::TenThousand as i32),
            drop("b", 2_000_000, D::Million as i32),
            drop("c", 150, D::Hundred as i32),
        ]))
        .unwrap();
        let rates: Vec<(&str, u32)> = out
            .drop_overloads
            .iter()
            .map(|d| (d.category.as_str(), d.drop_per_million))
            .collect();
        assert_eq!(rates, vec![("a", 500), ("b", 1_000_000), ("c", 1_000_000)]);

        assert_eq!(
            err(&with_drops(vec![drop("", 1, 0)])),
            "policy.drop_overloads[0].category: must be non-empty"
        );
        assert_eq!(
            err(&with_drops(vec![DropPb {
                category: "x".to_owned(),
                drop_percentage: None,
            }])),
            "policy.drop_overloads[0].drop_percentage: field not present"
        );
        assert_eq!(
            err(&with_drops(vec![drop("ok", 1, 0), drop("x", 1, 3)])),
            "policy.drop_overloads[1].drop_percentage.denominator: unknown denominator type 3"
        );
    }
}
