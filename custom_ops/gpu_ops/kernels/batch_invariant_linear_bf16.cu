// batch_invariant_linear_bf16 CUDA kernels: out [M, N] = x [M, K] @ weight [K, N] (+ bias [N]), bfloat16
// inputs on tensor cores, float32 accumulation, out float32 or bfloat16 (docs/spec.md §4.8).
// The arithmetic of an output is fixed by K and N alone. K is cut into S chunks of a fixed length (a multiple
// of 128, S = 1, 2 or 4, from K and N only: ChunksFor). Each chunk has its own float32 accumulator, +0 at the
// start, fed one 16-wide MMA k step after another in increasing k (columns past K are zero-filled); the chunk
// sums are then added in chunk order (p0 + p1, + p2, ...), then the bias, then one rounding to the output type.
// No atomics. Two instruction families compute a k step: mma.sync m16n8k16 (sm_80 and later: the ten tiles
// here) and wgmma m64nNk16 (sm_90a builds: batch_invariant_linear_bf16_wgmma.cuh). On sm_90 they give the same bits
// (the GPU tests assert it for every tile, on normal and on wide-range inputs), so an sm_90a build runs decode
// (M <= 16) on the mma.sync decode tiles and larger M on wgmma (the cp.async tiles, or the warp-specialised TMA tiles
// of batch_invariant_linear_bf16_ws.cuh); other builds use mma.sync for every M.
// What a tile shape or split mode decides is which warp issues an output's MMAs and which block adds the chunk
// sums, never which MMAs or in what order, so a row gives the same bits at every M, every position in the batch,
// under every tile shape and in both split modes (the GPU tests check all of these). The MMA's internal rounding
// is the hardware's: bits are fixed for one GPU architecture, not equal to the float32 CPU order.
// mma.sync tiles: a block owns a BM x BN output tile, its warps a (BM / WM) x (BN / WN) sub-tile of 16 x 8 MMA
// fragments. K is walked in BK-wide k tiles through a STAGES-deep shared-memory ring (cp.async 16-byte copies
// with zero fill, or element loads when K or N is not a multiple of 8 or a pointer is not 16-byte aligned);
// fragments come from ldmatrix (.trans for the [K, N] weight). grid.x covers the row tiles, grid.y the column
// tiles (a grid-stride loop past 65535; with one row tile, past one wave of resident blocks, in equal shares).
// Split modes (S > 1): one block walks all chunks of its tile with a second accumulator set for the running sum
// (kSeq), or, on sm_90, the S blocks of grid.z (one chunk each) form a thread-block cluster: each leaves its chunk
// sum in shared memory, and after the cluster barrier block z adds the S sums of rows z * BM / S .. in chunk
// order, reading the others' shared memory (ClusterReduceStore).
#include "batch_invariant_linear_bf16.h"

#include <stdint.h>

#include <type_traits>

#include "mma_bf16.cuh"
#include "tma_sm90.cuh"
#include "wgmma_bf16.cuh"

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
// The k chunks (ChunksFor): chunk starts are multiples of kChunkAlign (every tile's BK divides it); K is split
// when it is at least 2 * kSplitMinChunk and N has fewer than kSplitTarget 64-column tiles, into at most
// kMaxSplits chunks, enough that (64-column tile, chunk) pairs reach kSplitTarget.
constexpr int kChunkAlign = 128;
constexpr int kSplitMinChunk = 1024;
constexpr int kSplitTarget = 384;
constexpr int kMaxSplits = 4;
constexpr int kPartialPad = 4;  // floats per row of a block's chunk sum in shared memory (16-byte rows, no conflicts)

__host__ __device__ constexpr int CeilDiv(int a, int b) { return a / b + (a % b != 0); }

struct Chunks {
  int count;  // S
  int len;    // k per chunk (the last may be shorter)
};

