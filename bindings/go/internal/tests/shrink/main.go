// The shrink check (a test program, kept under internal/ so it is no command
// of the module) is recovery without restarting, from Go, in a real job: a
// linear model trained with mean-reduced gradients; before step 5 the last
// rank dies (vanishes without a word). The survivors' step 5 fails; each
// shrinks the world to the survivors, redoes step 5 and finishes training at
// world size - 1. The weights must equal training computed here without
// communication: steps 0-4 averaged over every rank's data, steps 5-9 over
// the survivors'.
package main

import (
	"fmt"
	"math"
	"os"
	"time"

	dk "distkit.dev/distkit"
)

const (
	dim        = 4
	steps      = 10
	diesBefore = 5
	lr         = 0.1
)

// gradOf is rank r's squared-error gradient at w for its sample
// x = (r+1, 1, -r, 0.5), y = 2r - 1.
func gradOf(r int, w []float64) []float64 {
	x := []float64{float64(r) + 1, 1, -float64(r), 0.5}
	pred := 0.0
	for i := range x {
		pred += w[i] * x[i]
	}
	e := pred - (2*float64(r) - 1)
	g := make([]float64, dim)
	for i := range x {
		g[i] = e * x[i]
	}
	return g
}

func reference(size int) []float64 {
	w := make([]float64, dim)
	for step := 0; step < steps; step++ {
		n := size
		if step >= diesBefore {
			n = size - 1
		}
		mean := make([]float64, dim)
		for r := 0; r < n; r++ {
			g := gradOf(r, w)
			for i := range g {
				mean[i] += g[i] / float64(n)
			}
		}
		for i := range w {
			w[i] -= lr * mean[i]
		}
	}
	return w
}

func fail(rank int, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "rank %d: CHECK FAILED: %s\n", rank, fmt.Sprintf(format, args...))
	os.Exit(1)
}

func main() {
	world, err := dk.Init("pytorch", dk.InitOptions{Timeout: 20 * time.Second})
	if err != nil {
		fail(-1, "init: %v", err)
	}
	rank, size := world.Rank(), world.Size()
	if size < 2 {
		fmt.Println("rank 0: one rank, nothing to shrink")
		return
	}
	group := world
	shrunk := false
	w := make([]float64, dim)
	for step := 0; step < steps; {
		if step == diesBefore && rank == size-1 {
			fmt.Printf("rank %d dies before step %d\n", rank, step)
			os.Exit(0) // at once: no deferred calls, no clean-up
		}
		g := gradOf(rank, w)
		if err := dk.AllReduce(group, g, dk.Mean); err != nil {
			if step != diesBefore || shrunk {
				fail(rank, "step %d failed: %v", step, err)
			}
			if c := dk.CodeOf(err); c != dk.Unavailable && c != dk.DeadlineExceeded {
				fail(rank, "the failure is not a lost peer or a timeout: %v", err)
			}
			fmt.Printf("rank %d: step %d failed (%v); shrinking\n", rank, step, err)
			survivors, err := group.Shrink(2 * time.Second)
			if err != nil {
				fail(rank, "shrink: %v", err)
			}
			if survivors.Size() != size-1 || survivors.Rank() != rank {
				fail(rank, "survivors' group: rank %d of %d", survivors.Rank(), survivors.Size())
			}
			group.Close()
			group = survivors
			shrunk = true // step 5 is redone at the smaller size
			continue
		}
		for i := range w {
			w[i] -= lr * g[i]
		}
		step++
	}
	if !shrunk {
		fail(rank, "the job never shrank")
	}
	want := reference(size)
	for i := range w {
		if math.Abs(w[i]-want[i]) > 1e-9*(1+math.Abs(want[i])) {
			fail(rank, "w[%d] = %v, training without communication gives %v", i, w[i], want[i])
		}
	}
	if err := group.Barrier(); err != nil {
		fail(rank, "barrier: %v", err)
	}
	group.Close()
	dk.Shutdown()
	fmt.Printf("rank %d: trained on after the shrink, w[0]=%.6f\n", rank, w[0])
}
