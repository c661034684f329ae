//! The runs' figures by cell (size, contender), the medians' summary, and the markdown
//! table for BENCHMARKS.md: each client beside the probe of its size and API, with the
//! spread of both and the runs in which the client took more responses than the probe;
//! and, when it ran, beside the decoding probe (see `probe.rs`).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

use crate::client::Registration;
use crate::server::ServerStats;
use crate::{Api, Args, Run, ms};

/// Who runs: the raw probe, the decoding probe, or the client with a registration
/// style.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Contender {
    Probe(Api),
    Decoder(Api),
    Client(Api, Registration),
}

impl Contender {
    pub fn api(self) -> Api {
        match self {
            Contender::Probe(api) | Contender::Decoder(api) | Contender::Client(api, _) => api,
        }
    }

    pub fn label(self) -> String {
        match self {
            Contender::Probe(api) => format!("raw probe {}", api.name()),
            Contender::Decoder(api) => format!("decoding probe {}", api.name()),
            Contender::Client(api, r) => format!("client {} {}", api.name(), r.name()),
        }
    }

    /// The `--child` value naming this contender.
    pub fn child_arg(self) -> String {
        let api = |api: Api| if api == Api::Sotw { "sotw" } else { "delta" };
        match self {
            Contender::Probe(a) => format!("probe-{}", api(a)),
            Contender::Decoder(a) => format!("decoder-{}", api(a)),
            Contender::Client(a, r) => format!("client-{}-{}", api(a), r.name()),
        }
    }

