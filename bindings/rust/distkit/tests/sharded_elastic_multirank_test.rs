//! The elastic loop of a sharded (FSDP) trainer from Rust, as
//! capi/test/sharded_elastic_c_multirank_test.c runs it in C: DIM f64 weights
//! in one `Shard` (FULL_SHARD) and their momentum take 16 steps, each step's
//! gradient summed over a global batch of 12 samples shared among the ranks
//! of the current group and scaled by n / 12 (the unit averages over the n
//! ranks). The weights' shard, the momentum's and the step are held by a
//! `ShardedSnapshot`, committed before the first step and after every 4th.
//! Before the reduction of step DIE_AT (7 + the world size) the last rank
//! SIGKILLs itself. The survivors grow back with distrun's replacement (under
//! --max-replacements 1) or shrink (under --min-ranks 1); every member of the
//! new group fetches the shards it needs (its own when the size was kept, the
//! replacement's from its neighbour's memory; every shard when the group
//! shrank), loads them into a new unit (`Shard::load_sharded`, the momentum by
//! the same layout), commits a new snapshot and redoes the steps since the
//! commit. The final weights are compared with an uninterrupted run computed
//! here in one process (relative 1e-12); check failures are summed over the
//! final group. With the argument "pieces" it checks the snapshot's
//! pieces instead (sharded_pieces).
mod elastic_model;
mod sharded_pieces;

use distkit::{Code, Group, Shard, ShardOptions, ShardedSnapshot, ShardingStrategy};
use elastic_model::{
    gradient, initial_w, job_failures, recover, sigkill_self, Checks, Plan, BETA, COMMIT_EVERY, GLOBAL_BATCH, LR, STEPS,
};

const DIM: usize = 10;
const SLOPE: f64 = 0.1;

/// What a rank carries from one layout to the next: the old layout's
/// shards it fetched (weights and momentum by old shard index, None where
/// not fetched), their group's size, and the step.
struct Carried {
    w: Vec<Option<Vec<f64>>>,
    m: Vec<Option<Vec<f64>>>,
    world: usize,
    step: i64,
    commit: i64,
}

/// Collective over `group`: the shards this rank needs from `snapshot` (its
/// own index when `same_layout`, else every shard), copied out.
fn fetch(snapshot: &mut ShardedSnapshot, group: &Group, same_layout: bool, c: &Checks) -> Carried {
    let me = [group.rank()];
    let got =
        snapshot.fetch(group, if same_layout { Some(&me[..]) } else { None }).unwrap_or_else(|e| c.die("fetch", e));
    let world = got.world as usize;
    let mut carried = Carried { w: vec![None; world], m: vec![None; world], world, step: -1, commit: got.commit };
    for j in 0..world {
        if same_layout && j as i32 != me[0] {
            continue;
        }
        let shard = |b| snapshot.shard_as::<f64>(j as i32, b).unwrap_or_else(|e| c.die("shard", e)).to_vec();
        carried.w[j] = Some(shard(0));
        carried.m[j] = Some(shard(1));
        carried.step = snapshot.shard_as::<i64>(j as i32, 2).unwrap_or_else(|e| c.die("shard", e))[0];
    }
    carried
}

enum Outcome {
    /// The step failed: the new group, whether it grew, what was fetched on
    /// it, the steps run before, and the old snapshot (kept until the new
    /// layout's first commit).
    Lost(Group, bool, Carried, i64, ShardedSnapshot),
    /// Training ended: the full weights, steps run, the snapshot's bytes and
    /// one shard's length.
    Done(Vec<f64>, i64, i64, usize),
}

/// Commits this rank's shard of the weights, the momentum's and the step.
fn commit_state(
    snapshot: &mut ShardedSnapshot,
    group: &Group,
    unit: &mut Shard,
    m: &Vec<f64>,
    step: &[i64; 1],
    c: &Checks,
) {
    let w = unit.local::<f64>(0).unwrap_or_else(|e| c.die("local", e)).0.to_vec();
    snapshot.commit(group, &[&w, m, step]).unwrap_or_else(|e| c.die("commit", e));
}