// docs/spec.md §4.8: the chunking is a function of K and N only, never of M, the tile or the GPU.
Chunks ChunksFor(int K, int N) {
  int s = 1;
  const int col_tiles = CeilDiv(N, 64);
  if (K >= 2 * kSplitMinChunk && col_tiles < kSplitTarget) {
    s = K / kSplitMinChunk;
    if (s > kMaxSplits) s = kMaxSplits;
    if (s > CeilDiv(kSplitTarget, col_tiles)) s = CeilDiv(kSplitTarget, col_tiles);
    while (s & (s - 1)) --s;  // 1, 2 or 4
  }
  int len = CeilDiv(CeilDiv(K > 0 ? K : 1, s), kChunkAlign) * kChunkAlign;
  return {K > 0 ? CeilDiv(K, len) : 1, len};
}

// The call's chunking and how the launch realises it.
struct Plan {
  int splits;       // S
  int chunk_tiles;  // k tiles of the kernel's BK per chunk
  bool cluster;     // S > 1: grid.z = S blocks per output tile in one cluster (else kSeq, one block)
  int device;       // the current device (ResidentBlocks' cache)
  int sms;          // its SMs
};

__device__ __forceinline__ void StoreOut(void* out, int out_dtype, int64_t i, float v) {
  if (out_dtype == SPECWORKER_LINEAR_OUT_FLOAT32) {
    static_cast<float*>(out)[i] = v;
  } else {
    static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16_rn(v);
  }
}

__device__ __forceinline__ float AddBias(float v, const __nv_bfloat16* bias, int n) {
  return bias != nullptr ? __fadd_rn(v, __bfloat162float(bias[n])) : v;
}

// How many k tiles from t_begin a block walks: up to k_tiles, at most chunk_tiles when that is not 0.
__device__ __forceinline__ int BlockKTiles(int k_tiles, int t_begin, int chunk_tiles) {
  const int end = chunk_tiles > 0 && t_begin + chunk_tiles < k_tiles ? t_begin + chunk_tiles : k_tiles;
  return end - t_begin;
}

// The running sum over chunks: the first chunk's sum is taken as it is, later ones added in order.
template <int L>
__device__ __forceinline__ void FoldChunk(float (&total)[L], float (&acc)[L], bool first) {
#pragma unroll
  for (int i = 0; i < L; ++i) {
    total[i] = first ? acc[i] : __fadd_rn(total[i], acc[i]);
    acc[i] = 0.0f;
  }
}

// Cluster split (sm_90): partial [BM][BN + kPartialPad] floats in this block's shared memory holds its chunk sum.
// Block z of the cluster adds the S chunk sums of its share of the rows in chunk order, adds the bias, rounds and
// stores 4 columns at a time. The barriers: all sums written before any is read; none reused before all are read.
template <int BM, int BN, int kThreads>
__device__ __forceinline__ void ClusterReduceStore(const float* partial, const __nv_bfloat16* __restrict__ bias,
                                                   void* __restrict__ out, int out_dtype, int r0, int n0, int M,
                                                   int N) {
  constexpr int kStride = BN + kPartialPad;
  specworker::ClusterSync();
  const int S = gridDim.z, rank = blockIdx.z;
  const int rows = CeilDiv(BM, S);
  for (int e = threadIdx.x; e < rows * (BN / 4); e += kThreads) {
    const int rr = rank * rows + e / (BN / 4), cc = (e % (BN / 4)) * 4;
    const int r = r0 + rr;
    if (rr >= BM || r >= M || n0 + cc >= N) continue;
    const float* p = partial + rr * kStride + cc;
    float4 v = specworker::LoadClusterShared(p, 0);
    for (int s = 1; s < S; ++s) {
      const float4 u = specworker::LoadClusterShared(p, s);
      v.x = __fadd_rn(v.x, u.x), v.y = __fadd_rn(v.y, u.y), v.z = __fadd_rn(v.z, u.z), v.w = __fadd_rn(v.w, u.w);
    }
    const float vals[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int n = n0 + cc + j;
      if (n < N) StoreOut(out, out_dtype, static_cast<int64_t>(r) * N + n, AddBias(vals[j], bias, n));
    }
  }
  specworker::ClusterSync();
}

