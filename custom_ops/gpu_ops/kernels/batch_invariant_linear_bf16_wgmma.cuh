// batch_invariant_linear_bf16's sm_90a tiles (wgmma), included once by batch_invariant_linear_bf16.cu after its
// shared pieces (chunking, stores, cluster reduction, Launch). The arithmetic per output is the file comment's there.
// A block of WGS warpgroups owns a (64 WGS) x BN output tile: warpgroup g the rows 64g .. 64g + 63, all BN columns,
// as BN / NI wgmma m64nNIk16 per 16-wide k step (four per 64-wide k tile, k in increasing order), operands in
// shared memory. k tiles stream through a STAGES-deep ring of cp.async 16-byte copies with zero fill (element loads
// and ordinary stores when not 16-byte aligned), STAGES - 2 k tiles ahead, while the warpgroups' wgmma of the
// previous k tile may still run (one commit group in flight). Shared layouts, each 128-byte swizzled (16-byte
// chunk c of a 128-byte row r stored at chunk c ^ (r % 8), atoms of 8 rows on 1024-byte boundaries):
//   x tile  [BM rows][64 k] bf16, K-major: row r at r * 128 bytes;
//   w tile  [BN / 64 column blocks][64 k rows][64 n] bf16, MN-major: block j at j * 8192 bytes, row k at k * 128.
// No warp specialisation and no TMA: every thread copies, then its warpgroup issues the MMAs.

