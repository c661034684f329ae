//! The sans-IO core of xds-proto: an xDS client as a deterministic state machine.
//!
//! The contract, in three rules:
//! 1. The core never reads the clock: time is an argument ([`time::Instant`]).
//! 2. The core never does I/O: transport events come in through
//!    [`XdsClient::handle_event`], and what to send goes out through
//!    [`XdsClient::poll_action`].
//! 3. The core never draws OS randomness: jitter comes from the seed given to
//!    [`XdsClient::new`].
//!
//! The drive loop, the same for every adapter:
//! 1. make one mutation: [`XdsClient::watch`], [`XdsClient::cancel_watch`],
//!    [`XdsClient::handle_event`] or [`XdsClient::handle_timeout`];
//! 2. drain [`XdsClient::poll_action`] until it returns `None`;
//! 3. sleep until [`XdsClient::poll_timeout`].

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod backoff;
pub mod bootstrap;
pub mod client;
pub mod dependency;
pub mod lb;
pub mod lrs;
pub mod metrics;
pub mod names;
pub mod pool;
pub mod resource;
pub mod security;
pub mod selector;
pub mod time;

pub use bootstrap::{ApiType, Bootstrap};
pub use client::{
    Action, AdsRequest, Code, DeltaRequest, ErrorKind, Event, Notification, ResourceSnapshot,
    ResourceStatusKind, ServerId, Status, StreamId, WatchChecker, WatchError, WatchEvent,
    WatcherId, XdsClient, XdsClientConfig, XdsError,
};
pub use resource::{Cds, DecodeError, Eds, Lds, Rds, ResourceValue, XdsResourceType};
pub use time::Instant;

/// The `bytes` crate, whose `Bytes` carries responses into the core.
pub use bytes;
/// The `prost` crate, whose messages the core's `pb` types are.
pub use prost;

/// The hash map the core uses: foldhash with a fixed seed. Deterministic (the same
/// inputs give the same iteration order on every run) and free of OS randomness, unlike
/// `std`'s `RandomState`; fast on the short string keys of resource names.
pub(crate) type DetHashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::FixedState>;

/// Prost types generated from the vendored Envoy/xDS protos (see `proto/README.md`).
pub mod pb {
    #![allow(missing_docs, clippy::all, rustdoc::all)]
    include!(concat!(env!("OUT_DIR"), "/_includes.rs"));
}

/// The README's drive-loop example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
