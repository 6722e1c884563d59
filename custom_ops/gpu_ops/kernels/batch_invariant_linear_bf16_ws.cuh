// batch_invariant_linear_bf16's warp-specialised sm_90a tiles for large M, included once by
// batch_invariant_linear_bf16.cu after the wgmma tiles. The arithmetic per output is the file comment's there (the
// same wgmma m64nNk16 k steps in increasing k per chunk, the same chunk sums in chunk order: docs/spec.md §4.8);
// what changes is how operands reach shared memory and which block computes which output tile.
// A block is 3 warpgroups: warpgroup 0 the producer (one thread issues bulk tensor copies, TMA), warpgroups 1 and 2
// the consumers, rows 0 .. 63 and 64 .. 127 of a 128 x BN output tile, each as BN / NI wgmma per 16-wide k step.
// Blocks come in clusters of two that own the two row tiles of a row pair and the same column tile: each block
// copies its own x tile [128 rows][64 k] and every other one of the weight tile's 64-column blocks (rank 0 the
// even, rank 1 the odd ones), multicast to both (the weight tile is read from L2 once per pair). k tiles of 64 go
// through a STAGES-deep ring; per stage a "full" mbarrier (the producer's expect-tx of the stage's bytes, the
// copies' completion) and an "empty" one (one arrival per consumer warpgroup of both blocks, after its wgmma reading
// the stage have completed; a multicast writes into both blocks). Shared layouts are the wgmma tiles' (TMA's
// 128-byte swizzle writes exactly them); columns and rows past K, M or N arrive as zeros (TMA's out-of-bounds fill).
// The grid is persistent: cluster c walks the units (row pair, column tile) c, c + clusters, ..., in groups of
// kGroupRows row pairs (all column tiles of a group before the next), so the clusters running at once share x rows
// and weight columns in L2; the producer runs ahead into the next unit while the consumers store the last one.
// kSeq (S > 1): a consumer walks the unit's chunks with a running sum in a second accumulator set (FoldChunk), so
// only tiles whose two sets fit in registers have it (BN = 128, 192); no cluster split (the cluster is the row pair).
// Needs the 16-byte path (K % 8 == 0, N % 8 == 0, 16-byte aligned x and weight) and K > 0.

namespace {

constexpr int kWsThreads = 384;      // producer warpgroup + 2 consumer warpgroups
constexpr int kWsProducerRegs = 40;  // setmaxnreg: 40 * 128 + 232 * 256 <= 65536
constexpr int kWsConsumerRegs = 232;
constexpr int kGroupRows = 8;  // row pairs per raster group

template <int BN_, int NI_, int STAGES_>
struct WsTile {
  static constexpr int BN = BN_, NI = NI_, STAGES = STAGES_;
  static constexpr int BM = 128, BK = 64, kThreads = kWsThreads;
  static constexpr int kInst = BN / NI, kAccInst = NI / 2;
  static constexpr int kABytes = BM * 128, kBBytes = BN * 128, kStageBytes = kABytes + kBBytes;
  static constexpr int kRingBytes = STAGES * kStageBytes;
  static constexpr int kBytes = kRingBytes + 2 * STAGES * 8 + 1024;  // + barriers, + 1024-byte alignment
  static constexpr bool kHasSeq = kInst * kAccInst <= 96;  // room for the running-sum set in registers
  static_assert(BN % NI == 0 && NI % 64 == 0, "whole 64-column blocks per wgmma");
  static_assert(kBytes <= 227 * 1024, "fits one block's shared memory on sm_90");
  static_assert(kChunkAlign % BK == 0, "chunk edges fall on k-tile edges");
};

// Tile ids kNumMmaTiles + kNumWgTiles + 0 .. 2 of the tile launcher.
//                      BN   NI STAGES    block tile
using WsTile0 = WsTile<256, 256, 4>;  // 128 x 256, one m64n256k16 per consumer and k step; S = 1 only
using WsTile1 = WsTile<128, 128, 6>;  // 128 x 128, with the one-block split (kSeq)
using WsTile2 = WsTile<192, 192, 5>;  // 128 x 192, one m64n192k16, with the one-block split: fewer units per wave
constexpr int kNumWsTiles = 3;

template <class F>
auto WithWsTile(int id, F&& f) -> decltype(f(WsTile0{})) {
  switch (id) {
    case 0: return f(WsTile0{});
    case 1: return f(WsTile1{});
    default: return f(WsTile2{});
  }
}

// Unit u of the persistent walk: its row pair and column tile (groups of kGroupRows row pairs, column tiles
// outer within a group, row pairs inner).
struct WsUnit {
  int row_pair, col_tile;
};
__device__ __forceinline__ WsUnit WsUnitAt(int u, int row_pairs, int col_tiles) {
  const int per_group = kGroupRows * col_tiles;
  const int g = u / per_group, idx = u % per_group;
  const int rows = row_pairs - g * kGroupRows < kGroupRows ? row_pairs - g * kGroupRows : kGroupRows;
  return {g * kGroupRows + idx % rows, idx / rows};
}

// out[i], out[i + 1] (i even, both in the row) from v0, v1: one 8-byte (float32) or 4-byte (bfloat16) store.
__device__ __forceinline__ void StorePair(void* out, int out_dtype, int64_t i, float v0, float v1) {
  if (out_dtype == SPECWORKER_LINEAR_OUT_FLOAT32) {
    *reinterpret_cast<float2*>(static_cast<float*>(out) + i) = make_float2(v0, v1);
  } else {
    *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(out) + i) = __floats2bfloat162_rn(v0, v1);
  }
}

