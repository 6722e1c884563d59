// Framework-neutral launcher for fused_rms_norm (see fused_rms_norm.cu).
#pragma once
#include <cuda_bf16.h>
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

// The same on bfloat16 tensors (x, weight, residual, out, residual_out all bf16, same shapes and checks): float32
// arithmetic in the order above on the exactly widened inputs (h stays float32 for the norm), each output value
// rounded to bf16 (nearest even) once. residual_out must not alias x or residual (out-of-place, as the float32 op).
int specworker_fused_rms_norm_bf16_launch(const __nv_bfloat16* x, const __nv_bfloat16* weight,
                                          const __nv_bfloat16* residual, __nv_bfloat16* out,
                                          __nv_bfloat16* residual_out, int rows, int hidden, float eps,
                                          cudaStream_t stream);

#ifdef __cplusplus
}
#endif
