//! Every rank of a real job (start it with distrun) runs every collective the
//! Rust binding offers, for every element type, and checks each result
//! against values it computes itself. Exits non-zero on the first mismatch.
mod reducer_check;

use std::time::{Duration, Instant};

use distkit::{Code, Element, Group, GroupOptions, ReduceOp, BF16, F16};

/// Test values are small integers, exact in every element type.
trait Value: Element + PartialEq + std::fmt::Debug {
    fn from_f64(x: f64) -> Self;
    fn to_f64(self) -> f64;
    const INTEGER: bool;
}
macro_rules! value {
    ($t:ty, $int:expr) => {
        impl Value for $t {
            fn from_f64(x: f64) -> Self { x as $t }
            fn to_f64(self) -> f64 { self as f64 }
            const INTEGER: bool = $int;
        }
    };
}
value!(f32, false);
value!(f64, false);
value!(i8, true);
value!(u8, true);
value!(i32, true);
value!(i64, true);
impl Value for F16 {
    fn from_f64(x: f64) -> Self { F16::from_f32(x as f32) }
    fn to_f64(self) -> f64 { self.to_f32() as f64 }
    const INTEGER: bool = false;
}
impl Value for BF16 {
    fn from_f64(x: f64) -> Self { BF16::from_f32(x as f32) }
    fn to_f64(self) -> f64 { self.to_f32() as f64 }
    const INTEGER: bool = false;
}

fn value(rank: i32, i: usize) -> f64 {
    ((rank + 1) as f64) * ((i % 7) as f64 + 1.0)
}
fn small(rank: i32, i: usize) -> f64 {
    1.0 + ((rank as usize + i) % 2) as f64
}

fn fail(what: String) -> ! {
    eprintln!("FAILED: {what}");
    std::process::exit(1)
}

fn close(got: f64, want: f64, what: &str, i: usize) {
    let tol = 1e-2 * want.abs().max(1.0);
    if (got - want).abs() > tol {
        fail(format!("{what}[{i}]: got {got}, want {want}"));
    }
}

