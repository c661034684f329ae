//! Tests of the security module: SAN matching (A29's rules and a property against a
//! reference model), SNI (A101), certificate providers and the `file_watcher` state,
//! SPIFFE (A87).

mod file_watcher;
mod san;
mod san_property;
mod spiffe;

use crate::pb::envoy::r#type::matcher::v3 as matcher_pb;
use crate::resource::route::StringMatcher;

/// A `StringMatcher` decoded as a cluster's would be.
fn matcher(pattern: matcher_pb::string_matcher::MatchPattern, ignore_case: bool) -> StringMatcher {
    crate::resource::tls::san_matcher(&matcher_pb::StringMatcher {
        match_pattern: Some(pattern),
        ignore_case,
    })
    .expect("a valid matcher")
}

fn exact(value: &str) -> StringMatcher {
    StringMatcher::Exact {
        value: value.to_owned(),
        ignore_case: false,
    }
}

/// `s` in standard base64 (padded), for PEM and JWK test material.
fn base64(s: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in s.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A PEM section `label` holding `der`.
fn pem(label: &str, der: &[u8]) -> String {
    format!(
        "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
        base64(der)
    )
}

#[test]
fn the_test_base64_is_standard_base64() {
    assert_eq!(base64(b""), "");
    assert_eq!(base64(b"f"), "Zg==");
    assert_eq!(base64(b"fo"), "Zm8=");
    assert_eq!(base64(b"foo"), "Zm9v");
    assert_eq!(base64(b"foobar"), "Zm9vYmFy");
}
