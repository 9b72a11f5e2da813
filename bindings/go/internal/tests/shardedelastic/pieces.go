// The pieces of distkit.ShardedSnapshot in a real job (the program's argument
// "pieces")
// (as cc/elastic's sharded_snapshot_test in C++ and capi's sharded_elastic_c
// tests in C). Each rank commits its own shard (r + 2 values, so sizes
// differ, and a step) twice on the world; then, on groups that leave ranks
// out as a loss would, every member fetches every shard and finds rank j's
// second commit in shard j; a member asking for its own shard alone gets it
// without traffic; two neighbours left out together are DataLoss on every
// member; a Shard's local values committed on the world and fetched by the
// members of a group without rank k load into a unit on that group
// (Shard.LoadSharded re-shards them) whose full parameter is the one sharded;
// and a snapshot nobody committed is FailedPrecondition.

package main

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	dk "distkit.dev/distkit"
)

func values(r, c int) []float64 {
	v := make([]float64, r+2)
	for i := range v {
		v[i] = 1000*float64(c) + 10*float64(r) + float64(i)
	}
	return v
}

func failPieces(rank int, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "rank %d: CHECK FAILED: %s\n", rank, fmt.Sprintf(format, args...))
	os.Exit(1)
}

// committed is a snapshot of this rank's shard, committed twice on world.
func committed(world *dk.Group) *dk.ShardedSnapshot {
	rank := world.Rank()
	w := values(rank, 0)
	step := []int64{0}
	s, err := dk.NewShardedSnapshot()
	if err != nil {
		failPieces(rank, "new: %v", err)
	}
	if err := dk.RegisterShardBuffer(s, "w", w); err != nil {
		failPieces(rank, "register: %v", err)
	}
	if err := dk.RegisterShardBuffer(s, "step", step); err != nil {
		failPieces(rank, "register: %v", err)
	}
	for c := 1; c <= 2; c++ {
		copy(w, values(rank, c)) // in place: the slice is registered
		step[0] = int64(100*c + rank)
		if err := s.Commit(world); err != nil {
			failPieces(rank, "commit %d: %v", c, err)
		}
	}
	if s.CommitNumber() != 2 {
		failPieces(rank, "commit number %d", s.CommitNumber())
	}
	return s
}

func checkShard(s *dk.ShardedSnapshot, j, rank int, where string) {
	w, err := s.ShardBytes(j, 0)
	if err != nil {
		failPieces(rank, "%s: shard %d: %v", where, j, err)
	}
	st, err := s.ShardBytes(j, 1)
	if err != nil || len(st) != 8 {
		failPieces(rank, "%s: shard %d's step: %v", where, j, err)
	}
	want := values(j, 2)
	ok := len(w) == 8*len(want) && int64(binary.LittleEndian.Uint64(st)) == int64(200+j)
	for i := 0; ok && i < len(want); i++ {
		ok = math.Float64frombits(binary.LittleEndian.Uint64(w[8*i:])) == want[i]
	}
	if !ok {
		failPieces(rank, "%s: shard %d is not rank %d's second commit", where, j, j)
	}
}

// recoverWithout: every member of a group without `lost` fetches every shard.
func recoverWithout(world *dk.Group, lost []int) {
	rank, n := world.Rank(), world.Size()
	s := committed(world)
	defer s.Close()
	isLost := map[int]bool{}
	for _, r := range lost {
		isLost[r] = true
	}
	var members []int
	for r := 0; r < n; r++ {
		if !isLost[r] {
			members = append(members, r)
		}
	}
	g, err := world.NewGroup(members)
	if err != nil {
		failPieces(rank, "new group: %v", err)
	}
	defer g.Close()
	where := fmt.Sprintf("lost %v of %d", lost, n)
	if !isLost[rank] {
		commit, size, err := s.Fetch(g, nil)
		neighbours := len(lost) == 2 && (lost[1]-lost[0] == 1 || (lost[0] == 0 && lost[1] == n-1))
		if neighbours && n > 2 {
			shard := lost[1]
			if lost[0] == 0 && lost[1] == n-1 {
				shard = 0
			}
			if dk.CodeOf(err) != dk.DataLoss || !strings.Contains(err.Error(), fmt.Sprintf("shard(s) %d of commit 2", shard)) {
				failPieces(rank, "%s: want DATA_LOSS naming shard %d, got %v", where, shard, err)
			}
		} else {
			if err != nil {
				failPieces(rank, "%s: fetch: %v", where, err)
			}
			if commit != 2 || size != n {
				failPieces(rank, "%s: fetched commit %d of %d ranks", where, commit, size)
			}
			for j := 0; j < n; j++ {
				checkShard(s, j, rank, where)
			}
		}
	}
	if err := world.Barrier(); err != nil {
		failPieces(rank, "%s: barrier: %v", where, err)
	}
}

