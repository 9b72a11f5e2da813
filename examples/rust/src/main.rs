//! Data-parallel training in Rust with distkit: linear regression on flat
//! buffers, each rank on its own shard of a synthetic dataset. distkit's
//! Reducer (the engine of DDP) broadcasts rank 0's parameters, and averages
//! the gradients each step: bucket all_reduces start as soon as a gradient is
//! marked ready, overlapping the rest of the backward computation.
//!
//!     bazel run //tools/distrun -- --nproc-per-node 4 -- $PWD/bazel-bin/examples/rust/train.bin
//!
//! Options: --steps N (default 200), --lr X (default 0.05), --sharded (the
//! parameters live sharded across the ranks, FSDP's FULL_SHARD, through
//! distkit's Shard; otherwise every rank holds them, DDP's way).
use std::time::Instant;

use distkit::{InitOptions, ReduceOp, Reducer, ReducerOptions, Shard, ShardOptions};

const FEATURES: usize = 16;
const SAMPLES: usize = 8192;
const BATCH: usize = 32; // per rank

/// Sample k of the synthetic dataset: features in [-1, 1) from a
/// deterministic generator, and y = w_true . x + b_true + small noise.
fn sample(k: usize) -> ([f32; FEATURES], f32) {
    let mut state = (k as u64).wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let mut next = || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    };
    let mut x = [0f32; FEATURES];
    for v in x.iter_mut() {
        *v = next();
    }
    let y = (0..FEATURES).map(|j| true_weight(j) * x[j]).sum::<f32>() + 0.5 + 0.01 * next();
    (x, y)
}

fn true_weight(j: usize) -> f32 {
    (j as f32 - 7.5) / 8.0
}

fn arg(name: &str, default: f64) -> f64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().unwrap_or_else(|_| panic!("{name} takes a number")))
        .unwrap_or(default)
}

fn main() -> distkit::Result<()> {
    let steps = arg("--steps", 200.0) as usize;
    let lr = arg("--lr", 0.05) as f32;
    let world = distkit::init("pytorch", &InitOptions::default())?;
    let (rank, size) = (world.rank() as usize, world.size() as usize);

    // Parameters: the weights and the bias, each rank starting elsewhere;
    // the reducer (or the sharded unit) replaces them with rank 0's.
    let weights: Vec<f32> = (0..FEATURES).map(|j| 0.01 * j as f32 + rank as f32).collect();
    let sharded = std::env::args().any(|a| a == "--sharded");
    let mut engine = if sharded {
        Engine::Sharded(Shard::new(&world, &[&weights, &[rank as f32]], &ShardOptions::default())?)
    } else {
        Engine::Replicated(Reducer::new(&world, vec![weights, vec![rank as f32]], Vec::new(), &ReducerOptions::default())?)
    };

    // This rank's part of the data: samples rank, rank + size, ...
    let shard: Vec<usize> = (rank..SAMPLES).step_by(size).collect();
    let (mut first_loss, mut last_loss) = (None, 0f32);
    let start = Instant::now();
    for step in 1..=steps {
        // Forward and backward on this rank's batch.
        let (mut gw, mut gb, mut loss) = (vec![0f32; FEATURES], 0f32, 0f32);
        {
            let (w, b) = engine.params()?;
            for k in 0..BATCH {
                let (x, y) = sample(shard[((step - 1) * BATCH + k) % shard.len()]);
                let err = (0..FEATURES).map(|j| w[j] * x[j]).sum::<f32>() + b - y;
                for j in 0..FEATURES {
                    gw[j] += 2.0 * err * x[j] / BATCH as f32;
                }
                gb += 2.0 * err / BATCH as f32;
                loss += err * err / BATCH as f32;
            }
        }
        engine.step(&gw, gb, lr)?;
        let mut global_loss = [loss];
        world.all_reduce(&mut global_loss, ReduceOp::Mean)?;
        let loss = global_loss[0];
        first_loss.get_or_insert(loss);
        last_loss = loss;
        if rank == 0 && (step % 20 == 0 || step == 1) {
            let samples_per_s = (step * BATCH * size) as f64 / start.elapsed().as_secs_f64();
            println!("step {step:4}  loss {loss:.6}  samples/s {samples_per_s:.0}");
        }
    }
    let params: Vec<f32> = engine.full_params()?;

    // Every rank must hold the same parameters, bit for bit.
    let mut all = vec![0f32; params.len() * size];
    world.all_gather(&params, &mut all)?;
    let identical = all.chunks(params.len()).all(|c| c.iter().zip(&params).all(|(a, b)| a.to_bits() == b.to_bits()));
    let first = first_loss.unwrap_or(0.0);
    let max_weight_error = (0..FEATURES).map(|j| (params[j] - true_weight(j)).abs()).fold(0f32, f32::max);
    if rank == 0 {
        println!(
            "done: loss {first:.4} -> {last_loss:.6}, max |w - w_true| {max_weight_error:.4}, parameters identical on all {size} ranks: {identical}"
        );
    }
    if !identical || !(last_loss < first / 10.0) {
        eprintln!("rank {rank}: training check failed (identical {identical}, loss {first} -> {last_loss})");
        std::process::exit(1);
    }
    Ok(())
}

/// The two ways to train: every rank holds the parameters (DDP's Reducer)
/// or each holds a shard (FSDP's Shard).
enum Engine<'g> {
    Replicated(Reducer<'g, f32>),
    Sharded(Shard<'g>),
}

impl Engine<'_> {
    /// The full weights and bias for this step's forward.
    fn params(&mut self) -> distkit::Result<(Vec<f32>, f32)> {
        match self {
            Engine::Replicated(r) => Ok((r.params()[0].clone(), r.params()[1][0])),
            Engine::Sharded(s) => {
                s.unshard()?;
                let w = s.full_param::<f32>(0)?.to_vec();
                let b = s.full_param::<f32>(1)?[0];
                s.reshard()?; // FULL_SHARD: only the shard stays between uses
                Ok((w, b))
            }
        }
    }

    /// Averages the gradients across ranks and takes an SGD step.
    fn step(&mut self, gw: &[f32], gb: f32, lr: f32) -> distkit::Result<()> {
        match self {
            Engine::Replicated(r) => {
                // Backward produces the last parameter's gradient first.
                r.mark_ready(1, &[gb])?;
                r.mark_ready(0, gw)?;
                r.finalize()?;
                let (params, grads) = r.params_and_grads();
                for (p, g) in params.into_iter().zip(grads) {
                    for (v, d) in p.iter_mut().zip(g) {
                        *v -= lr * d;
                    }
                }
            }
            Engine::Sharded(s) => {
                s.accumulate_grad(1, &[gb])?;
                s.accumulate_grad(0, gw)?;
                // Started, then finished: a trainer with more layers would
                // compute the next ones in between.
                s.reduce_grads_start()?;
                s.reduce_grads_wait()?;
                let (values, grads) = s.local::<f32>(0)?;
                for (v, d) in values.iter_mut().zip(grads) {
                    *v -= lr * d;
                }
                s.zero_grads();
            }
        }
        Ok(())
    }

    /// Every parameter, concatenated (collective when sharded).
    fn full_params(&mut self) -> distkit::Result<Vec<f32>> {
        match self {
            Engine::Replicated(r) => Ok(r.params().concat()),
            Engine::Sharded(s) => {
                let mut outs = vec![vec![0f32; FEATURES], vec![0f32; 1]];
                s.gather_full(&mut outs)?;
                Ok(outs.concat())
            }
        }
    }
}
