//! The pieces of `distkit::ShardedSnapshot` in a real job (the program's
//! argument "pieces") (as cc/elastic's
//! sharded_snapshot_test in C++ and capi's sharded_elastic_c tests in C).
//! Each rank commits its own shard (r + 2 values, so sizes differ, and a
//! step) twice on the world; then, on groups that leave ranks out as a loss
//! would, every member fetches every shard and finds rank j's second commit
//! in shard j; a member asking for its own shard alone gets it without
//! traffic; two neighbours left out together are `Code::DataLoss` on every
//! member; a `Shard`'s local values committed on the world and fetched by the
//! members of a group without rank k load into a unit on that group
//! (`Shard::load_sharded` re-shards them) whose full parameter is the one
//! sharded; and a snapshot nobody committed is `Code::FailedPrecondition`.
use distkit::{Code, Group, InitOptions, Shard, ShardOptions, ShardedSnapshot};
use std::time::Duration;

fn values(r: i32, c: i32) -> Vec<f64> {
    (0..r + 2).map(|i| 1000.0 * c as f64 + 10.0 * r as f64 + i as f64).collect()
}

fn fail(rank: i32, what: String) -> ! {
    eprintln!("rank {rank}: CHECK FAILED: {what}");
    std::process::exit(1)
}

fn f64s(bytes: &[u8]) -> Vec<f64> {
    bytes.chunks_exact(8).map(|c| f64::from_ne_bytes(c.try_into().unwrap())).collect()
}

/// A snapshot of this rank's shard, committed twice on `world`.
fn committed(world: &Group) -> ShardedSnapshot {
    let rank = world.rank();
    let mut w = values(rank, 0);
    let mut step = 0i64;
    let mut s = ShardedSnapshot::new().unwrap_or_else(|e| fail(rank, format!("new: {e}")));
    s.register("w", &w).and_then(|_| s.register("step", &step)).unwrap_or_else(|e| fail(rank, format!("register: {e}")));
    for c in 1..=2 {
        w = values(rank, c);
        step = 100 * c as i64 + rank as i64;
        s.commit(world, &[&w, &step]).unwrap_or_else(|e| fail(rank, format!("commit {c}: {e}")));
    }
    if s.commit_number() != 2 {
        fail(rank, format!("commit number {}", s.commit_number()));
    }
    s
}

fn check_shard(s: &ShardedSnapshot, j: i32, rank: i32, case: &str) {
    let w = s.shard(j, 0).unwrap_or_else(|e| fail(rank, format!("{case}: shard {j}: {e}")));
    let step = s.shard(j, 1).unwrap_or_else(|e| fail(rank, format!("{case}: shard {j}: {e}")));
    let step = i64::from_ne_bytes(step.try_into().unwrap_or_else(|_| fail(rank, format!("{case}: step size"))));
    if f64s(w) != values(j, 2) || step != 200 + j as i64 {
        fail(rank, format!("{case}: shard {j} is not rank {j}'s second commit (step {step})"));
    }
}

/// Every member of a group without `lost` fetches every shard.
fn recover(world: &Group, lost: &[i32]) {
    let (rank, n) = (world.rank(), world.size());
    let mut s = committed(world);
    let members: Vec<i32> = (0..n).filter(|r| !lost.contains(r)).collect();
    let group = world.new_group(&members).unwrap_or_else(|e| fail(rank, format!("new_group: {e}")));
    let case = format!("lost {lost:?} of {n}");
    if members.contains(&rank) {
        let got = s.fetch(&group, None);
        let neighbours = lost.len() == 2 && (lost[1] - lost[0] == 1 || (lost[0] == 0 && lost[1] == n - 1));
        if neighbours && n > 2 {
            let shard = if lost[0] == 0 && lost[1] == n - 1 { 0 } else { lost[1] };
            match got {
                Err(e) if e.code() == Code::DataLoss && e.message().contains(&format!("shard(s) {shard} of commit 2")) => {}
                other => fail(rank, format!("{case}: want DATA_LOSS naming shard {shard}, got {other:?}")),
            }
        } else {
            let got = got.unwrap_or_else(|e| fail(rank, format!("{case}: fetch: {e}")));
            if got.commit != 2 || got.world != n {
                fail(rank, format!("{case}: fetched {got:?}"));
            }
            for j in 0..n {
                check_shard(&s, j, rank, &case);
            }
        }
    }
    world.barrier().unwrap_or_else(|e| fail(rank, format!("{case}: barrier: {e}")));
}