// Stages 8 bfloat16 of matrix a ([rows, len], row-major) at (r, c) into shared dst: a 16-byte cp.async (through
// L1 when kL1) when kVec (len % 8 == 0, a 16-byte aligned), else element loads; zeros past the matrix.
template <bool kVec, bool kL1 = false>
__device__ __forceinline__ void Stage8(void* dst, const __nv_bfloat16* __restrict__ a, int r, int c, int rows,
                                       int len) {
  const __nv_bfloat16* row = a + static_cast<int64_t>(r < rows ? r : 0) * len;
  if constexpr (kVec) {
    const bool ok = r < rows && c < len;
    CpAsync16<kL1>(dst, ok ? row + c : a, ok);
  } else {
    *reinterpret_cast<uint4*>(dst) = Load8(row, c, len, r < rows);
  }
}

// kernel<<<grid, threads, bytes, stream>>>(args...), in clusters of (1, 1, grid.z) when grid.z > 1.
template <typename... KArgs, typename... Args>
int Launch(void (*kernel)(KArgs...), dim3 grid, int threads, int bytes, cudaStream_t stream, Args... args) {
  if (bytes > 48 * 1024) {
    const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (err != cudaSuccess) return static_cast<int>(err);
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = static_cast<size_t>(bytes);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  if (grid.z > 1) {
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 1;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = grid.z;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  return static_cast<int>(cudaLaunchKernelEx(&cfg, kernel, args...));
}

}  // namespace

#include "batch_invariant_linear_bf16_wgmma.cuh"
#include "batch_invariant_linear_bf16_ws.cuh"

namespace {

template <int BM_, int BN_, int BK_, int WM_, int WN_, int STAGES_, bool CA_ = false>
struct Tile {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, WM = WM_, WN = WN_, STAGES = STAGES_;
  static constexpr bool kCaA = CA_;  // x tile through L1 (cp.async.ca): the blocks of an SM share its lines
  static constexpr int kThreads = WM * WN * 32;
  static constexpr int kWarpM = BM / WM, kWarpN = BN / WN;
  static constexpr int MF = kWarpM / 16, NF = kWarpN / 8;  // MMA fragments per warp
  static constexpr int kAStride = BK + kPad, kBStride = BN + kPad;  // shared row lengths (bf16)
  static constexpr int kAStage = BM * kAStride, kBStage = BK * kBStride;
  static constexpr int kRingBytes = STAGES * (kAStage + kBStage) * 2;
  static constexpr int kPartialBytes = BM * (BN + kPartialPad) * 4;
  static constexpr int kAChunks = BM * BK / 8, kBChunks = BK * BN / 8;  // 16-byte chunks per tile
  static constexpr int kAcc = MF * NF * 4;
  static_assert(kWarpM % 16 == 0 && kWarpN % 8 == 0 && BK % 16 == 0, "whole MMA fragments");
  static_assert(kAChunks % kThreads == 0 && kBChunks % kThreads == 0, "tiles load in whole rounds");
  static_assert(kChunkAlign % BK == 0, "chunk edges fall on k-tile edges");
};

// The mma.sync tile shapes, by id (specworker_batch_invariant_linear_bf16_tile_launch). Each gives the same
// arithmetic per output (file comment); they differ in rows x columns per block, k-tile depth and ring.
//                 BM   BN  BK WM WN STAGES
using Tile0 = Tile<16, 64, 32, 1, 2, 4, true>;   // decode, wide N, one chunk: 2 warps, x through L1
using Tile1 = Tile<16, 128, 64, 1, 4, 3, true>;  // decode, split K with enough 128-column tiles, x through L1
using Tile2 = Tile<16, 64, 64, 1, 4, 4>;
using Tile3 = Tile<32, 64, 64, 2, 2, 4>;
using Tile4 = Tile<64, 64, 32, 2, 2, 4>;
using Tile5 = Tile<64, 128, 32, 2, 2, 4>;
using Tile6 = Tile<128, 128, 32, 2, 4, 4>;
using Tile7 = Tile<128, 128, 64, 2, 4, 3>;
using Tile8 = Tile<128, 256, 32, 2, 4, 3>;
using Tile9 = Tile<16, 64, 64, 1, 4, 4, true>;  // decode: tile 2 with x through L1 (many blocks read the same x)
constexpr int kNumMmaTiles = 10;
constexpr int kFirstWsTile = kNumMmaTiles + kNumWgTiles;
constexpr int kNumTiles = kFirstWsTile + kNumWsTiles;

// f(Tile<...>{}) for mma.sync tile id `id`.
template <class F>
auto WithMmaTile(int id, F&& f) -> decltype(f(Tile0{})) {
  switch (id) {
    case 0: return f(Tile0{});
    case 1: return f(Tile1{});
    case 2: return f(Tile2{});
    case 3: return f(Tile3{});
    case 4: return f(Tile4{});
    case 5: return f(Tile5{});
    case 6: return f(Tile6{});
    case 7: return f(Tile7{});
    case 8: return f(Tile8{});
    default: return f(Tile9{});
  }
}

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
    Stage8<kVec, T::kCaA>(As + rr * T::kAStride + cc, x, r0 + rr, k0 + cc, M, K);
  }
#pragma unroll
  for (int q = 0; q < T::kBChunks / T::kThreads; ++q) {
    const int e = threadIdx.x + q * T::kThreads;
    const int kk = e / (T::BN / 8), cc = (e % (T::BN / 8)) * 8;
    Stage8<kVec>(Bs + kk * T::kBStride + cc, w, k0 + kk, n0 + cc, K, N);
  }
}

