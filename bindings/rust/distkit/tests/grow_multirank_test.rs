//! Elastic recovery from Rust, under distrun --max-replacements 1, as
//! capi/test/grow_c_multirank_test.c does it in C: N ranks run checked
//! all_reduces; before step DIE_AT rank 1 SIGKILLs itself. The survivors'
//! step fails (a lost peer or a timeout); they shrink the world
//! (`Group::shrink`) and run checked steps at N - 1, then `Group::grow` on
//! the shrunk group while distrun's new process for rank 1
//! (DISTKIT_REPLACEMENT=1) enters through `distkit::init`, which joins the
//! same grow and returns the grown group as its world. Everyone then holds a
//! group of N again, in the original rank order (an all_gather of world
//! ranks says so); the groups the survivors grew from are aborted; the
//! newcomer gets the step counter by broadcast and the steps at N are checked
//! again. At world size 2 the lone survivor shrinks to a group of one (its
//! steps there are its own values). With the argument "direct" the survivors
//! grow straight from the failed world, without a shrink. Every expected sum
//! is computed here from the formula for the members each phase must have; a
//! failed check exits 1, which the spent replacement budget turns into the
//! job's failure.
use distkit::{Code, Group, InitOptions, ReduceOp};
use std::time::Duration;

const DIM: usize = 5;
const VICTIM: i32 = 1;
const DIE_AT: i64 = 3;
const SHRUNK_STEPS: i64 = 3;
const GROWN_STEPS: i64 = 3;
const TIMEOUT: Duration = Duration::from_secs(20);
const SIGKILL: i32 = 9;

extern "C" {
    fn raise(sig: i32) -> i32;
}

/// World rank r's contribution at `step`.
fn value(step: i64, r: i32, i: usize) -> f64 {
    (step + 1) as f64 * 100.0 + (r + 1) as f64 * (i + 1) as f64
}

fn fail(rank: i32, what: String) -> ! {
    eprintln!("rank {rank}: CHECK FAILED: {what}");
    std::process::exit(1)
}

/// One all_reduce (sum) on `group` at `step`, checked against the sum over
/// the world ranks `members`; returns the library's error.
fn step_on(group: &Group, rank: i32, step: i64, members: &[i32]) -> distkit::Result<()> {
    let mut v: Vec<f64> = (0..DIM).map(|i| value(step, rank, i)).collect();
    group.all_reduce(&mut v, ReduceOp::Sum)?;
    for (i, got) in v.iter().enumerate() {
        let want: f64 = members.iter().map(|&r| value(step, r, i)).sum();
        if *got != want {
            fail(rank, format!("step {step} [{i}] = {got}, the sum over {members:?} is {want}"));
        }
    }
    Ok(())
}

/// The world ranks of `group`'s members, in group order, by all_gather.
fn check_order(group: &Group, rank: i32, members: &[i32]) {
    let mut all = vec![-1i64; members.len()];
    group.all_gather(&[rank as i64], &mut all).unwrap_or_else(|e| fail(rank, format!("all_gather: {e}")));
    let want: Vec<i64> = members.iter().map(|&r| r as i64).collect();
    if all != want {
        fail(rank, format!("group ranks {all:?}, want the original world order {want:?}"));
    }
}

/// A group the survivors grew from: aborted, nothing runs on it again.
fn check_aborted(group: &Group, rank: i32, what: &str) {
    if group.all_reduce(&mut [1.0f64], ReduceOp::Sum).is_ok() {
        fail(rank, format!("{what} still runs collectives after the grow"));
    }
}