fn check_type<T: Value>(g: &Group, name: &str) {
    let (r, n) = (g.rank(), g.size());
    let len = 37;
    let ranks = 0..n;
    let mk = |f: &dyn Fn(i32, usize) -> f64, rank: i32| -> Vec<T> { (0..len).map(|i| T::from_f64(f(rank, i))).collect() };
    let ok = |res: distkit::Result<()>, what: &str| {
        if let Err(e) = res {
            fail(format!("{what} {name}: {e}"))
        }
    };

    // all_reduce: sum, max, min, product, mean.
    let cases: [(ReduceOp, &dyn Fn(i32, usize) -> f64); 5] =
        [(ReduceOp::Sum, &value), (ReduceOp::Max, &value), (ReduceOp::Min, &value), (ReduceOp::Product, &small), (ReduceOp::Mean, &value)];
    for (op, f) in cases {
        let mut data = mk(f, r);
        ok(g.all_reduce(&mut data, op), &format!("all_reduce {op:?}"));
        for (i, x) in data.iter().enumerate() {
            let vals: Vec<f64> = ranks.clone().map(|q| f(q, i)).collect();
            let want = match op {
                ReduceOp::Sum => vals.iter().sum(),
                ReduceOp::Max => vals.iter().cloned().fold(f64::MIN, f64::max),
                ReduceOp::Min => vals.iter().cloned().fold(f64::MAX, f64::min),
                ReduceOp::Product => vals.iter().product(),
                _ => {
                    let s: f64 = vals.iter().sum();
                    if T::INTEGER { (s / n as f64).trunc() } else { s / n as f64 }
                }
            };
            close(x.to_f64(), want, &format!("all_reduce {op:?} {name}"), i);
        }
    }
    // broadcast from each root in turn.
    for root in ranks.clone() {
        let mut data = mk(&value, r);
        ok(g.broadcast(&mut data, root), "broadcast");
        for (i, x) in data.iter().enumerate() {
            close(x.to_f64(), value(root, i), &format!("broadcast from {root} {name}"), i);
        }
    }
    // reduce to the last rank.
    let root = n - 1;
    let mut data = mk(&value, r);
    ok(g.reduce(&mut data, ReduceOp::Sum, root), "reduce");
    for (i, x) in data.iter().enumerate() {
        let want = if r == root { ranks.clone().map(|q| value(q, i)).sum() } else { value(r, i) };
        close(x.to_f64(), want, &format!("reduce {name}"), i);
    }
    // all_gather and gather.
    let input = mk(&value, r);
    let mut out = vec![T::from_f64(0.0); len * n as usize];
    ok(g.all_gather(&input, &mut out), "all_gather");
    for (j, x) in out.iter().enumerate() {
        close(x.to_f64(), value((j / len) as i32, j % len), &format!("all_gather {name}"), j);
    }
    let mut out = vec![T::from_f64(0.0); len * n as usize];
    ok(g.gather(&input, if r == 0 { Some(&mut out[..]) } else { None }, 0), "gather");
    if r == 0 {
        for (j, x) in out.iter().enumerate() {
            close(x.to_f64(), value((j / len) as i32, j % len), &format!("gather {name}"), j);
        }
    }
    // scatter from rank 0: part q holds value(q, .).
    let full: Vec<T> = (0..n).flat_map(|q| mk(&value, q)).collect();
    let mut part = vec![T::from_f64(0.0); len];
    ok(g.scatter(if r == 0 { Some(&full[..]) } else { None }, &mut part, 0), "scatter");
    for (i, x) in part.iter().enumerate() {
        close(x.to_f64(), value(r, i), &format!("scatter {name}"), i);
    }
    // reduce_scatter: input element j is value(rank, j); rank r gets part r summed.
    let input: Vec<T> = (0..len * n as usize).map(|j| T::from_f64(value(r, j))).collect();
    let mut part = vec![T::from_f64(0.0); len];
    ok(g.reduce_scatter(&input, &mut part, ReduceOp::Sum), "reduce_scatter");
    for (i, x) in part.iter().enumerate() {
        let j = r as usize * len + i;
        close(x.to_f64(), ranks.clone().map(|q| value(q, j)).sum(), &format!("reduce_scatter {name}"), i);
    }
    // all_to_all, equal parts: element i of the part for q is 100 * rank + q + i % 5.
    let input: Vec<T> = (0..n as usize * 3).map(|j| T::from_f64((10 * r as usize + j / 3 + j % 3) as f64)).collect();
    let mut out = vec![T::from_f64(0.0); n as usize * 3];
    ok(g.all_to_all(&input, &mut out), "all_to_all");
    for (j, x) in out.iter().enumerate() {
        let src = j / 3;
        close(x.to_f64(), (10 * src + r as usize + j % 3) as f64, &format!("all_to_all {name}"), j);
    }
}

fn check_bitwise<T: Value>(g: &Group, name: &str, ops: &[(ReduceOp, fn(i64, i64) -> i64)]) {
    for &(op, f) in ops {
        let mut data: Vec<T> = (0..19).map(|i| T::from_f64(((g.rank() as usize * 5 + i) % 8) as f64)).collect();
        g.all_reduce(&mut data, op).unwrap_or_else(|e| fail(format!("{op:?} {name}: {e}")));
        for (i, x) in data.iter().enumerate() {
            let want = (1..g.size()).fold((i % 8) as i64, |acc, q| f(acc, ((q as usize * 5 + i) % 8) as i64));
            close(x.to_f64(), want as f64, &format!("{op:?} {name}"), i);
        }
    }
}

