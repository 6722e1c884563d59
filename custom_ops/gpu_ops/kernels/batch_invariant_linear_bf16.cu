// batch_invariant_linear_bf16 CUDA kernel: out [M, N] = x [M, K] @ weight [K, N] (+ bias [N]), bfloat16
// inputs on tensor cores (mma.sync m16n8k16 bf16 -> f32, sm_80 and later), float32 accumulation,
// out float32 or bfloat16 (docs/spec.md §4.8).
// The arithmetic of an output is fixed by K alone: one accumulator, starting at +0, receives one
// m16n8k16 MMA per 16-wide k step, k steps in increasing order (columns past K are zero-filled),
// then one float32 add of the bias and one rounding to the output type. No split-K, no atomics, no
// reduction across threads or warps. The tile shape below picks which warp issues an output's MMAs
// and how many rows share them, never which MMAs or in what order, so a row gives the same bits at
// every M, every position in the batch and under every tile shape (the GPU tests check both: every
// tile on the same inputs, and rows alone vs in batches of up to 4096). The MMA's internal rounding is the hardware's: bits are fixed for one
// GPU architecture, not across architectures, and not equal to the float32 CPU order.
// Parallelisation: a block owns a BM x BN output tile, its warps a (BM / WM) x (BN / WN) sub-tile of
// 16 x 8 MMA fragments. The K axis is walked in BK-wide k tiles through a STAGES-deep shared-memory
// ring (cp.async 16-byte copies with zero fill, or element loads when K or N is not a multiple of 8
// or a pointer is not 16-byte aligned); fragments come from ldmatrix (.trans for the [K, N] weight).
// grid.x covers the row tiles, grid.y the column tiles (a grid-stride loop past 65535).
#include "batch_invariant_linear_bf16.h"

#include <stdint.h>

#include "mma_bf16.cuh"