// One k tile's MMAs: 16-wide k steps in increasing order into the same accumulators.
template <class T>
__device__ __forceinline__ void ComputeTile(const __nv_bfloat16* As, const __nv_bfloat16* Bs,
                                            float (&acc)[T::kAcc], int wm, int wn, int lane) {
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
      for (int nf = 0; nf < T::NF; ++nf) {
        float(&c)[4] = *reinterpret_cast<float(*)[4]>(&acc[(mf * T::NF + nf) * 4]);
        Mma(c, a[mf], b[nf]);
      }
  }
}

// Accumulator element i of this thread: fragment (mf, nf) = i / 4, m16n8 layout: c0, c1 at row lane / 4,
// columns 2 (lane % 4) + {0, 1}; c2, c3 8 rows down. Row and column within the block tile.
template <class T>
__device__ __forceinline__ int AccRow(int i, int wm, int lane) {
  return wm * T::kWarpM + (i / 4 / T::NF) * 16 + lane / 4 + 8 * ((i % 4) / 2);
}
template <class T>
__device__ __forceinline__ int AccCol(int i, int wn, int lane) {
  return wn * T::kWarpN + (i / 4 % T::NF) * 8 + 2 * (lane % 4) + (i % 2);
}

// Stores (or, in a cluster split, adds across the cluster and stores) the block's result res.
template <class T>
__device__ __forceinline__ void MmaEpilogue(float (&res)[T::kAcc], float* partial, bool cluster,
                                            const __nv_bfloat16* __restrict__ bias, void* __restrict__ out,
                                            int out_dtype, int r0, int n0, int M, int N, int wm, int wn, int lane) {
  if (cluster) {
#pragma unroll
    for (int i = 0; i < T::kAcc; i += 2) {
      *reinterpret_cast<float2*>(partial + AccRow<T>(i, wm, lane) * (T::BN + kPartialPad) + AccCol<T>(i, wn, lane)) =
          make_float2(res[i], res[i + 1]);
    }
    ClusterReduceStore<T::BM, T::BN, T::kThreads>(partial, bias, out, out_dtype, r0, n0, M, N);
    return;
  }
#pragma unroll
  for (int i = 0; i < T::kAcc; ++i) {
    const int r = r0 + AccRow<T>(i, wm, lane), n = n0 + AccCol<T>(i, wn, lane);
    if (r < M && n < N) StoreOut(out, out_dtype, static_cast<int64_t>(r) * N + n, AddBias(res[i], bias, n));
  }
}

