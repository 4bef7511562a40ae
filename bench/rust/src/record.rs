//! One contender's measurements, as the report (bench/report.py) reads them: raw samples, so
//! that every language's percentiles are computed the same way, in one place.

use std::time::Duration;

use serde_json::{json, Map, Value};

pub struct Record {
    pub id: &'static str,
    pub label: String,
    pub latencies: Vec<Duration>,
    /// Operations measured and the wall time they took (for ops/s).
    pub ops: usize,
    pub elapsed: Duration,
    pub metrics: Map<String, Value>,
}

impl Record {
    pub fn new(id: &'static str, label: impl Into<String>) -> Record {
        Record {
            id,
            label: label.into(),
            latencies: Vec::new(),
            ops: 0,
            elapsed: Duration::ZERO,
            metrics: Map::new(),
        }
    }

    /// Adds one batch of samples measured in `elapsed` of wall time.
    pub fn add(&mut self, samples: Vec<Duration>, elapsed: Duration) {
        self.ops += samples.len();
        self.latencies.extend(samples);
        self.elapsed += elapsed;
    }

    /// The same contender measured on a durable server (fsync and synchronous_commit on): its
    /// id gains `-fsync`, as the report expects. Leaks the id: a handful per run.
    pub fn durable(mut self) -> Record {
        self.id = Box::leak(format!("{}-fsync", self.id).into_boxed_str());
        self.metric("fsync", 1);
        self
    }

    pub fn metric(&mut self, name: &str, value: impl Into<Value>) {
        self.metrics.insert(name.to_string(), value.into());
    }

    pub fn ops_per_s(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// One line for the console; the report prints the real table.
    pub fn summary(&self) -> String {
        let mut sorted: Vec<f64> = self.latencies.iter().map(micros).collect();
        sorted.sort_by(f64::total_cmp);
        let at = |p: f64| {
            sorted
                .get(((sorted.len().max(1) - 1) as f64 * p).round() as usize)
                .copied()
                .unwrap_or(f64::NAN)
        };
        format!(
            "{:<26} {:>9.0} ops/s   p50 {:>8.1} µs   p99 {:>8.1} µs",
            self.id,
            self.ops_per_s(),
            at(0.5),
            at(0.99)
        )
    }

    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "label": self.label,
            "ops": self.ops,
            "seconds": self.elapsed.as_secs_f64(),
            "latencies_us": self.latencies.iter().map(|d| (micros(d) * 10.0).round() / 10.0).collect::<Vec<_>>(),
            "metrics": self.metrics,
        })
    }
}

fn micros(d: &Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
