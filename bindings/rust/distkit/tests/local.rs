//! Single-process checks of the safe API: the store, a world of one, errors
//! and their codes, half-precision conversions. One #[test]: joining a job is
//! process-wide state.
use std::time::{Duration, Instant};

use distkit::{
    Code, Device, Group, GroupOptions, InitOptions, LauncherInfo, ReduceOp, Reducer, ReducerOptions, Shard,
    ShardEventKind, ShardOptions, Snapshot, Store, StoreOptions, BF16, F16,
};

fn store_round_trips(store: &Store) {
    store.set("a", b"1").unwrap();
    assert_eq!(store.get("a").unwrap(), b"1");
    assert_eq!(store.add("n", 5).unwrap(), 5);
    assert_eq!(store.add("n", -2).unwrap(), 3);
    assert!(store.check(&["a", "n"]).unwrap());
    assert!(!store.check(&["a", "missing"]).unwrap());
    let e = store.wait(&["missing"], Some(Duration::from_millis(50))).expect_err("timeout");
    assert_eq!(e.code(), Code::DeadlineExceeded, "{e}");
    assert!(e.message().contains("missing"), "{e}");
    assert_eq!(store.compare_set("c", b"", b"x").unwrap(), b"x");
    assert_eq!(store.compare_set("c", b"wrong", b"y").unwrap(), b"x");
    store.append("c", b"yz").unwrap();
    store.multi_set(&[("k1", b"v1"), ("k2", b"")]).unwrap();
    assert_eq!(store.multi_get(&["c", "k1", "k2"]).unwrap(), vec![b"xyz".to_vec(), b"v1".to_vec(), Vec::new()]);
    assert!(store.delete_key("a").unwrap());
    assert!(!store.delete_key("a").unwrap());
    assert!(store.num_keys().unwrap() >= 4);
    let e = store.set("nul\0key", b"").expect_err("NUL in key");
    assert_eq!(e.code(), Code::InvalidArgument);
}

/// The launcher's view, read by the library as init reads it: the same
/// values capi/header_cxx_test.cc and Python's dist_local_test expect.
fn launcher_view() {
    for name in ["WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "DISTKIT_STORE", "OMPI_COMM_WORLD_LOCAL_RANK"] {
        std::env::remove_var(name);
    }
    let slurm = [
        ("SLURM_NTASKS", "8"),
        ("SLURM_PROCID", "5"),
        ("SLURM_LOCALID", "1"),
        ("SLURM_NTASKS_PER_NODE", "2(x4)"),
        ("SLURM_NODEID", "2"),
        ("SLURM_NODELIST", "node[01-03,07]"),
    ];
    for (name, value) in slurm {
        std::env::set_var(name, value);
    }
    assert_eq!(distkit::infer_launcher(), "slurm");
    let expected = LauncherInfo {
        launcher: "slurm".into(),
        rank: 5,
        world_size: 8,
        local_rank: 1,
        local_world_size: 2,
        node_rank: 2,
        master_addr: "node01".into(),
        master_port: 29500,
        store_address: "node01:29500".into(),
        hosts_store: false,
    };
    assert_eq!(distkit::launcher_info(None).unwrap(), expected);
    std::env::set_var("SLURM_PROCID", "five");
    let e = distkit::launcher_info(Some("slurm")).expect_err("malformed SLURM_PROCID");
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    assert!(e.message().contains("SLURM_PROCID"), "{e}");
    for (name, _) in slurm {
        std::env::remove_var(name);
    }
    assert_eq!(distkit::infer_launcher(), "none");
    let none = distkit::launcher_info(None).unwrap();
    assert_eq!((none.launcher.as_str(), none.rank, none.world_size), ("none", 0, 1));
    let e = distkit::launcher_info(Some("torchrun")).expect_err("unknown launcher");
    assert!(e.message().contains("Invalid launcher type: torchrun"), "{e}");
}