namespace {

using specworker::FenceOperand;
using specworker::FenceProxyAsync;
using specworker::SmemDesc128;
using specworker::WgmmaBf16;
using specworker::WgmmaCommit;
using specworker::WgmmaFence;
using specworker::WgmmaWait;

template <int WGS_, int BN_, int NI_, int STAGES_>
struct WgTile {
  static constexpr int WGS = WGS_, BN = BN_, NI = NI_, STAGES = STAGES_;
  static constexpr int BM = 64 * WGS, BK = 64, kThreads = 128 * WGS;
  static constexpr int kInst = BN / NI, kAccInst = NI / 2, kAcc = kInst * kAccInst;  // accumulators per thread
  static constexpr int kABytes = BM * 128, kBBytes = BN * 128, kStageBytes = kABytes + kBBytes;
  static constexpr int kRingBytes = STAGES * kStageBytes;
  static constexpr int kPartialBytes = BM * (BN + kPartialPad) * 4;
  static constexpr int kBytes = (kRingBytes > kPartialBytes ? kRingBytes : kPartialBytes) + 1024;  // + alignment
  static constexpr bool kHasSeq = kAcc <= 64;  // room for the running-sum set (kSeq) in registers
  static constexpr int kAChunks = BM * 8, kBChunks = BK * BN / 8;  // 16-byte chunks per k tile
  static_assert(BN % NI == 0 && NI % 64 == 0 && STAGES >= 3, "whole 64-column blocks per wgmma, a ring of 3+");
  static_assert(kAChunks % kThreads == 0 && kBChunks % kThreads == 0, "tiles load in whole rounds");
  static_assert(kChunkAlign % BK == 0, "chunk edges fall on k-tile edges");
};

// The wgmma tile shapes, tile ids kNumMmaTiles + 0 .. 3 of the tile launcher. All give the same bits as each other
// and as the mma.sync tiles (instruction width NI included; the GPU tests check both).
//                      WGS   BN   NI STAGES       block tile
using WgTile0 = WgTile<1, 64, 64, 6>;      //  64 x  64: small outputs, 2 blocks per SM
using WgTile1 = WgTile<1, 128, 128, 5>;    //  64 x 128
using WgTile2 = WgTile<2, 128, 128, 5>;    // 128 x 128
using WgTile3 = WgTile<2, 256, 256, 4>;    // 128 x 256, one m64n256k16 per warpgroup and k step (no one-block split)
constexpr int kNumWgTiles = 4;

// f(WgTile<...>{}) for wgmma tile index `id` (tile id kNumMmaTiles + id).
template <class F>
auto WithWgTile(int id, F&& f) -> decltype(f(WgTile0{})) {
  switch (id) {
    case 0: return f(WgTile0{});
    case 1: return f(WgTile1{});
    case 2: return f(WgTile2{});
    default: return f(WgTile3{});
  }
}

// Stages k tile kt of x and weight into the ring stage at `stage` (swizzled, see the file comment).
template <class T, bool kVec>
__device__ __forceinline__ void WgLoadTile(unsigned char* stage, const __nv_bfloat16* __restrict__ x,
                                           const __nv_bfloat16* __restrict__ w, int r0, int n0, int kt, int M,
                                           int K, int N) {
  const int k0 = kt * T::BK;
#pragma unroll
  for (int q = 0; q < T::kAChunks / T::kThreads; ++q) {
    const int e = threadIdx.x + q * T::kThreads;
    const int rr = e / 8, c = e % 8;
    Stage8<kVec>(stage + rr * 128 + ((c ^ (rr % 8)) << 4), x, r0 + rr, k0 + c * 8, M, K);
  }
#pragma unroll
  for (int q = 0; q < T::kBChunks / T::kThreads; ++q) {
    const int e = threadIdx.x + q * T::kThreads;
    const int kk = e / (T::BN / 8), c = e % (T::BN / 8);
    Stage8<kVec>(stage + T::kABytes + (c / 8) * (64 * 128) + kk * 128 + (((c % 8) ^ (kk % 8)) << 4), w, k0 + kk,
                 n0 + c * 8, K, N);
  }
}

// Accumulator element q of instruction j of this thread: row and column within the block tile.
template <class T>
__device__ __forceinline__ int WgAccRow(int q) {
  const int t = threadIdx.x % 128;
  return (threadIdx.x / 128) * 64 + (t / 32) * 16 + (t % 32) / 4 + 8 * ((q % 4) / 2);
}
template <class T>
__device__ __forceinline__ int WgAccCol(int j, int q) {
  return j * T::NI + (q / 4) * 8 + 2 * (threadIdx.x % 4) + (q % 2);
}

template <class T>
__device__ __forceinline__ void FenceAcc(float (&acc)[T::kInst][T::kAccInst]) {
#pragma unroll
  for (int j = 0; j < T::kInst; ++j)
#pragma unroll
    for (int q = 0; q < T::kAccInst; ++q) FenceOperand(acc[j][q]);
}

template <class T>
__device__ __forceinline__ void WgFold(float (&total)[T::kInst][T::kAccInst], float (&acc)[T::kInst][T::kAccInst],
                                       bool first) {
#pragma unroll
  for (int j = 0; j < T::kInst; ++j) FoldChunk(total[j], acc[j], first);
}

// +0 in every accumulator, pinned before the first wgmma.
template <class T>
__device__ __forceinline__ void WgZeroAcc(float (&acc)[T::kInst][T::kAccInst]) {
#pragma unroll
  for (int j = 0; j < T::kInst; ++j)
#pragma unroll
    for (int q = 0; q < T::kAccInst; ++q) acc[j][q] = 0.0f;
  FenceAcc<T>(acc);
}

// kSeq, before k tile i: when a chunk ends there, its sum joins the running sum and the next chunk starts at +0.
template <class T>
__device__ __forceinline__ void WgFoldAtChunkEnd(float (&total)[T::kInst][T::kAccInst],
                                                 float (&acc)[T::kInst][T::kAccInst], int i, int chunk_tiles) {
  if (i > 0 && i % chunk_tiles == 0) {
    WgmmaWait<0>();
    FenceAcc<T>(acc);
    WgFold<T>(total, acc, i == chunk_tiles);
    FenceAcc<T>(acc);
  }
}

// One k tile's MMAs as one commit group: its 16-wide k steps in increasing order, each as kInst wgmma. a_s: this
// warpgroup's 64 rows of the stage's x tile; b_s: the stage's weight tile (shared addresses, layouts above).
template <class T>
__device__ __forceinline__ void WgMmaKTile(float (&acc)[T::kInst][T::kAccInst], uint32_t a_s, uint32_t b_s) {
  WgmmaFence();
#pragma unroll
  for (int kk = 0; kk < T::BK / 16; ++kk) {
    const uint64_t da = SmemDesc128(a_s + kk * 32, 16, 1024);
#pragma unroll
    for (int j = 0; j < T::kInst; ++j) {
      const uint64_t db = SmemDesc128(b_s + j * (T::NI / 64) * (64 * 128) + kk * 16 * 128, 64 * 128, 1024);
      WgmmaBf16<T::NI>(acc[j], da, db);
    }
  }
  WgmmaCommit();
}

// Stores (or, in a cluster split, adds across the cluster and stores) the block's result res.
template <class T>
__device__ __forceinline__ void WgEpilogue(float (&res)[T::kInst][T::kAccInst], float* partial, bool cluster,
                                           const __nv_bfloat16* __restrict__ bias, void* __restrict__ out,
                                           int out_dtype, int r0, int n0, int M, int N) {
  if (cluster) {
#pragma unroll
    for (int j = 0; j < T::kInst; ++j)
#pragma unroll
      for (int q = 0; q < T::kAccInst; q += 2) {
        *reinterpret_cast<float2*>(partial + WgAccRow<T>(q) * (T::BN + kPartialPad) + WgAccCol<T>(j, q)) =
            make_float2(res[j][q], res[j][q + 1]);
      }
    ClusterReduceStore<T::BM, T::BN, T::kThreads>(partial, bias, out, out_dtype, r0, n0, M, N);
    return;
  }
#pragma unroll
  for (int j = 0; j < T::kInst; ++j)
#pragma unroll
    for (int q = 0; q < T::kAccInst; ++q) {
      const int r = r0 + WgAccRow<T>(q), n = n0 + WgAccCol<T>(j, q);
      if (r < M && n < N) StoreOut(out, out_dtype, static_cast<int64_t>(r) * N + n, AddBias(res[j][q], bias, n));
    }
}

// kSeq: the block walks every chunk (running sum in `total`); else one chunk per block (all of K when S = 1,
// chunk blockIdx.z in a cluster split).
template <class T, bool kVec, bool kSeq>
__global__ void __launch_bounds__(T::kThreads, 1)
    LinearBf16WgKernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                       const __nv_bfloat16* __restrict__ bias, void* __restrict__ out, int M, int K, int N,
                       int out_dtype, int chunk_tiles) {
#if SPECWORKER_WGMMA
  extern __shared__ __align__(16) unsigned char wg_smem[];
  const uint32_t raw = specworker::SharedAddr(wg_smem);
  const uint32_t pad = (1024 - raw % 1024) % 1024;  // swizzle atoms need 1024-byte alignment
  unsigned char* smem = wg_smem + pad;
  const uint32_t smem_s = raw + pad;
  const int wg = threadIdx.x / 128;
  const int r0 = blockIdx.x * T::BM;
  const bool cluster = gridDim.z > 1;
  const int t_begin = cluster ? blockIdx.z * chunk_tiles : 0;  // the block's k tiles: all, or its chunk's
  const int n_k = BlockKTiles(CeilDiv(K, T::BK), t_begin, cluster ? chunk_tiles : 0);
  const int n_tiles = CeilDiv(N, T::BN);

  for (int nt = blockIdx.y; nt < n_tiles; nt += gridDim.y) {
    const int n0 = nt * T::BN;
    float acc[T::kInst][T::kAccInst];
    float total[kSeq ? T::kInst : 1][kSeq ? T::kAccInst : 1];
    WgZeroAcc<T>(acc);

    // Prologue: k tiles 0 .. STAGES - 3 in flight, one commit group per k tile (empty past the end).
#pragma unroll
    for (int s = 0; s < T::STAGES - 2; ++s) {
      if (s < n_k) WgLoadTile<T, kVec>(smem + s * T::kStageBytes, x, w, r0, n0, t_begin + s, M, K, N);
      CpAsyncCommit();
    }
    for (int i = 0; i < n_k; ++i) {
      CpAsyncWait<T::STAGES - 3>();  // k tile i has landed (this thread's copies) ...
      FenceProxyAsync();             // ... visible to wgmma ...
      __syncthreads();               // ... everyone's; and every warpgroup is done with k tile i - 2
      const int next = i + T::STAGES - 2;
      if (next < n_k) {
        WgLoadTile<T, kVec>(smem + (next % T::STAGES) * T::kStageBytes, x, w, r0, n0, t_begin + next, M, K, N);
      }
      CpAsyncCommit();
      if constexpr (kSeq) WgFoldAtChunkEnd<T>(total, acc, i, chunk_tiles);
      const uint32_t stage = smem_s + (i % T::STAGES) * T::kStageBytes;
      WgMmaKTile<T>(acc, stage + wg * 64 * 128, stage + T::kABytes);
      WgmmaWait<1>();  // k tile i - 1's MMAs are done
    }
    WgmmaWait<0>();
    FenceAcc<T>(acc);
    CpAsyncWait<0>();
    __syncthreads();  // the ring is free: the next column tile's prologue, or the chunk sums, overwrite it
    float* partial = reinterpret_cast<float*>(smem);
    if constexpr (kSeq) {
      WgFold<T>(total, acc, n_k <= chunk_tiles);
      WgEpilogue<T>(total, partial, cluster, bias, out, out_dtype, r0, n0, M, N);
    } else {
      WgEpilogue<T>(acc, partial, cluster, bias, out, out_dtype, r0, n0, M, N);
    }
  }
#else
  __trap();
#endif
}