/// Subgroups with options of their own (ABI 0.11), under a parent with the
/// default 30-minute timeout: a collective one member skips fails on the
/// others after the subgroup's 1 s; a named subgroup is made by its members
/// alone; a creation a member never joins fails after the connect timeout.
fn subgroups_with_options(world: &Group) {
    let (r, n) = (world.rank(), world.size());
    let all: Vec<i32> = (0..n).collect();
    // Its creation may take a loaded machine's while; its operations, 3 s.
    let quick = GroupOptions::default().timeout(Duration::from_secs(3)).connect_timeout(Duration::from_secs(60));
    let sub =
        world.new_group_with_options(&all, &quick).unwrap_or_else(|e| fail(format!("new_group_with_options: {e}")));
    assert_eq!((sub.rank(), sub.size()), (r, n));
    let mut v = vec![r + 1; 4];
    sub.all_reduce(&mut v, ReduceOp::Sum).unwrap_or_else(|e| fail(format!("all_reduce on the subgroup: {e}")));
    assert!(v.iter().all(|&x| x == n * (n + 1) / 2), "subgroup sum {v:?}");
    if n > 1 {
        if r != n - 1 {
            // The last rank skips this one.
            let start = Instant::now();
            let e = sub.all_reduce(&mut v, ReduceOp::Sum).expect_err("a collective the last rank skipped");
            let took = start.elapsed();
            assert_eq!(e.code(), Code::DeadlineExceeded, "{e}");
            assert!(
                took >= Duration::from_secs(2) && took < Duration::from_secs(20),
                "the skipped collective failed after {took:?}, not the subgroup's 3 s"
            );
        }
        // The last rank keeps its handle until the others have timed out
        // (dropping it closes its connections: Unavailable, not a timeout).
        world.barrier().unwrap_or_else(|e| fail(format!("barrier after the timeout: {e}")));
    }
    drop(sub);

    let mut pair = vec![0, n - 1];
    pair.dedup();
    if pair.contains(&r) {
        let options =
            GroupOptions::named("timed-pair").timeout(Duration::from_secs(10)).connect_timeout(Duration::from_secs(20));
        let named = world
            .new_group_with_options(&pair, &options)
            .unwrap_or_else(|e| fail(format!("named new_group_with_options: {e}")));
        let name = named.name().unwrap_or_default();
        assert!(name.contains("timed-pair"), "named subgroup is called {name:?}");
        let mut v = vec![r + 1; 3];
        named.all_reduce(&mut v, ReduceOp::Sum).unwrap_or_else(|e| fail(format!("named subgroup all_reduce: {e}")));
        let want: i32 = pair.iter().map(|q| q + 1).sum();
        assert!(v.iter().all(|&x| x == want), "named subgroup sum {v:?}, want {want}");
    }
    if n > 1 && r == 0 {
        // Rank n - 1 never comes: the creation gives up after 1 s.
        let options = GroupOptions::named("never-joined").connect_timeout(Duration::from_secs(1));
        let start = Instant::now();
        let e = world.new_group_with_options(&[0, n - 1], &options).expect_err("a member that never came");
        let took = start.elapsed();
        assert_eq!(e.code(), Code::DeadlineExceeded, "{e}");
        assert!(took < Duration::from_secs(20), "the creation failed after {took:?}, not the connect timeout's 1 s");
    }
    let e = world.new_group_with_options(&all, &GroupOptions::named("a/b")).expect_err("'/' in the name");
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    world.barrier().unwrap_or_else(|e| fail(format!("barrier after the subgroups with options: {e}")));
}

