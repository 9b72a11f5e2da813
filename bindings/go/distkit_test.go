package distkit

import (
	"bytes"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"
)

func wantCode(t *testing.T, err error, code Code, text string) {
	t.Helper()
	if CodeOf(err) != code || (text != "" && !strings.Contains(err.Error(), text)) {
		t.Fatalf("want %v containing %q, got %v", code, text, err)
	}
}

func checkStore(t *testing.T, s *Store) {
	if err := s.Set("a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Get("a"); err != nil || string(v) != "1" {
		t.Fatalf("get: %q %v", v, err)
	}
	if n, _ := s.Add("n", 5); n != 5 {
		t.Fatal("add")
	}
	if n, _ := s.Add("n", -2); n != 3 {
		t.Fatal("add")
	}
	if ok, _ := s.Check([]string{"a", "n"}); !ok {
		t.Fatal("check")
	}
	if ok, _ := s.Check([]string{"a", "missing"}); ok {
		t.Fatal("check missing")
	}
	wantCode(t, s.Wait([]string{"missing"}, 50*time.Millisecond), DeadlineExceeded, "missing")
	if v, _ := s.CompareSet("c", nil, []byte("x")); string(v) != "x" {
		t.Fatal("compare_set")
	}
	if v, _ := s.CompareSet("c", []byte("wrong"), []byte("y")); string(v) != "x" {
		t.Fatal("compare_set mismatch")
	}
	if err := s.Append("c", []byte("yz")); err != nil {
		t.Fatal(err)
	}
	if err := s.MultiSet([]string{"k1", "k2"}, [][]byte{[]byte("v1"), nil}); err != nil {
		t.Fatal(err)
	}
	vs, err := s.MultiGet([]string{"c", "k1", "k2"})
	if err != nil || string(vs[0]) != "xyz" || string(vs[1]) != "v1" || len(vs[2]) != 0 {
		t.Fatalf("multi_get %q %v", vs, err)
	}
	if ok, _ := s.DeleteKey("a"); !ok {
		t.Fatal("delete")
	}
	if ok, _ := s.DeleteKey("a"); ok {
		t.Fatal("delete twice")
	}
	wantCode(t, s.MultiSet([]string{"k"}, nil), InvalidArgument, "one value per key")
}

// checkLauncherInfo reads Slurm's variables through the library, as Init
// does: the values capi/header_cxx_test.cc and the Python and Rust tests
// expect for the same environment.
func checkLauncherInfo(t *testing.T) {
	for _, name := range []string{"WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "DISTKIT_STORE", "OMPI_COMM_WORLD_LOCAL_RANK"} {
		os.Unsetenv(name)
	}
	slurm := map[string]string{
		"SLURM_NTASKS": "8", "SLURM_PROCID": "5", "SLURM_LOCALID": "1",
		"SLURM_NTASKS_PER_NODE": "2(x4)", "SLURM_NODEID": "2", "SLURM_NODELIST": "node[01-03,07]",
	}
	for name, value := range slurm {
		os.Setenv(name, value)
	}
	if got := InferLauncher(); got != "slurm" {
		t.Fatal("infer_launcher", got)
	}
	want := LauncherInfo{Launcher: "slurm", Rank: 5, WorldSize: 8, LocalRank: 1, LocalWorldSize: 2,
		NodeRank: 2, MasterAddr: "node01", MasterPort: 29500, StoreAddr: "node01:29500"}
	if got, err := ReadLauncherInfo(""); err != nil || got != want {
		t.Fatalf("launcher info %+v %v", got, err)
	}
	os.Setenv("SLURM_PROCID", "five")
	_, err := ReadLauncherInfo("slurm")
	wantCode(t, err, InvalidArgument, "SLURM_PROCID")
	for name := range slurm {
		os.Unsetenv(name)
	}
	if got, err := ReadLauncherInfo(""); err != nil || got.Launcher != "none" || got.WorldSize != 1 {
		t.Fatalf("no launcher %+v %v", got, err)
	}
	_, err = ReadLauncherInfo("torchrun")
	wantCode(t, err, InvalidArgument, "Invalid launcher type: torchrun")
}

