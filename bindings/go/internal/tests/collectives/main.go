// The collectives check (a test program, kept under internal/ so it is no
// command of the module) runs, in every rank of a real job (start it with
// distrun), every collective the Go binding offers for every element type,
// and checks each result against values it computes itself.
package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	dk "distkit.dev/distkit"
	rc "distkit.dev/distkit/internal/tests/rankcheck"
	"distkit.dev/distkit/internal/tests/reducercheck"
)

var rank, size int

// Test values are small integers, exact in every element type.
func value(r, i int) float64 { return float64((r + 1) * (i%7 + 1)) }
func small(r, i int) float64 { return float64(1 + (r+i)%2) }

func from[T dk.Element](x float64) T {
	var z T
	var out any
	switch any(z).(type) {
	case float32:
		out = float32(x)
	case float64:
		out = x
	case int8:
		out = int8(x)
	case uint8:
		out = uint8(x)
	case int32:
		out = int32(x)
	case int64:
		out = int64(x)
	case dk.Float16:
		out = dk.Float16FromFloat32(float32(x))
	case dk.BFloat16:
		out = dk.BFloat16FromFloat32(float32(x))
	}
	return out.(T)
}

func to[T dk.Element](v T) float64 {
	switch x := any(v).(type) {
	case float32:
		return float64(x)
	case float64:
		return x
	case int8:
		return float64(x)
	case uint8:
		return float64(x)
	case int32:
		return float64(x)
	case int64:
		return float64(x)
	case dk.Float16:
		return float64(x.Float32())
	case dk.BFloat16:
		return float64(x.Float32())
	}
	panic("unreachable")
}

func isInteger[T dk.Element]() bool {
	var z T
	switch any(z).(type) {
	case int8, uint8, int32, int64:
		return true
	}
	return false
}

func near(got, want float64, what string, i int) {
	if math.Abs(got-want) > 1e-2*math.Max(1, math.Abs(want)) {
		rc.Fail("%s[%d]: got %v, want %v", what, i, got, want)
	}
}

func make1[T dk.Element](n int, f func(i int) float64) []T {
	s := make([]T, n)
	for i := range s {
		s[i] = from[T](f(i))
	}
	return s
}

// reduceCase is one all_reduce case: op, per-rank values, expected fold.
type reduceCase struct {
	op   dk.ReduceOp
	f    func(int, int) float64
	fold func([]float64) float64
}

func checkType[T dk.Element](g *dk.Group, name string) {
	const n = 37
	sum := func(v []float64) float64 {
		s := 0.0
		for _, x := range v {
			s += x
		}
		return s
	}
	cases := []reduceCase{
		{dk.Sum, value, sum},
		{dk.Max, value, func(v []float64) float64 {
			m := v[0]
			for _, x := range v {
				m = math.Max(m, x)
			}
			return m
		}},
		{dk.Min, value, func(v []float64) float64 {
			m := v[0]
			for _, x := range v {
				m = math.Min(m, x)
			}
			return m
		}},
		{dk.Product, small, func(v []float64) float64 {
			p := 1.0
			for _, x := range v {
				p *= x
			}
			return p
		}},
		{dk.Mean, value, func(v []float64) float64 {
			m := sum(v) / float64(len(v))
			if isInteger[T]() {
				return math.Trunc(m)
			}
			return m
		}},
	}
	for _, c := range cases {
		data := make1[T](n, func(i int) float64 { return c.f(rank, i) })
		rc.Must(dk.AllReduce(g, data, c.op), "all_reduce "+name)
		for i, x := range data {
			vals := make([]float64, size)
			for q := range vals {
				vals[q] = c.f(q, i)
			}
			near(to(x), c.fold(vals), fmt.Sprintf("all_reduce %d %s", c.op, name), i)
		}
	}
	for root := 0; root < size; root++ {
		data := make1[T](n, func(i int) float64 { return value(rank, i) })
		rc.Must(dk.Broadcast(g, data, root), "broadcast")
		for i, x := range data {
			near(to(x), value(root, i), fmt.Sprintf("broadcast from %d %s", root, name), i)
		}
	}
	root := size - 1
	data := make1[T](n, func(i int) float64 { return value(rank, i) })
	rc.Must(dk.Reduce(g, data, dk.Sum, root), "reduce")
	for i, x := range data {
		want := value(rank, i)
		if rank == root {
			want = 0
			for q := 0; q < size; q++ {
				want += value(q, i)
			}
		}
		near(to(x), want, "reduce "+name, i)
	}
	input := make1[T](n, func(i int) float64 { return value(rank, i) })
	out := make([]T, n*size)
	rc.Must(dk.AllGather(g, input, out), "all_gather")
	for j, x := range out {
		near(to(x), value(j/n, j%n), "all_gather "+name, j)
	}
	var gathered []T
	if rank == 0 {
		gathered = make([]T, n*size)
	}
	rc.Must(dk.Gather(g, input, gathered, 0), "gather")
	for j, x := range gathered {
		near(to(x), value(j/n, j%n), "gather "+name, j)
	}
	var full []T
	if rank == 0 {
		full = make1[T](n*size, func(j int) float64 { return value(j/n, j%n) })
	}
	part := make([]T, n)
	rc.Must(dk.Scatter(g, full, part, 0), "scatter")
	for i, x := range part {
		near(to(x), value(rank, i), "scatter "+name, i)
	}
	input = make1[T](n*size, func(j int) float64 { return value(rank, j) })
	rc.Must(dk.ReduceScatter(g, input, part, dk.Sum), "reduce_scatter")
	for i, x := range part {
		want := 0.0
		for q := 0; q < size; q++ {
			want += value(q, rank*n+i)
		}
		near(to(x), want, "reduce_scatter "+name, i)
	}
	input = make1[T](3*size, func(j int) float64 { return float64(10*rank + j/3 + j%3) })
	out = make([]T, 3*size)
	rc.Must(dk.AllToAll(g, input, out), "all_to_all")
	for j, x := range out {
		near(to(x), float64(10*(j/3)+rank+j%3), "all_to_all "+name, j)
	}
}

