//! Where a server's audited RBAC decisions go (gRFC A59): the core decides when and
//! builds the event; an [`AuditSink`] writes it. The default, [`StdoutAuditLogger`],
//! is A59's stdout logger: [`AuditEvent::stdout_line`] with this process's clock's
//! RFC 3339 time, one line per event. Tests and applications inject their own sink
//! (or the stdout logger over another writer) with
//! [`XdsServerBuilder::audit_logger`](super::XdsServerBuilder::audit_logger).

use std::io::Write;
use std::sync::Mutex;

use xds_proto_core::filter::rbac::{AuditEvent, AuditLogger, AuditLoggerConfig};

/// Receives every audited RBAC decision of a server, with the configured logger it is
/// for. Called on the RPC's path: it must not block for long (A59).
pub trait AuditSink: Send + Sync + 'static {
    /// Logs `event` as the configured logger `config` says.
    fn log(&self, config: &AuditLoggerConfig, event: &AuditEvent<'_>);
}

/// A59's stdout audit logger: each event as one JSON line
/// ([`AuditEvent::stdout_line`]) stamped with the current UTC time in RFC 3339.
pub struct StdoutAuditLogger {
    out: Mutex<Box<dyn Write + Send>>,
}

impl StdoutAuditLogger {
    /// Writes to the process's stdout.
    pub fn stdout() -> StdoutAuditLogger {
        StdoutAuditLogger::to_writer(std::io::stdout())
    }

    /// Writes the same lines to `out` (for tests, or to redirect the log).
    pub fn to_writer(out: impl Write + Send + 'static) -> StdoutAuditLogger {
        StdoutAuditLogger {
            out: Mutex::new(Box::new(out)),
        }
    }
}

impl AuditSink for StdoutAuditLogger {
    fn log(&self, config: &AuditLoggerConfig, event: &AuditEvent<'_>) {
        match config {
            AuditLoggerConfig::Stdout { .. } => {
                let mut line = event.stdout_line(&rfc3339_now());
                line.push('\n');
                let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
                // A lost audit line must not fail the RPC.
                let _ = out.write_all(line.as_bytes()).and_then(|()| out.flush());
            }
            other => tracing::debug!(?other, "no writer for this audit logger type"),
        }
    }
}

/// The current UTC time as RFC 3339 (`2026-11-27T10:56:00.123456789Z`).
fn rfc3339_now() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// The core's per-RPC logger view of a sink.
pub(crate) struct SinkLogger<'a>(pub(crate) &'a dyn AuditSink);

impl AuditLogger for SinkLogger<'_> {
    fn log(&mut self, config: &AuditLoggerConfig, event: &AuditEvent<'_>) {
        self.0.log(config, event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_stdout_logger_writes_one_json_line_stamped_in_rfc_3339() {
        let buf = Shared::default();
        let logger = StdoutAuditLogger::to_writer(buf.clone());
        let event = AuditEvent {
            policy_name: "authz",
            matched_rule: "deny-all",
            principal: "spiffe://example.com/client",
            rpc_method: "/pkg.Svc/Get",
            authorized: false,
        };
        let config = AuditLoggerConfig::Stdout { name: "out".into() };
        logger.log(&config, &event);
        logger.log(&config, &event);
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        let json: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        let log = &json["grpc_audit_log"];
        assert_eq!(log["rpc_method"], "/pkg.Svc/Get");
        assert_eq!(log["principal"], "spiffe://example.com/client");
        assert_eq!(log["matched_rule"], "deny-all");
        assert_eq!(log["authorized"], false);
        let stamp = log["timestamp"].as_str().unwrap();
        let parsed =
            time::OffsetDateTime::parse(stamp, &time::format_description::well_known::Rfc3339)
                .unwrap();
        let age = time::OffsetDateTime::now_utc() - parsed;
        assert!(age.whole_seconds().abs() < 60, "{stamp}");
        assert!(stamp.ends_with('Z'), "{stamp}");
    }
}