namespace {

using specworker::CpAsync16;
using specworker::CpAsyncCommit;
using specworker::CpAsyncWait;
using specworker::LdMatrixX2Trans;
using specworker::LdMatrixX4;
using specworker::LdMatrixX4Trans;
using specworker::Load8;
using specworker::Mma;

constexpr int kPad = 8;  // bf16 per shared row: rows 16 bytes apart mod 128, ldmatrix conflict-free
constexpr int kMaxGridY = 65535;

template <int BM_, int BN_, int BK_, int WM_, int WN_, int STAGES_>
struct Tile {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, WM = WM_, WN = WN_, STAGES = STAGES_;
  static constexpr int kThreads = WM * WN * 32;
  static constexpr int kWarpM = BM / WM, kWarpN = BN / WN;
  static constexpr int MF = kWarpM / 16, NF = kWarpN / 8;  // MMA fragments per warp
  static constexpr int kAStride = BK + kPad, kBStride = BN + kPad;  // shared row lengths (bf16)
  static constexpr int kAStage = BM * kAStride, kBStage = BK * kBStride;
  static constexpr int kSmemBytes = STAGES * (kAStage + kBStage) * 2;
  static constexpr int kAChunks = BM * BK / 8, kBChunks = BK * BN / 8;  // 16-byte chunks per tile
  static_assert(kWarpM % 16 == 0 && kWarpN % 8 == 0 && BK % 16 == 0, "whole MMA fragments");
  static_assert(kAChunks % kThreads == 0 && kBChunks % kThreads == 0, "tiles load in whole rounds");
};

// The tile shapes, by id (specworker_batch_invariant_linear_bf16_tile_launch). Each gives the same
// arithmetic per output (file comment); they differ in rows x columns per block, k-tile depth and ring.
//                 BM   BN  BK WM WN STAGES
using Tile0 = Tile<16, 32, 64, 1, 4, 4>;    // decode: many narrow column tiles
using Tile1 = Tile<16, 32, 128, 1, 4, 6>;   // decode, deeper ring (more weight bytes in flight per SM)
using Tile2 = Tile<16, 64, 64, 1, 4, 4>;
using Tile3 = Tile<32, 64, 64, 2, 2, 4>;
using Tile4 = Tile<64, 64, 32, 2, 2, 4>;
using Tile5 = Tile<64, 128, 32, 2, 2, 4>;
using Tile6 = Tile<128, 128, 32, 2, 4, 4>;
using Tile7 = Tile<128, 128, 64, 2, 4, 3>;
using Tile8 = Tile<128, 256, 32, 2, 4, 3>;
constexpr int kNumTiles = 9;

__host__ __device__ inline int CeilDiv(int a, int b) { return a / b + (a % b != 0); }

// Stages k tile kt of x and weight into ring slot (As, Bs).
template <class T, bool kVec>
__device__ __forceinline__ void LoadTile(__nv_bfloat16* As, __nv_bfloat16* Bs,
                                         const __nv_bfloat16* __restrict__ x,
                                         const __nv_bfloat16* __restrict__ w, int r0, int n0, int kt,
                                         int M, int K, int N) {
  const int k0 = kt * T::BK;
#pragma unroll
  for (int q = 0; q < T::kAChunks / T::kThreads; ++q) {
    const int e = threadIdx.x + q * T::kThreads;
    const int rr = e / (T::BK / 8), cc = (e % (T::BK / 8)) * 8;
    const int r = r0 + rr, k = k0 + cc;
    __nv_bfloat16* dst = As + rr * T::kAStride + cc;
    const __nv_bfloat16* row = x + static_cast<int64_t>(r < M ? r : 0) * K;
    if (kVec) {
      const bool ok = r < M && k < K;
      CpAsync16(dst, ok ? row + k : x, ok);
    } else {
      *reinterpret_cast<uint4*>(dst) = Load8(row, k, K, r < M);
    }
  }
#pragma unroll
  for (int q = 0; q < T::kBChunks / T::kThreads; ++q) {
    const int e = threadIdx.x + q * T::kThreads;
    const int kk = e / (T::BN / 8), cc = (e % (T::BN / 8)) * 8;
    const int k = k0 + kk, n = n0 + cc;
    __nv_bfloat16* dst = Bs + kk * T::kBStride + cc;
    const __nv_bfloat16* row = w + static_cast<int64_t>(k < K ? k : 0) * N;
    if (kVec) {
      const bool ok = k < K && n < N;
      CpAsync16(dst, ok ? row + n : w, ok);
    } else {
      *reinterpret_cast<uint4*>(dst) = Load8(row, n, N, k < K);
    }
  }
}

// One k tile's MMAs: 16-wide k steps in increasing order into the same accumulators.
template <class T>
__device__ __forceinline__ void ComputeTile(const __nv_bfloat16* As, const __nv_bfloat16* Bs,
                                            float (&acc)[T::MF][T::NF][4], int wm, int wn, int lane) {
  const int lr = lane % 16, lc = (lane / 16) * 8;  // this lane's ldmatrix row address
#pragma unroll
  for (int kk = 0; kk < T::BK; kk += 16) {
    uint32_t a[T::MF][4];
    uint32_t b[T::NF][2];
#pragma unroll
    for (int mf = 0; mf < T::MF; ++mf) {
      LdMatrixX4(a[mf], As + (wm * T::kWarpM + mf * 16 + lr) * T::kAStride + kk + lc);
    }
    const __nv_bfloat16* brow = Bs + (kk + lr) * T::kBStride + wn * T::kWarpN;
#pragma unroll
    for (int p = 0; p + 1 < T::NF; p += 2) {  // two n fragments per x4: matrices k0-7, k8-15 of each
      uint32_t r[4];
      LdMatrixX4Trans(r, brow + p * 8 + lc);
      b[p][0] = r[0], b[p][1] = r[1], b[p + 1][0] = r[2], b[p + 1][1] = r[3];
    }
    if (T::NF % 2 == 1) {
      uint32_t r[2];
      LdMatrixX2Trans(r, brow + (T::NF - 1) * 8);  // lanes 0-15 give the addresses
      b[T::NF - 1][0] = r[0], b[T::NF - 1][1] = r[1];
    }
#pragma unroll
    for (int mf = 0; mf < T::MF; ++mf)
#pragma unroll
      for (int nf = 0; nf < T::NF; ++nf) Mma(acc[mf][nf], a[mf], b[nf]);
  }
}

__device__ __forceinline__ void Store(float* out, int64_t i, float v) { out[i] = v; }
__device__ __forceinline__ void Store(__nv_bfloat16* out, int64_t i, float v) {
  out[i] = __float2bfloat16_rn(v);
}

template <class T, bool kVec, typename OutT>
__global__ void __launch_bounds__(T::kThreads)
    LinearBf16Kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                     const __nv_bfloat16* __restrict__ bias, OutT* __restrict__ out, int M, int K,
                     int N) {
  extern __shared__ __align__(16) unsigned char smem[];
  __nv_bfloat16* As = reinterpret_cast<__nv_bfloat16*>(smem);
  __nv_bfloat16* Bs = As + T::STAGES * T::kAStage;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int wm = warp / T::WN, wn = warp % T::WN;
  const int r0 = blockIdx.x * T::BM;
  const int k_tiles = CeilDiv(K, T::BK);
  const int n_tiles = CeilDiv(N, T::BN);

  for (int nt = blockIdx.y; nt < n_tiles; nt += gridDim.y) {
    const int n0 = nt * T::BN;
    float acc[T::MF][T::NF][4];
#pragma unroll
    for (int mf = 0; mf < T::MF; ++mf)
#pragma unroll
      for (int nf = 0; nf < T::NF; ++nf)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[mf][nf][i] = 0.0f;

    // Prologue: k tiles 0 .. STAGES - 2 in flight. One commit group per k tile, empty past the end.
#pragma unroll
    for (int s = 0; s < T::STAGES - 1; ++s) {
      if (s < k_tiles) LoadTile<T, kVec>(As + s * T::kAStage, Bs + s * T::kBStage, x, w, r0, n0, s, M, K, N);
      CpAsyncCommit();
    }
    for (int kt = 0; kt < k_tiles; ++kt) {
      CpAsyncWait<T::STAGES - 2>();  // k tile kt has landed (this thread's copies)
      __syncthreads();               // ... everyone's; and slot (kt - 1) % STAGES is free again
      const int next = kt + T::STAGES - 1;
      if (next < k_tiles) {
        const int s = next % T::STAGES;
        LoadTile<T, kVec>(As + s * T::kAStage, Bs + s * T::kBStage, x, w, r0, n0, next, M, K, N);
      }
      CpAsyncCommit();
      const int s = kt % T::STAGES;
      ComputeTile<T>(As + s * T::kAStage, Bs + s * T::kBStage, acc, wm, wn, lane);
    }
    CpAsyncWait<0>();
    __syncthreads();  // the next column tile's prologue overwrites the ring

    // Accumulator layout of m16n8: c0, c1 at row lane / 4, columns 2 (lane % 4) + {0, 1}; c2, c3 8 rows down.
#pragma unroll
    for (int mf = 0; mf < T::MF; ++mf) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = r0 + wm * T::kWarpM + mf * 16 + lane / 4 + 8 * half;
        if (r >= M) continue;
#pragma unroll
        for (int nf = 0; nf < T::NF; ++nf) {
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const int n = n0 + wn * T::kWarpN + nf * 8 + 2 * (lane % 4) + j;
            if (n >= N) continue;
            const float v = acc[mf][nf][2 * half + j];
            Store(out, static_cast<int64_t>(r) * N + n,
                  bias != nullptr ? __fadd_rn(v, __bfloat162float(bias[n])) : v);
          }
        }
      }
    }
  }
}