// kSeq: the block walks every chunk (a running sum in a second accumulator set); else one chunk per block: all of
// K when S = 1, chunk blockIdx.z in a cluster split.
template <class T, bool kVec, bool kSeq>
__global__ void __launch_bounds__(T::kThreads)
    LinearBf16Kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                     const __nv_bfloat16* __restrict__ bias, void* __restrict__ out, int M, int K, int N,
                     int out_dtype, int chunk_tiles) {
  extern __shared__ __align__(16) unsigned char smem[];
  __nv_bfloat16* As = reinterpret_cast<__nv_bfloat16*>(smem);
  __nv_bfloat16* Bs = As + T::STAGES * T::kAStage;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int wm = warp / T::WN, wn = warp % T::WN;
  const int r0 = blockIdx.x * T::BM;
  const bool cluster = gridDim.z > 1;
  const int t_begin = cluster ? blockIdx.z * chunk_tiles : 0;  // the block's k tiles: all, or its chunk's
  const int n_k = BlockKTiles(CeilDiv(K, T::BK), t_begin, cluster ? chunk_tiles : 0);
  const int n_tiles = CeilDiv(N, T::BN);

  for (int nt = blockIdx.y; nt < n_tiles; nt += gridDim.y) {
    const int n0 = nt * T::BN;
    float acc[T::kAcc];
    float total[kSeq ? T::kAcc : 1];
#pragma unroll
    for (int i = 0; i < T::kAcc; ++i) acc[i] = 0.0f;

    // Prologue: k tiles 0 .. STAGES - 2 in flight. One commit group per k tile, empty past the end.
#pragma unroll
    for (int s = 0; s < T::STAGES - 1; ++s) {
      if (s < n_k) LoadTile<T, kVec>(As + s * T::kAStage, Bs + s * T::kBStage, x, w, r0, n0, t_begin + s, M, K, N);
      CpAsyncCommit();
    }
    for (int i = 0; i < n_k; ++i) {
      CpAsyncWait<T::STAGES - 2>();  // k tile i has landed (this thread's copies)
      __syncthreads();               // ... everyone's; and slot (i - 1) % STAGES is free again
      const int next = i + T::STAGES - 1;
      if (next < n_k) {
        const int s = next % T::STAGES;
        LoadTile<T, kVec>(As + s * T::kAStage, Bs + s * T::kBStage, x, w, r0, n0, t_begin + next, M, K, N);
      }
      CpAsyncCommit();
      if constexpr (kSeq) {
        if (i > 0 && i % chunk_tiles == 0) FoldChunk(total, acc, i == chunk_tiles);
      }
      const int s = i % T::STAGES;
      ComputeTile<T>(As + s * T::kAStage, Bs + s * T::kBStage, acc, wm, wn, lane);
    }
    CpAsyncWait<0>();
    __syncthreads();  // the ring is free: the next column tile's prologue, or the chunk sums, overwrite it
    if constexpr (kSeq) {
      FoldChunk(total, acc, n_k <= chunk_tiles);
      MmaEpilogue<T>(total, reinterpret_cast<float*>(smem), cluster, bias, out, out_dtype, r0, n0, M, N, wm, wn, lane);
    } else {
      MmaEpilogue<T>(acc, reinterpret_cast<float*>(smem), cluster, bias, out, out_dtype, r0, n0, M, N, wm, wn, lane);
    }
  }
}

// Blocks of LinearBf16Kernel<T, kVec, kSeq> with `bytes` of shared memory (one per tile and split mode) that fit
// on one SM, asked once per device; 0 when the query fails (the launch then keeps one block per column tile).
template <class T, bool kVec, bool kSeq>
int ResidentBlocks(int device, bool cluster, int bytes) {
  static int cached[2][64];
  if (device < 0 || device >= 64) return 0;
  int& c = cached[cluster][device];
  if (c == 0) {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, LinearBf16Kernel<T, kVec, kSeq>, T::kThreads, bytes) !=
            cudaSuccess ||
        n < 1) {
      n = -1;
    }
    c = n;
  }
  return c > 0 ? c : 0;
}