// reshardUnit: a unit's shards through the snapshot, re-sharded over the
// members of a group without `lost`.
func reshardUnit(world *dk.Group, lost int) {
	rank, n := world.Rank(), world.Size()
	full := make([]float64, 10)
	for i := range full {
		full[i] = 0.5 + float64(i)
	}
	unit, err := dk.NewShard(world, [][]float64{full}, dk.ShardOptions{})
	if err != nil {
		failPieces(rank, "unit: %v", err)
	}
	defer unit.Close()
	values, _, err := unit.Local(0)
	if err != nil {
		failPieces(rank, "local: %v", err)
	}
	local := append([]float64(nil), values...)
	s, err := dk.NewShardedSnapshot()
	if err != nil {
		failPieces(rank, "new: %v", err)
	}
	defer s.Close()
	if err := dk.RegisterShardBuffer(s, "w", local); err != nil {
		failPieces(rank, "register: %v", err)
	}
	if err := s.Commit(world); err != nil {
		failPieces(rank, "commit: %v", err)
	}
	var members []int
	for r := 0; r < n; r++ {
		if r != lost {
			members = append(members, r)
		}
	}
	g, err := world.NewGroup(members)
	if err != nil {
		failPieces(rank, "new group: %v", err)
	}
	defer g.Close()
	if rank != lost {
		_, size, err := s.Fetch(g, nil)
		if err != nil {
			failPieces(rank, "unit fetch: %v", err)
		}
		shards := make([][]float64, size)
		for j := range shards {
			if shards[j], err = dk.ShardValues[float64](s, j, 0); err != nil {
				failPieces(rank, "shard %d: %v", j, err)
			}
		}
		unit2, err := dk.NewShard(g, [][]float64{make([]float64, len(full))}, dk.ShardOptions{})
		if err != nil {
			failPieces(rank, "new unit: %v", err)
		}
		defer unit2.Close()
		if err := unit2.LoadSharded(size, shards); err != nil {
			failPieces(rank, "LoadSharded: %v", err)
		}
		out := [][]float64{make([]float64, len(full))}
		if err := unit2.GatherFull(out); err != nil {
			failPieces(rank, "GatherFull: %v", err)
		}
		for i := range full {
			if out[0][i] != full[i] {
				failPieces(rank, "without rank %d: the re-sharded unit holds %v", lost, out[0])
			}
		}
	}
	if err := world.Barrier(); err != nil {
		failPieces(rank, "barrier: %v", err)
	}
}

func runPieces() {
	world, err := dk.Init("pytorch", dk.InitOptions{Timeout: 20 * time.Second})
	if err != nil {
		failPieces(-1, "init: %v", err)
	}
	rank, n := world.Rank(), world.Size()
	recoverWithout(world, nil)
	for k := 0; k < n && n > 1; k++ {
		recoverWithout(world, []int{k})
	}
	if n > 2 {
		recoverWithout(world, []int{0, 1})
		recoverWithout(world, []int{0, n - 1})
	}
	lost := -1
	if n > 1 {
		lost = n - 1
	}
	reshardUnit(world, lost)
	// Its own shard alone: from this rank's memory, nothing received.
	s := committed(world)
	held := s.Bytes()
	if _, _, err := s.Fetch(world, []int{rank}); err != nil {
		failPieces(rank, "own shard: %v", err)
	}
	checkShard(s, rank, rank, "own shard")
	if s.Bytes() != held {
		failPieces(rank, "own shard: %d bytes held, %d before", s.Bytes(), held)
	}
	s.Close()
	// Nothing committed anywhere.
	empty, err := dk.NewShardedSnapshot()
	if err != nil {
		failPieces(rank, "new: %v", err)
	}
	if _, _, err := empty.Fetch(world, nil); dk.CodeOf(err) != dk.FailedPrecondition {
		failPieces(rank, "nothing committed: want FAILED_PRECONDITION, got %v", err)
	}
	empty.Close()
	if err := world.Barrier(); err != nil {
		failPieces(rank, "barrier: %v", err)
	}
	fmt.Printf("rank %d: sharded snapshot: passed\n", rank)
}
