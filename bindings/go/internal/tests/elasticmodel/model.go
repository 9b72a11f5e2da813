// Package elasticmodel is what the Go elastic-loop checks share
// (internal/tests/elastic, whose state is a distkit.Snapshot, and
// internal/tests/shardedelastic, whose state is a Shard's shard in a
// distkit.ShardedSnapshot), as testing/c/elastic_model.h is for the C ones:
// the launcher's numbers, the model's loss, and the recovery after a lost
// peer as distkit.elastic decides it.
package elasticmodel

import (
	"math"
	"os"
	"strconv"
	"time"

	dk "distkit.dev/distkit"
)

// LauncherNumber is a launcher's variable as a number (0 when unset).
func LauncherNumber(name string) int {
	n, _ := strconv.Atoi(os.Getenv(name))
	return n
}

// Sample is element j of sample i of step t's batch; Weight its weight in
// the loss.
func Sample(t int64, i, j int) float64 {
	return math.Sin(0.37*float64(t) + 1.3*float64(i) + 0.7*float64(j))
}

func Weight(t int64, i int) float64 { return 1 + 0.5*math.Cos(float64(t)+float64(i)) }

// Gradient is the summed gradient of samples [lo, hi) of step t at w: a
// weighted squared error plus a quartic term, so each update depends on w
// nonlinearly.
func Gradient(t int64, lo, hi int, w []float64) []float64 {
	g := make([]float64, len(w))
	for j := range g {
		for i := lo; i < hi; i++ {
			g[j] += Weight(t, i)*(w[j]-Sample(t, i, j)) + 0.01*w[j]*w[j]*w[j]
		}
	}
	return g
}

// Reference is the uninterrupted run from w0 in one process: steps steps of
// SGD with momentum on the mean gradient of each step's global batch.
func Reference(w0 []float64, steps int64, globalBatch int, lr, beta float64) []float64 {
	w := append([]float64(nil), w0...)
	m := make([]float64, len(w))
	for t := int64(0); t < steps; t++ {
		g := Gradient(t, 0, globalBatch, w)
		for j := range w {
			m[j] = beta*m[j] + g[j]/float64(globalBatch)
			w[j] -= lr * m[j]
		}
	}
	return w
}

// Regroup is the survivors' new group after g failed: grown back where the
// launcher replaces a lost rank, else (or when no replacement came in time
// and the job may go on smaller) shrunk; and whether it grew. die reports a
// failure and ends the process.
func Regroup(g *dk.Group, timeout, settle time.Duration, die func(string, error)) (*dk.Group, bool) {
	if LauncherNumber("DISTKIT_MAX_REPLACEMENTS") > 0 {
		grown, err := g.Grow(0, timeout)
		if err == nil {
			return grown, true
		}
		if dk.CodeOf(err) != dk.DeadlineExceeded || LauncherNumber("DISTKIT_MIN_RANKS") <= 0 {
			die("grow", err)
		}
	}
	shrunk, err := g.Shrink(settle)
	if err != nil {
		die("shrink", err)
	}
	return shrunk, false
}
