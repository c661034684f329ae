//! Decoding reports as backends send them, and as a hostile or broken one might.

use prost::Message;

use super::*;

fn encoded(report: orca_pb::OrcaLoadReport) -> Vec<u8> {
    report.encode_to_vec()
}

#[test]
fn a_report_round_trips() {
    let report = OrcaLoadReport {
        cpu_utilization: 0.5,
        mem_utilization: 0.25,
        application_utilization: 1.5,
        qps: 120.5,
        eps: 3.0,
        request_cost: BTreeMap::from([("db".to_owned(), 7.0)]),
        utilization: BTreeMap::from([("disk".to_owned(), 0.75)]),
        named_metrics: BTreeMap::from([("queue".to_owned(), -2.0)]),
    };
    assert_eq!(
        OrcaLoadReport::decode(&report.encode_to_vec()),
        Ok(report.clone())
    );
    // The qps goes out as `rps_fractional`, the field gRPC reads.
    assert_eq!(report.to_proto().rps_fractional, 120.5);
}

#[test]
fn an_empty_trailer_is_an_empty_report() {
    assert_eq!(OrcaLoadReport::decode(&[]), Ok(OrcaLoadReport::default()));
}

#[test]
fn bytes_that_are_no_report_are_refused() {
    for junk in [&b"\xff\xff\xff\xff"[..], b"\x0a", b"not a protobuf at all"] {
        let decoded = OrcaLoadReport::decode(junk);
        assert!(
            matches!(decoded, Err(OrcaError::Malformed(_))),
            "{junk:?}: {decoded:?}"
        );
    }
}

#[test]
fn scalars_out_of_range_read_as_unset() {
    let bytes = encoded(orca_pb::OrcaLoadReport {
        cpu_utilization: f64::NAN,
        mem_utilization: 1.5,
        application_utilization: -0.5,
        rps_fractional: f64::INFINITY,
        eps: f64::NEG_INFINITY,
        ..Default::default()
    });
    assert_eq!(
        OrcaLoadReport::decode(&bytes),
        Ok(OrcaLoadReport::default())
    );
    // Large but finite values are kept: utilization may exceed 1 (A51).
    let bytes = encoded(orca_pb::OrcaLoadReport {
        cpu_utilization: 1e300,
        rps_fractional: 1e300,
        mem_utilization: 1.0,
        ..Default::default()
    });
    let report = OrcaLoadReport::decode(&bytes).unwrap();
    assert_eq!(
        (report.cpu_utilization, report.qps, report.mem_utilization),
        (1e300, 1e300, 1.0)
    );
}

#[test]
fn map_entries_with_unusable_values_are_dropped() {
    let bytes = encoded(orca_pb::OrcaLoadReport {
        utilization: BTreeMap::from([
            ("ok".to_owned(), 0.5),
            ("above".to_owned(), 1.5),
            ("nan".to_owned(), f64::NAN),
        ]),
        named_metrics: BTreeMap::from([
            ("negative".to_owned(), -1.0),
            ("inf".to_owned(), f64::INFINITY),
            ("nan".to_owned(), f64::NAN),
        ]),
        request_cost: BTreeMap::from([("cost".to_owned(), f64::NEG_INFINITY)]),
        ..Default::default()
    });
    let report = OrcaLoadReport::decode(&bytes).unwrap();
    assert_eq!(report.utilization, BTreeMap::from([("ok".to_owned(), 0.5)]));
    // Named metrics are opaque (A64): any finite value stays.
    assert_eq!(
        report.named_metrics,
        BTreeMap::from([("negative".to_owned(), -1.0)])
    );
    assert!(report.request_cost.is_empty());
}

#[test]
fn a_million_named_metrics_are_refused_before_decoding() {
    let named_metrics = (0..1_000_000).map(|i| (format!("m{i}"), 1.0)).collect();
    let bytes = encoded(orca_pb::OrcaLoadReport {
        named_metrics,
        ..Default::default()
    });
    assert_eq!(
        OrcaLoadReport::decode(&bytes),
        Err(OrcaError::TooLarge(bytes.len()))
    );
}

#[test]
fn too_many_entries_within_the_size_limit_are_refused() {
    let named_metrics: BTreeMap<String, f64> = (0..MAX_MAP_ENTRIES + 1)
        .map(|i| (format!("{i}"), 1.0))
        .collect();
    let bytes = encoded(orca_pb::OrcaLoadReport {
        named_metrics,
        ..Default::default()
    });
    assert!(bytes.len() <= MAX_REPORT_BYTES);
    assert_eq!(
        OrcaLoadReport::decode(&bytes),
        Err(OrcaError::TooManyEntries {
            field: "named_metrics",
            count: MAX_MAP_ENTRIES + 1
        })
    );
    let at_limit: BTreeMap<String, f64> = (0..MAX_MAP_ENTRIES)
        .map(|i| (format!("{i}"), 1.0))
        .collect();
    let bytes = encoded(orca_pb::OrcaLoadReport {
        named_metrics: at_limit,
        ..Default::default()
    });
    assert_eq!(
        OrcaLoadReport::decode(&bytes).map(|r| r.named_metrics.len()),
        Ok(MAX_MAP_ENTRIES)
    );
}

#[test]
fn weighted_round_robin_prefers_application_utilization() {
    let mut report = OrcaLoadReport {
        cpu_utilization: 0.8,
        ..Default::default()
    };
    assert_eq!(report.wrr_utilization(), 0.8);
    report.application_utilization = 0.3;
    assert_eq!(report.wrr_utilization(), 0.3);
}

#[test]
fn the_oob_request_carries_the_interval() {
    let request = oob_request(Duration::from_millis(1500));
    let interval = request.report_interval.unwrap();
    assert_eq!((interval.seconds, interval.nanos), (1, 500_000_000));
    assert_eq!(
        requested_interval(&request),
        Some(Duration::from_millis(1500))
    );
    let huge = oob_request(Duration::MAX);
    assert_eq!(huge.report_interval.as_ref().unwrap().seconds, i64::MAX);
    assert!(requested_interval(&huge).is_some());
    // Unset, zero, negative or malformed: the server's minimum applies.
    for (seconds, nanos) in [(0, 0), (-1, 0), (1, -1), (1, 1_000_000_000)] {
        let mut request = oob_request(Duration::ZERO);
        request.report_interval = Some(crate::pb::google::protobuf::Duration { seconds, nanos });
        assert_eq!(requested_interval(&request), None, "{seconds} s {nanos} ns");
    }
    let mut request = oob_request(Duration::ZERO);
    request.report_interval = None;
    assert_eq!(requested_interval(&request), None);
}
