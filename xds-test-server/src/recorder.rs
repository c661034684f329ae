//! A `metrics` recorder for tests: every counter and gauge by name and label set, as
//! last written, with the descriptions.
//!
//! metrics-util's `DebuggingRecorder` resets every value it reports, so a reading
//! could not tell a gauge an exporter set to 0 from one it left alone; this one keeps
//! values until they are written again. It is installed as the process's global
//! recorder (a client's driver runs on other tasks and threads, out of reach of a
//! thread-local recorder), so tests in one binary share it: each reads only the
//! series of its own `grpc.target`.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};

/// Whether a series is a counter or a gauge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// A counter: its value is a `u64`.
    Counter,
    /// A gauge: its value is an `f64`.
    Gauge,
}

/// One series: a name and its labels, sorted by key.
pub type Series = (Kind, String, Vec<(String, String)>);

/// The unit and text a metric was described with.
pub type Description = (Option<Unit>, String);

/// The recorder. Cheap to clone; every clone reads the same values.
#[derive(Clone, Debug, Default)]
pub struct TestRecorder {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    values: Mutex<BTreeMap<Series, Arc<Cell>>>,
    descriptions: Mutex<HashMap<(Kind, String), Description>>,
}

impl TestRecorder {
    /// The process's global recorder, installed on first use.
    ///
    /// # Panics
    /// When another global recorder was installed first.
    pub fn global() -> &'static TestRecorder {
        static GLOBAL: OnceLock<TestRecorder> = OnceLock::new();
        GLOBAL.get_or_init(|| {
            let recorder = TestRecorder::default();
            metrics::set_global_recorder(recorder.clone())
                .expect("no other global metrics recorder in this test binary");
            recorder
        })
    }

    /// The value of one series, if it was ever written: a counter's as `f64`.
    pub fn value(&self, kind: Kind, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let series = series(kind, name, labels);
        let values = self.inner.values.lock().unwrap_or_else(|e| e.into_inner());
        values.get(&series).map(|v| read(kind, v))
    }

    /// Every series with `label` = `value`, and its value.
    pub fn series_with(&self, label: &str, value: &str) -> Vec<(Series, f64)> {
        let values = self.inner.values.lock().unwrap_or_else(|e| e.into_inner());
        values
            .iter()
            .filter(|((_, _, labels), _)| labels.iter().any(|(k, v)| k == label && v == value))
            .map(|(s, v)| (s.clone(), read(s.0, v)))
            .collect()
    }

    /// The unit and description a metric was described with.
    pub fn description(&self, kind: Kind, name: &str) -> Option<Description> {
        let descriptions = self
            .inner
            .descriptions
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        descriptions.get(&(kind, name.to_string())).cloned()
    }

    fn handle(&self, kind: Kind, key: &Key) -> Arc<Cell> {
        let series = to_series(kind, key.name(), key.labels().map(|l| (l.key(), l.value())));
        let mut values = self.inner.values.lock().unwrap_or_else(|e| e.into_inner());
        values.entry(series).or_default().clone()
    }

    fn describe(&self, kind: Kind, key: KeyName, unit: Option<Unit>, description: SharedString) {
        let mut descriptions = self
            .inner
            .descriptions
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        descriptions.insert(
            (kind, key.as_str().to_string()),
            (unit, description.to_string()),
        );
    }
}

/// The series of a name and labels (in any order).
pub fn series(kind: Kind, name: &str, labels: &[(&str, &str)]) -> Series {
    to_series(kind, name, labels.iter().copied())
}

fn to_series<'a>(
    kind: Kind,
    name: &str,
    labels: impl Iterator<Item = (&'a str, &'a str)>,
) -> Series {
    let mut labels: Vec<(String, String)> = labels
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    labels.sort();
    (kind, name.to_string(), labels)
}

fn read(kind: Kind, value: &Cell) -> f64 {
    let bits = value.0.load(Ordering::SeqCst);
    match kind {
        Kind::Counter => bits as f64,
        Kind::Gauge => f64::from_bits(bits),
    }
}

/// One series' value: a counter's `u64`, or a gauge's `f64` bits. Unlike the
/// `metrics` crate's own `AtomicU64` handles (whose `absolute` keeps the maximum), an
/// absolute write is stored as written.
#[derive(Debug, Default)]
struct Cell(AtomicU64);

impl metrics::CounterFn for Cell {
    fn increment(&self, value: u64) {
        self.0.fetch_add(value, Ordering::SeqCst);
    }

    fn absolute(&self, value: u64) {
        self.0.store(value, Ordering::SeqCst);
    }
}

impl metrics::GaugeFn for Cell {
    fn increment(&self, value: f64) {
        self.add(value);
    }

    fn decrement(&self, value: f64) {
        self.add(-value);
    }

    fn set(&self, value: f64) {
        self.0.store(value.to_bits(), Ordering::SeqCst);
    }
}

impl Cell {
    fn add(&self, delta: f64) {
        let _ = self
            .0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |bits| {
                Some((f64::from_bits(bits) + delta).to_bits())
            });
    }
}

impl Recorder for TestRecorder {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.describe(Kind::Counter, key, unit, description);
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.describe(Kind::Gauge, key, unit, description);
    }

    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.handle(Kind::Counter, key))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.handle(Kind::Gauge, key))
    }

    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}