// checkSnapshotAlone: a snapshot in a world of one (commit, restore, sync
// from its own commit, misuse).
func checkSnapshotAlone(t *testing.T, world *Group) {
	w, step := []float64{1, 2}, []int64{3}
	s, err := NewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := RegisterBuffer(s, "w", w); err != nil {
		t.Fatal(err)
	}
	if err := RegisterBuffer(s, "step", step); err != nil {
		t.Fatal(err)
	}
	wantCode(t, RegisterBuffer(s, "w", w), InvalidArgument, "already registered")
	wantCode(t, s.Restore(), FailedPrecondition, "nothing to restore")
	if err := s.Commit(); err != nil || s.CommitNumber() != 1 || s.Bytes() != 24 {
		t.Fatal("commit", err, s.CommitNumber(), s.Bytes())
	}
	wantCode(t, RegisterBuffer(s, "late", step), FailedPrecondition, "'late'")
	w[0], w[1], step[0] = 0, 0, 0
	if err := s.Restore(); err != nil || w[0] != 1 || w[1] != 2 || step[0] != 3 {
		t.Fatal("restore", err, w, step)
	}
	w[0], step[0] = 5, 4
	if c, err := s.Sync(world); err != nil || c != 1 || w[0] != 1 || step[0] != 3 {
		t.Fatal("sync", c, err, w, step)
	}
	s.Close()
	wantCode(t, s.Commit(), FailedPrecondition, "closed")
}

// wantBools fails unless got is exactly want, byte for byte: Go's true is
// byte 1, and a bool holding 2 is neither true nor false to == (the compiler
// compares bytes), while `if b` takes it.
func wantBools(t *testing.T, what string, got, want []bool) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d flags, want %d", what, len(got), len(want))
	}
	for i := range want {
		raw := *(*byte)(unsafe.Pointer(&got[i]))
		if got[i] != want[i] || raw > 1 {
			t.Fatalf("%s: flag %d is byte %d, want %v", what, i, raw, want[i])
		}
	}
}

