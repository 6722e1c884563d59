// batch_invariant_linear CUDA kernel: out [M, N] = x [M, K] @ weight [K, N] (+ bias [N]), float32,
// with every output summed in one fixed order that depends only on K, so a row's bits do not
// depend on M, on the row's position or on the tile it lands in:
//   acc = +0.0f; for k = 0 .. K-1: acc = __fadd_rn(acc, __fmul_rn(x[r, k], weight[k, n]));
//   out[r, n] = bias ? __fadd_rn(acc, bias[n]) : acc.
// The _rn intrinsics are never contracted into an FMA, so this is the same sequence of IEEE
// operations as the CPU op (cpu_ops/batch_invariant_linear.cc) and the two agree bit for bit on
// normal numbers. No split-K, no atomics, no reduction across threads: each output is owned by
// one thread from the first k to the store.
// Parallelisation: a block of 256 threads (16 x 16) owns a tile of kBM = 32 rows x kBN = 64
// columns; each thread owns 2 rows x 4 columns (rows ty + 16 i, columns tx + 16 j). The K axis is
// walked in chunks of kBK = 32 staged through shared memory (x tile [32][32], weight tile
// [32][64], both loaded coalesced; cells past M, N or K are never summed). grid.x covers the
// columns, grid.y the row tiles (a grid-stride loop beyond 65535 row tiles), so any M works.
#include "batch_invariant_linear.h"

#include <stdint.h>

namespace {

constexpr int kBM = 32;
constexpr int kBN = 64;
constexpr int kBK = 32;
constexpr int kTX = 16;  // threads along columns
constexpr int kTY = 16;  // threads along rows
constexpr int kThreads = kTX * kTY;
constexpr int kRowsPerThread = kBM / kTY;  // 2
constexpr int kColsPerThread = kBN / kTX;  // 4
constexpr int kMaxGridY = 65535;
static_assert(kBM * kBK % kThreads == 0 && kBK * kBN % kThreads == 0, "tiles load in whole rounds");

// ceil(a / b) without forming a + b - 1 (sizes may come close to INT32_MAX).
__host__ __device__ inline int CeilDiv(int a, int b) { return a / b + (a % b != 0); }

__global__ void __launch_bounds__(kThreads)
    BatchInvariantLinearKernel(const float* __restrict__ x, const float* __restrict__ weight,
                               const float* __restrict__ bias, float* __restrict__ out, int M,
                               int K, int N) {
  __shared__ float xs[kBM][kBK + 1];  // +1: the column-wise loads do not hit one bank
  __shared__ float ws[kBK][kBN];
  const int tx = threadIdx.x % kTX;
  const int ty = threadIdx.x / kTX;
  const int n0 = blockIdx.x * kBN;
  const int row_tiles = CeilDiv(M, kBM);
  const int k_chunks = CeilDiv(K, kBK);

  for (int tile = blockIdx.y; tile < row_tiles; tile += gridDim.y) {
    const int r0 = tile * kBM;
    float acc[kRowsPerThread][kColsPerThread];
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i)
#pragma unroll
      for (int j = 0; j < kColsPerThread; ++j) acc[i][j] = 0.0f;

    for (int c = 0; c < k_chunks; ++c) {
      const int k0 = c * kBK;
      // Stage the chunk; cells outside the matrices hold 0 but are never summed (kend below).
#pragma unroll
      for (int q = 0; q < kBM * kBK / kThreads; ++q) {
        const int e = threadIdx.x + q * kThreads;
        const int rr = e / kBK, kk = e % kBK;
        const int r = r0 + rr, k = k0 + kk;
        xs[rr][kk] = (r < M && k < K) ? x[static_cast<int64_t>(r) * K + k] : 0.0f;
      }
#pragma unroll
      for (int q = 0; q < kBK * kBN / kThreads; ++q) {
        const int e = threadIdx.x + q * kThreads;
        const int kk = e / kBN, nn = e % kBN;
        const int k = k0 + kk, n = n0 + nn;
        ws[kk][nn] = (k < K && n < N) ? weight[static_cast<int64_t>(k) * N + n] : 0.0f;
      }
      __syncthreads();
      const int kend = min(kBK, K - k0);  // the same for every thread of the block
      if (kend == kBK) {
#pragma unroll 8
        for (int kk = 0; kk < kBK; ++kk) {
          float a[kRowsPerThread], b[kColsPerThread];
#pragma unroll
          for (int i = 0; i < kRowsPerThread; ++i) a[i] = xs[ty + kTY * i][kk];
#pragma unroll
          for (int j = 0; j < kColsPerThread; ++j) b[j] = ws[kk][tx + kTX * j];
#pragma unroll
          for (int i = 0; i < kRowsPerThread; ++i)
#pragma unroll
            for (int j = 0; j < kColsPerThread; ++j)
              acc[i][j] = __fadd_rn(acc[i][j], __fmul_rn(a[i], b[j]));
        }
      } else {
        for (int kk = 0; kk < kend; ++kk) {
#pragma unroll
          for (int i = 0; i < kRowsPerThread; ++i)
#pragma unroll
            for (int j = 0; j < kColsPerThread; ++j)
              acc[i][j] = __fadd_rn(acc[i][j], __fmul_rn(xs[ty + kTY * i][kk], ws[kk][tx + kTX * j]));
        }
      }
      __syncthreads();  // the next chunk overwrites xs / ws
    }

#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      const int r = r0 + ty + kTY * i;
      if (r >= M) continue;
#pragma unroll
      for (int j = 0; j < kColsPerThread; ++j) {
        const int n = n0 + tx + kTX * j;
        if (n >= N) continue;
        const float v = bias != nullptr ? __fadd_rn(acc[i][j], bias[n]) : acc[i][j];
        out[static_cast<int64_t>(r) * N + n] = v;
      }
    }
  }
}

}  // namespace

extern "C" int specworker_batch_invariant_linear_launch(const float* x, const float* weight,
                                                        const float* bias, float* out, int M,
                                                        int K, int N, cudaStream_t stream) {
  if (M < 0 || K < 0 || N < 0) return static_cast<int>(cudaErrorInvalidValue);
  if (M == 0 || N == 0) return static_cast<int>(cudaSuccess);
  if (out == nullptr || (K > 0 && (x == nullptr || weight == nullptr))) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  const int row_tiles = CeilDiv(M, kBM);
  const dim3 grid(CeilDiv(N, kBN), row_tiles < kMaxGridY ? row_tiles : kMaxGridY);
  BatchInvariantLinearKernel<<<grid, kThreads, 0, stream>>>(x, weight, bias, out, M, K, N);
  return static_cast<int>(cudaGetLastError());
}
