// Framework-neutral launcher for fused_rms_norm (see fused_rms_norm.cu).
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Residual add + RMSNorm per row, in the IEEE order of docs/spec.md §4.10.
//   x             [rows, hidden] float32
//   weight        [hidden] float32
//   residual      [rows, hidden] float32, or NULL (then h = x)
//   out           [rows, hidden] float32, fully written
//   residual_out  [rows, hidden] float32 (h = fl(x + residual)); given exactly when residual is
// Returns the cudaError_t as an int: cudaErrorInvalidValue for rows < 0, hidden < 1, eps negative
// or NaN, and with rows > 0: residual without residual_out (or the reverse), NULL x / weight / out;
// else the launch's error (0 on success; rows == 0 launches nothing).
int specworker_fused_rms_norm_launch(const float* x, const float* weight, const float* residual,
                                     float* out, float* residual_out, int rows, int hidden,
                                     float eps, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
