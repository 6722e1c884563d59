// Framework-neutral launcher for batch_invariant_linear_bf16 (see batch_invariant_linear_bf16.cu).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

// Element type of out: the launcher's out_dtype argument (the codes of paged_attention's dtype).
enum {
  SPECWORKER_LINEAR_OUT_FLOAT32 = 0,
  SPECWORKER_LINEAR_OUT_BFLOAT16 = 2,
};

// out = x @ weight (+ bias) on bfloat16 tensor cores, float32 accumulation (docs/spec.md §4.8):
//   acc = +0.0f; for k0 = 0, 16, 32, ... < K: acc = mma_m16n8k16(x[r, k0 : k0 + 16], weight[k0 : k0 + 16, n], acc)
//   (columns past K count as zeros); out[r, n] = bias ? fl32(acc + bias[n]) : acc, then rounded to
//   out_dtype (bfloat16: to nearest even).
//   x [M, K], weight [K, N] (in_features x out_features, row-major), bias [N] or NULL: bfloat16;
//   out [M, N] float32 or bfloat16; all on the device, row-major, densely packed.
// M, K, N >= 0 with any values (a fast path needs K % 8 == 0, N % 8 == 0 and 16-byte aligned x and
// weight; other shapes give the same bits through element loads). M == 0 or N == 0 launches
// nothing. Returns the cudaError_t as an int: cudaErrorInvalidValue for a negative size, an unknown
// out_dtype, or a NULL out (M * N > 0) / x / weight (M * N * K > 0); cudaErrorNotSupported on a GPU
// before sm_80 (no bf16 MMA); else the launch's error.
int specworker_batch_invariant_linear_bf16_launch(const __nv_bfloat16* x, const __nv_bfloat16* weight,
                                                  const __nv_bfloat16* bias, void* out, int M, int K,
                                                  int N, int out_dtype, cudaStream_t stream);

// The same with the tile shape forced: tile = -1 picks it from M, K and N as the launcher above does,
// 0 .. 8 names one (kernel file). Every tile gives the same bits; this exists so tests can check that
// and benchmarks can tune the choice. cudaErrorInvalidValue for a tile outside [-1, 8].
int specworker_batch_invariant_linear_bf16_tile_launch(const __nv_bfloat16* x, const __nv_bfloat16* weight,
                                                       const __nv_bfloat16* bias, void* out, int M, int K,
                                                       int N, int out_dtype, int tile, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