// A consumer's result res (its 64 rows of the tile) to out: accumulator pairs (q, q + 1) are adjacent columns of one
// row, and N % 8 == 0 puts both or neither inside N.
template <class T>
__device__ __forceinline__ void WsEpilogue(float (&res)[T::kInst][T::kAccInst], const __nv_bfloat16* __restrict__ bias,
                                           void* __restrict__ out, int out_dtype, int r0, int n0, int M, int N) {
  const int t = threadIdx.x % 128;
#pragma unroll
  for (int j = 0; j < T::kInst; ++j)
#pragma unroll
    for (int q = 0; q < T::kAccInst; q += 2) {
      const int r = r0 + (t / 32) * 16 + (t % 32) / 4 + 8 * ((q % 4) / 2);
      const int n = n0 + j * T::NI + (q / 4) * 8 + 2 * (t % 4);
      if (r < M && n < N) {
        StorePair(out, out_dtype, static_cast<int64_t>(r) * N + n, AddBias(res[j][q], bias, n),
                  AddBias(res[j][q + 1], bias, n + 1));
      }
    }
}

// The producer thread: every k tile of every unit of this cluster, in the consumers' order.
template <class T>
__device__ __forceinline__ void WsProduce(const CUtensorMap* tmap_x, const CUtensorMap* tmap_w, uint32_t ring,
                                          uint32_t full, uint32_t empty, uint32_t rank, int units, int row_pairs,
                                          int col_tiles, int n_k) {
  int s = 0;
  uint32_t phase = 0;
  for (int u = blockIdx.x / 2; u < units; u += gridDim.x / 2) {
    const WsUnit unit = WsUnitAt(u, row_pairs, col_tiles);
    const int r0 = (2 * unit.row_pair + static_cast<int>(rank)) * T::BM, n0 = unit.col_tile * T::BN;
    for (int kt = 0; kt < n_k; ++kt) {
      specworker::MbarWait(empty + 8 * s, phase ^ 1);  // both blocks' consumers are done with the stage
      specworker::MbarArriveExpectTx(full + 8 * s, T::kStageBytes);
      const uint32_t stage = ring + s * T::kStageBytes;
      specworker::TmaLoad2d(stage, tmap_x, full + 8 * s, kt * T::BK, r0);
#pragma unroll
      for (int j = 0; j < T::BN / 64; j += 2) {
        const int b = j + static_cast<int>(rank);  // this block's share of the 64-column blocks
        if (T::BN % 128 == 0 || b < T::BN / 64) {  // 192 columns: rank 1 copies one block, rank 0 two
          specworker::TmaLoad2dMulticast(stage + T::kABytes + b * (64 * 128), tmap_w, full + 8 * s, n0 + 64 * b,
                                         kt * T::BK, 0x3);
        }
      }
      if (++s == T::STAGES) s = 0, phase ^= 1;
    }
  }
}

