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

	dk "distkit.dev/distkit"
	em "distkit.dev/distkit/internal/tests/elasticmodel"
)

const dim = 10

// job is this rank's elastic check (started in main).
var job em.Job

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
		job.Die("fetch", err)
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
			job.Die("shard", fmt.Errorf("%v %v %v", e1, e2, e3))
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
	unit, err := dk.NewShard(g, [][]float64{em.InitialW(dim, 0.1)}, dk.ShardOptions{Strategy: dk.FullShard})
	if err != nil {
		job.Die("unit", err)
	}
	defer unit.Close()
	n, r := g.Size(), g.Rank()
	values, _, err := unit.Local(0)
	if err != nil {
		job.Die("local", err)
	}
	localLen := len(values)
	m := make([]float64, localLen)
	step := []int64{0}
	if k != nil {
		if err := unit.LoadSharded(k.world, k.w); err != nil {
			job.Die("LoadSharded", err)
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
		job.Die("snapshot", err)
	}
	// The weights' shard is the unit's own memory; the snapshot takes its
	// values through a slice kept current before each commit.
	w := append([]float64(nil), values...)
	if dk.RegisterShardBuffer(snapshot, "w", w) != nil || dk.RegisterShardBuffer(snapshot, "momentum", m) != nil ||
		dk.RegisterShardBuffer(snapshot, "step", step) != nil {
		job.Die("register", fmt.Errorf("a buffer was refused"))
	}
	commit := func() {
		values, _, err := unit.Local(0)
		if err != nil {
			job.Die("local", err)
		}
		copy(w, values)
		if err := snapshot.Commit(g); err != nil {
			job.Die("commit", err)
		}
	}
	commit()
	if previous != nil {
		previous.Close()
	}
	full := make([]float64, dim)
	var stepsRun int64
	for step[0] < em.Steps {
		if err := unit.Unshard(); err != nil {
			job.Die("unshard", err)
		}
		if err := unit.FullParam(0, full); err != nil {
			job.Die("full param", err)
		}
		grad := em.Gradient(step[0], r*em.GlobalBatch/n, (r+1)*em.GlobalBatch/n, full)
		for j := range grad {
			grad[j] *= float64(n) / em.GlobalBatch
		}
		if err := unit.Reshard(); err != nil {
			job.Die("reshard", err)
		}
		if err := unit.AccumulateGrad(0, grad); err != nil {
			job.Die("accumulate grad", err)
		}
		if step[0] == dieAt {
			job.SigkillSelf(step[0])
		}
		if err := unit.ReduceGrads(); err != nil {
			fmt.Printf("rank %d: step %d failed (%v); recovering\n", job.Rank, step[0], err)
			job.Check(step[0] == failsAt, "the step the victim died in fails")
			c := dk.CodeOf(err)
			job.Check(c == dk.Unavailable || c == dk.DeadlineExceeded, "a lost peer or a timeout")
			next, grown := job.Regroup(g)
			return outcome{next: next, snapshot: snapshot, grown: grown, k: fetch(snapshot, next, grown), stepsRun: stepsRun}
		}
		values, grads, err := unit.Local(0)
		if err != nil {
			job.Die("local", err)
		}
		for i := range values {
			m[i] = em.Beta*m[i] + grads[i]
			values[i] -= em.LR * m[i]
		}
		unit.ZeroGrads()
		step[0]++
		stepsRun++
		if step[0]%em.CommitEvery == 0 {
			commit()
		}
	}
	out := [][]float64{make([]float64, dim)}
	if err := unit.GatherFull(out); err != nil {
		job.Die("gather full", err)
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
	group := job.Start()

	var k *carried
	if job.Newcomer {
		// Init joined the survivors' grow; its snapshot holds nothing.
		empty, err := dk.NewShardedSnapshot()
		if err != nil {
			job.Die("snapshot", err)
		}
		k = fetch(empty, group, true)
		empty.Close()
		fmt.Printf("rank %d: replacement fetched commit %d (step %d)\n", job.Rank, k.commit, k.step)
		job.CheckJoined(k.commit, k.step)
	}
	recoveries := 0
	var total int64
	var done outcome
	var previous *dk.ShardedSnapshot
	for {
		mine := int64(-1)
		if !job.Newcomer && recoveries == 0 && job.Rank == job.Victim {
			mine = job.DieAt
		}
		o := train(group, k, previous, mine, job.DieAt)
		total += o.stepsRun
		if o.next == nil {
			done = o
			break
		}
		recoveries++
		job.CheckRegroup(o.next, o.grown)
		job.CheckRecovery(o.next, o.grown, "fetched", o.k.commit, o.k.step)
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
	job.Check(done.bytes == want, "the snapshot holds two shards")
	job.CheckTrained(done.w, em.InitialW(dim, 0.1), total, recoveries)
	failures := job.Failures(group)
	group.Close()
	dk.Shutdown()
	job.End(failures, total)
}