/// A snapshot in a world of one: commit, restore, sync from its own commit,
/// and the buffers checked against the registration.
fn snapshot_alone(world: &Group) {
    let (mut w, mut step) = (vec![1.0f64, 2.0], 3i64);
    let mut s = Snapshot::new().unwrap();
    s.register("w", &w).unwrap();
    s.register("step", &step).unwrap();
    assert_eq!((s.commit_number(), s.bytes()), (0, 0));
    let e = s.restore(&mut [&mut w, &mut step]).expect_err("nothing committed");
    assert_eq!(e.code(), Code::FailedPrecondition, "{e}");
    s.commit(&[&w, &step]).unwrap();
    assert_eq!((s.commit_number(), s.bytes()), (1, 24));
    let e = s.register("late", &step).expect_err("after the first commit");
    assert_eq!(e.code(), Code::FailedPrecondition, "{e}");
    (w, step) = (vec![0.0, 0.0], 0);
    s.restore(&mut [&mut w, &mut step]).unwrap();
    assert_eq!((w.as_slice(), step), ([1.0, 2.0].as_slice(), 3));
    (w[0], step) = (5.0, 4);
    assert_eq!(s.sync(world, &mut [&mut w, &mut step]).unwrap(), 1);
    assert_eq!((w[0], step), (1.0, 3));
    let mut short = vec![0.0f64];
    let e = s.commit(&[&short, &step]).expect_err("a buffer of another size");
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    assert!(e.message().contains("'w' is 8 bytes, registered as 16"), "{e}");
    let e = s.restore(&mut [&mut short]).expect_err("too few buffers");
    assert!(e.message().contains("1 buffers given, 2 registered"), "{e}");
    let e = Snapshot::new().unwrap().register("", &step).expect_err("an empty name");
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
}

fn world_of_one(world: &Group) {
    snapshot_alone(world);
    assert_eq!((world.rank(), world.size()), (0, 1));
    assert_eq!(world.comm_device().unwrap(), Device::Cpu);
    assert_eq!(world.name().as_deref(), Some("world"));
    let mut x = vec![1.5f32, -2.0];
    world.all_reduce(&mut x, ReduceOp::Sum).unwrap();
    assert_eq!(x, [1.5, -2.0]);
    let mut m = vec![7i32, -7];
    world.all_reduce(&mut m, ReduceOp::Mean).unwrap();
    assert_eq!(m, [7, -7]);
    let mut out = vec![0u8; 3];
    world.all_gather(&[1u8, 2, 3], &mut out).unwrap();
    assert_eq!(out, [1, 2, 3]);
    assert_eq!(world.all_gather_object(b"solo").unwrap(), vec![b"solo".to_vec()]);
    assert_eq!((world.global_rank(0), world.global_rank(1)), (0, -1));
    // A subgroup made by its members only, under a name.
    let named = world.new_named_group(&[0], "solo").unwrap();
    assert_eq!((named.rank(), named.size(), named.global_rank(0)), (0, 1, 0));
    named.all_reduce(&mut m, ReduceOp::Sum).unwrap();
    assert_eq!(m, [7, -7]);
    let e = world.new_named_group(&[0], "a/b").expect_err("'/' in the name");
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    // Subgroups with options of their own (ABI 0.11): collective, and named.
    let options = GroupOptions::default().timeout(Duration::from_secs(1)).connect_timeout(Duration::from_secs(5));
    let timed = world.new_group_with_options(&[0], &options).unwrap();
    assert_eq!((timed.rank(), timed.size()), (0, 1));
    assert_ne!(timed.name().as_deref(), Some("world"));
    timed.all_reduce(&mut m, ReduceOp::Sum).unwrap();
    assert_eq!(m, [7, -7]);
    let named = world.new_group_with_options(&[0], &GroupOptions::named("solo-timed")).unwrap();
    assert!(named.name().unwrap_or_default().contains("solo-timed"), "{:?}", named.name());
    let e = world.new_group_with_options(&[0], &GroupOptions::named("a/b")).expect_err("'/' in the name");
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    let e = world.new_group_with_options(&[0, 5], &GroupOptions::default()).expect_err("rank out of range");
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    let e = world.new_group_with_options(&[0], &GroupOptions::named("nul\0")).expect_err("NUL in the name");
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    // Errors: codes read from the ABI, messages naming what is wrong.
    let e = world.broadcast(&mut x, 3).expect_err("root out of range");
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    let e = world.all_gather(&[1u8, 2], &mut out).expect_err("wrong output size");
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    let e = world.send(&[1i64], 0, 0).expect_err("send to self");
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    let e = world.new_group(&[0, 5]).expect_err("rank out of range");
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    // A closed (aborted) group refuses further work without crashing.
    let g = world.new_group(&[0]).unwrap();
    g.abort_handle().abort();
    let e = g.all_reduce(&mut x, ReduceOp::Max).expect_err("aborted");
    assert!(matches!(e.code(), Code::Cancelled | Code::FailedPrecondition), "{e}");
    let handle = g.abort_handle();
    drop(g);
    handle.abort(); // still safe after the group is gone
    // A sharded unit's timeline: one gather, one free, one reduction.
    let mut s = Shard::new(world, &[&[1.0f32, 2.0][..]], &ShardOptions::default()).unwrap();
    let before = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    s.unshard().unwrap();
    s.reshard().unwrap();
    s.accumulate_grad(0, &[0.5f32, 0.5]).unwrap();
    s.reduce_grads_start().unwrap();
    s.reduce_grads_wait().unwrap();
    let events = s.take_events().unwrap();
    let kinds: Vec<ShardEventKind> = events.iter().map(|e| e.kind).collect();
    use ShardEventKind::*;
    assert_eq!(kinds, [UnshardStart, UnshardDone, Reshard, ReduceStart, ReduceDone]);
    assert!(events[0].unix_ns >= before.as_nanos() as i64);
    assert!(events.windows(2).all(|w| w[0].unix_ns <= w[1].unix_ns));
    assert!(s.take_events().unwrap().is_empty(), "taken events are gone");
    assert!(s.peak_held_bytes() >= s.held_bytes() && s.peak_held_bytes() > 0);
    indices_past_i32(world, &mut s);
    empty_unit(world);
}