template <class T, bool kVec, bool kSeq>
int LaunchWg(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* bias, void* out, int M, int K,
             int N, int out_dtype, const Plan& plan, cudaStream_t stream) {
  const int n_tiles = CeilDiv(N, T::BN);
  const dim3 grid(CeilDiv(M, T::BM), n_tiles < kMaxGridY ? n_tiles : kMaxGridY, plan.cluster ? plan.splits : 1);
  return Launch(LinearBf16WgKernel<T, kVec, kSeq>, grid, T::kThreads, T::kBytes, stream, x, w, bias, out, M, K, N,
                out_dtype, plan.chunk_tiles);
}

template <class T>
int LaunchWgFor(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* bias, void* out, int M, int K,
                int N, int out_dtype, bool vec, Plan plan, cudaStream_t stream) {
  plan.chunk_tiles /= T::BK;  // the plan carries k per chunk until here
  const bool seq = plan.splits > 1 && !plan.cluster;
  if constexpr (T::kHasSeq) {
    if (seq) {
      return vec ? LaunchWg<T, true, true>(x, w, bias, out, M, K, N, out_dtype, plan, stream)
                 : LaunchWg<T, false, true>(x, w, bias, out, M, K, N, out_dtype, plan, stream);
    }
  } else {
    if (seq) return static_cast<int>(cudaErrorInvalidValue);
  }
  return vec ? LaunchWg<T, true, false>(x, w, bias, out, M, K, N, out_dtype, plan, stream)
             : LaunchWg<T, false, false>(x, w, bias, out, M, K, N, out_dtype, plan, stream);
}

