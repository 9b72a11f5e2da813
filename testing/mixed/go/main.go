// Command mixedrank is the Go rank of the mixed-language job (see
// ../README.md): the Go package.
package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"strings"
	"unsafe"

	dk "distkit.dev/distkit"
)

const N = 9

var r, n int

func check(ok bool, what string) {
	if !ok {
		fmt.Fprintf(os.Stderr, "rank %d (go): FAILED: %s\n", r, what)
		os.Exit(1)
	}
}

func must(err error) {
	if err != nil {
		check(false, err.Error())
	}
}

func obj(q int) []byte { return []byte(strings.Repeat(fmt.Sprintf("rank-%d;", q), q+1)) }

func main() {
	world, err := dk.Init("pytorch", dk.InitOptions{})
	must(err)
	r, n = world.Rank(), world.Size()
	i64, f32 := make([]int64, N), make([]float32, N)

	for i := range i64 {
		i64[i] = int64((r + 1) * (i + 1))
	}
	must(dk.AllReduce(world, i64, dk.Sum))
	for i, x := range i64 {
		check(x == int64(n*(n+1)/2*(i+1)), "sum int64")
	}
	for i := range i64 {
		i64[i] = int64((7*r + i) % 11)
	}
	must(dk.AllReduce(world, i64, dk.Max))
	for i, x := range i64 {
		want := int64(0)
		for q := 0; q < n; q++ {
			if v := int64((7*q + i) % 11); v > want {
				want = v
			}
		}
		check(x == want, "max int64")
	}
	for i := range f32 {
		f32[i] = 0.5*float32(r+1) + float32(i)
	}
	must(dk.AllReduce(world, f32, dk.Sum))
	for i, x := range f32 {
		check(x == 0.25*float32(n*(n+1))+float32(n*i), "sum float32")
	}
	for i := range f32 {
		f32[i] = float32(r) - 0.25*float32(i)
	}
	must(dk.AllReduce(world, f32, dk.Max))
	for i, x := range f32 {
		check(x == float32(n-1)-0.25*float32(i), "max float32")
	}
	for q := 0; q < n; q++ {
		for i := range i64 {
			i64[i], f32[i] = -1, -1
			if r == q {
				i64[i], f32[i] = int64(1000*q+i), float32(q)+0.125*float32(i)
			}
		}
		must(dk.Broadcast(world, i64, q))
		must(dk.Broadcast(world, f32, q))
		for i := range i64 {
			check(i64[i] == int64(1000*q+i) && f32[i] == float32(q)+0.125*float32(i), fmt.Sprintf("broadcast from %d", q))
		}
	}
	all := make([]int64, 3*n)
	must(dk.AllGather(world, []int64{int64(10 * r), int64(10*r + 1), int64(10*r + 2)}, all))
	for j, x := range all {
		check(x == int64(10*(j/3)+j%3), "all_gather")
	}
	objs, err := world.AllGatherObject(obj(r))
	must(err)
	check(len(objs) == n, "all_gather_object count")
	for q, o := range objs {
		check(bytes.Equal(o, obj(q)), "all_gather_object")
	}
	raw, err := world.AllGatherObject([]byte("go"))
	must(err)
	known := map[string]bool{"c": true, "c++": true, "python": true, "rust": true, "go": true}
	seen := map[string]bool{}
	var names []string
	for _, b := range raw {
		name := string(b)
		check(known[name] && !seen[name], "language names")
		seen[name] = true
		names = append(names, name)
	}
	fmt.Printf("rank %d (go): languages: %s\n", r, strings.Join(names, " "))

	// 9: one model sharded across the languages (README).
	w := make([]float32, 10)
	for i := range w {
		w[i] = -5
		if r == 0 {
			w[i] = 0.1 * float32(i)
		}
	}
	unit, err := dk.NewShard(world, [][]float32{w}, dk.ShardOptions{Strategy: dk.FullShard, SyncModuleStates: true})
	must(err)
	full, g := make([]float32, 10), make([]float32, 10)
	for step := 0; step < 3; step++ {
		must(unit.Unshard())
		must(unit.FullParam(0, full))
		for i := range g {
			g[i] = float32(r+1)*0.1*full[i] + 0.01*float32(i)
		}
		must(unit.Reshard())
		must(unit.AccumulateGrad(0, g))
		must(unit.ReduceGrads())
		values, grads, err := unit.Local(0)
		must(err)
		for i := range values {
			values[i] -= 0.5 * grads[i]
		}
		unit.ZeroGrads()
	}
	must(unit.GatherFull([][]float32{w}))
	for i := range w {
		want := 0.1 * float64(i)
		for step := 0; step < 3; step++ {
			want -= 0.5 * (0.1*want*float64(n+1)/2 + 0.01*float64(i))
		}
		check(math.Abs(float64(w[i])-want) <= 1e-5*math.Max(1, math.Abs(want)), "sharded training")
	}
	unit.Close()

	// 10: the C rank's bool bytes 2 and 255 arrive as 1 (README), read as
	// bytes: a Go bool must be 0 or 1.
	flags := make([]bool, 4*n)
	must(dk.AllGather(world, []bool{true, true, false, true}, flags))
	got := unsafe.Slice((*byte)(unsafe.Pointer(&flags[0])), len(flags))
	for j, b := range got {
		want := byte(1)
		if j%4 == 2 {
			want = 0
		}
		check(b == want, "all_gather bool")
	}
	must(world.Barrier())
	world.Close()
	fmt.Printf("rank %d (go): mixed-language checks passed\n", r)
}