template <class T, bool kVec, bool kSeq>
int LaunchTile(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* bias, void* out, int M, int K,
               int N, int out_dtype, const Plan& plan, cudaStream_t stream) {
  const int n_tiles = CeilDiv(N, T::BN);
  const int z = plan.cluster ? plan.splits : 1;
  const int bytes = plan.cluster && T::kPartialBytes > T::kRingBytes ? T::kPartialBytes : T::kRingBytes;
  int grid_y = n_tiles < kMaxGridY ? n_tiles : kMaxGridY;
  // One row tile (decode): at most one wave of blocks, each walking an equal share of the column tiles (the
  // kernel's grid-stride loop), so no second, partly filled wave trails behind the first.
  if (M <= T::BM && plan.sms > 0) {
    if (bytes > 48 * 1024) {  // the occupancy query counts the opt-in shared memory (Launch sets it too)
      const cudaError_t err = cudaFuncSetAttribute(LinearBf16Kernel<T, kVec, kSeq>,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
      if (err != cudaSuccess) return static_cast<int>(err);
    }
    const int64_t wave =
        static_cast<int64_t>(plan.sms) * ResidentBlocks<T, kVec, kSeq>(plan.device, plan.cluster, bytes) / z;
    if (wave > 0 && n_tiles > wave) grid_y = CeilDiv(n_tiles, CeilDiv(n_tiles, static_cast<int>(wave)));
  }
  const dim3 grid(CeilDiv(M, T::BM), grid_y, z);
  return Launch(LinearBf16Kernel<T, kVec, kSeq>, grid, T::kThreads, bytes, stream, x, w, bias, out, M, K, N,
                out_dtype, plan.chunk_tiles);
}

template <class T>
int LaunchFor(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* bias, void* out, int M, int K,
              int N, int out_dtype, bool vec, Plan plan, cudaStream_t stream) {
  plan.chunk_tiles /= T::BK;  // the plan carries k per chunk until here
  const bool seq = plan.splits > 1 && !plan.cluster;
  if (vec) {
    return seq ? LaunchTile<T, true, true>(x, w, bias, out, M, K, N, out_dtype, plan, stream)
               : LaunchTile<T, true, false>(x, w, bias, out, M, K, N, out_dtype, plan, stream);
  }
  return seq ? LaunchTile<T, false, true>(x, w, bias, out, M, K, N, out_dtype, plan, stream)
             : LaunchTile<T, false, false>(x, w, bias, out, M, K, N, out_dtype, plan, stream);
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Whether T is a WgTile (it has kHasSeq).
template <class T, class = void>
struct IsWgTile : std::false_type {};
template <class T>
struct IsWgTile<T, std::void_t<decltype(T::kHasSeq)>> : std::true_type {};

// What the launch rules need to know of a tile id at (M, N).
struct TileInfo {
  int64_t blocks;  // output tiles
  int threads;
  int smem;        // dynamic shared memory of a block (the ring)
  bool has_seq;    // has the one-block split (kSeq)
};

TileInfo InfoOf(int tile, int M, int N) {
  auto info = [&](auto t) {
    using T = decltype(t);
    const int64_t blocks = static_cast<int64_t>(CeilDiv(M, T::BM)) * CeilDiv(N, T::BN);
    if constexpr (IsWgTile<T>::value) {
      return TileInfo{blocks, T::kThreads, T::kBytes, T::kHasSeq};
    } else {
      return TileInfo{blocks, T::kThreads, T::kRingBytes, true};
    }
  };
  if (tile < kNumMmaTiles) return WithMmaTile(tile, info);
  return tile < kFirstWsTile ? WithWgTile(tile - kNumMmaTiles, info) : WithWsTile(tile - kFirstWsTile, info);
}

// The mma.sync tile for a call, for speed only (every tile gives the same bits). Fitted on H200 sweeps
// (benchmarks/tuning/bf16_linear_tiles.py; decode: benchmarks/results/gpu_logs/issue22-gemm-smallm/): decode
// (M <= 16) streams the weight once, so the tile is chosen for bandwidth: with one k chunk and at least one
// 64-column tile per SM the two-warp 16 x 64 x 32 tile (small ring, many resident blocks), with S chunks the
// 16 x 128 tile while its (column tile, chunk) blocks still number 1.25 per SM, else the 16 x 64 x 64 tile with
// x through L1. Larger M: the largest tile that still makes enough blocks to fill the GPU.
int PickMmaTile(int M, int N, int splits, int sms) {
  if (M <= 16) {
    if (splits == 1 && CeilDiv(N, 64) >= sms) return 0;
    if (splits > 1 && static_cast<int64_t>(CeilDiv(N, 128)) * splits * 4 >= static_cast<int64_t>(sms) * 5) return 1;
    return 9;
  }
  if (InfoOf(6, M, N).blocks >= 264) return 6;
  if (InfoOf(5, M, N).blocks >= 200) return 5;
  if (M > 64 && InfoOf(4, M, N).blocks >= 32) return 4;
  if (InfoOf(3, M, N).blocks >= 128) return 3;
  return 2;
}

// The warp-specialised tile for a call (index into WsTile0 .. 2), or -1 for the wgmma tiles (PickWgTile), for speed
// only (every tile gives the same bits). Fitted on the H200 sweep with the CTA-scope stage release
// (benchmarks/results/gpu_logs/issue22-gemm4/sweep.log): from M = 256 the warp-specialised tiles beat the wgmma
// tiles at every shape (1.3-2.3x at M = 512 / 4096); the 128 x 128 tile (with its one-block split) wins but where
// K >= 2048 meets M >= 2048 without a split (Llama gate_up / lm_head at M = 4096: the 128 x 256 tile 1352 / 6097 us
// against 1400 / 7050). The 128 x 192 tile replaces the 128 x 128 one where the slowest cluster's column steps
// (units of a row pair x a column tile, one per two-block cluster at a time, about sms / 2 clusters, times the
// tile's columns) drop by 1/8 without a split, or do not grow by more than 1/9 with one (there its one-block split
// ran about 12% faster per column: H100, Llama qkv at M = 1024 / 4096, the same steps: 111 -> 98 / 380 -> 335 us).
// Llama qkv at M = 512: 96 units of 128 columns are 1.45 waves of 66 clusters, 64 of 192 one wave: 77 -> 56 us
// (H100, benchmarks/results/gpu_logs/issue22l/).
int PickWsTile(int M, int N, int K, int splits, int sms) {
  if (M < 256 || K < 64 || N < 64) return -1;
  if (splits == 1 && K >= 2048 && M >= 2048) return 0;
  const int64_t row_pairs = CeilDiv(CeilDiv(M, 128), 2), clusters = sms / 2 > 0 ? sms / 2 : 1;
  auto steps = [&](int bn) { return (row_pairs * CeilDiv(N, bn) + clusters - 1) / clusters * bn; };
  const bool wider = splits > 1 ? steps(192) * 9 <= steps(128) * 10 : steps(192) * 8 <= steps(128) * 7;
  return wider ? 2 : 1;
}

// Per device: 1 when this build's image for it holds the wgmma kernels (sm_90a), -1 when not, 0 not asked yet.
int g_wgmma_built[64];
bool WgmmaBuilt(int device) {
  if (device < 0 || device >= 64) return false;
  if (g_wgmma_built[device] == 0) g_wgmma_built[device] = ProbeWgmmaImage() ? 1 : -1;
  return g_wgmma_built[device] == 1;
}

}  // namespace

extern "C" int specworker_batch_invariant_linear_bf16_tile_launch(
    const __nv_bfloat16* x, const __nv_bfloat16* weight, const __nv_bfloat16* bias, void* out, int M, int K, int N,
    int out_dtype, int tile, int split_mode, cudaStream_t stream) {
  if (tile < -1 || tile >= kNumTiles || split_mode < -1 || split_mode > 1) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  if (M < 0 || K < 0 || N < 0) return static_cast<int>(cudaErrorInvalidValue);
  if (out_dtype != SPECWORKER_LINEAR_OUT_FLOAT32 && out_dtype != SPECWORKER_LINEAR_OUT_BFLOAT16) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  if (M == 0 || N == 0) return static_cast<int>(cudaSuccess);
  int device = 0, major = 0, sms = 0, smem_sm = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
  if (err != cudaSuccess) return static_cast<int>(err);
  if (major < 8) return static_cast<int>(cudaErrorNotSupported);  // no bf16 MMA / cp.async before sm_80
  if (out == nullptr || (K > 0 && (x == nullptr || weight == nullptr))) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  const bool wgmma = major == 9 && WgmmaBuilt(device);
  if (tile >= kNumMmaTiles && !wgmma) return static_cast<int>(cudaErrorNotSupported);
  if (split_mode == 1 && major < 9) return static_cast<int>(cudaErrorNotSupported);  // clusters from sm_90
  const bool vec = K % 8 == 0 && N % 8 == 0 && Aligned16(x) && Aligned16(weight);
  const bool ws_ok = wgmma && vec && K > 0 && EncodeTiled() != nullptr;  // what the warp-specialised tiles need
  if (tile >= kFirstWsTile && !ws_ok) return static_cast<int>(cudaErrorNotSupported);
  // sm_90a builds: decode on the mma.sync tile, the rest on wgmma (the two give the same bits: docs/spec.md §4.8).
  const Chunks chunks = ChunksFor(K, N);
  if (tile < 0) {
    tile = !wgmma || M <= 16 ? PickMmaTile(M, N, chunks.count, sms)
                             : ws_ok && PickWsTile(M, N, K, chunks.count, sms) >= 0
                                   ? kFirstWsTile + PickWsTile(M, N, K, chunks.count, sms)
                                   : kNumMmaTiles + PickWgTile(M, N);
  }
  Plan plan = {chunks.count, chunks.len, false, device, sms};
  if (chunks.count > 1 && tile >= kFirstWsTile) {
    plan.cluster = split_mode == 1;  // no cluster split on these tiles: LaunchWsFor refuses it
  } else if (chunks.count > 1) {
    // A cluster per output tile unless the output tiles alone fill at least 90% of one wave of blocks (or the tile
    // has no one-block split); either way the bits are the same.
    const TileInfo info = InfoOf(tile, M, N);
    int per_sm = smem_sm / (info.smem + 1024);
    if (per_sm > 2048 / info.threads) per_sm = 2048 / info.threads;
    if (per_sm < 1) per_sm = 1;
    const bool fills = info.blocks * 10 >= static_cast<int64_t>(sms) * per_sm * 9;
    plan.cluster = split_mode == -1 ? major >= 9 && (!fills || !info.has_seq) : split_mode == 1;
    if (!plan.cluster && !info.has_seq) {
      return static_cast<int>(cudaErrorInvalidValue);  // forced one-block split on a tile without it
    }
  }
  auto launch = [&](auto t) {
    return LaunchFor<decltype(t)>(x, weight, bias, out, M, K, N, out_dtype, vec, plan, stream);
  };
  auto launch_wg = [&](auto t) {
    return LaunchWgFor<decltype(t)>(x, weight, bias, out, M, K, N, out_dtype, vec, plan, stream);
  };
  auto launch_ws = [&](auto t) {
    return LaunchWsFor<decltype(t)>(x, weight, bias, out, M, K, N, out_dtype, plan, stream);
  };
  if (tile < kNumMmaTiles) return WithMmaTile(tile, launch);
  return tile < kFirstWsTile ? WithWgTile(tile - kNumMmaTiles, launch_wg) : WithWsTile(tile - kFirstWsTile, launch_ws);
}

extern "C" int specworker_batch_invariant_linear_bf16_launch(const __nv_bfloat16* x, const __nv_bfloat16* weight,
                                                             const __nv_bfloat16* bias, void* out, int M, int K,
                                                             int N, int out_dtype, cudaStream_t stream) {
  return specworker_batch_invariant_linear_bf16_tile_launch(x, weight, bias, out, M, K, N, out_dtype, -1, -1, stream);
}