// Stage s is free again in both blocks of the cluster (one arrival per consumer warpgroup and block).
__device__ __forceinline__ void WsRelease(uint32_t empty, int s) {
  if (threadIdx.x % 128 == 0) {
    specworker::MbarArriveCluster(empty + 8 * s, 0);
    specworker::MbarArriveCluster(empty + 8 * s, 1);
  }
}

// A consumer warpgroup: its 64 rows of every unit of this cluster.
template <class T, bool kSeq>
__device__ __forceinline__ void WsConsume(const __nv_bfloat16* __restrict__ bias, void* __restrict__ out,
                                          uint32_t ring, uint32_t full, uint32_t empty, uint32_t rank, int units,
                                          int row_pairs, int col_tiles, int n_k, int M, int N, int out_dtype,
                                          int chunk_tiles) {
  const int cw = threadIdx.x / 128 - 1;
  int s = 0;
  uint32_t phase = 0;
  for (int u = blockIdx.x / 2; u < units; u += gridDim.x / 2) {
    const WsUnit unit = WsUnitAt(u, row_pairs, col_tiles);
    const int r0 = (2 * unit.row_pair + static_cast<int>(rank)) * T::BM + 64 * cw, n0 = unit.col_tile * T::BN;
    float acc[T::kInst][T::kAccInst];
    float total[kSeq ? T::kInst : 1][kSeq ? T::kAccInst : 1];
    WgZeroAcc<T>(acc);
    int prev = 0;
    for (int i = 0; i < n_k; ++i) {
      specworker::MbarWait(full + 8 * s, phase);
      if constexpr (kSeq) WgFoldAtChunkEnd<T>(total, acc, i, chunk_tiles);
      const uint32_t stage = ring + s * T::kStageBytes;
      WgMmaKTile<T>(acc, stage + cw * 64 * 128, stage + T::kABytes);
      WgmmaWait<1>();  // k tile i - 1's MMAs are done: its stage can be refilled
      if (i > 0) WsRelease(empty, prev);
      prev = s;
      if (++s == T::STAGES) s = 0, phase ^= 1;
    }
    WgmmaWait<0>();
    FenceAcc<T>(acc);
    if (n_k > 0) WsRelease(empty, prev);
    if constexpr (kSeq) {
      WgFold<T>(total, acc, n_k <= chunk_tiles);
      WsEpilogue<T>(total, bias, out, out_dtype, r0, n0, M, N);
    } else {
      WsEpilogue<T>(acc, bias, out, out_dtype, r0, n0, M, N);
    }
  }
}

template <class T, bool kSeq>
__global__ void __launch_bounds__(kWsThreads, 1)
    LinearBf16WsKernel(const __grid_constant__ CUtensorMap tmap_x, const __grid_constant__ CUtensorMap tmap_w,
                       const __nv_bfloat16* __restrict__ bias, void* __restrict__ out, int M, int K, int N,
                       int out_dtype, int chunk_tiles) {
#if SPECWORKER_WGMMA
  extern __shared__ __align__(16) unsigned char ws_smem[];
  const uint32_t raw = specworker::SharedAddr(ws_smem);
  const uint32_t ring = raw + (1024 - raw % 1024) % 1024;  // swizzle atoms need 1024-byte alignment
  const uint32_t full = ring + T::kRingBytes, empty = full + 8 * T::STAGES;
  const uint32_t rank = specworker::ClusterRank();
  if (threadIdx.x == 0) {
    for (int s = 0; s < T::STAGES; ++s) {
      specworker::MbarInit(full + 8 * s, 1);
      specworker::MbarInit(empty + 8 * s, 2 * 2);  // 2 consumer warpgroups x 2 blocks
    }
    specworker::FenceMbarInit();
  }
  specworker::ClusterSync();  // both blocks' barriers exist before either block copies or arrives
  const int row_pairs = CeilDiv(CeilDiv(M, T::BM), 2), col_tiles = CeilDiv(N, T::BN);
  const int units = row_pairs * col_tiles, n_k = CeilDiv(K, T::BK);
  if (threadIdx.x < 128) {
    specworker::SetMaxNRegDec<kWsProducerRegs>();
    if (threadIdx.x == 0) WsProduce<T>(&tmap_x, &tmap_w, ring, full, empty, rank, units, row_pairs, col_tiles, n_k);
  } else {
    specworker::SetMaxNRegInc<kWsConsumerRegs>();
    WsConsume<T, kSeq>(bias, out, ring, full, empty, rank, units, row_pairs, col_tiles, n_k, M, N, out_dtype,
                       chunk_tiles);
  }
  specworker::ClusterSync();  // no block leaves while its peer may still arrive on its barriers
#else
  __trap();
#endif
}

