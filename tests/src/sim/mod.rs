//! Deterministic simulation testing for the xDS client, in the manner of TigerBeetle's
//! VOPR and FoundationDB's simulator: clients, management servers and the network
//! between them run on virtual time from one `u64` seed, faults are drawn from the
//! seed, an invariant checker runs after every step, a faulty safety phase is followed
//! by a healed liveness phase that must converge, and a failure prints the one command
//! that replays it.
//!
//! The module owns:
//! - [`world`]: the simulated world and [`run`], one seed start to end;
//! - [`check`]: [`CheckedClient`], the invariant checker around one client (also used by
//!   the fuzz targets);
//! - [`verdict`]: the naive reference for ACK/NACK decisions the checker holds the
//!   client to;
//! - [`server`]: the sans-IO management server model (the testing kit's);
//! - [`rng`]: the seeded random stream;
//! - `keepalive`: the transport's HTTP/2 keepalive, as the adapters configure it;
//! - [`fuzz`]: the library side of the cargo-fuzz targets, so `cargo test` can replay
//!   their regression inputs;
//! - [`bootstrap_json`]: a bootstrap serializer for round-trip properties.

pub mod bootstrap_json;
pub mod check;
pub mod fuzz;
mod keepalive;
pub mod rng;
pub mod verdict;
pub mod world;

pub use xds_proto_testing::server;

pub use check::{CheckOptions, CheckedClient, Violation, WatcherState};
pub use world::{SimFailure, SimOptions, SimReport, SimStats, replay_command, run};