template <class T, bool kVec, typename OutT>
int LaunchTile(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* bias, void* out,
               int M, int K, int N, cudaStream_t stream) {
  auto kernel = LinearBf16Kernel<T, kVec, OutT>;
  if (T::kSmemBytes > 48 * 1024) {
    const cudaError_t err =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes);
    if (err != cudaSuccess) return static_cast<int>(err);
  }
  const int n_tiles = CeilDiv(N, T::BN);
  const dim3 grid(CeilDiv(M, T::BM), n_tiles < kMaxGridY ? n_tiles : kMaxGridY);
  kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(x, w, bias, static_cast<OutT*>(out), M, K, N);
  return static_cast<int>(cudaGetLastError());
}

template <class T>
int LaunchFor(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* bias, void* out,
              int M, int K, int N, int out_dtype, bool vec, cudaStream_t stream) {
  const bool f32 = out_dtype == SPECWORKER_LINEAR_OUT_FLOAT32;
  if (vec) {
    return f32 ? LaunchTile<T, true, float>(x, w, bias, out, M, K, N, stream)
               : LaunchTile<T, true, __nv_bfloat16>(x, w, bias, out, M, K, N, stream);
  }
  return f32 ? LaunchTile<T, false, float>(x, w, bias, out, M, K, N, stream)
             : LaunchTile<T, false, __nv_bfloat16>(x, w, bias, out, M, K, N, stream);
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <class T>
int64_t Blocks(int M, int N) {
  return static_cast<int64_t>(CeilDiv(M, T::BM)) * CeilDiv(N, T::BN);
}

// The tile for a call, for speed only (every tile gives the same bits). Fitted on an H200 sweep
// (benchmarks/tuning/bf16_linear_tiles.py; within 2% of the best tile on geometric mean, 11% worst):
// decode uses 16-row tiles, the deep ring when the weight is tall and narrow; larger M takes the
// largest tile that still makes enough blocks to fill the GPU.
int PickTile(int M, int K, int N) {
  if (M <= 16) return K >= 2048 && N <= 8192 ? 1 : 2;
  if (Blocks<Tile6>(M, N) >= 264) return 6;
  if (Blocks<Tile5>(M, N) >= 200) return 5;
  if (M > 64 && Blocks<Tile4>(M, N) >= 32) return 4;
  if (Blocks<Tile3>(M, N) >= 128) return 3;
  return 2;
}

}  // namespace

