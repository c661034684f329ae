//! What both client children share: the command line the parent passes, the progress
//! of the watchers, the memory readings and the result line.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use xds_proto_testing::resources::mesh;

/// What a child watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The listener, every cluster and every endpoint set.
    Full,
    /// One cluster only: the baseline of a connected client holding one resource.
    Idle,
}

impl Mode {
    /// The command-line spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Full => "full",
            Mode::Idle => "idle",
        }
    }

    /// Parses the command-line spelling.
    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "full" => Some(Mode::Full),
            "idle" => Some(Mode::Idle),
            _ => None,
        }
    }
}

/// The workload of one child, as the parent passed it.
#[derive(Clone, Debug)]
pub struct ChildArgs {
    /// The loopback server, `127.0.0.1:PORT`.
    pub addr: String,
    /// The number of clusters (and endpoint sets) the server serves.
    pub clusters: usize,
    /// What to watch.
    pub mode: Mode,
    /// How long to wait for every watcher before giving up.
    pub timeout: Duration,
}

impl ChildArgs {
    /// The resources to watch: (listener?, cluster names, endpoint-set names).
    pub fn names(&self) -> (bool, Vec<String>, Vec<String>) {
        match self.mode {
            Mode::Full => {
                let names: Vec<String> = (0..self.clusters).map(mesh::cluster_name).collect();
                (true, names.clone(), names)
            }
            Mode::Idle => (false, vec![mesh::cluster_name(0)], Vec::new()),
        }
    }

    /// The number of watchers [`names`](Self::names) gives.
    pub fn watcher_count(&self) -> usize {
        let (listener, clusters, endpoints) = self.names();
        usize::from(listener) + clusters.len() + endpoints.len()
    }
}

/// How many watchers have settled: received their resource, or failed first.
#[derive(Debug)]
pub struct Progress {
    total: usize,
    received: AtomicUsize,
    failed: AtomicUsize,
    first_error: Mutex<Option<String>>,
    all_settled: Notify,
}

impl Progress {
    /// Progress of `total` watchers.
    pub fn new(total: usize) -> Progress {
        Progress {
            total,
            received: AtomicUsize::new(0),
            failed: AtomicUsize::new(0),
            first_error: Mutex::new(None),
            all_settled: Notify::new(),
        }
    }

    fn settle(&self) {
        let settled = self.received.load(Ordering::SeqCst) + self.failed.load(Ordering::SeqCst);
        if settled == self.total {
            self.all_settled.notify_one();
        }
    }

    /// A watcher received its resource (call once per watcher).
    pub fn received(&self) {
        self.received.fetch_add(1, Ordering::SeqCst);
        self.settle();
    }

    /// A watcher got an error before its resource (call once per watcher).
    pub fn failed(&self, error: String) {
        self.first_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert(error);
        self.failed.fetch_add(1, Ordering::SeqCst);
        self.settle();
    }

    /// Waits until every watcher has settled.
    pub async fn wait(&self) {
        self.all_settled.notified().await;
    }
}

/// Reads a `kB` field (`VmHWM`, `VmRSS`) of `/proc/self/status`; 0 when unavailable.
pub fn proc_status_kb(field: &str) -> u64 {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return 0;
    };
    status
        .lines()
        .find_map(|line| {
            let rest = line.strip_prefix(field)?.strip_prefix(':')?;
            rest.trim().trim_end_matches("kB").trim().parse().ok()
        })
        .unwrap_or(0)
}

/// The CPU time this process has used (user + system), from `/proc/self/stat`; zero
/// when unavailable.
pub fn cpu_time() -> Duration {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return Duration::ZERO;
    };
    // The fields after the command name (which is in parentheses and may hold spaces):
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after it.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return Duration::ZERO;
    };
    let ticks: u64 = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|t| t.parse::<u64>().ok())
        .sum();
    // USER_HZ is 100 on every Linux configuration Rust supports.
    Duration::from_millis(ticks * 10)
}

/// Waits for every watcher (or the timeout) and prints the result line the parent
/// parses, then exits the process at once (tearing down 20,000 watchers is not part
/// of the measurement).
pub async fn finish(client: &str, args: &ChildArgs, progress: &Progress, start: Instant) -> ! {
    let timed_out = tokio::time::timeout(args.timeout, progress.wait())
        .await
        .is_err();
    let elapsed = start.elapsed();
    let error = progress
        .first_error
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .unwrap_or_default()
        .replace(['\n', '\r'], " ");
    println!(
        "RESULT client={client} mode={} watchers={} received={} failed={} timed_out={timed_out} \
         elapsed_us={} cpu_us={} hwm_kb={} rss_kb={} first_error={error}",
        args.mode.as_str(),
        progress.total,
        progress.received.load(Ordering::SeqCst),
        progress.failed.load(Ordering::SeqCst),
        elapsed.as_micros(),
        cpu_time().as_micros(),
        proc_status_kb("VmHWM"),
        proc_status_kb("VmRSS"),
    );
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    std::process::exit(0)
}
