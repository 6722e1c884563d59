// Framework-neutral launcher for qkv_norm_rotary (see qkv_norm_rotary.cu).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// The packed qkv projection -> rotated q, rotated k and v (docs/spec.md §4.11).
//   qkv                   [T, (num_heads + 2 num_kv_heads) * head_dim] float32 (q heads, k heads, v heads)
//   cos_full, sin_signed  [T, head_dim] float32 (a [T, 1, head_dim] tensor has the same layout)
//   q_norm_weight, k_norm_weight [head_dim] float32: both or both NULL (no per-head RMSNorm)
//   q [T, num_heads, head_dim], k and v [T, num_kv_heads, head_dim] float32, fully written
// Returns the cudaError_t as an int: cudaErrorInvalidValue for a negative T, num_heads or num_kv_heads
// < 1, num_heads % num_kv_heads != 0, head_dim odd or outside [2, 8192], a negative or non-finite eps,
// unpaired norm weights, or a NULL tensor when T > 0; else the launch's error (0 on success).
int specworker_qkv_norm_rotary_launch(const float* qkv, const float* cos_full, const float* sin_signed,
                                      const float* q_norm_weight, const float* k_norm_weight, float* q,
                                      float* k, float* v, int T, int num_heads, int num_kv_heads,
                                      int head_dim, float eps, cudaStream_t stream);

// The same on bfloat16 tensors: qkv, q_norm_weight, k_norm_weight, q, k, v bf16 (same shapes and checks), cos_full
// and sin_signed float32. float32 arithmetic in the order above on the exactly widened inputs, each q and k value
// rounded to bf16 (nearest even) once at the output; v is copied unchanged.
int specworker_qkv_norm_rotary_bf16_launch(const __nv_bfloat16* qkv, const float* cos_full, const float* sin_signed,
                                           const __nv_bfloat16* q_norm_weight, const __nv_bfloat16* k_norm_weight,
                                           __nv_bfloat16* q, __nv_bfloat16* k, __nv_bfloat16* v, int T,
                                           int num_heads, int num_kv_heads, int head_dim, float eps,
                                           cudaStream_t stream);

#ifdef __cplusplus
}
#endif