// cuTensorMapEncodeTiled from the driver, through the runtime (no link against libcuda); null when unavailable.
using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
EncodeTiledFn EncodeTiled() {
  static EncodeTiledFn fn = nullptr;
  static bool asked = false;
  if (!asked) {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    const cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q);
#else
    const cudaError_t err = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &p, cudaEnableDefault, &q);
#endif
    if (err == cudaSuccess && q == cudaDriverEntryPointSuccess) fn = reinterpret_cast<EncodeTiledFn>(p);
    asked = true;
  }
  return fn;
}

// A 128-byte-swizzled tensor map of the row-major bf16 matrix a [rows, cols] with boxes of box_rows x 64 columns.
bool EncodeBf16Map(CUtensorMap* map, const __nv_bfloat16* a, int rows, int cols, int box_rows) {
  const EncodeTiledFn encode = EncodeTiled();
  if (encode == nullptr) return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * 2};
  const cuuint32_t box[2] = {64, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem[2] = {1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<__nv_bfloat16*>(a), dims, strides, box, elem,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// Clusters of LinearBf16WsKernel<T, kSeq> resident at once on the current device (asked once per device); 0 when
// the query fails.
template <class T, bool kSeq>
int WsResidentClusters(int device, const cudaLaunchConfig_t& cfg) {
  static int cached[64];
  if (device < 0 || device >= 64) return 0;
  if (cached[device] == 0) {
    int n = 0;
    cached[device] =
        cudaOccupancyMaxActiveClusters(&n, LinearBf16WsKernel<T, kSeq>, &cfg) == cudaSuccess && n > 0 ? n : -1;
  }
  return cached[device] > 0 ? cached[device] : 0;
}

template <class T, bool kSeq>
int LaunchWs(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* bias, void* out, int M, int K,
             int N, int out_dtype, const Plan& plan, cudaStream_t stream) {
  CUtensorMap tmap_x, tmap_w;
  if (!EncodeBf16Map(&tmap_x, x, M, K, T::BM) || !EncodeBf16Map(&tmap_w, w, K, N, 64)) {
    return static_cast<int>(cudaErrorNotSupported);
  }
  auto kernel = LinearBf16WsKernel<T, kSeq>;
  const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kBytes);
  if (err != cudaSuccess) return static_cast<int>(err);
  const int64_t units = static_cast<int64_t>(CeilDiv(CeilDiv(M, T::BM), 2)) * CeilDiv(N, T::BN);
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 2;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.blockDim = dim3(T::kThreads);
  cfg.dynamicSmemBytes = static_cast<size_t>(T::kBytes);
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  cfg.gridDim = dim3(2);  // the occupancy query's launch shape
  int64_t clusters = WsResidentClusters<T, kSeq>(plan.device, cfg);
  if (clusters <= 0) clusters = plan.sms / 2 > 0 ? plan.sms / 2 : 1;
  if (clusters > units) clusters = units;
  cfg.gridDim = dim3(static_cast<unsigned>(2 * clusters));
  return static_cast<int>(
      cudaLaunchKernelEx(&cfg, kernel, tmap_x, tmap_w, bias, out, M, K, N, out_dtype, plan.chunk_tiles));
}

// S > 1 needs the one-block split (no cluster split here); the 16-byte path and K > 0 are the caller's to check.
template <class T>
int LaunchWsFor(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* bias, void* out, int M, int K,
                int N, int out_dtype, Plan plan, cudaStream_t stream) {
  plan.chunk_tiles /= T::BK;  // the plan carries k per chunk until here
  if (plan.splits > 1) {
    if constexpr (T::kHasSeq) {
      if (!plan.cluster) return LaunchWs<T, true>(x, w, bias, out, M, K, N, out_dtype, plan, stream);
    }
    return static_cast<int>(cudaErrorInvalidValue);
  }
  return LaunchWs<T, false>(x, w, bias, out, M, K, N, out_dtype, plan, stream);
}

}  // namespace
