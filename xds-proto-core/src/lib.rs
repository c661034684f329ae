//! The sans-IO core of xds-proto: the ADS protocol state machine.

pub mod bootstrap;
pub mod resource;
pub mod time;

/// Prost types generated from the vendored Envoy/xDS protos (see `proto/README.md`).
pub mod pb {
    #![allow(missing_docs, clippy::all, rustdoc::all)]
    include!(concat!(env!("OUT_DIR"), "/_includes.rs"));
}
