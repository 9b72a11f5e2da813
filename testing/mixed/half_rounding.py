"""The Python side of half_rounding_test (see README.md, "16-bit floats"):
torch's conversion (what a Python rank's bfloat16 / float16 tensors hold)
on the inputs every language generates alike."""
import sys

import numpy as np
import torch

COUNT = 100000
SPECIALS = [0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xff800001,
            0x00000001, 0x807fffff, 0x7f7fffff, 0x7f7f8000, 0x477ff000, 0x33000000]
M32 = 0xffffffff


def inputs() -> np.ndarray:
    """xorshift32 draws shaped as half_rounding.cc's Inputs()."""
    state = 0x2545f491
    out = np.empty(COUNT, dtype=np.uint32)
    for i in range(COUNT):
        state ^= (state << 13) & M32
        state ^= state >> 17
        state ^= (state << 5) & M32
        x = bits = state
        k = i % 8
        if k == 4:
            bits = (x & 0xffff0000) | 0x8000
        elif k in (5, 6):
            bits = (x & 0x807fffff) | ((102 + (x >> 24) % 42) << 23)
            if k == 6:
                bits = (bits & ~0x1fff & M32) | 0x1000
        elif k == 7:
            bits = SPECIALS[(x >> 8) % 12]
        out[i] = bits
    return out


def round_trip(values: torch.Tensor, dtype: torch.dtype) -> np.ndarray:
    back = values.to(dtype).to(torch.float32).numpy().view(np.uint32).copy()
    back[(back & 0x7fffffff) > 0x7f800000] = 0x7fc00000  # NaN payloads aside
    return back


def main():
    values = torch.from_numpy(inputs().view(np.float32))
    pairs = np.stack([round_trip(values, torch.bfloat16), round_trip(values, torch.float16)],
                     axis=1)
    pairs.astype("<u4").tofile(sys.argv[1])


if __name__ == "__main__":
    main()
