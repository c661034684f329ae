//! The `decode_response` target's LRS part: the bytes as the `LoadStatsResponse` of a
//! client's LRS stream, bounded input. Whatever they say, the interval the client
//! takes is within its bounds, it keeps at most `MAX_REPORTED_CLUSTER_NAMES` names,
//! its next report is due within the longest interval, and its reports name only the
//! one cluster it has (when the server wants it).

use bytes::Bytes;
use xds_proto_core::Cds;
use xds_proto_core::client::{Action, Event};
use xds_proto_core::lrs::{
    DEFAULT_MIN_LOAD_REPORTING_INTERVAL, MAX_LOAD_REPORTING_INTERVAL, MAX_REPORTED_CLUSTER_NAMES,
    ReportingSettings,
};
use xds_proto_testing::resources::load_reporting_cluster;

use crate::{CDS, Harness};

/// Runs the bytes through the decoder and through a client's LRS stream; panics with
/// the broken rule.
pub(super) fn decode_load_stats_response(data: &[u8]) {
    let settings = ReportingSettings::decode(data, DEFAULT_MIN_LOAD_REPORTING_INTERVAL);
    if let Ok(s) = &settings {
        assert!(
            (DEFAULT_MIN_LOAD_REPORTING_INTERVAL..=MAX_LOAD_REPORTING_INTERVAL)
                .contains(&s.interval),
            "interval out of bounds: {:?}",
            s.interval
        );
        assert!(s.clusters.len() <= MAX_REPORTED_CLUSTER_NAMES);
        assert!(!s.send_all_clusters || s.clusters.is_empty());
    }
    let mut h = Harness::new();
    h.watch::<Cds>("c");
    let ads = h.connect_first(CDS, &["c"]);
    h.respond(ads, CDS, "1", "n1", vec![load_reporting_cluster("c", None)]);
    h.take();
    let stats = h.client.cluster_load_stats("c", None).expect("c is cached");
    h.collect_actions();
    let (lrs, _) = h.connect_lrs();
    let bytes = Bytes::copy_from_slice(data);
    h.event(Event::ResponseReceived { stream: lrs, bytes });
    let wants = settings.as_ref().is_ok_and(|s| s.wants("c"));
    for _ in 0..3 {
        let due = h.client.poll_timeout();
        let at = match (&settings, due) {
            (Ok(_), Some(at)) => at,
            (Ok(_), None) => panic!("a stream with settings has no report timer"),
            (Err(_), Some(at)) => panic!("an undecodable response armed a timer at {at:?}"),
            (Err(_), None) => return,
        };
        let wait = at.saturating_duration_since(h.now);
        assert!(
            wait <= MAX_LOAD_REPORTING_INTERVAL,
            "the next report is due in {wait:?}"
        );
        stats.drop_counter("x").add();
        h.advance(wait);
        for action in h.take() {
            match action {
                Action::SendLoadReport { stream, request } => {
                    assert_eq!(stream, lrs);
                    let names: Vec<_> = (request.cluster_stats.iter())
                        .map(|c| c.cluster_name.as_str())
                        .collect();
                    let expected: &[&str] = if wants { &["c"] } else { &[] };
                    assert_eq!(
                        names, expected,
                        "what the server asked for, and nothing else"
                    );
                    h.event(Event::RequestSent { stream });
                }
                other => panic!("unexpected action {other:?}"),
            }
        }
    }
}
