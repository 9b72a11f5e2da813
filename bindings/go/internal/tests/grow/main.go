// The grow check (a test program, kept under internal/ so it is no command of
// the module) is elastic recovery from Go, under distrun --max-replacements 1,
// as capi/test/grow_c_multirank_test.c does it in C: N ranks run checked
// all_reduces; before step dieAt rank 1 SIGKILLs itself. The survivors' step
// fails (a lost peer or a timeout); they shrink the world (Group.Shrink) and
// run checked steps at N - 1, then Group.Grow on the shrunk group while
// distrun's new process for rank 1 (DISTKIT_REPLACEMENT=1) enters through
// distkit.Init, which joins the same grow and returns the grown group as its
// world. Everyone then holds a group of N again, in the original rank order
// (an all_gather of world ranks says so); the groups the survivors grew from
// are aborted; the newcomer gets the step counter by broadcast and the steps
// at N are checked again. At world size 2 the lone survivor shrinks to a
// group of one (its steps there are its own values). With the argument
// "direct" the survivors grow straight from the failed world, without a
// shrink. Every expected sum is computed here from the formula for the
// members each phase must have; a failed check exits 1, which the spent
// replacement budget turns into the job's failure.
package main

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	dk "distkit.dev/distkit"
)

const (
	dim         = 5
	victim      = 1
	dieAt       = 3
	shrunkSteps = 3
	grownSteps  = 3
	timeout     = 20 * time.Second
)

var rank = -1

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "rank %d: CHECK FAILED: %s\n", rank, fmt.Sprintf(format, args...))
	os.Exit(1)
}

// value is world rank r's contribution at step.
func value(step, r, i int) float64 {
	return float64(step+1)*100 + float64((r+1)*(i+1))
}

// stepOn runs one all_reduce (sum) on g at step and checks it against the
// sum over the world ranks members; it returns the library's error.
func stepOn(g *dk.Group, step int, members []int) error {
	v := make([]float64, dim)
	for i := range v {
		v[i] = value(step, rank, i)
	}
	if err := dk.AllReduce(g, v, dk.Sum); err != nil {
		return err
	}
	for i, got := range v {
		want := 0.0
		for _, r := range members {
			want += value(step, r, i)
		}
		if got != want {
			fail("step %d [%d] = %v, the sum over %v is %v", step, i, got, members, want)
		}
	}
	return nil
}

// checkOrder checks the world ranks of g's members, in group order, by
// all_gather.
func checkOrder(g *dk.Group, members []int) {
	all := make([]int64, len(members))
	if err := dk.AllGather(g, []int64{int64(rank)}, all); err != nil {
		fail("all_gather: %v", err)
	}
	for k, r := range members {
		if all[k] != int64(r) {
			fail("group ranks %v, want the original world order %v", all, members)
		}
	}
}

// checkAborted checks that a group the survivors grew from runs nothing again.
func checkAborted(g *dk.Group, what string) {
	if err := dk.AllReduce(g, []float64{1}, dk.Sum); err == nil {
		fail("%s still runs collectives after the grow", what)
	}
}

func main() {
	direct := len(os.Args) > 1 && os.Args[1] == "direct"
	wantCounter := dieAt + shrunkSteps
	if direct {
		wantCounter = dieAt
	}
	replacement := os.Getenv("DISTKIT_REPLACEMENT")
	world, err := dk.Init("pytorch", dk.InitOptions{Timeout: timeout, ConnectTimeout: timeout})
	if err != nil {
		fail("init: %v", err)
	}
	rank = world.Rank()
	size := world.Size()
	if size < 2 {
		fail("needs 2 ranks or more, has %d", size)
	}
	everyone, survivors := []int{}, []int{}
	for r := 0; r < size; r++ {
		everyone = append(everyone, r)
		if r != victim {
			survivors = append(survivors, r)
		}
	}
	step := 0
	var grown *dk.Group
	if replacement != "" {
		// Init joined the survivors' grow: its world is the grown group.
		if replacement != "1" || rank != victim {
			fail("replacement %s of rank %d: want the first, of rank %d", replacement, rank, victim)
		}
		fmt.Printf("rank %d: replacement %s joined '%s'\n", rank, replacement, world.Name())
		grown = world
	} else {
		for ; step < dieAt; step++ {
			if err := stepOn(world, step, everyone); err != nil {
				fail("step %d: %v", step, err)
			}
		}
		if rank == victim {
			fmt.Printf("rank %d: SIGKILL before step %d\n", rank, step)
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal ends the process
		}
		err := stepOn(world, step, everyone)
		if err == nil {
			fail("step %d, the one rank %d died in, succeeded", step, victim)
		}
		if c := dk.CodeOf(err); c != dk.Unavailable && c != dk.DeadlineExceeded {
			fail("step %d failed, but not as a lost peer or a timeout: %v", step, err)
		}
		next := "shrinking"
		if direct {
			next = "growing from the failed world"
		}
		fmt.Printf("rank %d: step %d failed (%v); %s\n", rank, step, err, next)
		if direct {
			if grown, err = world.Grow(0, timeout); err != nil {
				fail("grow: %v", err)
			}
		} else {
			shrunk, err := world.Shrink(2 * time.Second)
			if err != nil {
				fail("shrink: %v", err)
			}
			wantRank := rank // renumbered in the old order, without the victim
			if rank > victim {
				wantRank = rank - 1
			}
			if shrunk.Size() != size-1 || shrunk.Rank() != wantRank {
				fail("survivors' group: rank %d of %d", shrunk.Rank(), shrunk.Size())
			}
			checkOrder(shrunk, survivors)
			for k := 0; k < shrunkSteps; k, step = k+1, step+1 {
				if err := stepOn(shrunk, step, survivors); err != nil {
					fail("step %d at world size - 1: %v", step, err)
				}
			}
			fmt.Printf("rank %d: %d steps at %d ranks; growing\n", rank, shrunkSteps, size-1)
			if grown, err = shrunk.Grow(0, timeout); err != nil {
				fail("grow: %v", err)
			}
			checkAborted(shrunk, "the shrunk group")
			shrunk.Close()
		}
		checkAborted(world, "the failed world")
		world.Close()
	}
	// Both sides: a group of the job's size, world ranks kept, generation 1.
	if grown.Size() != size || grown.Rank() != rank || !strings.HasPrefix(grown.Name(), "world@g1") {
		fail("grown group '%s': rank %d of %d, want %d of %d in world@g1", grown.Name(), grown.Rank(), grown.Size(), rank, size)
	}
	checkOrder(grown, everyone)
	counter := []int64{int64(step)}
	if err := dk.Broadcast(grown, counter, 0); err != nil {
		fail("broadcast of the step: %v", err)
	}
	if counter[0] != int64(wantCounter) {
		fail("step counter %d from rank 0, want %d", counter[0], wantCounter)
	}
	step = int(counter[0])
	for k := 0; k < grownSteps; k, step = k+1, step+1 {
		if err := stepOn(grown, step, everyone); err != nil {
			fail("step %d after the grow: %v", step, err)
		}
	}
	if err := grown.Barrier(); err != nil {
		fail("barrier: %v", err)
	}
	grown.Close()
	dk.Shutdown()
	how := "shrank and grew"
	if replacement != "" {
		how = "joined as a replacement"
	} else if direct {
		how = "grew from the failed world"
	}
	fmt.Printf("rank %d: %s, back at %d ranks, %d steps checked\n", rank, how, size, step)
}
