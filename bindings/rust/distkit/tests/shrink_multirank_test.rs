//! Recovery without restarting, from Rust, in a real job: a linear model
//! trained with mean-reduced gradients; before step 5 the last rank dies
//! (vanishes without a word). The survivors' step 5 fails; each shrinks the
//! world to the survivors, redoes step 5 and finishes training at world size
//! - 1. The weights must equal training computed here without communication:
//! steps 0-4 averaged over every rank's data, steps 5-9 over the survivors'.
use distkit::{Code, InitOptions, ReduceOp};
use std::time::Duration;

const DIM: usize = 4;
const STEPS: usize = 10;
const DIES_BEFORE: usize = 5;
const LR: f64 = 0.1;

extern "C" {
    // Ends the process at once, as a crash would: no destructors, no atexit.
    fn _exit(code: i32) -> !;
}

/// Rank r's sample: x = (r+1, 1, -r, 0.5), y = 2r - 1; the squared error's
/// gradient at w.
fn grad_of(r: i32, w: &[f64; DIM]) -> [f64; DIM] {
    let r = r as f64;
    let x = [r + 1.0, 1.0, -r, 0.5];
    let pred: f64 = w.iter().zip(&x).map(|(a, b)| a * b).sum();
    let e = pred - (2.0 * r - 1.0);
    x.map(|xi| e * xi)
}

fn reference(size: i32) -> [f64; DIM] {
    let mut w = [0.0; DIM];
    for step in 0..STEPS {
        let n = if step < DIES_BEFORE { size } else { size - 1 };
        let mut mean = [0.0; DIM];
        for r in 0..n {
            let g = grad_of(r, &w);
            for i in 0..DIM {
                mean[i] += g[i] / n as f64;
            }
        }
        for i in 0..DIM {
            w[i] -= LR * mean[i];
        }
    }
    w
}

fn fail(rank: i32, what: String) -> ! {
    eprintln!("rank {rank}: CHECK FAILED: {what}");
    std::process::exit(1)
}

fn main() {
    let options = InitOptions { timeout: Duration::from_secs(20), ..InitOptions::default() };
    let world = distkit::init("pytorch", &options).unwrap_or_else(|e| fail(-1, format!("init: {e}")));
    let (rank, size) = (world.rank(), world.size());
    if size < 2 {
        println!("rank 0: one rank, nothing to shrink");
        return;
    }
    let mut group = world;
    let mut shrunk = false;
    let mut w = [0.0; DIM];
    let mut step = 0;
    while step < STEPS {
        if step == DIES_BEFORE && rank == size - 1 {
            println!("rank {rank} dies before step {step}");
            unsafe { _exit(0) }
        }
        let mut g = grad_of(rank, &w);
        match group.all_reduce(&mut g, ReduceOp::Mean) {
            Ok(()) => {
                for i in 0..DIM {
                    w[i] -= LR * g[i];
                }
                step += 1;
            }
            Err(e) => {
                if step != DIES_BEFORE || shrunk {
                    fail(rank, format!("step {step} failed: {e}"));
                }
                if !matches!(e.code(), Code::Unavailable | Code::DeadlineExceeded) {
                    fail(rank, format!("the failure is not a lost peer or a timeout: {e}"));
                }
                println!("rank {rank}: step {step} failed ({e}); shrinking");
                let survivors = group.shrink(Duration::from_secs(2)).unwrap_or_else(|e| fail(rank, format!("shrink: {e}")));
                if survivors.size() != size - 1 || survivors.rank() != rank {
                    fail(rank, format!("survivors' group: rank {} of {}", survivors.rank(), survivors.size()));
                }
                group = survivors; // the failed world is destroyed here
                shrunk = true; // and step 5 is redone at the smaller size
            }
        }
    }
    if !shrunk {
        fail(rank, "the job never shrank".to_string());
    }
    let want = reference(size);
    for i in 0..DIM {
        if (w[i] - want[i]).abs() > 1e-9 * (1.0 + want[i].abs()) {
            fail(rank, format!("w[{i}] = {}, training without communication gives {}", w[i], want[i]));
        }
    }
    group.barrier().unwrap_or_else(|e| fail(rank, format!("barrier: {e}")));
    drop(group);
    distkit::shutdown();
    println!("rank {rank}: trained on after the shrink, w[0]={:.6}", w[0]);
}
