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

use distkit::{Code, ReduceOp, Snapshot};
use elastic_model::{
    gradient, initial_w, job_failures, recover, sigkill_self, Checks, Plan, BETA, COMMIT_EVERY, GLOBAL_BATCH, LR, STEPS,
};

const DIM: usize = 4;
const SLOPE: f64 = 0.25;

fn main() {
    let mut c = Checks { rank: -1, failures: 0 };
    let (mut group, plan) = Plan::start(&mut c);
    let world_rank = c.rank;

    let (mut w, mut m, mut step) = (initial_w(DIM, SLOPE), vec![0.0f64; DIM], [0i64]);
    if plan.newcomer {
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
    if plan.newcomer {
        // init joined the survivors' grow: its world is the grown group, on
        // which the survivors sync next.
        let commit = snapshot.sync(&group, &mut [&mut w, &mut m, &mut step]).unwrap_or_else(|e| c.die("sync", e));
        println!(
            "rank {world_rank}: replacement joined '{}', loaded commit {commit} (step {})",
            group.name().unwrap_or_default(),
            step[0]
        );
        plan.check_joined(&mut c, commit, step[0]);
    } else {
        snapshot.commit(&[&w, &m, &step]).unwrap_or_else(|e| c.die("the first commit", e));
    }
    while step[0] < STEPS {
        let (n, r) = (group.size() as i64, group.rank() as i64);
        let mut g = gradient(step[0], r * GLOBAL_BATCH / n, (r + 1) * GLOBAL_BATCH / n, &w);
        m.iter_mut().for_each(|v| *v *= BETA);
        if !plan.newcomer && recoveries == 0 && world_rank == plan.victim && step[0] == plan.die_at {
            sigkill_self(&c, step[0]);
        }
        if let Err(e) = group.all_reduce(&mut g, ReduceOp::Sum) {
            println!("rank {world_rank}: step {} failed ({e}); recovering", step[0]);
            c.check(step[0] == plan.die_at, "the step the victim died in fails");
            c.check(matches!(e.code(), Code::Unavailable | Code::DeadlineExceeded), "a lost peer or a timeout");
            let (next, grown) = recover(&group, &c);
            plan.check_regroup(&mut c, &next, grown);
            group = next; // the failed group is dropped (destroyed) here
            recoveries += 1;
            let commit = snapshot.sync(&group, &mut [&mut w, &mut m, &mut step]).unwrap_or_else(|e| c.die("sync", e));
            plan.check_recovery(&mut c, &group, grown, "loaded", commit, step[0]);
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
    plan.check_trained(&mut c, &w, initial_w(DIM, SLOPE), steps_run, recoveries);
    let bad = job_failures(&c, &group);
    drop(snapshot);
    drop(group);
    distkit::shutdown();
    plan.end(&c, bad, steps_run);
}
