// Package reducercheck holds the Reducer checks that the CPU and the device
// test programs share.
package reducercheck

import (
	"fmt"
	"math"

	dk "distkit.dev/distkit"
	rc "distkit.dev/distkit/internal/tests/rankcheck"
)

// CheckAverages: every gradient grads[p][k] a Reducer finalized must be the
// average over the world's `size` ranks of grad(q, p, k), what rank q
// contributed (0 where it marked none), to within 1e-9; a failure names
// `what`, the parameter and the element.
func CheckAverages(grads [][]float64, size int, grad func(q, p, k int) float64, what string) {
	for p, gp := range grads {
		for k, v := range gp {
			want := 0.0
			for q := 0; q < size; q++ {
				want += grad(q, p, k)
			}
			want /= float64(size)
			if math.Abs(v-want) > 1e-9 {
				rc.Fail("%s p%d[%d] = %v want %v", what, p, k, v, want)
			}
		}
	}
}

// UnusedParameters: with FindUnusedParameters, parameter 1 is used by
// the even ranks only (named unused by the odd ranks, left unmarked by the
// others), 2 by no rank. Every rank gets parameter 1's average over the world
// (a zero for each rank that did not use it) and zeros for parameter 2, not
// what its staging buffer held before (the parameters, then the last step's).
func UnusedParameters(world *dk.Group, rank, size int) {
	sizes := []int{5, 2, 3}
	var params [][]float64
	for _, n := range sizes {
		p := make([]float64, n)
		for k := range p {
			p[k] = 7
		}
		params = append(params, p)
	}
	red, err := dk.NewReducer(world, params, nil, dk.ReducerOptions{FirstBucketCapMB: 1e-4, FindUnusedParameters: true})
	rc.Must(err, "new reducer (find unused parameters)")
	defer red.Close()
	grad := func(q, p, k, it int) float64 {
		if p == 0 {
			return float64((q+1)*(k+1) + it)
		}
		return float64(4 + q*(k+1) + it)
	}
	used := func(q, p int) bool { return p == 0 || (p == 1 && q%2 == 0) }
	for it := 0; it < 3; it++ {
		if rank%2 == 1 {
			rc.Must(red.Prepare([]int{1, 2}), "prepare")
		} else if rank > 0 {
			rc.Must(red.Prepare([]int{2}), "prepare")
		}
		grads := make([][]float64, len(sizes))
		for p, n := range sizes {
			grads[p] = make([]float64, n)
			if !used(rank, p) {
				continue
			}
			for k := range grads[p] {
				grads[p][k] = grad(rank, p, k, it)
			}
			rc.Must(red.MarkReady(p, grads[p]), "mark ready")
		}
		rc.Must(red.Finalize(grads), "finalize (find unused parameters)")
		CheckAverages(grads, size, func(q, p, k int) float64 {
			if !used(q, p) {
				return 0
			}
			return grad(q, p, k, it)
		}, fmt.Sprintf("find unused: iteration %d", it))
		if !red.GloballyUsed(0) || !red.GloballyUsed(1) || red.GloballyUsed(2) {
			rc.Fail("globally used: %v %v %v", red.GloballyUsed(0), red.GloballyUsed(1), red.GloballyUsed(2))
		}
	}
}

// AbandonedIteration: a backward that fails after some gradients were marked
// ready (a bucket per parameter, so their all_reduces were launched); Abandon
// ends the iteration on every rank, and the next full one averages as usual,
// with no "marked ready twice". Before the first Finalize and after it.
func AbandonedIteration(world *dk.Group, rank, size int) {
	sizes := []int{6, 4, 3}
	params := [][]float64{make([]float64, 6), make([]float64, 4), make([]float64, 3)}
	red, err := dk.NewReducer(world, params, nil, dk.ReducerOptions{BucketCapMB: 1e-4, FirstBucketCapMB: 1e-4})
	rc.Must(err, "new reducer (abandon)")
	defer red.Close()
	grad := func(q, p, k, it int) float64 { return float64((q+1)*(k+1) + p - it) }
	for it := 0; it < 3; it++ {
		if it != 1 {
			for _, p := range []int{2, 1} {
				junk := make([]float64, sizes[p])
				for k := range junk {
					junk[k] = 1e9
				}
				rc.Must(red.MarkReady(p, junk), "mark ready before the failure")
			}
			rc.Must(red.Abandon(), "abandon")
			rc.Must(red.Abandon(), "abandon outside an iteration")
		}
		grads := make([][]float64, len(sizes))
		for p := len(sizes) - 1; p >= 0; p-- {
			grads[p] = make([]float64, sizes[p])
			for k := range grads[p] {
				grads[p][k] = grad(rank, p, k, it)
			}
			rc.Must(red.MarkReady(p, grads[p]), "mark ready after abandon")
		}
		rc.Must(red.Finalize(grads), "finalize after abandon")
		CheckAverages(grads, size, func(q, p, k int) float64 { return grad(q, p, k, it) },
			fmt.Sprintf("after abandon: iteration %d", it))
	}
}
