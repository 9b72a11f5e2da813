// The sharded elastic check (a test program, kept under internal/ so it is no
// command of the module) runs capi/test/sharded_elastic_c_multirank_test.c's
// loop in Go: dim float64 weights in one Shard (FULL_SHARD) and their
// momentum take 16 steps, each step's gradient summed over a global batch of
// 12 samples shared among the ranks of the current group and scaled by n / 12
// (the unit averages over the n ranks). The weights' shard, the momentum's
// and the step are registered in a distkit.ShardedSnapshot, committed before
// the first step and after every 4th. Before the reduction of step dieAt
// (7 + the world size) rank size/2 SIGKILLs itself. The survivors grow back
// with distrun's replacement (--max-replacements 1) or shrink (--min-ranks
// 1); every member of the new group fetches the shards it needs (its own
// when the size was kept, the replacement's from its neighbour's memory;
// every shard when the group shrank), loads them into a new Shard
// (LoadSharded, the momentum by the same layout), commits a new snapshot and
// redoes the steps since the commit. The final weights are compared with an
// uninterrupted run computed here in one process (relative 1e-12); check
// failures are summed over the final group. With the argument "pieces" it
// checks the snapshot's pieces instead (pieces.go).
package main

import (
	"fmt"
	"math"
	"os"
	"syscall"
	"time"

	dk "distkit.dev/distkit"
	em "distkit.dev/distkit/internal/tests/elasticmodel"
)

const (
	dim         = 10
	globalBatch = 12
	steps       = 16
	commitEvery = 4
	lr          = 0.1
	beta        = 0.9
	timeout     = 20 * time.Second
	settle      = 2 * time.Second
)

var (
	rank     = -1
	failures = 0
)

func check(ok bool, what string) {
	if !ok {
		fmt.Fprintf(os.Stderr, "rank %d: CHECK FAILED: %s\n", rank, what)
		failures++
	}
}

func die(what string, err error) {
	fmt.Fprintf(os.Stderr, "rank %d: %s: %v\n", rank, what, err)
	os.Exit(1)
}

func initialW() []float64 {
	w := make([]float64, dim)
	for j := range w {
		w[j] = 0.5 - 0.1*float64(j)
	}
	return w
}

// carried is what a rank takes from one layout to the next: the old
// layout's shards it fetched (weights and momentum by old shard index, nil
// where not fetched), their group's size, the step and the commit.
type carried struct {
	w, m   [][]float64
	world  int
	step   int64
	commit int64
}

// fetch (collective over g) copies out the shards this rank needs from s:
// its own index when sameLayout, else every shard.
func fetch(s *dk.ShardedSnapshot, g *dk.Group, sameLayout bool) *carried {
	var wanted []int
	if sameLayout {
		wanted = []int{g.Rank()}
	}
	commit, world, err := s.Fetch(g, wanted)
	if err != nil {
		die("fetch", err)
	}
	k := &carried{w: make([][]float64, world), m: make([][]float64, world), world: world, step: -1, commit: commit}
	for j := 0; j < world; j++ {
		if sameLayout && j != g.Rank() {
			continue
		}
		var e1, e2, e3 error
		k.w[j], e1 = dk.ShardValues[float64](s, j, 0)
		k.m[j], e2 = dk.ShardValues[float64](s, j, 1)
		step, e3 := dk.ShardValues[int64](s, j, 2)
		if e1 != nil || e2 != nil || e3 != nil || len(step) != 1 {
			die("shard", fmt.Errorf("%v %v %v", e1, e2, e3))
		}
		k.step = step[0]
	}
	return k
}

// outcome of training on one group: lost (the new group, whether it grew,
// what was fetched on it) or done (the full weights, the snapshot's bytes
// and one shard's length); steps run either way.
type outcome struct {
	next     *dk.Group
	snapshot *dk.ShardedSnapshot // lost: the old snapshot, kept until the new layout's first commit
	grown    bool
	k        *carried
	w        []float64
	bytes    int64
	localLen int
	stepsRun int64
}