fn main() {
    let world = distkit::init("pytorch", &distkit::InitOptions::default()).unwrap_or_else(|e| fail(format!("init: {e}")));
    let (r, n) = (world.rank(), world.size());
    assert_eq!(r.to_string(), std::env::var("RANK").unwrap());
    assert_eq!(n.to_string(), std::env::var("WORLD_SIZE").unwrap());
    assert!(distkit::is_distributed());
    assert_eq!(world.backend().as_deref(), Some("gloo"));

    check_type::<f32>(&world, "f32");
    check_type::<f64>(&world, "f64");
    check_type::<i8>(&world, "i8");
    check_type::<u8>(&world, "u8");
    check_type::<i32>(&world, "i32");
    check_type::<i64>(&world, "i64");
    check_type::<F16>(&world, "f16");
    check_type::<BF16>(&world, "bf16");
    let bit: [(ReduceOp, fn(i64, i64) -> i64); 3] = [(ReduceOp::BitAnd, |a, b| a & b), (ReduceOp::BitOr, |a, b| a | b), (ReduceOp::BitXor, |a, b| a ^ b)];
    check_bitwise::<i32>(&world, "i32", &bit);
    check_bitwise::<u8>(&world, "u8", &bit);
    check_bitwise::<i64>(&world, "i64", &bit);
    // bool: or / and over "rank is even".
    let mut flags = vec![r % 2 == 0; 5];
    world.all_reduce(&mut flags, ReduceOp::BitOr).unwrap();
    assert!(flags.iter().all(|&f| f));
    let mut flags = vec![r % 2 == 0; 5];
    world.all_reduce(&mut flags, ReduceOp::BitAnd).unwrap();
    assert!(flags.iter().all(|&f| f == (n == 1)));
    // Bitwise ops on floats are refused, naming op and dtype.
    let mut fl = vec![1.0f32; 3];
    let e = world.all_reduce(&mut fl, ReduceOp::BitXor).expect_err("bxor on f32");
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    assert!(e.message().contains("float32"), "{e}");

    // Uneven all_to_all: rank r sends q + 1 elements to rank q, valued 100r + q.
    let in_splits: Vec<i64> = (0..n as i64).map(|q| q + 1).collect();
    let out_splits: Vec<i64> = vec![r as i64 + 1; n as usize];
    let input: Vec<i64> = (0..n as i64).flat_map(|q| std::iter::repeat(100 * r as i64 + q).take(q as usize + 1)).collect();
    let mut out = vec![0i64; (n * (r + 1)) as usize];
    world.all_to_all_uneven(&input, &in_splits, &mut out, &out_splits).unwrap();
    for (j, &x) in out.iter().enumerate() {
        let src = j as i64 / (r as i64 + 1);
        assert_eq!(x, 100 * src + r as i64, "uneven all_to_all [{j}]");
    }

    // Ring send/recv (even ranks send first).
    if n > 1 {
        let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
        let mine = vec![r as f64 + 0.5; 11];
        let mut theirs = vec![0f64; 11];
        if r % 2 == 0 {
            world.send(&mine, next, 7).unwrap();
            world.recv(&mut theirs, prev, 7).unwrap();
        } else {
            world.recv(&mut theirs, prev, 7).unwrap();
            world.send(&mine, next, 7).unwrap();
        }
        assert!(theirs.iter().all(|&x| x == prev as f64 + 0.5), "recv from {prev}: {theirs:?}");
    }
    world.barrier().unwrap();

    // Byte objects of different lengths.
    let obj = |q: i32| format!("rank-{q}-").repeat(q as usize + 1).into_bytes();
    let all = world.all_gather_object(&obj(r)).unwrap();
    assert_eq!(all, (0..n).map(obj).collect::<Vec<_>>());
    let gathered = world.gather_object(&obj(r), n - 1).unwrap();
    assert_eq!(gathered, if r == n - 1 { Some((0..n).map(obj).collect()) } else { None });
    let list = if r == 0 { vec![b"alpha".to_vec(), Vec::new(), b"gamma".to_vec()] } else { Vec::new() };
    let got = world.broadcast_object_list(&list, 0).unwrap();
    assert_eq!(got, vec![b"alpha".to_vec(), Vec::new(), b"gamma".to_vec()]);
    let seeds = world.all_gather_object(&world.sync_random_seed().unwrap().to_le_bytes()).unwrap();
    assert!(seeds.windows(2).all(|w| w[0] == w[1]), "seeds differ: {seeds:?}");

    // Coalesced all_reduce of several buffers.
    let (mut a, mut b) = (vec![r as f32; 3], vec![1.0f32; 1000]);
    world.all_reduce_coalesced(&mut [&mut a[..], &mut b[..]], ReduceOp::Sum, Some(1)).unwrap();
    let total = (n * (n - 1) / 2) as f32;
    assert!(a.iter().all(|&x| x == total) && b.iter().all(|&x| x == n as f32));

    // Asynchronous work overlapping: two all_reduces and an all_gather in flight.
    let mut x = vec![r as i64; 100_000];
    let mut y = vec![1.0f64; 5];
    let mine = [r];
    let mut ranks = vec![0i32; n as usize];
    world.scope(|s| {
        let w1 = s.all_reduce(&mut x, ReduceOp::Sum).unwrap();
        let w2 = s.all_reduce(&mut y, ReduceOp::Sum).unwrap();
        let w3 = s.all_gather(&mine, &mut ranks).unwrap();
        w3.wait().unwrap();
        w1.wait().unwrap();
        drop(w2); // waits
        let leaked = s.barrier().unwrap();
        std::mem::forget(leaked); // the scope still waits for it
    });
    assert!(x.iter().all(|&v| v == (n * (n - 1) / 2) as i64));
    assert!(y.iter().all(|&v| v == n as f64));
    assert_eq!(ranks, (0..n).collect::<Vec<_>>());

    // A scope whose closure panics still waits for what it started, even a
    // forgotten Work: rank 0 panics at once while the others join late, so
    // the sum can only be in place if the scope waited before unwinding.
    let mut late = vec![1i64; 1 << 16];
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        world.scope(|s| {
            if r != 0 {
                std::thread::sleep(std::time::Duration::from_millis(300));
            }
            std::mem::forget(s.all_reduce(&mut late, ReduceOp::Sum).unwrap());
            panic!("closure panics with an operation in flight");
        })
    }));
    std::panic::set_hook(hook);
    assert!(caught.is_err(), "the panic reaches the caller");
    assert!(late.iter().all(|&v| v == n as i64), "scope unwound before its operation finished: {}", late[0]);

    // Work::test on a failed operation returns its error (not Ok(false)
    // forever): different counts on different ranks.
    if n > 1 {
        let mut mismatched = vec![1i32; 10 + r as usize];
        world.scope(|s| {
            let e = match s.all_reduce(&mut mismatched, ReduceOp::Sum) {
                // Where the ranks' calls are compared before it returns (at 3
                // and 4 ranks it can be), the start itself fails: allowed too,
                // as in the Go test.
                Err(e) => e,
                Ok(w) => {
                    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
                    loop {
                        match w.test() {
                            Err(e) => break e,
                            Ok(true) => fail("mismatched all_reduce succeeded".into()),
                            Ok(false) if std::time::Instant::now() > deadline => {
                                fail("test() never reported the failed operation".into())
                            }
                            Ok(false) => std::thread::sleep(std::time::Duration::from_millis(5)),
                        }
                    }
                }
            };
            assert_eq!(e.code(), Code::InvalidArgument, "{e}");
        });
    }

    // A subgroup {0, last}; the others get a group they cannot use.
    let mut pair = vec![0, n - 1];
    pair.dedup();
    let sub = world.new_group(&pair).unwrap();
    let member = r == 0 || r == n - 1;
    let mut v = vec![r + 1; 4];
    match sub.all_reduce(&mut v, ReduceOp::Sum) {
        Ok(()) => {
            assert!(member);
            let want = if n == 1 { 1 } else { 1 + n };
            assert!(v.iter().all(|&x| x == want), "subgroup sum {v:?}");
            assert_eq!(sub.size(), if n == 1 { 1 } else { 2 });
        }
        Err(e) => {
            assert!(!member, "member {r}: {e}");
            assert_eq!(e.code(), Code::FailedPrecondition, "{e}");
            assert_eq!(sub.rank(), -1);
        }
    }

    subgroups_with_options(&world);

    // Misuse: a wrong output size is refused locally; different counts on
    // different ranks fail on every rank, naming what each called.
    let mut short = vec![0f32; 1];
    let e = world.all_gather(&[1f32, 2f32], &mut short).expect_err("short output");
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    let e = world.all_to_all_uneven(&[1i32], &[1], &mut [0i32], &[1, 1, 1, 1, 1]).expect_err("splits");
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    if n > 1 {
        let mut mismatched = vec![1i32; 10 + r as usize];
        let e = world.all_reduce(&mut mismatched, ReduceOp::Sum).expect_err("mismatched counts");
        assert_eq!(e.code(), Code::InvalidArgument, "{e}");
        assert!(mismatched.iter().all(|&x| x == 1), "data changed by a refused call");
    }
    world.barrier().unwrap();

    // The gradient reducer: rank 0's parameters everywhere, averaged
    // gradients, no_sync accumulation, a missing gradient named.
    {
        use distkit::{Reducer, ReducerOptions};
        let opts = ReducerOptions { first_bucket_cap_mb: 1e-4, ..Default::default() };
        let mut red = Reducer::new(&world, vec![vec![r as f64; 40], vec![r as f64; 3]], vec![vec![r as f64 + 9.0]], &opts).unwrap();
        assert!(red.params().iter().all(|p| p.iter().all(|&v| v == 0.0)), "parameters from rank 0");
        assert_eq!(red.buffers()[0][0], 9.0);
        let grad = |q: i32, p: usize, k: usize| (q + 1) as f64 * (k as f64 + 1.0) + p as f64;
        let mean = |p: usize, k: usize| (0..n).map(|q| grad(q, p, k)).sum::<f64>() / n as f64;
        for _ in 0..2 {
            red.mark_ready(1, &(0..3).map(|k| grad(r, 1, k)).collect::<Vec<_>>()).unwrap();
            red.mark_ready(0, &(0..40).map(|k| grad(r, 0, k)).collect::<Vec<_>>()).unwrap();
            let g = red.finalize().unwrap();
            for (p, gp) in g.iter().enumerate() {
                for (k, &v) in gp.iter().enumerate() {
                    assert!((v - mean(p, k)).abs() < 1e-9, "reducer average p{p}[{k}] {v}");
                }
            }
        }
        red.set_require_sync(false);
        red.mark_ready(0, &[0.0; 40]).unwrap();
        red.set_require_sync(true);
        let e = red.mark_ready(0, &[0.0; 3]).expect_err("wrong gradient size");
        assert_eq!(e.code(), Code::InvalidArgument);
        red.mark_ready(0, &[1.0; 40]).unwrap();
        let e = red.finalize().expect_err("missing gradient");
        assert_eq!(e.code(), Code::FailedPrecondition, "{e}");
        assert!(e.message().contains("params[1]"), "{e}");
    }

    reducer_check::unused_parameters(&world, r, n);
    reducer_check::abandoned_iteration(&world, r, n);

    // Abort from another thread: later calls fail cleanly.
    let g = world.new_group(&(0..n).collect::<Vec<_>>()).unwrap();
    let handle = g.abort_handle();
    std::thread::spawn(move || handle.abort()).join().unwrap();
    let e = g.barrier().expect_err("aborted group");
    assert!(matches!(e.code(), Code::Cancelled | Code::FailedPrecondition), "{e}");
    assert!(g.async_error().is_err());
    drop(g);
    drop(sub);
    world.barrier().unwrap();
    println!("rank {r}/{n}: all Rust collective checks passed");
}