func checkBitwise[T int32 | uint8 | int64](g *dk.Group, name string) {
	ops := []struct {
		op dk.ReduceOp
		f  func(a, b int64) int64
	}{{dk.BitAnd, func(a, b int64) int64 { return a & b }}, {dk.BitOr, func(a, b int64) int64 { return a | b }}, {dk.BitXor, func(a, b int64) int64 { return a ^ b }}}
	for _, o := range ops {
		data := make([]T, 19)
		for i := range data {
			data[i] = T((rank*5 + i) % 8)
		}
		rc.Must(dk.AllReduce(g, data, o.op), "bitwise "+name)
		for i, x := range data {
			want := int64(i % 8)
			for q := 1; q < size; q++ {
				want = o.f(want, int64((q*5+i)%8))
			}
			if int64(x) != want {
				rc.Fail("bitwise %d %s [%d]: got %d want %d", o.op, name, i, x, want)
			}
		}
	}
}

func obj(q int) []byte { return []byte(strings.Repeat(fmt.Sprintf("rank-%d-", q), q+1)) }

// subgroupsWithOptions checks subgroups with options of their own (ABI
// 0.11), under a world with the default 30-minute timeout: a collective one
// member skips fails on the others after the subgroup's 1 s; a named
// subgroup is made by its members alone; a creation a member never joins
// fails after the connect timeout.
func subgroupsWithOptions(world *dk.Group) {
	all := allRanks()
	sub, err := world.NewGroupWithOptions(all, dk.GroupOptions{Timeout: 3 * time.Second, ConnectTimeout: time.Minute})
	rc.Must(err, "new_group_with_options")
	if sub.Rank() != rank || sub.Size() != size {
		rc.Fail("subgroup with options: rank %d of %d", sub.Rank(), sub.Size())
	}
	v := []int32{int32(rank + 1)}
	rc.Must(dk.AllReduce(sub, v, dk.Sum), "all_reduce on the subgroup with options")
	if v[0] != int32(size*(size+1)/2) {
		rc.Fail("subgroup with options: sum %d", v[0])
	}
	if size > 1 {
		if rank != size-1 { // the last rank skips this one
			start := time.Now()
			err := dk.AllReduce(sub, v, dk.Sum)
			took := time.Since(start)
			if dk.CodeOf(err) != dk.DeadlineExceeded {
				rc.Fail("a collective the last rank skipped: %v", err)
			}
			if took < 2*time.Second || took > 20*time.Second {
				rc.Fail("the skipped collective failed after %v, not the subgroup's 3 s", took)
			}
		}
		// The last rank keeps its group open until the others have timed out
		// (closing it closes its connections: Unavailable, not a timeout).
		rc.Must(world.Barrier(), "barrier after the timeout")
	}
	sub.Close()

	pair := []int{0}
	if size > 1 {
		pair = append(pair, size-1)
	}
	if rank == 0 || rank == size-1 {
		named, err := world.NewGroupWithOptions(pair, dk.GroupOptions{Name: "timed-pair", Timeout: 10 * time.Second, ConnectTimeout: 20 * time.Second})
		rc.Must(err, "named new_group_with_options")
		if !strings.Contains(named.Name(), "timed-pair") {
			rc.Fail("the named subgroup is called %q", named.Name())
		}
		v := []int32{int32(rank + 1), int32(rank + 1)}
		rc.Must(dk.AllReduce(named, v, dk.Sum), "named subgroup all_reduce")
		want := int32(0)
		for _, q := range pair {
			want += int32(q + 1)
		}
		if v[0] != want || v[1] != want {
			rc.Fail("named subgroup sum %v, want %d", v, want)
		}
		named.Close()
	}
	if size > 1 && rank == 0 {
		// Rank size-1 never comes: the creation gives up after 1 s.
		start := time.Now()
		_, err := world.NewGroupWithOptions([]int{0, size - 1}, dk.GroupOptions{Name: "never-joined", ConnectTimeout: time.Second})
		took := time.Since(start)
		if dk.CodeOf(err) != dk.DeadlineExceeded || took > 20*time.Second {
			rc.Fail("a member that never came: %v after %v", err, took)
		}
	}
	if _, err := world.NewGroupWithOptions(all, dk.GroupOptions{Name: "a/b"}); dk.CodeOf(err) != dk.InvalidArgument {
		rc.Fail("'/' in the name: %v", err)
	}
	if _, err := world.NewGroupWithOptions([]int{1 << 32}, dk.GroupOptions{}); dk.CodeOf(err) != dk.InvalidArgument {
		rc.Fail("rank 1<<32: %v", err)
	}
	rc.Must(world.Barrier(), "barrier after the subgroups with options")
}

