// Command halfrounding is the Go side of half_rounding_test (see
// ../../README.md, "16-bit floats"): the package's BFloat16 and Float16 on
// the inputs every language generates alike.
package main

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"

	dk "distkit.dev/distkit"
)

const count = 100000

var specials = [12]uint32{
	0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xff800001,
	0x00000001, 0x807fffff, 0x7f7fffff, 0x7f7f8000, 0x477ff000, 0x33000000,
}

// inputs draws xorshift32 values shaped as half_rounding.cc's Inputs().
func inputs() []uint32 {
	state := uint32(0x2545f491)
	out := make([]uint32, count)
	for i := range out {
		state ^= state << 13
		state ^= state >> 17
		state ^= state << 5
		x, bits := state, state
		switch i % 8 {
		case 4:
			bits = x&0xffff0000 | 0x8000
		case 5, 6:
			bits = x&0x807fffff | (102+(x>>24)%42)<<23
			if i%8 == 6 {
				bits = bits&^0x1fff | 0x1000
			}
		case 7:
			bits = specials[(x>>8)%12]
		}
		out[i] = bits
	}
	return out
}

// canonical writes NaN as 0x7fc00000: payloads are not part of the rule.
func canonical(x float32) uint32 {
	if x != x {
		return 0x7fc00000
	}
	return math.Float32bits(x)
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: halfrounding OUTPUT")
		os.Exit(2)
	}
	out := make([]byte, 0, count*8)
	for _, bits := range inputs() {
		x := math.Float32frombits(bits)
		out = binary.LittleEndian.AppendUint32(out, canonical(dk.BFloat16FromFloat32(x).Float32()))
		out = binary.LittleEndian.AppendUint32(out, canonical(dk.Float16FromFloat32(x).Float32()))
	}
	if err := os.WriteFile(os.Args[1], out, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
