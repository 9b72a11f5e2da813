//! The elastic loop from Rust, as capi/test/elastic_c_multirank_test.c runs
//! it in C: a small model (w and its momentum m, f64) takes 16 steps, each
//! step's gradient summed over a global batch of 12 samples shared among the
//! ranks of the current group (rank r of n takes samples [r*12/n,
//! (r+1)*12/n)), all_reduced (sum) and divided by 12, so every world size
//! trains on the same batches. w, m and the step are held by a
//! `distkit::Snapshot`, committed before the first step and after every
//! 4th. In step DIE_AT (7 + the world size) the last rank SIGKILLs itself
//! after the first half of the momentum update, before the all_reduce: the
//! survivors' step fails with their momentum half-updated. Under
//! DISTKIT_MAX_REPLACEMENTS (distrun --max-replacements 1) they
//! `Group::grow` while distrun's new process joins through `distkit::init`;
//! else, where DISTKIT_MIN_RANKS allows (distrun --min-ranks 1), they
//! `Group::shrink`. Every member of the new group, the replacement included
//! (its state starts as NaN), calls `Snapshot::sync` and all redo the steps
//! since the commit. The final weights are compared with an uninterrupted
//! run computed here without communication (relative 1e-12). The argument
//! ("grow" or "shrink") says which recovery the launcher's variables must
//! lead to. Check failures are summed over the final group, so a wrong rank
//! fails every rank (and --min-ranks cannot let the job pass).
mod elastic_model;

use distkit::{Code, InitOptions, ReduceOp, Snapshot};
use elastic_model::{check_final, gradient, job_failures, launcher_number, recover, reference, Checks};
use std::time::Duration;

const DIM: usize = 4;
const GLOBAL_BATCH: i64 = 12;
const STEPS: i64 = 16;
const COMMIT_EVERY: i64 = 4;
const LR: f64 = 0.1;
const BETA: f64 = 0.9;
const TIMEOUT: Duration = Duration::from_secs(20);
const SETTLE: Duration = Duration::from_secs(2);
const SIGKILL: i32 = 9;

extern "C" {
    fn raise(sig: i32) -> i32;
}

fn initial_w() -> Vec<f64> {
    (0..DIM).map(|j| 0.5 - 0.25 * j as f64).collect()
}

