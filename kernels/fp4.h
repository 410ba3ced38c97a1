// kernels/fp4.h — 4-bit floats with 3 exponent bits and no mantissa (E3M0: a sign and 8
// magnitudes), the outer gradients' format of Streaming DiLoCo (Douillard et al. 2025).
// A vector is sent as one fp32 scale s = max |x| and a code per value; a value becomes
// sign(x) s m, m the magnitude of {0, 2^-6, 2^-5, ..., 2^-1, 1} nearest to |x| / s (in
// value; a tie goes to the larger). The paper fixes the 4 bits (E3M0) but not the
// scaling: the per-vector max scale is this simulator's. Scalar twin in kernels/fp4_ref.h.
#pragma once
#include <cstddef>
#include "kernels/exec.h"

namespace asgd::fp4 {

// The bytes of n values so encoded: n / 2 (rounded up) and the 4-byte scale.
inline double encoded_bytes(size_t n) { return double((n + 1) / 2) + 4.0; }
// max |x| over x[0, n) (0 for n = 0).
float max_abs(ExecContext& ctx, const float* x, size_t n);
// x[i] <- its E3M0 value at scale s (in place): what the receiver decodes. s = 0: all 0.
void round_e3m0(ExecContext& ctx, float* x, size_t n, float scale);

}  // namespace asgd::fp4
