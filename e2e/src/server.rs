//! The go-control-plane server (interop/go-control-plane/scale): built by its script,
//! started on 127.0.0.1, asked for its counters, stopped when dropped.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// What the server counted since the last reading.
#[derive(Clone, Copy, Debug, Default)]
pub struct ServerStats {
    pub requests: u64,
    pub responses: u64,
    pub response_bytes: u64,
}

/// A running go-xds-scale process.
pub struct GoServer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    pub port: u16,
}

impl GoServer {
    /// Builds the server if needed (`server` overrides the binary) and starts it
    /// serving `clusters` clusters and endpoint sets.
    pub fn start(server: Option<PathBuf>, clusters: usize, ads: bool) -> GoServer {
        let binary = server.unwrap_or_else(build);
        let mut child = Command::new(&binary)
            .args(["-clusters", &clusters.to_string(), &format!("-ads={ads}")])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", binary.display()));
        let stdin = child.stdin.take().expect("piped stdin");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut line = String::new();
        stdout
            .read_line(&mut line)
            .expect("the server's first line");
        let port = line
            .strip_prefix("READY ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("expected READY <port>, got {line:?}"));
        GoServer {
            child,
            stdin,
            stdout,
            port,
        }
    }

    /// The counters since the last call (the server resets them).
    pub fn take_stats(&mut self) -> ServerStats {
        writeln!(self.stdin, "stats").expect("the server reads stdin");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("a STATS line");
        let mut stats = ServerStats::default();
        for field in line.trim().strip_prefix("STATS ").unwrap_or("").split(' ') {
            let Some((key, value)) = field.split_once('=') else {
                continue;
            };
            let value = value.parse().unwrap_or(0);
            match key {
                "requests" => stats.requests = value,
                "responses" => stats.responses = value,
                "response_bytes" => stats.response_bytes = value,
                _ => {}
            }
        }
        stats
    }
}

impl Drop for GoServer {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.child.wait();
    }
}

/// Runs interop/go-control-plane/scale/build.sh (a warm run takes a moment) and
/// returns the binary it names on its last line.
fn build() -> PathBuf {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../interop/go-control-plane/scale/build.sh"
    );
    let out = Command::new("bash")
        .arg(script)
        .stderr(Stdio::inherit())
        .output()
        .expect("running interop/go-control-plane/scale/build.sh");
    assert!(out.status.success(), "{script} failed");
    let stdout = String::from_utf8_lossy(&out.stdout);
    PathBuf::from(stdout.lines().last().expect("the binary's path").trim())
}
