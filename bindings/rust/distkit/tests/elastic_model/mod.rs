//! What the Rust elastic-loop checks share (elastic_multirank_test.rs, whose
//! state is a `Snapshot`, and sharded_elastic_multirank_test.rs, whose state
//! is a `Shard`'s shard in a `ShardedSnapshot`), as testing/c/elastic_model.h
//! is for the C ones: the launcher's numbers, the model's loss, the checks'
//! bookkeeping, the job's plan (`Plan`) and the recovery after a lost peer as
//! distkit.elastic decides it.
use distkit::{Code, Group, InitOptions, ReduceOp};
use std::time::Duration;

// The loop's numbers, as testing/c/elastic_model.h has them: a global batch
// of GLOBAL_BATCH samples a step, STEPS steps of SGD with momentum, a commit
// before the first step and after every COMMIT_EVERY-th.
pub const GLOBAL_BATCH: i64 = 12;
pub const STEPS: i64 = 16;
pub const COMMIT_EVERY: i64 = 4;
pub const LR: f64 = 0.1;
pub const BETA: f64 = 0.9;
/// Bounds init and the wait for a replacement.
pub const TIMEOUT: Duration = Duration::from_secs(20);
/// How long a shrink waits for further losses.
pub const SETTLE: Duration = Duration::from_secs(2);

const SIGKILL: i32 = 9;

extern "C" {
    fn raise(sig: i32) -> i32;
}

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

/// The weights a check starts from: `dim` values falling from 0.5 by
/// `slope`.
pub fn initial_w(dim: usize, slope: f64) -> Vec<f64> {
    (0..dim).map(|j| 0.5 - slope * j as f64).collect()
}

