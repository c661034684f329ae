//! An RBAC filter config (A41), built rule by rule or raw, through the core's parser,
//! then arbitrary requests through evaluate and authorize: no panic, accepted configs
//! within the nesting and rule bounds, decisions consistent with the action and the
//! audit condition.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| xds_proto_tests::sim::fuzz::rbac(data));
