//! The Rust rank of the mixed-language job (see README.md): the distkit crate.
use distkit::{InitOptions, ReduceOp, Shard, ShardOptions};

const N: usize = 9;

fn check(ok: bool, rank: i32, what: &str) {
    if !ok {
        eprintln!("rank {rank} (rust): FAILED: {what}");
        std::process::exit(1);
    }
}

fn obj(r: i32) -> Vec<u8> {
    format!("rank-{r};").repeat(r as usize + 1).into_bytes()
}

fn main() -> distkit::Result<()> {
    let world = distkit::init("pytorch", &InitOptions::default())?;
    let (r, n) = (world.rank(), world.size());
    let (ri, ni) = (r as i64, n as i64);

    let mut a: Vec<i64> = (0..N as i64).map(|i| (ri + 1) * (i + 1)).collect();
    world.all_reduce(&mut a, ReduceOp::Sum)?;
    check(a.iter().enumerate().all(|(i, &x)| x == ni * (ni + 1) / 2 * (i as i64 + 1)), r, "sum int64");
    let mut b: Vec<i64> = (0..N as i64).map(|i| (7 * ri + i) % 11).collect();
    world.all_reduce(&mut b, ReduceOp::Max)?;
    check(b.iter().enumerate().all(|(i, &x)| x == (0..ni).map(|q| (7 * q + i as i64) % 11).max().unwrap()), r, "max int64");
    let mut c: Vec<f32> = (0..N).map(|i| 0.5 * (r + 1) as f32 + i as f32).collect();
    world.all_reduce(&mut c, ReduceOp::Sum)?;
    check(c.iter().enumerate().all(|(i, &x)| x == 0.25 * (n * (n + 1)) as f32 + (n as f32) * i as f32), r, "sum float32");
    let mut d: Vec<f32> = (0..N).map(|i| r as f32 - 0.25 * i as f32).collect();
    world.all_reduce(&mut d, ReduceOp::Max)?;
    check(d.iter().enumerate().all(|(i, &x)| x == (n - 1) as f32 - 0.25 * i as f32), r, "max float32");
    for q in 0..n {
        let mut e: Vec<i64> = (0..N as i64).map(|i| if r == q { 1000 * q as i64 + i } else { -1 }).collect();
        world.broadcast(&mut e, q)?;
        let mut f: Vec<f32> = (0..N).map(|i| if r == q { q as f32 + 0.125 * i as f32 } else { -1.0 }).collect();
        world.broadcast(&mut f, q)?;
        check(
            (0..N).all(|i| e[i] == 1000 * q as i64 + i as i64 && f[i] == q as f32 + 0.125 * i as f32),
            r,
            &format!("broadcast from {q}"),
        );
    }
    let mine = [10 * ri, 10 * ri + 1, 10 * ri + 2];
    let mut all = vec![0i64; 3 * n as usize];
    world.all_gather(&mine, &mut all)?;
    check(all.iter().enumerate().all(|(j, &x)| x == 10 * (j as i64 / 3) + j as i64 % 3), r, "all_gather");
    check(world.all_gather_object(&obj(r))? == (0..n).map(obj).collect::<Vec<_>>(), r, "all_gather_object");
    let names: Vec<String> =
        world.all_gather_object(b"rust")?.into_iter().map(|b| String::from_utf8_lossy(&b).into_owned()).collect();
    let mut unique = names.clone();
    unique.sort();
    unique.dedup();
    check(
        unique.len() == names.len() && names.iter().all(|x| ["c", "c++", "python", "rust", "go"].contains(&x.as_str())),
        r,
        "language names",
    );
    println!("rank {r} (rust): languages: {}", names.join(" "));

    // 9: one model sharded across the languages (README).
    let init: Vec<f32> = (0..10).map(|i| if r == 0 { 0.1 * i as f32 } else { -5.0 }).collect();
    let mut unit = Shard::new(&world, &[&init], &ShardOptions::default())?;
    for _ in 0..3 {
        unit.unshard()?;
        let g: Vec<f32> =
            unit.full_param::<f32>(0)?.iter().enumerate().map(|(i, &w)| (r + 1) as f32 * 0.1 * w + 0.01 * i as f32).collect();
        unit.reshard()?;
        unit.accumulate_grad(0, &g)?;
        unit.reduce_grads()?;
        let (values, grads) = unit.local::<f32>(0)?;
        for (v, d) in values.iter_mut().zip(grads) {
            *v -= 0.5 * d;
        }
        unit.zero_grads();
    }
    let mut full = vec![vec![0f32; 10]];
    unit.gather_full(&mut full)?;
    for i in 0..10 {
        let mut want = 0.1 * i as f64;
        for _ in 0..3 {
            want -= 0.5 * (0.1 * want * (n + 1) as f64 / 2.0 + 0.01 * i as f64);
        }
        check((full[0][i] as f64 - want).abs() <= 1e-5 * want.abs().max(1.0), r, "sharded training");
    }
    drop(unit);

    // 10: the C rank's bool bytes 2 and 255 arrive as 1 (README): checked as
    // bytes, since a bool holding 2 would be undefined behaviour to read.
    let mut flags = vec![false; 4 * n as usize];
    world.all_gather(&[true, true, false, true], &mut flags)?;
    // SAFETY: bool and u8 have the same size and alignment.
    let bytes: &[u8] = unsafe { std::slice::from_raw_parts(flags.as_ptr().cast::<u8>(), flags.len()) };
    check(bytes.iter().enumerate().all(|(j, &b)| b == if j % 4 == 2 { 0 } else { 1 }), r, "all_gather bool");
    world.barrier()?;
    println!("rank {r} (rust): mixed-language checks passed");
    Ok(())
}