/// The uninterrupted run from `w` in one process: STEPS steps of SGD with
/// momentum on the mean gradient of each step's global batch.
pub fn reference(mut w: Vec<f64>) -> Vec<f64> {
    let mut m = vec![0.0; w.len()];
    for t in 0..STEPS {
        let g = gradient(t, 0, GLOBAL_BATCH, &w);
        for j in 0..w.len() {
            m[j] = BETA * m[j] + g[j] / GLOBAL_BATCH as f64;
            w[j] -= LR * m[j];
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
pub fn recover(group: &Group, c: &Checks) -> (Group, bool) {
    if launcher_number("DISTKIT_MAX_REPLACEMENTS") > 0 {
        match group.grow(None, Some(TIMEOUT)) {
            Ok(g) => return (g, true),
            Err(e) if e.code() == Code::DeadlineExceeded && launcher_number("DISTKIT_MIN_RANKS") > 0 => {}
            Err(e) => c.die("grow", e),
        }
    }
    match group.shrink(SETTLE) {
        Ok(g) => (g, false),
        Err(e) => c.die("shrink", e),
    }
}

/// The victim's end: SIGKILLed in `step`, without a word to its peers.
pub fn sigkill_self(c: &Checks, step: i64) {
    println!("rank {}: SIGKILL in step {step}", c.rank);
    unsafe { raise(SIGKILL) };
}

/// One rank's elastic check: the variant the program's argument names
/// ("grow" or "shrink"), the loss it plans (the last rank SIGKILLs itself in
/// step `die_at`) and what the recovery must load.
pub struct Plan {
    pub newcomer: bool,
    pub want_grow: bool,
    /// The world init joined.
    pub size: i32,
    pub victim: i32,
    pub die_at: i64,
    /// The newest commit when the victim dies, and its step: the steps
    /// since are redone.
    pub want_commit: i64,
    pub commit_step: i64,
}

impl Plan {
    /// Joins the job (`distkit::init`; `c` then names its rank) and checks
    /// that the launcher's variables lead to the recovery the variant
    /// expects.
    pub fn start(c: &mut Checks) -> (Group, Plan) {
        let want_grow = std::env::args().nth(1).as_deref() == Some("grow");
        let newcomer = launcher_number("DISTKIT_REPLACEMENT") > 0;
        let options = InitOptions { timeout: TIMEOUT, ..InitOptions::default() };
        let group = distkit::init("pytorch", &options).unwrap_or_else(|e| c.die("init", e));
        let size = group.size();
        c.rank = group.rank();
        if size < 2 {
            eprintln!("rank {}: needs 2 ranks or more", c.rank);
            std::process::exit(1);
        }
        c.check(
            want_grow == (launcher_number("DISTKIT_MAX_REPLACEMENTS") > 0),
            "replacements in the grow variant only",
        );
        c.check(want_grow || launcher_number("DISTKIT_MIN_RANKS") > 0, "the shrink variant runs under --min-ranks");
        let die_at = 7 + size as i64;
        let plan = Plan {
            newcomer,
            want_grow,
            size,
            victim: size - 1,
            die_at,
            want_commit: 1 + die_at / COMMIT_EVERY,
            commit_step: die_at / COMMIT_EVERY * COMMIT_EVERY,
        };
        (group, plan)
    }

    /// Checks the commit the replacement loaded and its step.
    pub fn check_joined(&self, c: &mut Checks, commit: i64, step: i64) {
        c.check(commit == self.want_commit, "the replacement loads the newest commit");
        c.check(step == self.commit_step, "the replacement's step is the commit's");
    }

    /// Checks the group a recovery made: grown back to the world's size
    /// under --max-replacements, else shrunk by the victim.
    pub fn check_regroup(&self, c: &mut Checks, next: &Group, grown: bool) {
        c.check(grown == self.want_grow, "grown under --max-replacements, else shrunk");
        c.check(next.size() == if grown { self.size } else { self.size - 1 }, "the new group's size");
    }

    /// Reports the survivors' new group (`check_regroup` checked it) and
    /// checks the commit they loaded (`how` names the load: "loaded",
    /// "fetched").
    pub fn check_recovery(&self, c: &mut Checks, next: &Group, grown: bool, how: &str, commit: i64, step: i64) {
        println!(
            "rank {}: {} to {} ranks, {how} commit {commit} (step {step})",
            c.rank,
            if grown { "grew" } else { "shrank" },
            next.size()
        );
        c.check(commit == self.want_commit, "the survivors load the newest commit");
        c.check(step == self.commit_step, "the step is the commit's: the steps since are redone");
    }

    /// Checks the steps this rank trained (the replacement from the commit,
    /// a survivor those since the commit twice) and its final weights `w`
    /// against the uninterrupted run from `w0` (relative 1e-12: only the
    /// order of the partial sums differs).
    pub fn check_trained(&self, c: &mut Checks, w: &[f64], w0: Vec<f64>, steps_run: i64, recoveries: i32) {
        if self.newcomer {
            c.check(steps_run == STEPS - self.commit_step, "the replacement trains from the commit");
        } else {
            c.check(recoveries == 1, "one recovery");
            c.check(
                steps_run == STEPS + self.die_at - self.commit_step,
                "the steps since the commit are trained twice",
            );
        }
        let want = reference(w0);
        for j in 0..want.len() {
            if !((w[j] - want[j]).abs() <= 1e-12 * want[j].abs() + 1e-14) {
                eprintln!("rank {}: w[{j}] = {:.17}, the uninterrupted run's {:.17}", c.rank, w[j], want[j]);
                c.check(false, "final weights equal the uninterrupted run's");
            }
        }
    }

    /// Ends the process with the job's verdict (`bad`, from `job_failures`,
    /// after the caller shut distkit down).
    pub fn end(&self, c: &Checks, bad: f64, steps_run: i64) {
        if bad > 0.0 {
            eprintln!("rank {}: {} check(s) failed in the job", c.rank, bad);
            std::process::exit(1);
        }
        let how = if self.newcomer {
            "joined as a replacement"
        } else if self.want_grow {
            "grew back"
        } else {
            "shrank"
        };
        println!("rank {}: {how}; w equals the uninterrupted run's after {steps_run} steps", c.rank);
    }
}

/// The job's verdict: every rank's failed checks summed over `group`, so a
/// wrong rank fails every rank (and --min-ranks cannot let the job pass).
pub fn job_failures(c: &Checks, group: &Group) -> f64 {
    let mut bad = [c.failures as f64];
    group.all_reduce(&mut bad, ReduceOp::Sum).unwrap_or_else(|e| c.die("the final all_reduce", e));
    bad[0]
}