func main() {
	world, err := dk.Init("pytorch", dk.InitOptions{})
	rc.Must(err, "init")
	rank, size = world.Rank(), world.Size()
	rc.Rank = rank
	if strconv.Itoa(rank) != os.Getenv("RANK") || strconv.Itoa(size) != os.Getenv("WORLD_SIZE") {
		rc.Fail("rank/size disagree with the launcher")
	}
	checkType[float32](world, "f32")
	checkType[float64](world, "f64")
	checkType[int8](world, "i8")
	checkType[uint8](world, "u8")
	checkType[int32](world, "i32")
	checkType[int64](world, "i64")
	checkType[dk.Float16](world, "f16")
	checkType[dk.BFloat16](world, "bf16")
	checkBitwise[int32](world, "i32")
	checkBitwise[uint8](world, "u8")
	checkBitwise[int64](world, "i64")
	flags := []bool{rank%2 == 0, rank%2 == 0}
	rc.Must(dk.AllReduce(world, flags, dk.BitOr), "bool or")
	if !flags[0] || !flags[1] {
		rc.Fail("bool or: %v", flags)
	}
	flags = []bool{rank%2 == 0}
	rc.Must(dk.AllReduce(world, flags, dk.BitAnd), "bool and")
	if flags[0] != (size == 1) {
		rc.Fail("bool and: %v", flags)
	}
	if err := dk.AllReduce(world, []float32{1}, dk.BitXor); dk.CodeOf(err) != dk.InvalidArgument || !strings.Contains(err.Error(), "float32") {
		rc.Fail("bxor on float32: %v", err)
	}

	// Uneven all_to_all: rank r sends q+1 elements valued 100r+q to rank q.
	inSplits, outSplits := make([]int64, size), make([]int64, size)
	var input []int64
	for q := 0; q < size; q++ {
		inSplits[q], outSplits[q] = int64(q+1), int64(rank+1)
		for k := 0; k <= q; k++ {
			input = append(input, int64(100*rank+q))
		}
	}
	out := make([]int64, size*(rank+1))
	rc.Must(dk.AllToAllUneven(world, input, inSplits, out, outSplits), "uneven all_to_all")
	for j, x := range out {
		if want := int64(100*(j/(rank+1)) + rank); x != want {
			rc.Fail("uneven all_to_all [%d]: %d want %d", j, x, want)
		}
	}

	// Ring send/recv.
	if size > 1 {
		next, prev := (rank+1)%size, (rank+size-1)%size
		mine, theirs := []float64{float64(rank) + 0.5, 1}, make([]float64, 2)
		if rank%2 == 0 {
			rc.Must(dk.Send(world, mine, next, 7), "send")
			rc.Must(dk.Recv(world, theirs, prev, 7), "recv")
		} else {
			rc.Must(dk.Recv(world, theirs, prev, 7), "recv")
			rc.Must(dk.Send(world, mine, next, 7), "send")
		}
		if theirs[0] != float64(prev)+0.5 {
			rc.Fail("recv from %d: %v", prev, theirs)
		}
	}
	rc.Must(world.Barrier(), "barrier")

	// Byte objects.
	all, err := world.AllGatherObject(obj(rank))
	rc.Must(err, "all_gather_object")
	for q := 0; q < size; q++ {
		if !bytes.Equal(all[q], obj(q)) {
			rc.Fail("all_gather_object[%d] = %q", q, all[q])
		}
	}
	got, err := world.GatherObject(obj(rank), size-1)
	rc.Must(err, "gather_object")
	if (rank == size-1) != (len(got) == size) {
		rc.Fail("gather_object on %d: %d items", rank, len(got))
	}
	var list [][]byte
	if rank == 0 {
		list = [][]byte{[]byte("alpha"), {}, []byte("gamma")}
	}
	got, err = world.BroadcastObjectList(list, 0)
	rc.Must(err, "broadcast_object_list")
	if len(got) != 3 || string(got[0]) != "alpha" || len(got[1]) != 0 || string(got[2]) != "gamma" {
		rc.Fail("broadcast_object_list: %q", got)
	}
	seed, err := world.SyncRandomSeed()
	rc.Must(err, "seed")
	seeds := make([]int64, size)
	rc.Must(dk.AllGather(world, []int64{int64(seed)}, seeds), "seeds")
	for _, s := range seeds {
		if s != seeds[0] {
			rc.Fail("seeds differ: %v", seeds)
		}
	}

	// Asynchronous work in flight together.
	x := make([]int64, 100000)
	for i := range x {
		x[i] = int64(rank)
	}
	y := []float64{1, 1, 1}
	ranks := make([]int32, size)
	w1, err := dk.AllReduceAsync(world, x, dk.Sum)
	rc.Must(err, "async all_reduce")
	w2, err := dk.AllReduceAsync(world, y, dk.Sum)
	rc.Must(err, "async all_reduce")
	w3, err := dk.AllGatherAsync(world, []int32{int32(rank)}, ranks)
	rc.Must(err, "async all_gather")
	rc.Must(w3.Wait(0), "wait")
	rc.Must(w1.Wait(0), "wait")
	w2.Close() // waits
	w1.Close()
	w3.Close()
	for _, v := range x {
		if v != int64(size*(size-1)/2) {
			rc.Fail("async all_reduce: %d", v)
		}
	}
	for q, r := range ranks {
		if int(r) != q || y[0] != float64(size) {
			rc.Fail("async results %v %v", ranks, y)
		}
	}

	// Subgroup {0, last}.
	pair := []int{0}
	if size > 1 {
		pair = append(pair, size-1)
	}
	sub, err := world.NewGroup(pair)
	rc.Must(err, "new_group")
	v := []int32{int32(rank + 1)}
	err = dk.AllReduce(sub, v, dk.Sum)
	member := rank == 0 || rank == size-1
	if member {
		rc.Must(err, "subgroup all_reduce")
		want := int32(1)
		if size > 1 {
			want = int32(1 + size)
		}
		if v[0] != want {
			rc.Fail("subgroup sum %d want %d", v[0], want)
		}
	} else if dk.CodeOf(err) != dk.FailedPrecondition || sub.Rank() != -1 {
		rc.Fail("non-member: %v", err)
	}
	sub.Close()
	subgroupsWithOptions(world)

	// Misuse: wrong sizes are errors, on every rank; data is not touched.
	if err := dk.AllGather(world, []float32{1, 2}, make([]float32, 1)); dk.CodeOf(err) != dk.InvalidArgument {
		rc.Fail("short output: %v", err)
	}
	// A root or rank past int32 is refused, not wrapped onto rank 0.
	if err := dk.Broadcast(world, []int32{1}, 1<<32); dk.CodeOf(err) != dk.InvalidArgument {
		rc.Fail("root 1<<32: %v", err)
	}
	if _, err := world.NewGroup([]int{1 << 32}); dk.CodeOf(err) != dk.InvalidArgument {
		rc.Fail("rank 1<<32: %v", err)
	}
	if size > 1 {
		mismatched := make([]int32, 10+rank)
		for i := range mismatched {
			mismatched[i] = 1
		}
		if err := dk.AllReduce(world, mismatched, dk.Sum); dk.CodeOf(err) != dk.InvalidArgument {
			rc.Fail("mismatched counts: %v", err)
		}
		for _, m := range mismatched {
			if m != 1 {
				rc.Fail("a refused call changed the data")
			}
		}
		// Test on a failed asynchronous operation returns its error (not
		// "still running" forever).
		// (Where the signatures are agreed on before the call returns, the
		// error comes from the call itself: that is allowed too.)
		w, err := dk.AllReduceAsync(world, mismatched, dk.Sum)
		if err != nil && dk.CodeOf(err) != dk.InvalidArgument {
			rc.Fail("async mismatched all_reduce: %v", err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for err == nil {
			done, err := w.Test()
			if err != nil {
				if dk.CodeOf(err) != dk.InvalidArgument {
					rc.Fail("Test on a failed op: %v", err)
				}
				break
			}
			if done {
				rc.Fail("mismatched async all_reduce succeeded")
				break
			}
			if time.Now().After(deadline) {
				rc.Fail("Test never reported the failed operation")
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if w != nil {
			w.Close()
		}
	}
	rc.Must(world.Barrier(), "barrier")
	// The gradient reducer: rank 0's parameters everywhere, averaged
	// gradients, a missing gradient named.
	params := [][]float64{make([]float64, 40), make([]float64, 3)}
	for _, p := range params {
		for k := range p {
			p[k] = float64(rank)
		}
	}
	red, err := dk.NewReducer(world, params, [][]float64{{float64(rank + 9)}}, dk.ReducerOptions{FirstBucketCapMB: 1e-4})
	rc.Must(err, "new reducer")
	if params[0][5] != 0 || params[1][2] != 0 {
		rc.Fail("reducer parameters not broadcast from rank 0: %v", params[1])
	}
	grad := func(q, p, k int) float64 { return float64((q+1)*(k+1) + p) }
	grads := [][]float64{make([]float64, 40), make([]float64, 3)}
	for it := 0; it < 2; it++ {
		for _, p := range []int{1, 0} {
			for k := range grads[p] {
				grads[p][k] = grad(rank, p, k)
			}
			rc.Must(red.MarkReady(p, grads[p]), "mark ready")
		}
		rc.Must(red.Finalize(grads), "finalize")
		reducercheck.CheckAverages(grads, size, grad, "reducer average")
	}
	if err := red.MarkReady(0, make([]float64, 3)); dk.CodeOf(err) != dk.InvalidArgument {
		rc.Fail("wrong gradient size: %v", err)
	}
	rc.Must(red.MarkReady(0, grads[0]), "mark ready")
	if err := red.Finalize(grads); dk.CodeOf(err) != dk.FailedPrecondition || !strings.Contains(err.Error(), "params[1]") {
		rc.Fail("missing gradient: %v", err)
	}
	red.Close()
	if err := red.MarkReady(0, grads[0]); dk.CodeOf(err) != dk.FailedPrecondition {
		rc.Fail("closed reducer: %v", err)
	}
	reducercheck.UnusedParameters(world, rank, size)
	reducercheck.AbandonedIteration(world, rank, size)
	checkIssuerAcrossThreads(world)
	checkDroppedWork(world)
	checkDroppedReducer(world)

	// Abort from another goroutine.
	g, err := world.NewGroup(allRanks())
	rc.Must(err, "new_group")
	done := make(chan struct{})
	go func() { g.Abort(); close(done) }()
	<-done
	if err := g.Barrier(); dk.CodeOf(err) != dk.Cancelled && dk.CodeOf(err) != dk.FailedPrecondition {
		rc.Fail("aborted group: %v", err)
	}
	g.Close()
	rc.Must(world.Barrier(), "barrier")
	world.Close()
	fmt.Printf("rank %d/%d: all Go collective checks passed\n", rank, size)
}

// allRanks: every rank of the world, in order, for a subgroup of them all.
func allRanks() []int {
	all := make([]int, size)
	for i := range all {
		all[i] = i
	}
	return all
}

// subgroupAndStore: for a check that drops an operation in flight, a
// subgroup of every rank to run it on, and the default store through which
// rank 0 tells the others when to join it. The caller closes the store.
func subgroupAndStore(world *dk.Group, what string) (*dk.Group, *dk.Store) {
	sub, err := world.NewGroup(allRanks())
	rc.Must(err, "new group ("+what+")")
	store, err := dk.DefaultStore()
	rc.Must(err, "default store")
	return sub, store
}

// unrelatedFinalizerRuns: whether a finalizer of a new object runs within
// `limit` of the collection that finds it unreachable, and how long it took
// (or waited). A finalizer that blocks holds up every later one: Go runs
// them all on one goroutine.
func unrelatedFinalizerRuns(limit time.Duration) (time.Duration, bool) {
	ran := make(chan struct{})
	func() {
		marker := new([64]byte)
		runtime.SetFinalizer(marker, func(*[64]byte) { close(ran) })
	}()
	start := time.Now()
	runtime.GC()
	select {
	case <-ran:
		return time.Since(start), true
	case <-time.After(limit):
		return time.Since(start), false
	}
}

// checkDroppedReducer: a Reducer dropped with a bucket in flight (its
// all_reduce waits for peers, and freeing it waits for that) must not hold up
// the program's other finalizers, as checkDroppedWork for a Work. Rank 0
// marks every gradient ready and drops the reducer; the others join the
// bucket (and abandon the iteration) only after rank 0 saw an unrelated
// finalizer run within 1 s.
func checkDroppedReducer(world *dk.Group) {
	if size == 1 {
		return
	}
	sub, store := subgroupAndStore(world, "dropped reducer")
	defer store.Close()
	const key = "go_collectives/dropped_reducer_checked"
	grad := func(q, k int) float32 { return float32((q + 1) * (k + 2)) }
	red, err := dk.NewReducer(sub, [][]float32{make([]float32, 3)}, nil, dk.ReducerOptions{})
	rc.Must(err, "new reducer (dropped)")
	if rank == 0 {
		g := []float32{grad(0, 0), grad(0, 1), grad(0, 2)}
		rc.Must(red.MarkReady(0, g), "mark ready (dropped reducer)")
		red = nil
		runtime.GC() // the Reducer's finalizer starts
		time.Sleep(100 * time.Millisecond)
		took, ran := unrelatedFinalizerRuns(time.Second)
		if !ran {
			rc.Fail("a Reducer dropped with a bucket in flight held up an unrelated finalizer for 1 s")
		}
		fmt.Printf("rank 0: a finalizer ran %v after a Reducer was dropped mid-iteration\n", took)
		rc.Must(store.Set(key, []byte("1")), "store set")
	} else {
		_, err := store.Get(key)
		rc.Must(err, "store get")
		// Their bucket's all_reduce completes rank 0's; finalize would wait
		// for rank 0's part of the iteration's end, so they abandon it.
		g := []float32{grad(rank, 0), grad(rank, 1), grad(rank, 2)}
		rc.Must(red.MarkReady(0, g), "mark ready (joining the dropped reducer)")
		rc.Must(red.Abandon(), "abandon (joining the dropped reducer)")
		red.Close()
	}
	// sub stays open: rank 0's reducer may still be closing on its goroutine.
	rc.Must(world.Barrier(), "barrier (dropped reducer)")
}

// checkDroppedWork: a Work dropped while its operation waits for peers
// must not hold up the program's other finalizers (Go runs them all on one
// goroutine). Rank 0 drops an all_reduce the others join only after it saw an
// unrelated finalizer run.
func checkDroppedWork(world *dk.Group) {
	if size == 1 {
		return
	}
	sub, store := subgroupAndStore(world, "dropped work")
	defer store.Close()
	const key = "go_collectives/dropped_work_checked"
	data := []float32{1, 2, 3}
	if rank == 0 {
		func() {
			_, err := dk.AllReduceAsync(sub, data, dk.Sum)
			rc.Must(err, "all_reduce async (dropped)")
		}()
		runtime.GC() // the Work's finalizer starts
		time.Sleep(100 * time.Millisecond)
		if _, ran := unrelatedFinalizerRuns(5 * time.Second); !ran {
			rc.Fail("a dropped, unfinished Work held up an unrelated finalizer for 5 s")
		}
		rc.Must(store.Set(key, []byte("1")), "store set")
	} else {
		_, err := store.Get(key)
		rc.Must(err, "store get")
		rc.Must(dk.AllReduce(sub, data, dk.Sum), "all_reduce (joining the dropped one)")
		if data[0] != float32(size) || data[2] != float32(3*size) {
			rc.Fail("all_reduce joining a dropped Work: %v", data)
		}
	}
	rc.Must(world.Barrier(), "barrier (dropped work)")
	sub.Close()
}

// checkIssuerAcrossThreads: a goroutine's collectives are one sequence when
// the runtime moves it to another OS thread while they are in flight. Forced
// here: goroutine A holds its thread (LockOSThread) and issues an
// all_reduce the last rank delays; this goroutine, necessarily on another
// thread, issues the next collective before A's completes. Then two
// goroutines whose calls overlap on one group: the second is refused.
func checkIssuerAcrossThreads(world *dk.Group) {
	rank, size := world.Rank(), world.Size()
	last := rank == size-1
	if last {
		time.Sleep(300 * time.Millisecond) // keeps A's all_reduce in flight
	}
	x := []int64{int64(rank)}
	started := make(chan *dk.Work)
	release := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		w, err := dk.AllReduceAsync(world, x, dk.Sum)
		rc.Must(err, "issuer: async all_reduce on a locked thread")
		started <- w
		<-release // holds the thread until the next collective is issued
	}()
	w := <-started
	y := []int64{int64(rank + 1)}
	rc.Must(dk.AllReduce(world, y, dk.Sum),
		"issuer: the next collective from another thread while the first is in flight")
	close(release)
	rc.Must(w.Wait(0), "issuer: wait")
	w.Close()
	if x[0] != int64(size*(size-1)/2) || y[0] != int64(size*(size+1)/2) {
		rc.Fail("issuer: sums %d and %d", x[0], y[0])
	}

	// A collective the binding makes for a snapshot (Sync) right after an
	// asynchronous one still in flight, from the same goroutine: one issuer.
	if last {
		time.Sleep(300 * time.Millisecond)
	}
	snap, err := dk.NewSnapshot()
	rc.Must(err, "issuer: snapshot")
	state := []float32{float32(rank)}
	rc.Must(dk.RegisterBuffer(snap, "state", state), "issuer: register")
	rc.Must(snap.Commit(), "issuer: commit")
	z := []int64{1}
	wz, err := dk.AllReduceAsync(world, z, dk.Sum)
	rc.Must(err, "issuer: async all_reduce before a snapshot sync")
	_, err = snap.Sync(world)
	rc.Must(err, "issuer: snapshot sync while an async all_reduce is in flight")
	rc.Must(wz.Wait(0), "issuer: wait")
	wz.Close()
	snap.Close()
	if z[0] != int64(size) {
		rc.Fail("issuer: sum %d", z[0])
	}

	// Overlapping calls: goroutine C blocks in an all_reduce the last rank
	// delays; a barrier from this goroutine meanwhile is refused (it takes
	// no place in the sequence, so the last rank makes no such call).
	if last {
		time.Sleep(1500 * time.Millisecond)
		rc.Must(dk.AllReduce(world, []int64{1}, dk.Sum), "issuer: overlapped all_reduce")
		return
	}
	done := make(chan error)
	calling := make(chan struct{})
	go func() {
		close(calling) // C is about to call: it claims the group at once
		done <- dk.AllReduce(world, []int64{1}, dk.Sum)
	}()
	<-calling
	// C's claim is a few instructions after the signal; the last rank
	// holds the all_reduce 1.5 s, so C stays inside it meanwhile.
	time.Sleep(200 * time.Millisecond)
	err = world.Barrier()
	if dk.CodeOf(err) != dk.FailedPrecondition || !strings.Contains(err.Error(), "another goroutine") {
		rc.Fail("issuer: an overlapping call must be refused naming another goroutine, got %v", err)
	}
	rc.Must(<-done, "issuer: the call it overlapped completes")
}
