// Command train is data-parallel training in Go with distkit: linear
// regression on flat buffers, each rank on its own shard of a synthetic
// dataset. distkit's Reducer (the engine of DDP) broadcasts rank 0's
// parameters and averages the gradients each step, starting each bucket's
// all_reduce as soon as its gradients are marked ready.
//
//	bazel run //tools/distrun -- --nproc-per-node 4 -- $PWD/bazel-bin/examples/go/train.bin
//
// With -sharded the parameters live sharded across the ranks (FSDP's
// FULL_SHARD, distkit's Shard) instead of on every rank.
package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"time"

	dk "distkit.dev/distkit"
)

const (
	features = 16
	samples  = 8192
	batch    = 32 // per rank
)

func trueWeight(j int) float32 { return (float32(j) - 7.5) / 8 }

// sample returns sample k of the synthetic dataset: features in [-1, 1) from a
// deterministic generator, y = w_true . x + b_true + small noise.
func sample(k int) ([features]float32, float32) {
	state := uint64(k)*6364136223846793005 + 1442695040888963407
	next := func() float32 {
		state = state*6364136223846793005 + 1442695040888963407
		return float32(state>>40)/float32(1<<24)*2 - 1
	}
	var x [features]float32
	y := float32(0.5)
	for j := range x {
		x[j] = next()
		y += trueWeight(j) * x[j]
	}
	return x, y + 0.01*next()
}

func main() {
	steps := flag.Int("steps", 200, "training steps")
	lr := flag.Float64("lr", 0.05, "learning rate")
	sharded := flag.Bool("sharded", false, "shard the parameters across the ranks (FSDP)")
	flag.Parse()
	world, err := dk.Init("pytorch", dk.InitOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer world.Close()
	rank, size := world.Rank(), world.Size()
	must := func(err error) {
		if err != nil {
			fmt.Fprintf(os.Stderr, "rank %d: %v\n", rank, err)
			os.Exit(1)
		}
	}

	// Parameters: the weights and the bias, each rank starting elsewhere;
	// the reducer replaces them with rank 0's.
	weights, bias := make([]float32, features), []float32{float32(rank)}
	for j := range weights {
		weights[j] = 0.01*float32(j) + float32(rank)
	}
	var reducer *dk.Reducer[float32]
	var unit *dk.Shard[float32]
	if *sharded {
		unit, err = dk.NewShard(world, [][]float32{weights, bias}, dk.ShardOptions{Strategy: dk.FullShard, SyncModuleStates: true})
		must(err)
		defer unit.Close()
	} else {
		reducer, err = dk.NewReducer(world, [][]float32{weights, bias}, nil, dk.ReducerOptions{})
		must(err)
		defer reducer.Close()
	}

	var shard []int // samples rank, rank + size, ...
	for k := rank; k < samples; k += size {
		shard = append(shard, k)
	}
	firstLoss, lastLoss := float32(-1), float32(0)
	gw, gb := make([]float32, features), make([]float32, 1)
	start := time.Now()
	for step := 1; step <= *steps; step++ {
		// Forward and backward on this rank's batch.
		for j := range gw {
			gw[j] = 0
		}
		gb[0] = 0
		loss := []float32{0}
		if unit != nil { // gather this step's full parameters, then free them
			must(unit.Unshard())
			must(unit.FullParam(0, weights))
			must(unit.FullParam(1, bias))
			must(unit.Reshard())
		}
		for b := 0; b < batch; b++ {
			x, y := sample(shard[((step-1)*batch+b)%len(shard)])
			pred := bias[0]
			for j := 0; j < features; j++ {
				pred += weights[j] * x[j]
			}
			e := pred - y
			for j := 0; j < features; j++ {
				gw[j] += 2 * e * x[j] / batch
			}
			gb[0] += 2 * e / batch
			loss[0] += e * e / batch
		}
		if unit != nil { // averaged into this rank's shard; SGD on the shard
			must(unit.AccumulateGrad(1, gb))
			must(unit.AccumulateGrad(0, gw))
			// Started, then finished: a trainer with more layers would
			// compute the next ones in between.
			must(unit.ReduceGradsStart())
			must(unit.ReduceGradsWait())
			values, grads, err := unit.Local(0)
			must(err)
			for i := range values {
				values[i] -= float32(*lr) * grads[i]
			}
			unit.ZeroGrads()
		} else {
			// Backward produces the last parameter's gradient first.
			must(reducer.MarkReady(1, gb))
			must(reducer.MarkReady(0, gw))
			must(reducer.Finalize([][]float32{gw, gb}))
			for j := range weights {
				weights[j] -= float32(*lr) * gw[j]
			}
			bias[0] -= float32(*lr) * gb[0]
		}
		must(dk.AllReduce(world, loss, dk.Mean))
		lastLoss = loss[0]
		if firstLoss < 0 {
			firstLoss = lastLoss
		}
		if rank == 0 && (step%20 == 0 || step == 1) {
			rate := float64(step*batch*size) / time.Since(start).Seconds()
			fmt.Printf("step %4d  loss %.6f  samples/s %.0f\n", step, lastLoss, rate)
		}
	}
	if unit != nil {
		must(unit.GatherFull([][]float32{weights, bias}))
	}
	params := append(append([]float32{}, weights...), bias...)

	// Every rank must hold the same parameters, bit for bit.
	all := make([]float32, len(params)*size)
	must(dk.AllGather(world, params, all))
	identical := true
	for i, v := range all {
		identical = identical && math.Float32bits(v) == math.Float32bits(params[i%len(params)])
	}
	maxErr := 0.0
	for j := 0; j < features; j++ {
		maxErr = math.Max(maxErr, math.Abs(float64(params[j]-trueWeight(j))))
	}
	if rank == 0 {
		fmt.Printf("done: loss %.4f -> %.6f, max |w - w_true| %.4f, parameters identical on all %d ranks: %v\n",
			firstLoss, lastLoss, maxErr, size, identical)
	}
	if !identical || !(lastLoss < firstLoss/10) {
		fmt.Fprintf(os.Stderr, "rank %d: training check failed (identical %v, loss %v -> %v)\n", rank, identical, firstLoss, lastLoss)
		os.Exit(1)
	}
}
