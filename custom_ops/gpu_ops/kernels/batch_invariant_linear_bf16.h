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
//   K is cut into S chunks of fixed length (S = 1, 2 or 4, from K and N only); per chunk c:
//     p_c = +0.0f; for each 16-wide k step of the chunk, in increasing k:
//       p_c = mma_k16(x[r, k step], weight[k step, n], p_c)
//   (columns past K count as zeros); acc = p_0, then acc = fl32(acc + p_c) for c = 1 .. S - 1;
//   out[r, n] = bias ? fl32(acc + bias[n]) : acc, then rounded to out_dtype (bfloat16: to nearest even).
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

// The same with the tile shape and split mode forced (tests and tuning). tile = -1 picks it as the launcher
// above does; 0 .. 9 name the mma.sync tiles, 10 .. 13 the wgmma tiles, 14 .. 16 the warp-specialised wgmma tiles
// (wgmma: sm_90a builds on sm_90 GPUs only; 14 .. 16 also need the 16-byte path and K > 0; else
// cudaErrorNotSupported). split_mode (when S > 1): -1 picks, 0 one block walks all chunks of its output tile,
// 1 the S chunks go to the S blocks of a cluster (sm_90 and later, else cudaErrorNotSupported). Modes a tile lacks
// give cudaErrorInvalidValue: 0 on tile 13, both on tile 14, 1 on tiles 15 and 16. Every tile and both modes give
// the same bits (docs/spec.md §4.8). cudaErrorInvalidValue for a tile outside [-1, 16] or a split_mode outside
// [-1, 1].
int specworker_batch_invariant_linear_bf16_tile_launch(const __nv_bfloat16* x, const __nv_bfloat16* weight,
                                                       const __nv_bfloat16* bias, void* out, int M, int K,
                                                       int N, int out_dtype, int tile, int split_mode,
                                                       cudaStream_t stream);

#ifdef __cplusplus
}
#endif
