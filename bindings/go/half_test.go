package distkit

import (
	"math"
	"math/rand"
	"testing"
)

func TestHalfConversions(t *testing.T) {
	if Float16FromFloat32(1.5) != 0x3e00 || Float16(0x3e00).Float32() != 1.5 {
		t.Fatal("float16 1.5")
	}
	if Float16FromFloat32(-70).Float32() != -70 || BFloat16FromFloat32(3).Float32() != 3 {
		t.Fatal("half round trips")
	}
}

// halfFormat describes a binary float format with a sign bit, for a
// reference rounding worked out from the format's definition (the two
// neighbouring values found by search and compared exactly in float64, ties
// to the even pattern), independent of the bit tricks in half.go.
type halfFormat struct {
	name         string
	exponentBits uint
	mantissaBits uint
	nan          func(negative bool) uint16 // the library's NaN for a NaN input
	convert      func(float32) uint16
}

var (
	float16Format = halfFormat{"float16", 5, 10,
		func(negative bool) uint16 { // the library keeps the sign
			if negative {
				return 0xfe00
			}
			return 0x7e00
		},
		func(x float32) uint16 { return uint16(Float16FromFloat32(x)) }}
	bfloat16Format = halfFormat{"bfloat16", 8, 7,
		func(bool) uint16 { return 0x7fc0 }, // the library drops the sign
		func(x float32) uint16 { return uint16(BFloat16FromFloat32(x)) }}
)

func (f halfFormat) bias() int         { return 1<<(f.exponentBits-1) - 1 }
func (f halfFormat) infinity() uint32  { return (1<<f.exponentBits - 1) << f.mantissaBits }
func (f halfFormat) signBit() uint32   { return 1 << (f.exponentBits + f.mantissaBits) }
func (f halfFormat) fractionBits() int { return int(f.mantissaBits) }

// value is a non-negative pattern's value; the infinity pattern gives
// 2^(emax+1), where the next binade would start, the value IEEE rounding
// compares against for overflow.
func (f halfFormat) value(pattern uint32) float64 {
	exponent := int(pattern >> f.mantissaBits)
	fraction := float64(pattern & (1<<f.mantissaBits - 1))
	if exponent == 0 {
		return math.Ldexp(fraction, 1-f.bias()-f.fractionBits())
	}
	return math.Ldexp(fraction+math.Ldexp(1, f.fractionBits()), exponent-f.bias()-f.fractionBits())
}

// reference rounds x to nearest, ties to even, by definition.
func (f halfFormat) reference(x float32) uint16 {
	var sign uint32
	if math.Signbit(float64(x)) {
		sign = f.signBit()
	}
	switch {
	case math.IsNaN(float64(x)):
		return f.nan(sign != 0)
	case math.IsInf(float64(x), 0):
		return uint16(sign | f.infinity())
	}
	magnitude := math.Abs(float64(x))
	// The largest finite pattern whose value does not exceed |x|.
	below, above := uint32(0), f.infinity()
	for above-below > 1 {
		middle := (below + above) / 2
		if f.value(middle) <= magnitude {
			below = middle
		} else {
			above = middle
		}
	}
	// 2|x| against low + high: both sides are exact in float64.
	twice, sum := 2*magnitude, f.value(below)+f.value(below+1)
	pattern := below
	if twice > sum || (twice == sum && below%2 == 1) {
		pattern = below + 1
	}
	return uint16(sign | pattern)
}

func (f halfFormat) check(t *testing.T, x float32) {
	t.Helper()
	if got, want := f.convert(x), f.reference(x); got != want {
		t.Fatalf("%s of %g (float32 bits %#08x): got %#04x, want %#04x", f.name, x, math.Float32bits(x), got, want)
	}
}

// checkAll converts 10^5 pseudo-random bit patterns (every exponent, NaN and
// infinity included), 10^5 values with f32 exponents in [lowest, highest]
// (the format's range, where most inputs round to a neighbour) and the
// special patterns with both signs.
func (f halfFormat) checkAll(t *testing.T, lowest, highest uint32, special []uint32) {
	random := rand.New(rand.NewSource(20261203))
	for i := 0; i < 100000; i++ {
		f.check(t, math.Float32frombits(random.Uint32()))
	}
	for i := 0; i < 100000; i++ {
		bits := random.Uint32()
		exponent := lowest + bits%(highest-lowest+1)
		f.check(t, math.Float32frombits(bits&0x807fffff|exponent<<23))
	}
	for _, bits := range special {
		f.check(t, math.Float32frombits(bits))
		f.check(t, math.Float32frombits(bits^0x80000000))
	}
}

func TestBFloat16RoundsToNearestEven(t *testing.T) {
	bfloat16Format.checkAll(t, 1, 254, []uint32{
		0x00000000, // zero
		0x3f808000, // 1 + 2^-8: a tie, down to the even 1
		0x3f818000, // 1 + 3 * 2^-8: a tie, up to the even 1 + 2^-6
		0x3f808001, // just above the tie: up
		0x3f807fff, // just below: down
		0x00008000, // half the smallest subnormal: a tie, down to 0
		0x00018000, // a subnormal tie, up to the even 2 units
		0x007fffff, // the largest f32 subnormal: up to the smallest normal
		0x7f7f7fff, // below half a unit past the largest finite: stays
		0x7f7f8000, // exactly half a unit past it: infinity (even)
		0x7f7fffff, // the largest f32: infinity
		0x7f800000, // infinity
		0x7f800001, // a signalling NaN
		0x7fc00000, // the quiet NaN
		0x7fffffff, // a NaN with every payload bit
	})
}

func TestFloat16RoundsToNearestEven(t *testing.T) {
	float16Format.checkAll(t, 127-26, 127+16, []uint32{
		0x00000000, // zero
		0x3f801000, // 1 + 2^-11: a tie, down to the even 1
		0x3f803000, // 1 + 3 * 2^-11: a tie, up to 1 + 2^-9
		0x33000000, // 2^-25, half the smallest subnormal: a tie, down to 0
		0x33000001, // just above it: the smallest subnormal
		0x33400000, // 1.5 * 2^-24: a tie between 1 and 2 units, up to 2
		0x33a00000, // 2.5 * 2^-24: a tie, down to 2 units
		0x387fe000, // 2^-14 - 2^-25: a tie between the largest subnormal and 2^-14
		0x38800000, // 2^-14, the smallest normal
		0x477fe000, // 65504, the largest finite half
		0x477fefff, // just below 65520: 65504
		0x477ff000, // 65520: a tie, to the even pattern, which is infinity
		0x47800000, // 65536
		0x7f7fffff, // the largest f32
		0x7f800000, // infinity
		0x7f800001, // a signalling NaN
		0x7fc00000, // the quiet NaN
	})
}

// Every finite pattern converts to float32 and back unchanged.
func TestEveryHalfPatternRoundTrips(t *testing.T) {
	for p := 0; p <= math.MaxUint16; p++ {
		h, b := Float16(p), BFloat16(p)
		if x := h.Float32(); !math.IsNaN(float64(x)) {
			if Float16FromFloat32(x) != h || float16Format.reference(x) != uint16(p) {
				t.Fatalf("float16 %#04x", p)
			}
		}
		if x := b.Float32(); !math.IsNaN(float64(x)) {
			if BFloat16FromFloat32(x) != b || bfloat16Format.reference(x) != uint16(p) {
				t.Fatalf("bfloat16 %#04x", p)
			}
		}
	}
}