/// A unit whose only parameter is empty: its buffers come back as slices
/// that never hold NULL (the library pads every flat buffer today, but an
/// empty one may be lent as NULL; shard.rs's unit tests cover that case).
fn empty_unit(world: &Group) {
    let mut s = Shard::new(world, &[&[][..] as &[f32]], &ShardOptions::default()).unwrap();
    s.unshard().unwrap();
    let full = s.full_param::<f32>(0).unwrap();
    assert!(full.is_empty() && !full.as_ptr().is_null(), "full parameter at {:p}", full.as_ptr());
    s.reshard().unwrap();
    for flat in 0..s.num_flat() {
        // The shard may hold padding: its length is the library's.
        let (values, grad) = s.local::<f32>(flat).unwrap();
        assert_eq!(values.len(), grad.len());
        assert!(!values.as_ptr().is_null() && !grad.as_ptr().is_null(), "local shard at {:p}, {:p}", values.as_ptr(), grad.as_ptr());
        assert!(values.iter().chain(grad).all(|&x| x == 0.0), "padding: {values:?} {grad:?}");
    }
}

/// Indices no i32 holds are refused (or out of range, for the queries),
/// never wrapped onto a valid one (1 << 32 onto 0).
fn indices_past_i32(world: &Group, s: &mut Shard) {
    let big = u32::MAX as usize + 1;
    let e = s.accumulate_grad(big, &[1.0f32, 1.0]).expect_err("parameter 1 << 32");
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    assert!(e.message().contains("4294967296"), "{e}");
    let e = s.local::<f32>(big).expect_err("flat buffer 1 << 32");
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    let options = ReducerOptions { find_unused_parameters: true, ..Default::default() };
    let mut r = Reducer::new(world, vec![vec![1.0f32]], Vec::new(), &options).unwrap();
    r.prepare(&[]).unwrap();
    r.mark_ready(0, &[3.0]).unwrap();
    assert_eq!(r.finalize().unwrap(), [vec![3.0]]);
    assert!(r.globally_used(0));
    assert!(!r.globally_used(big), "parameter 1 << 32 answered as parameter 0");
    assert!(!r.globally_used(1));
    let e = r.mark_ready(big, &[3.0]).expect_err("parameter 1 << 32");
    assert_eq!(e.code(), Code::OutOfRange, "{e}");
}

