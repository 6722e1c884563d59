// Framework-neutral launcher for batch_invariant_linear (see batch_invariant_linear.cu).
#pragma once
#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

// out = x @ weight (+ bias), each output summed in a fixed order that depends only on K:
//   acc = +0.0f; for k = 0 .. K-1: acc = acc + x[r, k] * weight[k, n]  (product and sum each
//   rounded to float32, never fused); out[r, n] = bias ? acc + bias[n] : acc.
//   x [M, K], weight [K, N], bias [N] or NULL, out [M, N]: float32, row-major, on the device.
// M, K, N >= 0; M == 0 or N == 0 launches nothing. No value is used as an index, so there is
// nothing to bound-check beyond the tile edges. Returns the cudaError_t as an int:
// cudaErrorInvalidValue for a negative size or a NULL x / weight / out with M * N > 0,
// else the launch's error (0 on success).
int specworker_batch_invariant_linear_launch(const float* x, const float* weight, const float* bias,
                                             float* out, int M, int K, int N, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