    pub fn parse_child(s: &str) -> Contender {
        let parts: Vec<&str> = s.split('-').collect();
        match parts[..] {
            ["probe", api] => Contender::Probe(Api::parse(api)),
            ["decoder", api] => Contender::Decoder(Api::parse(api)),
            ["client", api, r] => Contender::Client(Api::parse(api), Registration::parse(r)),
            _ => panic!("--child {s:?}: probe-API, decoder-API or client-API-REGISTRATION"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cell {
    pub size: usize,
    pub contender: Contender,
}

/// One timed run with the server's counts over it.
#[derive(Clone, Copy, Debug)]
struct Sample {
    round: usize,
    run: Run,
    server: ServerStats,
}

#[derive(Default)]
pub struct Table {
    cells: BTreeMap<Cell, Vec<Sample>>,
}

impl Table {
    pub fn record(&mut self, cell: Cell, round: usize, run: Run, server: ServerStats) {
        let sample = Sample { round, run, server };
        self.cells.entry(cell).or_default().push(sample);
    }

    pub fn cells(&self) -> usize {
        self.cells.len()
    }

    fn probe(&self, size: usize, api: Api) -> Option<&[Sample]> {
        let cell = Cell {
            size,
            contender: Contender::Probe(api),
        };
        self.cells.get(&cell).map(Vec::as_slice)
    }

    fn decoder(&self, size: usize, api: Api) -> Option<&[Sample]> {
        let cell = Cell {
            size,
            contender: Contender::Decoder(api),
        };
        self.cells.get(&cell).map(Vec::as_slice)
    }

    /// The clients' cells, each with its probe's (if the probe ran).
    fn clients(&self) -> impl Iterator<Item = (Cell, &[Sample], Option<&[Sample]>)> {
        self.cells.iter().filter_map(|(cell, samples)| {
            let Contender::Client(api, _) = cell.contender else {
                return None;
            };
            Some((*cell, samples.as_slice(), self.probe(cell.size, api)))
        })
    }

    /// One line per client cell and floor that ran (the decoding probe, the raw probe):
    /// the medians and their ratio.
    pub fn summary(&self) -> String {
        let mut out = String::new();
        for (cell, client, probe) in self.clients() {
            let client_median = median(client.iter().map(|s| s.run.elapsed));
            let floors = [
                (
                    "decoding probe",
                    self.decoder(cell.size, cell.contender.api()),
                ),
                ("raw probe", probe),
            ];
            let mut any = false;
            for (name, floor) in floors {
                let Some(floor) = floor else { continue };
                any = true;
                let floor_median = median(floor.iter().map(|s| s.run.elapsed));
                let _ = writeln!(
                    out,
                    "median, {} clusters, {}: {name} {:.1} ms, tokio client {:.1} ms, ratio {:.2}",
                    cell.size,
                    cell.contender.label(),
                    ms(floor_median),
                    ms(client_median),
                    client_median.as_secs_f64() / floor_median.as_secs_f64()
                );
            }
            if !any {
                let _ = writeln!(
                    out,
                    "median, {} clusters, {}: tokio client {:.1} ms",
                    cell.size,
                    cell.contender.label(),
                    ms(client_median)
                );
            }
        }
        out
    }

    /// The table for BENCHMARKS.md, with how it was run.
    pub fn markdown(
        &self,
        args: &Args,
        load_before: Option<&str>,
        load_after: Option<&str>,
    ) -> String {
        let mut out = String::new();
        let rounds = self.cells.values().map(Vec::len).max().unwrap_or(0);
        let _ = writeln!(
            out,
            "{} rounds, {}; {} runtime; load average (1, 5, 15 min) before: {}, after: {}",
            rounds,
            if args.fresh {
                "a fresh process per run"
            } else {
                "every run in the harness's process"
            },
            if args.current_thread {
                "current-thread"
            } else {
                "2-worker tokio"
            },
            load_before.unwrap_or("?"),
            load_after.unwrap_or("?"),
        );
        out.push('\n');
        out.push_str(
            "| clusters | API | registration | raw probe, median (min–max) | client, median (min–max) \
             | ratio of medians | per-round ratios, median (min–max) | decoding probe, median (min–max) \
             | ratio to the decoding probe | client CPU, median | watches queued by, median \
             | runs with an extra response |\n",
        );
        out.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        for (cell, client, probe) in self.clients() {
            let Contender::Client(api, registration) = cell.contender else {
                continue;
            };
            let client_times: Vec<Duration> = client.iter().map(|s| s.run.elapsed).collect();
            let (probe_col, ratio, per_round) = match probe {
                Some(probe) => {
                    let times: Vec<Duration> = probe.iter().map(|s| s.run.elapsed).collect();
                    let ratio = median(client_times.iter().copied()).as_secs_f64()
                        / median(times.iter().copied()).as_secs_f64();
                    (
                        spread(&times),
                        format!("{ratio:.2}×"),
                        per_round_ratios(client, probe),
                    )
                }
                None => ("–".into(), "–".into(), "–".into()),
            };
            let (decoder_col, decoder_ratio) = match self.decoder(cell.size, api) {
                Some(decoder) => {
                    let times: Vec<Duration> = decoder.iter().map(|s| s.run.elapsed).collect();
                    let ratio = median(client_times.iter().copied()).as_secs_f64()
                        / median(times.iter().copied()).as_secs_f64();
                    (spread(&times), format!("{ratio:.2}×"))
                }
                None => ("–".into(), "–".into()),
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1} ms | {:.1} ms | {} |",
                thousands(cell.size),
                api.name(),
                registration.name(),
                probe_col,
                spread(&client_times),
                ratio,
                per_round,
                decoder_col,
                decoder_ratio,
                ms(median(client.iter().map(|s| s.run.cpu))),
                ms(median(client.iter().map(|s| s.run.registered))),
                extra_responses(client, probe),
            );
        }
        out
    }
}

/// How many of the client's runs took more responses from the server than the
/// probe's fewest (four, one per type, when the probe ran).
fn extra_responses(client: &[Sample], probe: Option<&[Sample]>) -> String {
    let least = probe
        .and_then(|p| p.iter().map(|s| s.server.responses).min())
        .unwrap_or(4);
    let extra: Vec<u64> = client
        .iter()
        .map(|s| s.server.responses.saturating_sub(least))
        .filter(|&n| n > 0)
        .collect();
    match extra.iter().max() {
        None => format!("0 of {}", client.len()),
        Some(most) => format!("{} of {} (up to {most} more)", extra.len(), client.len()),
    }
}

/// The client's time over the probe's in each round both ran.
fn per_round_ratios(client: &[Sample], probe: &[Sample]) -> String {
    let mut ratios: Vec<f64> = client
        .iter()
        .filter_map(|c| {
            let p = probe.iter().find(|p| p.round == c.round)?;
            Some(c.run.elapsed.as_secs_f64() / p.run.elapsed.as_secs_f64())
        })
        .collect();
    if ratios.is_empty() {
        return "–".into();
    }
    ratios.sort_by(f64::total_cmp);
    format!(
        "{:.2}× ({:.2}–{:.2})",
        ratios[ratios.len() / 2],
        ratios[0],
        ratios[ratios.len() - 1]
    )
}

fn spread(times: &[Duration]) -> String {
    let (lo, hi) = (times.iter().min(), times.iter().max());
    format!(
        "{:.1} ms ({:.1}–{:.1})",
        ms(median(times.iter().copied())),
        ms(*lo.unwrap_or(&Duration::ZERO)),
        ms(*hi.unwrap_or(&Duration::ZERO))
    )
}

pub fn median(values: impl Iterator<Item = Duration>) -> Duration {
    let mut values: Vec<Duration> = values.collect();
    if values.is_empty() {
        return Duration::ZERO;
    }
    values.sort();
    values[values.len() / 2]
}

fn thousands(n: usize) -> String {
    if n >= 1000 && n.is_multiple_of(1000) {
        format!("{}k", n / 1000)
    } else {
        n.to_string()
    }
}

/// The machine's load average (Linux), as `uptime` prints it.
pub fn load_average() -> Option<String> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    Some(text.split(' ').take(3).collect::<Vec<_>>().join(", "))
}