#[test]
fn local_api() {
    assert_eq!(F16::from_f32(1.5).0, 0x3e00);
    assert_eq!(F16(0x3e00).to_f32(), 1.5);
    assert_eq!(F16::from_f32(-70.0).to_f32(), -70.0);
    assert_eq!(BF16::from_f32(3.0).to_f32(), 3.0);

    let e = Store::connect("127.0.0.1:1", &StoreOptions { connect_timeout: Duration::from_millis(200), ..Default::default() })
        .err()
        .expect("no server there");
    assert!(matches!(e.code(), Code::DeadlineExceeded | Code::Unavailable), "{e}");

    let options = StoreOptions { token: Some("secret".into()), ..Default::default() };
    let store = Store::serve("127.0.0.1:0", &options).unwrap();
    store_round_trips(&store);
    let wrong = Store::connect(&store.address(), &StoreOptions { token: Some("nope".into()), ..Default::default() }).unwrap();
    let e = wrong.get("c").expect_err("wrong token");
    assert_eq!(e.code(), Code::Unauthenticated, "{e}");

    let (major, minor) = distkit::library_version();
    assert_eq!(major, distkit_sys::DK_ABI_MAJOR);
    assert!(minor >= distkit_sys::DK_ABI_MINOR, "library {major}.{minor}");

    assert!(!distkit::is_distributed());
    launcher_view();
    assert!(matches!(distkit::device(), Device::Cpu | Device::Cuda(_)));
    let e = Store::default_store().err().expect("no job store before init");
    assert_eq!(e.code(), Code::FailedPrecondition, "{e}");
    let e = distkit::init("k8s", &InitOptions::default()).err().expect("bad launcher");
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("Invalid launcher type"), "{e}");
    let world = distkit::init_with_store(&store, 0, 1, &InitOptions::default()).unwrap();
    assert!(distkit::is_distributed());
    world_of_one(&world);
    // The job's store, reached without the handle the job was joined with.
    let job_store = Store::default_store().unwrap();
    job_store.set("from-the-job-store", b"seen").unwrap();
    assert_eq!(store.get("from-the-job-store").unwrap(), b"seen");
    drop(job_store); // closes this connection only
    assert_eq!(store.get("from-the-job-store").unwrap(), b"seen");
    drop(store); // the group keeps its store alive
    world.barrier().unwrap();
    distkit::shutdown();
    assert!(!distkit::is_distributed());
    drop(world);
    sub_millisecond_timeouts();
}

/// A positive timeout under a millisecond reaches the library as 1 ms, never
/// as 0 (a default, or a refusal): init with a 0.5 ms operation timeout
/// joins (0 was "config: timeout_ms must be > 0"), and a get or wait on a
/// missing key under a 0.5 ms timeout fails at once with DeadlineExceeded.
fn sub_millisecond_timeouts() {
    let half = Duration::from_micros(500);
    let store = Store::serve("127.0.0.1:0", &StoreOptions::default()).unwrap();
    let options = InitOptions { timeout: half, connect_timeout: Some(Duration::from_secs(120)), ..Default::default() };
    let world = distkit::init_with_store(&store, 0, 1, &options).expect("a 0.5 ms timeout is 1 ms, not 0");
    assert_eq!(world.size(), 1);
    distkit::shutdown();
    drop(world);

    let quick = Store::connect(&store.address(), &StoreOptions { timeout: half, ..Default::default() }).unwrap();
    let start = Instant::now();
    let e = quick.get("never-set").expect_err("a missing key");
    assert_eq!(e.code(), Code::DeadlineExceeded, "{e}");
    assert!(start.elapsed() < Duration::from_secs(60), "get waited {:?}", start.elapsed());
    let start = Instant::now();
    let e = store.wait(&["never-set"], Some(half)).expect_err("a missing key");
    assert_eq!(e.code(), Code::DeadlineExceeded, "{e}");
    assert!(start.elapsed() < Duration::from_secs(60), "wait waited {:?}", start.elapsed());
}