// train trains on g from k (nil: from the start) until the end or a lost
// peer; previous (the old layout's snapshot, nil at first) is closed once
// this layout's first commit succeeded; dieAt >= 0: the step this rank
// SIGKILLs itself in; failsAt: the step a loss is expected in.
func train(g *dk.Group, k *carried, previous *dk.ShardedSnapshot, dieAt, failsAt int64) outcome {
	unit, err := dk.NewShard(g, [][]float64{initialW()}, dk.ShardOptions{Strategy: dk.FullShard})
	if err != nil {
		die("unit", err)
	}
	defer unit.Close()
	n, r := g.Size(), g.Rank()
	values, _, err := unit.Local(0)
	if err != nil {
		die("local", err)
	}
	localLen := len(values)
	m := make([]float64, localLen)
	step := []int64{0}
	if k != nil {
		if err := unit.LoadSharded(k.world, k.w); err != nil {
			die("LoadSharded", err)
		}
		// The momentum by the same layout: shard j of the old group holds
		// elements [j*S, (j+1)*S) of the padded flat buffer.
		oldLen := 1
		for _, s := range k.m {
			if s != nil {
				oldLen = len(s)
				break
			}
		}
		for i := range m {
			at := r*localLen + i
			switch {
			case at >= dim:
				m[i] = 0
			case k.m[at/oldLen] == nil:
				m[i] = math.NaN()
			default:
				m[i] = k.m[at/oldLen][at%oldLen]
			}
		}
		step[0] = k.step
	}
	snapshot, err := dk.NewShardedSnapshot()
	if err != nil {
		die("snapshot", err)
	}
	// The weights' shard is the unit's own memory; the snapshot takes its
	// values through a slice kept current before each commit.
	w := append([]float64(nil), values...)
	if dk.RegisterShardBuffer(snapshot, "w", w) != nil || dk.RegisterShardBuffer(snapshot, "momentum", m) != nil ||
		dk.RegisterShardBuffer(snapshot, "step", step) != nil {
		die("register", fmt.Errorf("a buffer was refused"))
	}
	commit := func() {
		values, _, err := unit.Local(0)
		if err != nil {
			die("local", err)
		}
		copy(w, values)
		if err := snapshot.Commit(g); err != nil {
			die("commit", err)
		}
	}
	commit()
	if previous != nil {
		previous.Close()
	}
	full := make([]float64, dim)
	var stepsRun int64
	for step[0] < steps {
		if err := unit.Unshard(); err != nil {
			die("unshard", err)
		}
		if err := unit.FullParam(0, full); err != nil {
			die("full param", err)
		}
		grad := em.Gradient(step[0], r*globalBatch/n, (r+1)*globalBatch/n, full)
		for j := range grad {
			grad[j] *= float64(n) / globalBatch
		}
		if err := unit.Reshard(); err != nil {
			die("reshard", err)
		}
		if err := unit.AccumulateGrad(0, grad); err != nil {
			die("accumulate grad", err)
		}
		if step[0] == dieAt {
			fmt.Printf("rank %d: SIGKILL in step %d\n", rank, step[0])
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		if err := unit.ReduceGrads(); err != nil {
			fmt.Printf("rank %d: step %d failed (%v); recovering\n", rank, step[0], err)
			check(step[0] == failsAt, "the step the victim died in fails")
			c := dk.CodeOf(err)
			check(c == dk.Unavailable || c == dk.DeadlineExceeded, "a lost peer or a timeout")
			next, grown := em.Regroup(g, timeout, settle, die)
			return outcome{next: next, snapshot: snapshot, grown: grown, k: fetch(snapshot, next, grown), stepsRun: stepsRun}
		}
		values, grads, err := unit.Local(0)
		if err != nil {
			die("local", err)
		}
		for i := range values {
			m[i] = beta*m[i] + grads[i]
			values[i] -= lr * m[i]
		}
		unit.ZeroGrads()
		step[0]++
		stepsRun++
		if step[0]%commitEvery == 0 {
			commit()
		}
	}
	out := [][]float64{make([]float64, dim)}
	if err := unit.GatherFull(out); err != nil {
		die("gather full", err)
	}
	bytes := snapshot.Bytes()
	snapshot.Close()
	return outcome{w: out[0], bytes: bytes, localLen: localLen, stepsRun: stepsRun}
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "pieces" {
		runPieces()
		return
	}
	wantGrow := len(os.Args) > 1 && os.Args[1] == "grow"
	newcomer := em.LauncherNumber("DISTKIT_REPLACEMENT") > 0
	group, err := dk.Init("pytorch", dk.InitOptions{Timeout: timeout})
	if err != nil {
		die("init", err)
	}
	rank = group.Rank()
	size := group.Size()
	if size < 2 {
		die("world size", fmt.Errorf("needs 2 ranks or more, has %d", size))
	}
	check(wantGrow == (em.LauncherNumber("DISTKIT_MAX_REPLACEMENTS") > 0), "replacements in the grow variant only")
	check(wantGrow || em.LauncherNumber("DISTKIT_MIN_RANKS") > 0, "the shrink variant runs under --min-ranks")
	victim := size / 2
	dieAt := int64(7 + size)
	wantCommit := 1 + dieAt/commitEvery
	commitStep := dieAt / commitEvery * commitEvery

	var k *carried
	if newcomer {
		// Init joined the survivors' grow; its snapshot holds nothing.
		empty, err := dk.NewShardedSnapshot()
		if err != nil {
			die("snapshot", err)
		}
		k = fetch(empty, group, true)
		empty.Close()
		fmt.Printf("rank %d: replacement fetched commit %d (step %d)\n", rank, k.commit, k.step)
		check(k.commit == wantCommit, "the replacement loads the newest commit")
		check(k.step == commitStep, "the replacement's step is the commit's")
	}
	recoveries := 0
	var total int64
	var done outcome
	var previous *dk.ShardedSnapshot
	for {
		mine := int64(-1)
		if !newcomer && recoveries == 0 && rank == victim {
			mine = dieAt
		}
		o := train(group, k, previous, mine, dieAt)
		total += o.stepsRun
		if o.next == nil {
			done = o
			break
		}
		recoveries++
		check(o.grown == wantGrow, "grown under --max-replacements, else shrunk")
		want := size - 1
		if o.grown {
			want = size
		}
		check(o.next.Size() == want, "the new group's size")
		how := "shrank"
		if o.grown {
			how = "grew"
		}
		fmt.Printf("rank %d: %s to %d ranks, fetched commit %d (step %d)\n", rank, how, o.next.Size(),
			o.k.commit, o.k.step)
		check(o.k.commit == wantCommit, "the survivors load the newest commit")
		check(o.k.step == commitStep, "the step is the commit's: the steps since are redone")
		group.Close()
		group, k, previous = o.next, o.k, o.snapshot
	}
	// Two shards held (this rank's and its neighbour's), each a header and
	// its buffers from 64-byte boundaries.
	blob := int64(64 + 2*((done.localLen*8+63)/64*64) + 64)
	want := blob
	if group.Size() > 1 {
		want = 2 * blob
	}
	check(done.bytes == want, "the snapshot holds two shards")
	if newcomer {
		check(total == steps-commitStep, "the replacement trains from the commit")
	} else {
		check(recoveries == 1, "one recovery")
		check(total == steps+dieAt-commitStep, "the steps since the commit are trained twice")
	}
	ref := em.Reference(initialW(), steps, globalBatch, lr, beta)
	for j := range ref {
		if !(math.Abs(done.w[j]-ref[j]) <= 1e-12*math.Abs(ref[j])+1e-14) {
			fmt.Fprintf(os.Stderr, "rank %d: w[%d] = %.17g, the uninterrupted run's %.17g\n", rank, j, done.w[j], ref[j])
			check(false, "final weights equal the uninterrupted run's")
		}
	}
	bad := []float64{float64(failures)}
	if err := dk.AllReduce(group, bad, dk.Sum); err != nil {
		die("the final all_reduce", err)
	}
	group.Close()
	dk.Shutdown()
	if bad[0] > 0 {
		fmt.Fprintf(os.Stderr, "rank %d: %g check(s) failed in the job\n", rank, bad[0])
		os.Exit(1)
	}
	how := "shrank"
	if newcomer {
		how = "joined as a replacement"
	} else if wantGrow {
		how = "grew back"
	}
	fmt.Printf("rank %d: %s; w equals the uninterrupted run's after %d steps\n", rank, how, total)
}
