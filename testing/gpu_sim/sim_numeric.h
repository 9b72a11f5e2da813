// Element arithmetic for dkgpusim's NCCL: every ncclDataType_t, the
// reductions, and the 16- and 8-bit float formats (computed in float,
// rounded to nearest even).

#ifndef DISTKIT_TESTING_GPU_SIM_SIM_NUMERIC_H_
#define DISTKIT_TESTING_GPU_SIM_SIM_NUMERIC_H_

#include <nccl.h>

#include <cstddef>
#include <cstdint>

namespace dksim {

enum class RedKind { kSum, kProd, kMax, kMin, kAvg };

// Bytes per element; 0 for a value that is no ncclDataType_t.
size_t TypeSize(int dtype);
const char* TypeName(int dtype);

// out[i] = in[0][i] op in[1][i] op ... (in rank order, so every rank gets
// the same bits); kAvg divides the sum by n. out may not alias an input.
void ReduceInto(int dtype, RedKind op, const char* const* in, int n, char* out,
                size_t count);

// out[i] = in[i] * scalar (ncclRedOpCreatePreMulSum's factor), scalar being
// one element of dtype.
void Scale(int dtype, const char* scalar, const char* in, char* out,
           size_t count);

// The formats' conversions (exposed for tests of the rounding).
uint16_t FloatToHalf(float f);
float HalfToFloat(uint16_t h);
uint16_t FloatToBf16(float f);
float Bf16ToFloat(uint16_t h);
uint8_t FloatToE4M3(float f);  // saturates to +-448 (NCCL's satfinite)
float E4M3ToFloat(uint8_t v);
uint8_t FloatToE5M2(float f);  // saturates to +-57344
float E5M2ToFloat(uint8_t v);

}  // namespace dksim

#endif  // DISTKIT_TESTING_GPU_SIM_SIM_NUMERIC_H_
