//! What the Rust elastic-loop checks share (elastic_multirank_test.rs, whose
//! state is a `Snapshot`, and sharded_elastic_multirank_test.rs, whose state
//! is a `Shard`'s shard in a `ShardedSnapshot`), as testing/c/elastic_model.h
//! is for the C ones: the launcher's numbers, the model's loss, the checks'
//! bookkeeping and the recovery after a lost peer as distkit.elastic
//! decides it.
use distkit::{Code, Group, ReduceOp};
use std::time::Duration;

/// A launcher's variable as a number (0 when unset).
pub fn launcher_number(name: &str) -> i64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// Sample i of step t's batch (element j), and its weight in the loss.
pub fn sample(t: i64, i: i64, j: usize) -> f64 {
    (0.37 * t as f64 + 1.3 * i as f64 + 0.7 * j as f64).sin()
}

pub fn weight(t: i64, i: i64) -> f64 {
    1.0 + 0.5 * (t as f64 + i as f64).cos()
}

/// The summed gradient of samples [lo, hi) of step t at w: a weighted
/// squared error plus a quartic term, so each update depends on w
/// nonlinearly.
pub fn gradient(t: i64, lo: i64, hi: i64, w: &[f64]) -> Vec<f64> {
    (0..w.len())
        .map(|j| (lo..hi).map(|i| weight(t, i) * (w[j] - sample(t, i, j)) + 0.01 * w[j] * w[j] * w[j]).sum())
        .collect()
}

/// The uninterrupted run from `w` in one process: `steps` steps of SGD with
/// momentum on the mean gradient of each step's global batch.
pub fn reference(mut w: Vec<f64>, steps: i64, global_batch: i64, lr: f64, beta: f64) -> Vec<f64> {
    let mut m = vec![0.0; w.len()];
    for t in 0..steps {
        let g = gradient(t, 0, global_batch, &w);
        for j in 0..w.len() {
            m[j] = beta * m[j] + g[j] / global_batch as f64;
            w[j] -= lr * m[j];
        }
    }
    w
}

/// Failed checks, counted (the job's verdict sums them over the final
/// group), and the rank that names them.
pub struct Checks {
    pub rank: i32,
    pub failures: u32,
}

impl Checks {
    pub fn check(&mut self, ok: bool, what: &str) {
        if !ok {
            eprintln!("rank {}: CHECK FAILED: {what}", self.rank);
            self.failures += 1;
        }
    }
    pub fn die(&self, what: &str, e: distkit::Error) -> ! {
        eprintln!("rank {}: {what}: {e}", self.rank);
        std::process::exit(1)
    }
}

/// The survivors' new group after `group` failed: grown back where the
/// launcher replaces a lost rank, else (or when no replacement came in
/// time and the job may go on smaller) shrunk; and whether it grew.
pub fn recover(group: &Group, c: &Checks, timeout: Duration, settle: Duration) -> (Group, bool) {
    if launcher_number("DISTKIT_MAX_REPLACEMENTS") > 0 {
        match group.grow(None, Some(timeout)) {
            Ok(g) => return (g, true),
            Err(e) if e.code() == Code::DeadlineExceeded && launcher_number("DISTKIT_MIN_RANKS") > 0 => {}
            Err(e) => c.die("grow", e),
        }
    }
    match group.shrink(settle) {
        Ok(g) => (g, false),
        Err(e) => c.die("shrink", e),
    }
}

/// Checks the final weights against the uninterrupted run's (relative
/// 1e-12: only the order of the partial sums differs).
pub fn check_final(c: &mut Checks, w: &[f64], want: &[f64]) {
    for j in 0..want.len() {
        if !((w[j] - want[j]).abs() <= 1e-12 * want[j].abs() + 1e-14) {
            eprintln!("rank {}: w[{j}] = {:.17}, the uninterrupted run's {:.17}", c.rank, w[j], want[j]);
            c.check(false, "final weights equal the uninterrupted run's");
        }
    }
}

/// The job's verdict: every rank's failed checks summed over `group`, so a
/// wrong rank fails every rank (and --min-ranks cannot let the job pass).
pub fn job_failures(c: &Checks, group: &Group) -> f64 {
    let mut bad = [c.failures as f64];
    group.all_reduce(&mut bad, ReduceOp::Sum).unwrap_or_else(|e| c.die("the final all_reduce", e));
    bad[0]
}