/// A unit's shards through the snapshot, re-sharded over the members of a
/// group without `lost`.
fn reshard_unit(world: &Group, lost: i32) {
    let (rank, n) = (world.rank(), world.size());
    let full: Vec<f64> = (0..10).map(|i| 0.5 + i as f64).collect();
    let options = ShardOptions::default();
    let mut unit = Shard::new(world, &[&full[..]], &options).unwrap_or_else(|e| fail(rank, format!("unit: {e}")));
    let local = unit.local::<f64>(0).unwrap_or_else(|e| fail(rank, format!("local: {e}"))).0.to_vec();
    let mut s = ShardedSnapshot::new().unwrap_or_else(|e| fail(rank, format!("new: {e}")));
    s.register("w", &local).unwrap_or_else(|e| fail(rank, format!("register: {e}")));
    s.commit(world, &[&local]).unwrap_or_else(|e| fail(rank, format!("commit: {e}")));
    let members: Vec<i32> = (0..n).filter(|r| *r != lost).collect();
    let group = world.new_group(&members).unwrap_or_else(|e| fail(rank, format!("new_group: {e}")));
    if rank != lost {
        let got = s.fetch(&group, None).unwrap_or_else(|e| fail(rank, format!("unit fetch: {e}")));
        let shards: Vec<Option<&[f64]>> = (0..got.world)
            .map(|j| Some(s.shard_as::<f64>(j, 0).unwrap_or_else(|e| fail(rank, format!("shard {j}: {e}")))))
            .collect();
        let zeros = vec![0.0f64; full.len()];
        let mut unit2 =
            Shard::new(&group, &[&zeros[..]], &options).unwrap_or_else(|e| fail(rank, format!("new unit: {e}")));
        unit2.load_sharded(got.world, &shards).unwrap_or_else(|e| fail(rank, format!("load_sharded: {e}")));
        let mut outs = vec![vec![0.0f64; full.len()]];
        unit2.gather_full(&mut outs).unwrap_or_else(|e| fail(rank, format!("gather_full: {e}")));
        if outs[0] != full {
            fail(rank, format!("without rank {lost}: the re-sharded unit holds {:?}", outs[0]));
        }
    }
    world.barrier().unwrap_or_else(|e| fail(rank, format!("barrier: {e}")));
}

pub fn run() {
    let options = InitOptions { timeout: Duration::from_secs(20), ..InitOptions::default() };
    let world = distkit::init("pytorch", &options).unwrap_or_else(|e| fail(-1, format!("init: {e}")));
    let (rank, n) = (world.rank(), world.size());
    recover(&world, &[]);
    for k in 0..n {
        if n > 1 {
            recover(&world, &[k]);
        }
    }
    if n > 2 {
        recover(&world, &[0, 1]);
        recover(&world, &[0, n - 1]);
    }
    reshard_unit(&world, if n > 1 { n - 1 } else { -1 });
    // Its own shard alone: from this rank's memory, nothing received.
    let mut s = committed(&world);
    let held = s.bytes();
    s.fetch(&world, Some(&[rank])).unwrap_or_else(|e| fail(rank, format!("own shard: {e}")));
    check_shard(&s, rank, rank, "own shard");
    if s.bytes() != held {
        fail(rank, format!("own shard: {} bytes held, {held} before", s.bytes()));
    }
    // Nothing committed anywhere.
    let mut empty = ShardedSnapshot::new().unwrap_or_else(|e| fail(rank, format!("new: {e}")));
    match empty.fetch(&world, None) {
        Err(e) if e.code() == Code::FailedPrecondition => {}
        other => fail(rank, format!("nothing committed: want FAILED_PRECONDITION, got {other:?}")),
    }
    world.barrier().unwrap_or_else(|e| fail(rank, format!("barrier: {e}")));
    println!("rank {rank}: sharded snapshot: passed");
}