fn main() {
    let direct = std::env::args().nth(1).as_deref() == Some("direct");
    let shrunk_steps = if direct { 0 } else { SHRUNK_STEPS };
    let replacement = std::env::var("DISTKIT_REPLACEMENT").unwrap_or_default();
    let options = InitOptions { timeout: TIMEOUT, connect_timeout: Some(TIMEOUT), ..InitOptions::default() };
    let world = distkit::init("pytorch", &options).unwrap_or_else(|e| fail(-1, format!("init: {e}")));
    let (rank, size) = (world.rank(), world.size());
    if size < 2 {
        fail(rank, format!("needs 2 ranks or more, has {size}"));
    }
    let everyone: Vec<i32> = (0..size).collect();
    let survivors: Vec<i32> = everyone.iter().copied().filter(|&r| r != VICTIM).collect();
    let mut step: i64 = 0;
    let grown = if !replacement.is_empty() {
        // init joined the survivors' grow: its world is the grown group.
        if replacement != "1" || rank != VICTIM {
            fail(rank, format!("replacement {replacement} of rank {rank}: want the first, of rank {VICTIM}"));
        }
        println!("rank {rank}: replacement {replacement} joined '{}'", world.name().unwrap_or_default());
        world
    } else {
        while step < DIE_AT {
            step_on(&world, rank, step, &everyone).unwrap_or_else(|e| fail(rank, format!("step {step}: {e}")));
            step += 1;
        }
        if rank == VICTIM {
            println!("rank {rank}: SIGKILL before step {step}");
            unsafe { raise(SIGKILL) };
            unreachable!("SIGKILL returned");
        }
        match step_on(&world, rank, step, &everyone) {
            Ok(()) => fail(rank, format!("step {step}, the one rank {VICTIM} died in, succeeded")),
            Err(e) if matches!(e.code(), Code::Unavailable | Code::DeadlineExceeded) => {
                let next = if direct { "growing from the failed world" } else { "shrinking" };
                println!("rank {rank}: step {step} failed ({e}); {next}");
            }
            Err(e) => fail(rank, format!("step {step} failed, but not as a lost peer or a timeout: {e}")),
        }
        let grown = if direct {
            let grown = world.grow(None, Some(TIMEOUT)).unwrap_or_else(|e| fail(rank, format!("grow: {e}")));
            check_aborted(&world, rank, "the failed world");
            grown
        } else {
            let shrunk = world.shrink(Duration::from_secs(2)).unwrap_or_else(|e| fail(rank, format!("shrink: {e}")));
            let want_rank = survivors.iter().position(|&r| r == rank).unwrap() as i32;
            if shrunk.size() != size - 1 || shrunk.rank() != want_rank {
                fail(rank, format!("survivors' group: rank {} of {}", shrunk.rank(), shrunk.size()));
            }
            check_order(&shrunk, rank, &survivors);
            for _ in 0..SHRUNK_STEPS {
                step_on(&shrunk, rank, step, &survivors)
                    .unwrap_or_else(|e| fail(rank, format!("step {step} at world size - 1: {e}")));
                step += 1;
            }
            println!("rank {rank}: {SHRUNK_STEPS} steps at {} ranks; growing", size - 1);
            let grown = shrunk.grow(None, Some(TIMEOUT)).unwrap_or_else(|e| fail(rank, format!("grow: {e}")));
            check_aborted(&shrunk, rank, "the shrunk group");
            check_aborted(&world, rank, "the failed world");
            grown
        };
        drop(world); // the shrunk group dropped above; the grown group lives on
        grown
    };
    // Both sides: a group of the job's size, world ranks kept, generation 1.
    let name = grown.name().unwrap_or_default();
    if grown.size() != size || grown.rank() != rank || !name.starts_with("world@g1") {
        fail(
            rank,
            format!(
                "grown group '{name}': rank {} of {}, want {rank} of {size} in world@g1",
                grown.rank(),
                grown.size()
            ),
        );
    }
    check_order(&grown, rank, &everyone);
    let mut counter = [step];
    grown.broadcast(&mut counter, 0).unwrap_or_else(|e| fail(rank, format!("broadcast of the step: {e}")));
    if counter[0] != DIE_AT + shrunk_steps {
        fail(rank, format!("step counter {} from rank 0, want {}", counter[0], DIE_AT + shrunk_steps));
    }
    step = counter[0];
    for _ in 0..GROWN_STEPS {
        step_on(&grown, rank, step, &everyone)
            .unwrap_or_else(|e| fail(rank, format!("step {step} after the grow: {e}")));
        step += 1;
    }
    grown.barrier().unwrap_or_else(|e| fail(rank, format!("barrier: {e}")));
    drop(grown);
    distkit::shutdown();
    let how = if !replacement.is_empty() {
        "joined as a replacement"
    } else if direct {
        "grew from the failed world"
    } else {
        "shrank and grew"
    };
    println!("rank {rank}: {how}, back at {size} ranks, {step} steps checked");
}