// The wgmma tile for a call (index into WgTile0 .. 3), for speed only (every tile gives the same bits). Fitted on
// the H200 sweep (benchmarks/tuning/bf16_linear_tiles.py): 64-row tiles up to M = 64 (128 columns when that still
// makes a block per SM), else the widest tile that makes at least half an SM's worth of blocks.
int PickWgTile(int M, int N) {
  auto blocks = [&](int bm, int bn) { return static_cast<int64_t>(CeilDiv(M, bm)) * CeilDiv(N, bn); };
  if (M <= 64) return blocks(64, 128) >= 132 ? 1 : 0;
  if (blocks(128, 256) >= 66) return 3;
  if (blocks(128, 128) >= 66) return 2;
  return 0;
}

// Whether the image loaded for the current device was built for sm_90a: the probe's static shared memory is 256
// bytes there and 128 bytes in any other build (a host-side query; no launch, safe inside a graph capture).
__global__ void WgmmaProbeKernel(int* p) {
#if SPECWORKER_WGMMA
  __shared__ int s[64];
#else
  __shared__ int s[32];
#endif
  constexpr int kLen = sizeof(s) / sizeof(int);
  s[threadIdx.x % kLen] = static_cast<int>(threadIdx.x);
  __syncthreads();
  if (p != nullptr) p[threadIdx.x] = s[(threadIdx.x + 1) % kLen];
}

bool ProbeWgmmaImage() {
  cudaFuncAttributes a;
  if (cudaFuncGetAttributes(&a, WgmmaProbeKernel) != cudaSuccess) return false;
  return a.sharedSizeBytes == 64 * sizeof(int);
}

}  // namespace
