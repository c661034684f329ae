//! A testing kit for code that embeds `xds-proto-core`: what the project's own tests,
//! benchmarks, loopback server and demo use, published so that an embedder does not
//! have to rebuild it (nor learn from NACKs which fields gRPC requires).
//!
//! It has three parts, all sans-IO like the core (no runtime, no clock, no sockets):
//! - [`resources`]: builders of Listener, RouteConfiguration, Cluster and
//!   ClusterLoadAssignment resources from the core's prost types, valid by default
//!   (each builder's documentation says which fields gRPC requires), deliberately
//!   invalid where a test needs a NACK, plus `Any` packing, the `Resource` wrapper, TP3
//!   resource errors and a large Istio-like mesh ([`resources::mesh`]);
//! - [`server`]: [`ManagementServer`](server::ManagementServer), a SotW management
//!   server model that answers the requests of its streams like a real control plane
//!   (one response per type per burst, versions, nonces) and injects faults;
//! - [`peer`]: [`Harness`](peer::Harness), a scripted ADS peer that drives one
//!   `XdsClient` over virtual time and asserts the exact requests it sends
//!   ([`Req`](peer::Req)) and the notifications its watchers get.
//!
//! A scripted exchange: the client subscribes to a cluster, the test answers with one,
//! and the client notifies its watcher and ACKs.
//!
//! ```
//! use xds_proto_core::{Cds, WatchEvent};
//! use xds_proto_testing::peer::{CDS, Harness, Req};
//! use xds_proto_testing::resources;
//!
//! let mut h = Harness::new();
//! let watcher = h.watch::<Cds>("backend");
//! // The first watch opens a stream whose first request carries the node.
//! let stream = h.connect_first(CDS, &["backend"]);
//! h.respond(stream, CDS, "1", "nonce-1", vec![resources::cluster("backend")]);
//! let notification = h.expect_notify();
//! assert_eq!(notification.watcher, watcher);
//! assert!(matches!(notification.event, WatchEvent::Changed(Ok(_))));
//! assert_eq!(h.expect_request(stream), Req::new(CDS, &["backend"], "1", "nonce-1"));
//! ```
//!
//! The same exchange with the management server answering instead of the test:
//!
//! ```
//! use xds_proto_core::pb::envoy::service::discovery::v3::DiscoveryRequest;
//! use xds_proto_testing::peer::CDS;
//! use xds_proto_testing::server::{ManagementServer, ServerPolicy, SimResource};
//!
//! let mut server = ManagementServer::new("xds.example:443", ServerPolicy::default());
//! server.set(CDS, "backend", SimResource::Valid(1));
//! server.open_stream(1);
//! let request = DiscoveryRequest {
//!     type_url: CDS.to_string(),
//!     resource_names: vec!["backend".to_string()],
//!     ..Default::default()
//! };
//! assert!(server.on_request(1, &request));
//! let responses = server.flush(1, |_| 0);
//! assert_eq!(responses[0].resources.len(), 1);
//! ```

#![warn(missing_docs)]

pub mod alloc;
pub mod peer;
pub mod resources;
pub mod server;