fn main() {
    let want_grow = std::env::args().nth(1).as_deref() == Some("grow");
    let newcomer = launcher_number("DISTKIT_REPLACEMENT") > 0;
    let options = InitOptions { timeout: TIMEOUT, ..InitOptions::default() };
    let mut c = Checks { rank: -1, failures: 0 };
    let mut group = distkit::init("pytorch", &options).unwrap_or_else(|e| c.die("init", e));
    let (world_rank, size) = (group.rank(), group.size());
    c.rank = world_rank;
    if size < 2 {
        eprintln!("rank {world_rank}: needs 2 ranks or more");
        std::process::exit(1);
    }
    c.check(want_grow == (launcher_number("DISTKIT_MAX_REPLACEMENTS") > 0), "replacements in the grow variant only");
    c.check(want_grow || launcher_number("DISTKIT_MIN_RANKS") > 0, "the shrink variant runs under --min-ranks");
    let victim = size - 1;
    let die_at = 7 + size as i64;
    let want_commit = 1 + die_at / COMMIT_EVERY;
    let commit_step = die_at / COMMIT_EVERY * COMMIT_EVERY;

    let (mut w, mut m, mut step) = (initial_w(), vec![0.0f64; DIM], [0i64]);
    if newcomer {
        // Whatever a fresh process holds: only the sync may give it its state.
        w = vec![f64::NAN; DIM];
        m = vec![f64::NAN; DIM];
        step = [-1];
    }
    let mut snapshot = Snapshot::new().unwrap_or_else(|e| c.die("snapshot", e));
    for (name, b) in [("w", &w as &dyn distkit::SnapshotBuffer), ("momentum", &m), ("step", &step)] {
        snapshot.register(name, b).unwrap_or_else(|e| c.die("register", e));
    }
    let (mut recoveries, mut steps_run) = (0, 0i64);
    if newcomer {
        // init joined the survivors' grow: its world is the grown group, on
        // which the survivors sync next.
        let commit = snapshot.sync(&group, &mut [&mut w, &mut m, &mut step]).unwrap_or_else(|e| c.die("sync", e));
        println!(
            "rank {world_rank}: replacement joined '{}', loaded commit {commit} (step {})",
            group.name().unwrap_or_default(),
            step[0]
        );
        c.check(commit == want_commit, "the replacement loads the newest commit");
        c.check(step[0] == commit_step, "the replacement's step is the commit's");
    } else {
        snapshot.commit(&[&w, &m, &step]).unwrap_or_else(|e| c.die("the first commit", e));
    }
    while step[0] < STEPS {
        let (n, r) = (group.size() as i64, group.rank() as i64);
        let mut g = gradient(step[0], r * GLOBAL_BATCH / n, (r + 1) * GLOBAL_BATCH / n, &w);
        m.iter_mut().for_each(|v| *v *= BETA);
        if !newcomer && recoveries == 0 && world_rank == victim && step[0] == die_at {
            println!("rank {world_rank}: SIGKILL in step {}", step[0]);
            unsafe { raise(SIGKILL) };
        }
        if let Err(e) = group.all_reduce(&mut g, ReduceOp::Sum) {
            println!("rank {world_rank}: step {} failed ({e}); recovering", step[0]);
            c.check(step[0] == die_at, "the step the victim died in fails");
            c.check(matches!(e.code(), Code::Unavailable | Code::DeadlineExceeded), "a lost peer or a timeout");
            let (next, grown) = recover(&group, &c, TIMEOUT, SETTLE);
            group = next; // the failed group is dropped (destroyed) here
            recoveries += 1;
            c.check(grown == want_grow, "grown under --max-replacements, else shrunk");
            c.check(group.size() == if grown { size } else { size - 1 }, "the new group's size");
            let commit = snapshot.sync(&group, &mut [&mut w, &mut m, &mut step]).unwrap_or_else(|e| c.die("sync", e));
            println!(
                "rank {world_rank}: {} to {} ranks, loaded commit {commit} (step {})",
                if grown { "grew" } else { "shrank" },
                group.size(),
                step[0]
            );
            c.check(commit == want_commit, "the survivors load the newest commit");
            c.check(step[0] == commit_step, "the step is the commit's: the steps since are redone");
            continue;
        }
        for j in 0..DIM {
            m[j] += g[j] / GLOBAL_BATCH as f64;
            w[j] -= LR * m[j];
        }
        step[0] += 1;
        steps_run += 1;
        if step[0] % COMMIT_EVERY == 0 {
            snapshot.commit(&[&w, &m, &step]).unwrap_or_else(|e| c.die("commit", e));
        }
    }
    c.check(snapshot.commit_number() == 1 + STEPS / COMMIT_EVERY, "every commit counted");
    c.check(snapshot.bytes() == (2 * DIM * 8 + 8) as i64, "a full copy held");
    if newcomer {
        c.check(steps_run == STEPS - commit_step, "the replacement trains from the commit");
    } else {
        c.check(recoveries == 1, "one recovery");
        c.check(steps_run == STEPS + die_at - commit_step, "the steps since the commit are trained twice");
    }
    let want = reference(initial_w(), STEPS, GLOBAL_BATCH, LR, BETA);
    check_final(&mut c, &w, &want);
    let bad = job_failures(&c, &group);
    drop(snapshot);
    drop(group);
    distkit::shutdown();
    if bad > 0.0 {
        eprintln!("rank {world_rank}: {} check(s) failed in the job", bad);
        std::process::exit(1);
    }
    let how = if newcomer {
        "joined as a replacement"
    } else if want_grow {
        "grew back"
    } else {
        "shrank"
    };
    println!("rank {world_rank}: {how}; w equals the uninterrupted run's after {steps_run} steps");
}