// checkBoolSnapshotsAlone: bools a snapshot loads are Go's true and false
// whatever non-zero byte another language's rank committed (C's 2 is true).
// The bytes are written here as a C rank would send them: through a byte
// view of the registered flags, and through a uint8 registration.
func checkBoolSnapshotsAlone(t *testing.T, world *Group) {
	want := []bool{true, false, true}
	flags := make([]bool, 3)
	raw := unsafe.Slice((*byte)(unsafe.Pointer(&flags[0])), len(flags))
	s, err := NewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := RegisterBuffer(s, "flags", flags); err != nil {
		t.Fatal(err)
	}
	copy(raw, []byte{2, 0, 255})
	if err := s.Commit(); err != nil {
		t.Fatal(err)
	}
	copy(raw, []byte{0, 1, 0})
	if err := s.Restore(); err != nil {
		t.Fatal(err)
	}
	wantBools(t, "snapshot restore", flags, want)
	copy(raw, []byte{0, 1, 0})
	if _, err := s.Sync(world); err != nil {
		t.Fatal(err)
	}
	wantBools(t, "snapshot sync", flags, want)

	sharded, err := NewShardedSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer sharded.Close()
	if err := RegisterShardBuffer(sharded, "flags", []uint8{2, 0, 255}); err != nil {
		t.Fatal(err)
	}
	if err := sharded.Commit(world); err != nil {
		t.Fatal(err)
	}
	if _, _, err := sharded.Fetch(world, nil); err != nil {
		t.Fatal(err)
	}
	got, err := ShardValues[bool](sharded, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	wantBools(t, "sharded snapshot values", got, want)
}

// checkRangesAlone: in a world of one, integers no int32 holds are refused
// (or out of range, for the queries), never wrapped onto a valid value.
func checkRangesAlone(t *testing.T, world *Group) {
	const big = 1 << 32 // wraps onto 0 as an int32
	if r := world.GlobalRank(big); r != -1 {
		t.Fatalf("GlobalRank(1<<32) = %d, want -1", r)
	}
	_, err := world.Grow(big, time.Second)
	wantCode(t, err, InvalidArgument, "world size 4294967296")
	// A CPU DeviceSlice goes through gloo like a slice.
	buf := []float32{1, 2}
	host := DeviceSlice[float32]{Ptr: unsafe.Pointer(&buf[0]), Len: len(buf), Device: Device{Type: CPU}}
	wantCode(t, BroadcastDevice(world, host, big), InvalidArgument, "root 4294967296 is out of range")
	onBig := host
	onBig.Device = Device{Type: CUDA, Index: big}
	wantCode(t, AllReduceDevice(world, onBig, Sum), InvalidArgument, "device index 4294967296 is out of range")
	wantCode(t, BroadcastDevice(world, onBig, 0), InvalidArgument, "device index 4294967296 is out of range")
	wantCode(t, AllGatherDevice(world, host, onBig), InvalidArgument, "device index 4294967296 is out of range")
	if err := BroadcastDevice(world, host, 0); err != nil || buf[0] != 1 || buf[1] != 2 {
		t.Fatal("broadcast of a CPU DeviceSlice", buf, err)
	}
	runtime.KeepAlive(buf)

	unit, err := NewShard(world, [][]float32{{1, 2}}, ShardOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer unit.Close()
	wantCode(t, unit.AccumulateGrad(big, []float32{1, 1}), InvalidArgument, "parameter index 4294967296 is out of range")
	_, _, err = unit.Local(big)
	wantCode(t, err, InvalidArgument, "flat buffer index 4294967296 is out of range")
	wantCode(t, unit.LoadSharded(big+1, [][]float32{{5, 6}}), InvalidArgument, "saved world size 4294967297 is out of range")
	if values, grads, err := unit.Local(0); err != nil || values[0] != 1 || values[1] != 2 || grads[0] != 0 {
		t.Fatal("a refused call changed the unit", values, grads, err)
	}

	red, err := NewReducer(world, [][]float32{{1}}, nil, ReducerOptions{FindUnusedParameters: true})
	if err != nil {
		t.Fatal(err)
	}
	defer red.Close()
	wantCode(t, red.Prepare([]int{big}), InvalidArgument, "unused parameter index 4294967296 is out of range")
	if err := red.Prepare(nil); err != nil {
		t.Fatal(err)
	}
	if err := red.MarkReady(0, []float32{3}); err != nil {
		t.Fatal(err)
	}
	if err := red.Finalize([][]float32{{0}}); err != nil {
		t.Fatal(err)
	}
	if !red.GloballyUsed(0) || red.GloballyUsed(big) || red.GloballyUsed(-1) {
		t.Fatal("globally used", red.GloballyUsed(0), red.GloballyUsed(big), red.GloballyUsed(-1))
	}
}

func TestLocal(t *testing.T) {
	if _, err := Connect("127.0.0.1:1", StoreOptions{ConnectTimeout: 200 * time.Millisecond}); CodeOf(err) != DeadlineExceeded && CodeOf(err) != Unavailable {
		t.Fatalf("connect to nothing: %v", err)
	}
	store, err := Serve("127.0.0.1:0", StoreOptions{Token: "secret"})
	if err != nil {
		t.Fatal(err)
	}
	checkStore(t, store)
	wrong, err := Connect(store.Address(), StoreOptions{Token: "nope"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = wrong.Get("c")
	wantCode(t, err, Unauthenticated, "")
	wrong.Close()
	_, err = wrong.Get("c")
	wantCode(t, err, FailedPrecondition, "closed")

	if major, minor := LibraryVersion(); major != headerMajor || minor < headerMinor {
		t.Fatalf("library version %d.%d", major, minor)
	}
	checkLauncherInfo(t)
	if d := RankDevice(); d.Type != CPU && d.Type != CUDA {
		t.Fatal("rank device", d)
	}
	_, err = DefaultStore()
	wantCode(t, err, FailedPrecondition, "")
	_, err = Init("k8s", InitOptions{})
	wantCode(t, err, InvalidArgument, "Invalid launcher type")
	// A rank or size no int32 holds is refused before the library sees it
	// (converted, 1<<32 wrapped onto rank 0 and 1<<32+1 onto size 1).
	_, err = InitWithStore(store, 1<<32, 1, InitOptions{})
	wantCode(t, err, InvalidArgument, "rank 4294967296 is out of range")
	_, err = InitWithStore(store, 0, 1<<32+1, InitOptions{})
	wantCode(t, err, InvalidArgument, "size 4294967297 is out of range")
	world, err := InitWithStore(store, 0, 1, InitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkRangesAlone(t, world)
	if !IsDistributed() || world.Rank() != 0 || world.Size() != 1 || world.Name() != "world" || world.Backend() != "gloo" {
		t.Fatal("world of one")
	}
	if d, err := world.CommDevice(); err != nil || d != (Device{CPU, 0}) {
		t.Fatal("comm device", d, err)
	}
	x := []float32{1.5, -2}
	if err := AllReduce(world, x, Sum); err != nil || x[0] != 1.5 || x[1] != -2 {
		t.Fatal("all_reduce", err)
	}
	m := []int32{7, -7}
	if err := AllReduce(world, m, Mean); err != nil || m[0] != 7 || m[1] != -7 {
		t.Fatal("mean", err)
	}
	out := make([]uint8, 3)
	if err := AllGather(world, []uint8{1, 2, 3}, out); err != nil || !bytes.Equal(out, []byte{1, 2, 3}) {
		t.Fatal("all_gather", err)
	}
	objs, err := world.AllGatherObject([]byte("solo"))
	if err != nil || len(objs) != 1 || string(objs[0]) != "solo" {
		t.Fatal("all_gather_object", err)
	}
	if world.GlobalRank(0) != 0 || world.GlobalRank(1) != -1 {
		t.Fatal("global ranks", world.GlobalRank(0), world.GlobalRank(1))
	}
	a, b := []float32{1, 2}, []float32{3}
	if err := AllReduceCoalesced(world, [][]float32{a, b}, Sum, 0); err != nil || a[1] != 2 || b[0] != 3 {
		t.Fatal("all_reduce_coalesced", a, b, err)
	}
	// The job's store, reached without the handle the job was joined with.
	jobStore, err := DefaultStore()
	if err != nil {
		t.Fatal(err)
	}
	if err := jobStore.Set("from-the-job-store", []byte("seen")); err != nil {
		t.Fatal(err)
	}
	jobStore.Close() // this connection only
	if v, err := store.Get("from-the-job-store"); err != nil || string(v) != "seen" {
		t.Fatalf("job store: %q %v", v, err)
	}
	// A subgroup made by its members only, under a name.
	named, err := world.NewNamedGroup([]int{0}, "solo")
	if err != nil || named.Size() != 1 || named.GlobalRank(0) != 0 {
		t.Fatal("named group", err)
	}
	if err := AllReduce(named, m, Sum); err != nil || m[0] != 7 {
		t.Fatal("named group all_reduce", err)
	}
	named.Close()
	_, err = world.NewNamedGroup([]int{0}, "a/b")
	wantCode(t, err, InvalidArgument, "")
	// Subgroups with options of their own (ABI 0.11): collective, and named.
	timed, err := world.NewGroupWithOptions([]int{0}, GroupOptions{Timeout: time.Second, ConnectTimeout: 5 * time.Second})
	if err != nil || timed.Size() != 1 || timed.Name() == "world" {
		t.Fatal("group with options", err)
	}
	if err := AllReduce(timed, m, Sum); err != nil || m[0] != 7 {
		t.Fatal("group with options all_reduce", err)
	}
	timed.Close()
	named, err = world.NewGroupWithOptions([]int{0}, GroupOptions{Name: "solo-timed", Timeout: time.Second})
	if err != nil || named.Size() != 1 || !strings.Contains(named.Name(), "solo-timed") {
		t.Fatal("named group with options", err)
	}
	named.Close()
	_, err = world.NewGroupWithOptions([]int{0}, GroupOptions{Name: "a/b"})
	wantCode(t, err, InvalidArgument, "a/b")
	_, err = world.NewGroupWithOptions([]int{0, 5}, GroupOptions{})
	wantCode(t, err, InvalidArgument, "")
	_, err = world.NewGroupWithOptions([]int{1 << 32}, GroupOptions{})
	wantCode(t, err, InvalidArgument, "rank 4294967296 is out of range")
	// Misuse comes back as errors naming the problem, never a crash.
	wantCode(t, Broadcast(world, x, 3), InvalidArgument, "")
	wantCode(t, AllGather(world, []uint8{1, 2}, out), InvalidArgument, "")
	wantCode(t, Send(world, []int64{1}, 0, 0), InvalidArgument, "")
	wantCode(t, AllReduce(world, x, BitXor), InvalidArgument, "float32")
	wantCode(t, AllToAllUneven(world, []int32{1}, []int64{1}, []int32{0}, []int64{1, 1}), InvalidArgument, "splits")
	_, err = world.NewGroup([]int{0, 5})
	wantCode(t, err, InvalidArgument, "")
	// A closed group answers FailedPrecondition; an aborted one fails too.
	g, err := world.NewGroup([]int{0})
	if err != nil {
		t.Fatal(err)
	}
	g.Close()
	g.Close() // twice is fine
	wantCode(t, AllReduce(g, x, Max), FailedPrecondition, "")
	h, _ := world.NewGroup([]int{0})
	h.Abort()
	if err := h.Barrier(); CodeOf(err) != Cancelled && CodeOf(err) != FailedPrecondition {
		t.Fatalf("aborted group: %v", err)
	}
	if h.AsyncError() == nil {
		t.Fatal("aborted group reports no error")
	}
	h.Close()
	// A sharded unit: its timeline records one gather, one free and one
	// reduction done in two halves.
	unit, err := NewShard(world, [][]float32{{1, 2}}, ShardOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	if err := unit.Unshard(); err != nil {
		t.Fatal(err)
	}
	if err := unit.Reshard(); err != nil {
		t.Fatal(err)
	}
	if err := unit.AccumulateGrad(0, []float32{0.5, 0.5}); err != nil {
		t.Fatal(err)
	}
	if err := unit.ReduceGradsStart(); err != nil {
		t.Fatal(err)
	}
	if err := unit.ReduceGradsWait(); err != nil {
		t.Fatal(err)
	}
	if _, grads, err := unit.Local(0); err != nil || grads[0] != 0.5 || grads[1] != 0.5 {
		t.Fatal("shard gradient after the two-half reduction", grads, err)
	}
	events, err := unit.TakeEvents()
	want := []ShardEventKind{EventUnshardStart, EventUnshardDone, EventReshard, EventReduceStart, EventReduceDone}
	if err != nil || len(events) != len(want) {
		t.Fatalf("events %v %v", events, err)
	}
	for i, e := range events {
		if e.Kind != want[i] || e.At.Before(before.Add(-time.Millisecond)) || (i > 0 && e.At.Before(events[i-1].At)) {
			t.Fatalf("event %d: %v", i, events)
		}
	}
	// Prefetching form, no_sync and the unit's memory.
	if err := unit.UnshardStart(); err != nil {
		t.Fatal(err)
	}
	if err := unit.UnshardWait(); err != nil {
		t.Fatal(err)
	}
	full := make([]float32, 2)
	if err := unit.FullParam(0, full); err != nil || full[0] != 1 || full[1] != 2 {
		t.Fatal("full parameter after UnshardStart and UnshardWait", full, err)
	}
	unit.SetRequireSync(false)
	unit.SetRequireSync(true)
	if unit.NumFlat() != 1 || unit.HeldBytes() <= 0 || unit.PeakHeldBytes() < unit.HeldBytes() {
		t.Fatal("flat buffers and held bytes", unit.NumFlat(), unit.HeldBytes(), unit.PeakHeldBytes())
	}
	unit.Close()
	// Asynchronous work.
	w, err := AllReduceAsync(world, x, Sum)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(0); err != nil {
		t.Fatal(err)
	}
	w.Close()
	wantCode(t, w.Wait(0), FailedPrecondition, "closed")
	store.Close() // the world group keeps the connection open
	if err := world.Barrier(); err != nil {
		t.Fatal(err)
	}
	checkSnapshotAlone(t, world)
	checkBoolSnapshotsAlone(t, world)
	world.Close()
	Shutdown()
	if IsDistributed() {
		t.Fatal("still distributed after Shutdown")
	}
}

// Every duration the package hands the ABI goes through positiveMillis: a
// positive one under a millisecond is 1 ms, never 0 (a default, or a
// refusal).
func TestPositiveMillis(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want int64
	}{
		{-time.Second, 0}, {-time.Microsecond, 0}, {0, 0}, {time.Nanosecond, 1},
		{500 * time.Microsecond, 1}, {time.Millisecond, 1}, {1500 * time.Microsecond, 1},
		{2 * time.Second, 2000},
	} {
		if got := positiveMillis(c.d); got != c.want {
			t.Errorf("positiveMillis(%v) = %d, want %d", c.d, got, c.want)
		}
	}
}

// Through the API: init with a 0.5 ms operation timeout joins (as 0 it was
// refused: "config: timeout_ms must be > 0"), and a get or wait on a missing
// key under a 0.5 ms timeout fails at once with DeadlineExceeded.
func TestSubMillisecondTimeouts(t *testing.T) {
	half := 500 * time.Microsecond
	store, err := Serve("127.0.0.1:0", StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	world, err := InitWithStore(store, 0, 1, InitOptions{Timeout: half, ConnectTimeout: 2 * time.Minute})
	if err != nil {
		t.Fatal("init with a 0.5 ms timeout:", err)
	}
	if world.Size() != 1 {
		t.Fatal("world of one", world.Size())
	}
	world.Close()
	Shutdown()

	quick, err := Connect(store.Address(), StoreOptions{Timeout: half})
	if err != nil {
		t.Fatal(err)
	}
	defer quick.Close()
	start := time.Now()
	_, err = quick.Get("never-set")
	wantCode(t, err, DeadlineExceeded, "")
	if waited := time.Since(start); waited > time.Minute {
		t.Fatal("get waited", waited)
	}
	start = time.Now()
	err = store.Wait([]string{"never-set"}, half)
	wantCode(t, err, DeadlineExceeded, "")
	if waited := time.Since(start); waited > time.Minute {
		t.Fatal("wait waited", waited)
	}
}

// A string with a NUL byte is refused before C sees it: C would read only
// its first part, so "a\x00b" would set, read or name "a". Nothing under
// the short name is touched.
func TestNulInStrings(t *testing.T) {
	store, err := Serve("127.0.0.1:0", StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	err = store.Set("a\x00b", []byte("v"))
	wantCode(t, err, InvalidArgument, `store key "a\x00b" holds a NUL byte at 1`)
	_, err = store.Add("a\x00b", 1)
	wantCode(t, err, InvalidArgument, "NUL byte")
	err = store.MultiSet([]string{"ok", "a\x00b"}, [][]byte{[]byte("1"), []byte("2")})
	wantCode(t, err, InvalidArgument, "store keys[1]")
	_, err = store.Check([]string{"a\x00"})
	wantCode(t, err, InvalidArgument, "store keys[0]")
	if found, err := store.Check([]string{"a"}); err != nil || found {
		t.Fatal(`"a" was set through a key with a NUL byte`, found, err)
	}
	if found, err := store.Check([]string{"ok"}); err != nil || found {
		t.Fatal("MultiSet set a key although another was refused", found, err)
	}
	_, err = Connect("127.0.0.1:1\x00", StoreOptions{})
	wantCode(t, err, InvalidArgument, "store address")
	_, err = Init("pytorch\x00", InitOptions{})
	wantCode(t, err, InvalidArgument, "launcher")
	_, err = InitWithStore(store, 0, 1, InitOptions{Backend: "gloo\x00nccl"})
	wantCode(t, err, InvalidArgument, "backend")

	world, err := InitWithStore(store, 0, 1, InitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer Shutdown()
	defer world.Close()
	_, err = world.NewNamedGroup([]int{0}, "sub\x00group")
	wantCode(t, err, InvalidArgument, "new_named_group: name")
	_, err = world.NewGroupWithOptions([]int{0}, GroupOptions{Name: "sub\x00group"})
	wantCode(t, err, InvalidArgument, "new_group_with_options: name")
}

// Local's slices stay valid after the Shard they came from is unreachable
// and collected: nothing frees the unit but Close (it was a finalizer, which
// freed the memory under them).
func TestShardLocalOutlivesShard(t *testing.T) {
	store, err := Serve("127.0.0.1:0", StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	world, err := InitWithStore(store, 0, 1, InitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer Shutdown()
	defer world.Close()
	const n = 1 << 16 // past malloc's mmap threshold: freed memory is unmapped
	filled := func(v float32) [][]float32 {
		p := make([]float32, n)
		for i := range p {
			p[i] = v
		}
		return [][]float32{p}
	}
	values, err := shardValues(world, filled(7))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
	}
	// Units of other values, which would take the freed memory's place.
	for i := 0; i < 8; i++ {
		other, err := NewShard(world, filled(123), ShardOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
	}
	for i, v := range values {
		if v != 7 {
			t.Fatalf("values[%d] = %v after the Shard was collected, want 7", i, v)
		}
	}
	values[0] = 42
}

// shardValues is Local(0)'s values of a new unit, which is unreachable once
// it returns (a function of its own, so no frame of the test holds the unit).
//
//go:noinline
func shardValues(world *Group, params [][]float32) ([]float32, error) {
	unit, err := NewShard(world, params, ShardOptions{})
	if err != nil {
		return nil, err
	}
	values, _, err := unit.Local(0)
	return values, err
}

// Close while calls are in flight on other goroutines: they finish on the
// open handle (a Get blocked on a key set after Close returns its value), and
// Close does not wait for them; later calls are FailedPrecondition. Close
// used to destroy the handle under them (and read and wrote the fields the
// calls read without the lock: go test -race reported it).
func TestStoreCloseDuringCalls(t *testing.T) {
	server, err := Serve("127.0.0.1:0", StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	client, err := Connect(server.Address(), StoreOptions{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Set("warm", nil); err != nil {
		t.Fatal(err)
	}
	const calls = 4
	type result struct {
		value []byte
		err   error
	}
	results := make(chan result, calls)
	for i := 0; i < calls; i++ {
		go func() {
			v, err := client.Get("late")
			results <- result{v, err}
		}()
	}
	time.Sleep(300 * time.Millisecond) // the Gets are blocked in the library
	start := time.Now()
	client.Close()
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Close waited %v for the calls in flight", d)
	}
	_, err = client.Get("warm")
	wantCode(t, err, FailedPrecondition, "closed")
	if err := server.Set("late", []byte("v")); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < calls; i++ {
		r := <-results
		if r.err != nil || string(r.value) != "v" {
			t.Fatalf("a Get in flight during Close: %q, %v", r.value, r.err)
		}
	}
}