extern "C" int specworker_batch_invariant_linear_bf16_tile_launch(
    const __nv_bfloat16* x, const __nv_bfloat16* weight, const __nv_bfloat16* bias, void* out, int M,
    int K, int N, int out_dtype, int tile, cudaStream_t stream) {
  if (tile < -1 || tile >= kNumTiles) return static_cast<int>(cudaErrorInvalidValue);
  if (M < 0 || K < 0 || N < 0) return static_cast<int>(cudaErrorInvalidValue);
  if (out_dtype != SPECWORKER_LINEAR_OUT_FLOAT32 && out_dtype != SPECWORKER_LINEAR_OUT_BFLOAT16) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  if (M == 0 || N == 0) return static_cast<int>(cudaSuccess);
  int device = 0, major = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  if (err != cudaSuccess) return static_cast<int>(err);
  if (major < 8) return static_cast<int>(cudaErrorNotSupported);  // no bf16 MMA / cp.async before sm_80
  if (out == nullptr || (K > 0 && (x == nullptr || weight == nullptr))) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  const bool vec = K % 8 == 0 && N % 8 == 0 && Aligned16(x) && Aligned16(weight);
  if (tile < 0) tile = PickTile(M, K, N);
  switch (tile) {
    case 0: return LaunchFor<Tile0>(x, weight, bias, out, M, K, N, out_dtype, vec, stream);
    case 1: return LaunchFor<Tile1>(x, weight, bias, out, M, K, N, out_dtype, vec, stream);
    case 2: return LaunchFor<Tile2>(x, weight, bias, out, M, K, N, out_dtype, vec, stream);
    case 3: return LaunchFor<Tile3>(x, weight, bias, out, M, K, N, out_dtype, vec, stream);
    case 4: return LaunchFor<Tile4>(x, weight, bias, out, M, K, N, out_dtype, vec, stream);
    case 5: return LaunchFor<Tile5>(x, weight, bias, out, M, K, N, out_dtype, vec, stream);
    case 6: return LaunchFor<Tile6>(x, weight, bias, out, M, K, N, out_dtype, vec, stream);
    case 7: return LaunchFor<Tile7>(x, weight, bias, out, M, K, N, out_dtype, vec, stream);
    default: return LaunchFor<Tile8>(x, weight, bias, out, M, K, N, out_dtype, vec, stream);
  }
}

extern "C" int specworker_batch_invariant_linear_bf16_launch(const __nv_bfloat16* x,
                                                             const __nv_bfloat16* weight,
                                                             const __nv_bfloat16* bias, void* out,
                                                             int M, int K, int N, int out_dtype,
                                                             cudaStream_t stream) {
  return specworker_batch_invariant_linear_bf16_tile_launch(x, weight, bias, out, M, K, N, out_dtype,
                                                            -1, stream);
}
