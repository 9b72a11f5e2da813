//! The Reducer checks that the CPU and the device test programs share.

use distkit::Group;

/// find_unused_parameters: parameter 1 is used by the even ranks only
/// (named unused by the odd ranks, left unmarked by the others), 2 by no
/// rank. Every rank gets parameter 1's average over the world (a zero for
/// each rank that did not use it) and zeros for parameter 2, not what its
/// staging buffer held before (the parameters, then the last step's).
pub fn unused_parameters(world: &Group, r: i32, n: i32) {
    use distkit::{Reducer, ReducerOptions};
    let opts = ReducerOptions { first_bucket_cap_mb: 1e-4, find_unused_parameters: true, ..Default::default() };
    let mut red = Reducer::new(world, vec![vec![7.0f64; 5], vec![7.0; 2], vec![7.0; 3]], vec![], &opts).unwrap();
    let grad = |q: i32, p: usize, k: usize, it: i32| match p {
        0 => (q + 1) as f64 * (k as f64 + 1.0) + it as f64,
        _ => 4.0 + q as f64 * (k as f64 + 1.0) + it as f64,
    };
    let used = |q: i32, p: usize| p == 0 || (p == 1 && q % 2 == 0);
    for it in 0..3 {
        if r % 2 == 1 {
            red.prepare(&[1, 2]).unwrap();
        } else if r > 0 {
            red.prepare(&[2]).unwrap();
        }
        for p in 0..2 {
            if used(r, p) {
                red.mark_ready(p, &(0..[5, 2][p]).map(|k| grad(r, p, k, it)).collect::<Vec<_>>()).unwrap();
            }
        }
        let g = red.finalize().unwrap().to_vec();
        for (p, gp) in g.iter().enumerate() {
            for (k, &v) in gp.iter().enumerate() {
                let want = (0..n).filter(|&q| used(q, p)).map(|q| grad(q, p, k, it)).sum::<f64>() / n as f64;
                assert!((v - want).abs() < 1e-9, "find_unused: iteration {it} p{p}[{k}] = {v}, want {want}");
            }
        }
        assert!(red.globally_used(0) && red.globally_used(1) && !red.globally_used(2), "globally used");
    }
}

/// A backward that fails after some gradients were marked ready (a bucket
/// per parameter, so their all_reduces were launched): `abandon` ends the
/// iteration on every rank, and the next full one averages as usual, with
/// no "marked ready twice". Before the first finalize and after it.
pub fn abandoned_iteration(world: &Group, r: i32, n: i32) {
    use distkit::{Reducer, ReducerOptions};
    let opts = ReducerOptions { bucket_cap_mb: 1e-4, first_bucket_cap_mb: 1e-4, ..Default::default() };
    let mut red = Reducer::new(world, vec![vec![0.0f64; 6], vec![0.0; 4], vec![0.0; 3]], vec![], &opts).unwrap();
    let grad = |q: i32, p: usize, k: usize, it: i32| (q + 1) as f64 * (k as f64 + 1.0) + p as f64 - it as f64;
    for it in 0..3 {
        if it != 1 {
            red.mark_ready(2, &[1e9; 3]).unwrap();
            red.mark_ready(1, &[1e9; 4]).unwrap();
            red.abandon().unwrap();
            red.abandon().unwrap(); // outside an iteration: nothing to do
        }
        for p in (0..3).rev() {
            red.mark_ready(p, &(0..[6, 4, 3][p]).map(|k| grad(r, p, k, it)).collect::<Vec<_>>()).unwrap();
        }
        let g = red.finalize().unwrap();
        for (p, gp) in g.iter().enumerate() {
            for (k, &v) in gp.iter().enumerate() {
                let want = (0..n).map(|q| grad(q, p, k, it)).sum::<f64>() / n as f64;
                assert!((v - want).abs() < 1e-9, "after abandon: iteration {it} p{p}[{k}] = {v}, want {want}");
            }
        }
    }
}