/// Trains on `group` from `carried` (None: from the start) until the end or
/// a lost peer; `previous` (the old layout's snapshot) is dropped once this
/// layout's first commit succeeded; `die_at`: the step this rank SIGKILLs
/// itself in, if any; `fails_at`: the step a loss is expected in.
fn train(
    group: &Group,
    carried: Option<&Carried>,
    previous: Option<ShardedSnapshot>,
    c: &mut Checks,
    die_at: Option<i64>,
    fails_at: i64,
) -> Outcome {
    let options = ShardOptions { strategy: ShardingStrategy::FullShard, sync_module_states: false, param_dtype: None };
    let mut unit = Shard::new(group, &[&initial_w(DIM, SLOPE)[..]], &options).unwrap_or_else(|e| c.die("unit", e));
    let (n, r) = (group.size() as i64, group.rank() as usize);
    let local_len = unit.local::<f64>(0).unwrap_or_else(|e| c.die("local", e)).0.len();
    let mut m = vec![0.0f64; local_len];
    let mut step = [0i64];
    if let Some(k) = carried {
        let saved: Vec<Option<&[f64]>> = k.w.iter().map(|s| s.as_deref()).collect();
        unit.load_sharded(k.world as i32, &saved).unwrap_or_else(|e| c.die("load_sharded", e));
        // The momentum by the same layout: shard j of the old group holds
        // elements [j * S, (j + 1) * S) of the padded flat buffer.
        let old_len = k.m.iter().flatten().next().map_or(1, |s| s.len());
        for (i, v) in m.iter_mut().enumerate() {
            let at = r * local_len + i;
            *v = if at < DIM { k.m[at / old_len].as_ref().map_or(f64::NAN, |s| s[at % old_len]) } else { 0.0 };
        }
        step[0] = k.step;
    }
    let mut snapshot = ShardedSnapshot::new().unwrap_or_else(|e| c.die("snapshot", e));
    let w0 = unit.local::<f64>(0).unwrap_or_else(|e| c.die("local", e)).0.to_vec();
    for (name, b) in [("w", &w0 as &dyn distkit::SnapshotBuffer), ("momentum", &m), ("step", &step)] {
        snapshot.register(name, b).unwrap_or_else(|e| c.die("register", e));
    }
    commit_state(&mut snapshot, group, &mut unit, &m, &step, c);
    drop(previous);
    let mut steps_run = 0;
    while step[0] < STEPS {
        unit.unshard().unwrap_or_else(|e| c.die("unshard", e));
        let full = unit.full_param::<f64>(0).unwrap_or_else(|e| c.die("full_param", e)).to_vec();
        let mut g = gradient(step[0], r as i64 * GLOBAL_BATCH / n, (r as i64 + 1) * GLOBAL_BATCH / n, &full);
        g.iter_mut().for_each(|v| *v *= n as f64 / GLOBAL_BATCH as f64);
        unit.reshard().unwrap_or_else(|e| c.die("reshard", e));
        unit.accumulate_grad(0, &g).unwrap_or_else(|e| c.die("accumulate_grad", e));
        if die_at == Some(step[0]) {
            sigkill_self(c, step[0]);
        }
        if let Err(e) = unit.reduce_grads() {
            println!("rank {}: step {} failed ({e}); recovering", c.rank, step[0]);
            c.check(step[0] == fails_at, "the step the victim died in fails");
            c.check(matches!(e.code(), Code::Unavailable | Code::DeadlineExceeded), "a lost peer or a timeout");
            let (next, grown) = recover(group, c);
            let carried = fetch(&mut snapshot, &next, grown, c);
            return Outcome::Lost(next, grown, carried, steps_run, snapshot);
        }
        {
            let (w, grad) = unit.local::<f64>(0).unwrap_or_else(|e| c.die("local", e));
            for i in 0..w.len() {
                m[i] = BETA * m[i] + grad[i];
                w[i] -= LR * m[i];
            }
        }
        unit.zero_grads();
        step[0] += 1;
        steps_run += 1;
        if step[0] % COMMIT_EVERY == 0 {
            commit_state(&mut snapshot, group, &mut unit, &m, &step, c);
        }
    }
    let mut outs = vec![vec![0.0f64; DIM]];
    unit.gather_full(&mut outs).unwrap_or_else(|e| c.die("gather_full", e));
    Outcome::Done(outs.pop().unwrap(), steps_run, snapshot.bytes(), local_len)
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("pieces") {
        return sharded_pieces::run();
    }
    let mut c = Checks { rank: -1, failures: 0 };
    let (mut group, plan) = Plan::start(&mut c);
    let world_rank = c.rank;

    let mut carried = None;
    if plan.newcomer {
        // init joined the survivors' grow; its snapshot holds nothing.
        let mut empty = ShardedSnapshot::new().unwrap_or_else(|e| c.die("snapshot", e));
        let k = fetch(&mut empty, &group, true, &c);
        println!("rank {world_rank}: replacement fetched commit {} (step {})", k.commit, k.step);
        plan.check_joined(&mut c, k.commit, k.step);
        carried = Some(k);
    }
    let mut recoveries = 0;
    let mut total_steps = 0;
    let mut previous = None;
    let (w, bytes, local_len) = loop {
        let mine =
            if !plan.newcomer && recoveries == 0 && world_rank == plan.victim { Some(plan.die_at) } else { None };
        match train(&group, carried.as_ref(), previous.take(), &mut c, mine, plan.die_at) {
            Outcome::Lost(next, grown, k, steps_run, old) => {
                recoveries += 1;
                plan.check_regroup(&mut c, &next, grown);
                plan.check_recovery(&mut c, &next, grown, "fetched", k.commit, k.step);
                total_steps += steps_run;
                group = next; // the failed group is dropped (destroyed) here
                carried = Some(k);
                previous = Some(old);
            }
            Outcome::Done(w, steps_run, bytes, local_len) => {
                total_steps += steps_run;
                break (w, bytes, local_len);
            }
        }
    };
    // Two shards held (this rank's and its neighbour's), each a header and
    // its buffers from 64-byte boundaries.
    let blob = 64 + 2 * ((local_len as i64 * 8 + 63) / 64 * 64) + 64;
    c.check(bytes == if group.size() > 1 { 2 * blob } else { blob }, "the snapshot holds two shards");
    plan.check_trained(&mut c, &w, initial_w(DIM, SLOPE), total_steps, recoveries);
    let bad = job_failures(&c, &group);
    drop(group);
    distkit::shutdown();
    plan.end(&c, bad, total_steps);
}
