// paged_attention's bfloat16 path on tensor cores (mma.sync m16n8k16 bf16 -> f32, sm_80 and later):
// append this step's K/V to the paged cache, then causal attention of each packed query row over its
// slot's cache, float32 scores, softmax and accumulation (definition: cpu_ops/paged_attention.cc,
// docs/spec.md §4.9). Shapes as in paged_attention.h; q, k, v, caches and out bfloat16.
// Three launches on the caller's stream (on sm_90 and a stream of its own, only for grids past the two-launch and
// fused ones below; there the second and third are programmatic dependent launches: each starts while the one
// before drains, reads only the index tensors, q and the block table until griddepcontrol.wait, and writes nothing
// before it):
//   1. AppendRowKernel: k[t], v[t] to the row's position (paged_kv.cuh's AppendKernel, with 16-byte copies and its
//      loads issued early).
//   2. ChunkKernel: one block of 4 warps per (query tile, kv head, head group, split). A query tile is
//      up to QT = 16 / HU consecutive rows of one slot (the first at a local index that is a multiple of
//      QT) times HU = min(group, 16) of the kv head's query heads: the 16 rows of one MMA. Keys are cut
//      into chunks of kChunkKeys = 128 at fixed positions (chunk c = keys 128c .. 128c + 127), a chunk
//      into two tiles of 64 keys, a tile among the warps (warp w: keys 16w .. 16w + 15 of every tile). Split z
//      takes chunks z, z + S, ...: its tiles stream through a two-stage cp.async ring without a break at chunk
//      edges (the next chunk's first tile is in flight while a chunk's states merge; a tile's block-table entry is
//      read one tile ahead, the first two beside the rows' index loads; a tile of 64 whole rows of one cache block,
//      the common case, is copied with the index math hoisted out of the copy loop: the kernel issues far more
//      instructions than its bytes need, so the copies' address math was about a third of its time). Each warp keeps
//      its own online softmax over its keys (S = Q K^T on tensor cores, scaled by scale * log2(e), masked past the
//      row's position, m, l, P = exp2(S - m) rounded to bf16 for P V on tensor cores; a chunk's first tile skips
//      rescaling the zero accumulator); at the chunk's end the four warp states are merged in warp order into the
//      chunk's (m, l, O), through the ring stage just consumed (threads over (row, 4 columns) of the rows that
//      reach the chunk, each computing its row's weights itself: one barrier between the warps' stores and the
//      merge). A row whose
//      position p < 128 has one chunk and gets out = O / l here; other rows store the chunk's state in the
//      workspace. S (chosen by the launcher from the grid size: about two waves of resident blocks) picks which
//      block computes a chunk, never how.
//   3. CombineKernel (a block per (packed row, head); past one wave of those, CombineWarpKernel: a warp): rows with
//      chunks 0 .. p / 128 (more than one) merge their chunk states in chunk order; rows that cannot be computed get
//      zeros.
// Two launches (sm_90, a stream of the caller's own, 192 .. 384 chunk blocks, not fused): ChunkKernel<..., true>
// without clusters (the append and this step's keys as in the fused launch below; no chunk merge), then
// CombineKernel.
// Fused launch (sm_90, a stream of the caller's own, head_dim <= 64, 9 .. 16 splits and 65 .. 192 blocks: small
// batch, long history, a few rows a slot): ChunkKernel<..., true> alone, its S splits of a query tile one
// thread-block cluster. Block (t, kv head, head group 0, split 0) appends row t's k, v of its kv head; split 0
// zeroes row t's heads if no computed query tile holds it; this step's keys are read from k, v (the values the
// append writes); after the chunks, a tile of several chunks waits on the cluster barrier and its S blocks share the
// chunk merge (CombineKernel's arithmetic in chunk order, each (row, head, column) by one thread: the same bits
// whichever block finished last).
// Batch invariance: a row's arithmetic is fixed by its position p, its q and its slot's keys: chunk and
// tile edges sit at fixed key indices, a warp's keys are fixed by the key index, the MMA's output row
// depends on its own A row only, masked keys (past p, or zero-filled past the tile's keys) add exact
// zeros, and the merges run in fixed order. So a row gives the same bits alone (1-token decode), among
// its slot's verify rows, in any batch, under any split count; the GPU tests check all of these.
// Bounds checks as the float32 kernel's (paged_attention.cu): a row the CPU op would refuse gets a zero
// row and no cache write; so does a row whose query tile's first row is such a row.
#include "paged_attention_bf16.h"

#include <math.h>
#include <stdint.h>

#include <cuda_bf16.h>

#include "mma_bf16.cuh"
#include "paged_kv.cuh"

namespace {

using specworker::CpAsync16;
using specworker::CpAsyncCommit;
using specworker::CpAsyncWait;
using specworker::LdMatrixX4;
using specworker::LdMatrixX4Trans;
using specworker::Load8;
using specworker::Mma;
using specworker::paged::BlockOf;
using specworker::paged::Params;
using bf16 = __nv_bfloat16;

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kRows = 16;                        // MMA rows of a block: query rows x heads
constexpr int kTileKeys = 16 * kWarps;           // keys per shared-memory tile, 16 per warp
constexpr int kChunkKeys = 128;                  // keys per chunk (fixed positions): two tiles
constexpr int kPad = 8;                          // bf16 per shared row: ldmatrix conflict-free
constexpr int kMaxHeadDim = 256;
constexpr float kLog2e = 1.4426950408889634f;
constexpr int kMaxGrid = 65535;
constexpr int kCombinePre = 16;  // chunk states per column that CombineKernel reads ahead
constexpr int kTargetBlocks = 1056;              // about 8 blocks per SM of an H100 / H200
constexpr int64_t kWaves = 2;                    // three / two launches: chunk blocks of about two waves
// The fused launch (sm_90) where it measured faster than the other paths: head_dim <= 64, 9 .. 16 splits (one
// cluster of blocks, non-portable past 8) and more than kFusedMinBlocks, at most kFusedMaxBlocks blocks (SmolLM2
// ctx 2048 batch 1, 4 rows a slot: 192 blocks). H100 (issue22i): head_dim 128 lost (Llama ctx 2048 batch 1:
// 11.5 us fused, 10.1 three launches), and so did 384 blocks (SmolLM2 ctx 2048 batch 8: 12.2 fused, 10.7 two
// launches) and 48 (SmolLM2 ctx 2048 batch 1: 8.0-8.3 fused, 7.9 three launches).
constexpr int kFusedMinSplits = 9;
constexpr int kMaxCluster = 16;
constexpr int kFusedMaxHeadDim = 64;
constexpr int64_t kFusedMinBlocks = 64;
constexpr int64_t kFusedMaxBlocks = 192;
// The two-launch path (sm_90, not fused) where it measured faster than three launches: grids of kTwoLaunchMinBlocks
// .. kTwoLaunchMaxBlocks chunk blocks (H200: SmolLM2 ctx 512 batch 32: 11.5 -> 10.1 us; larger grids lost up to
// 15%; H100: Llama ctx 512 batch 8, 256 blocks: 13.3 -> 11.9). Below that, on an H100, three launches ran about 2%
// faster where splits >= 9 (decode at ctx 2048, batch 1: Llama, 128 blocks: 10.3 -> 10.1 us; SmolLM2, 48: 8.0 ->
// 7.9) and 1-3.5% slower at ctx 512 (SmolLM2 batch 8 decode, 96 blocks: 7.9 -> 8.0-8.2 us; batch 1 verify, 48:
// 7.7 -> 7.9).
constexpr int64_t kTwoLaunchMinBlocks = 192;
constexpr int64_t kTwoLaunchMaxBlocks = 384;
constexpr int kStages = 2;  // tiles in the cp.async ring

struct Tiling {
  int group;   // query heads per kv head
  int hu;      // of them in one block: min(group, 16)
  int qt;      // query rows per tile: 16 / hu
  int nsg;     // head groups per kv head: ceil(group / hu)
  int nc;      // chunk slots per (row, head) in the workspace: ceil(max positions / 128)
};

__host__ __device__ inline int CeilDiv(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

// Offsets of (row t, head h, chunk c) in the workspace: O (head_dim floats), then (m, l).
__device__ __forceinline__ int64_t PartialIndex(const Params& a, const Tiling& g, int t, int h, int c) {
  return (static_cast<int64_t>(t) * a.num_heads + h) * g.nc + c;
}

template <int DP>
struct Smem {
  static constexpr int kStride = DP + kPad;
  static constexpr int kTile = kTileKeys * kStride;            // one K or V tile (bf16)
  static constexpr int kQ = kRows * kStride;
  static constexpr int kBytes = (kQ + 2 * kStages * kTile) * 2;  // Q + kStages x (K, V)
};

// Programmatic dependent launch (sm_90): let the next kernel of the stream start, wait for the previous one's
// completion and memory. Both are no-ops in a kernel launched without the attribute, and compile to nothing before
// sm_90 (the launcher sets the attribute only from sm_90).
__device__ __forceinline__ void LaunchDependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void WaitPrevious() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
// Every thread of the cluster (sm_90) arrives, then waits: writes before it (global memory too) are visible to the
// cluster's threads after it.
__device__ __forceinline__ void ClusterSync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
}

// paged_kv.cuh's ResolveRow with the three per-slot loads issued together (one dependent step after the batch
// id, not three); the same result. local: the row's index in its slot's step.
struct Row {
  int slot;     // -1: not computed
  int local;
  int64_t pos;
};
// Slot b's three lengths, read with predicated loads (no branch: two rows' loads can be issued together).
struct SlotLens {
  int b, cu, len, dec;  // b: the batch id; cu, len, dec zero unless 0 <= b < bsz
};
__device__ __forceinline__ SlotLens LoadSlotLens(const Params& a, int b) {
  const bool ok = b >= 0 && b < a.bsz;
  return SlotLens{b, ok ? a.cu_seqlens_q[b] : 0, ok ? a.seq_lens_this_time[b] : 0, ok ? a.seq_lens_decoder[b] : 0};
}
__device__ __forceinline__ Row RowOf(const Params& a, int t, const SlotLens& s) {
  const Row none{-1, 0, 0};
  if (s.b < 0 || s.b >= a.bsz) return none;
  const int64_t local = static_cast<int64_t>(t) - s.cu;
  if (local < 0 || local >= s.len || s.dec < 0) return none;
  const int64_t pos = s.dec + local;
  if (pos >= static_cast<int64_t>(a.max_blocks) * a.block_size) return none;
  return Row{s.b, static_cast<int>(local), pos};
}
__device__ __forceinline__ Row ResolveRowFast(const Params& a, int t) {
  return RowOf(a, t, LoadSlotLens(a, a.batch_id_per_token[t]));
}

// Launch 1 of 3: paged_kv.cuh's AppendKernel (one block per packed row; the same cache writes, none for a row the
// CPU op would refuse or whose block is not valid) with its loads issued early: k[t] and v[t] (every kv head; the
// first Vec of each thread) beside the batch id, the slot's three lengths together (ResolveRowFast), so the chunk
// kernel, which waits for this grid, waits for three dependent loads (batch id, lengths, table entry), not six.
template <typename Vec>
__global__ void __launch_bounds__(kThreads)
    AppendRowKernel(Params a, const bf16* __restrict__ k, const bf16* __restrict__ v, bf16* __restrict__ kc,
                    bf16* __restrict__ vc) {
  LaunchDependents();
  constexpr int per = sizeof(Vec) / sizeof(bf16);
  const int t = blockIdx.x, D = a.head_dim, n = a.num_kv_heads * D / per;
  const int64_t src0 = static_cast<int64_t>(t) * a.num_kv_heads * D;  // row t: kv heads, then columns
  const bool first = threadIdx.x < n;
  Vec k0{}, v0{};
  if (first) {
    k0 = *reinterpret_cast<const Vec*>(k + src0 + threadIdx.x * per);
    v0 = *reinterpret_cast<const Vec*>(v + src0 + threadIdx.x * per);
  }
  const Row r = ResolveRowFast(a, t);
  if (r.slot < 0) return;
  const int64_t block = BlockOf(a, r.slot, r.pos);
  if (block < 0) return;
  const int64_t offset = r.pos % a.block_size;
  for (int e = threadIdx.x; e < n; e += kThreads) {
    const int h = e * per / D, d = e * per - h * D;
    const int64_t dst = ((block * a.num_kv_heads + h) * a.block_size + offset) * D + d;
    const bool early = e == static_cast<int>(threadIdx.x);
    *reinterpret_cast<Vec*>(kc + dst) = early ? k0 : *reinterpret_cast<const Vec*>(k + src0 + e * per);
    *reinterpret_cast<Vec*>(vc + dst) = early ? v0 : *reinterpret_cast<const Vec*>(v + src0 + e * per);
  }
}

// Slot b's first packed row and first position of this step: its keys at positions >= dec are rows cu + (pos - dec)
// of k and v.
struct Step {
  int64_t cu, dec;
  int64_t t0;     // the block's first row
  uint32_t own;   // bit i: row t0 + i is one of the tile's computed rows (so of slot b)
};

// A tile of 64 keys lies in one cache block (one table lookup per tile) when the block size is a multiple of 64.
__host__ __device__ __forceinline__ bool OneBlockTiles(const Params& a) { return a.block_size % kTileKeys == 0; }

// Stages keys [key0, key0 + 64) of slot b, kv head g into (Ks, Vs), looking each key's block up in the table; keys
// at or past n_keys, in a block that is not valid, or columns past head_dim are zero-filled (masked keys then add
// exact zeros: P = 0 times a zero V). key0 < n_keys <= max_blocks * block_size. kFused: this step's keys come from
// k and v (the rows that the fused kernel's own blocks append; a row that appends nothing leaves the cache's key),
// the same values the cache holds after the append.
// tile_block: the table entry of key0 when the tile lies in one cache block (OneBlockTiles), read ahead by the caller.
template <int DP, bool kVec, bool kFused>
__device__ __forceinline__ void LoadTile(const Params& a, int b, int g, int key0, int64_t n_keys, Step step,
                                         int32_t tile_block, const bf16* __restrict__ k,
                                         const bf16* __restrict__ v, const bf16* __restrict__ kc,
                                         const bf16* __restrict__ vc, bf16* Ks, bf16* Vs) {
  constexpr int kChunksPerRow = DP / 8;
  const int D = a.head_dim, bs = a.block_size;
  const int32_t* table = a.block_tables + static_cast<int64_t>(b) * a.max_blocks;
  const bool one_block = OneBlockTiles(a);
  int64_t base = -1;
  if (one_block && tile_block >= 0 && tile_block < a.num_blocks) {
    base = ((static_cast<int64_t>(tile_block) * a.num_kv_heads + g) * bs + key0 % bs) * D;
  }
  if (kVec && one_block && base >= 0 && D == DP && (!kFused || key0 + kTileKeys <= step.dec)) {
    // The common tile: 64 whole rows of one cache block, contiguous, all from the cache (none of this step's keys
    // in the fused kernel): the same copies as below with the index math hoisted. Thread x copies column chunk
    // x % kChunksPerRow of keys x / kChunksPerRow + kPass j; keys at or past n_keys are zero-filled.
    constexpr int kPass = kThreads / kChunksPerRow;  // keys per pass of the block's threads
    const int key = threadIdx.x / kChunksPerRow, col = (threadIdx.x % kChunksPerRow) * 8;
    const int64_t n_valid = n_keys - key0;
    const bf16* ks = kc + base + key * DP + col;
    const bf16* vs = vc + base + key * DP + col;
    bf16* kd = Ks + key * Smem<DP>::kStride + col;
    bf16* vd = Vs + key * Smem<DP>::kStride + col;
#pragma unroll
    for (int j = 0; j < kTileKeys / kPass; ++j) {
      const bool ok = key + j * kPass < n_valid;
      CpAsync16(kd + j * kPass * Smem<DP>::kStride, ok ? ks + j * kPass * DP : kc, ok);
      CpAsync16(vd + j * kPass * Smem<DP>::kStride, ok ? vs + j * kPass * DP : vc, ok);
    }
    return;
  }
  for (int e = threadIdx.x; e < kTileKeys * kChunksPerRow; e += kThreads) {
    const int key = e / kChunksPerRow, col = (e % kChunksPerRow) * 8;
    const int pos = key0 + key;
    int64_t off = -1;
    if (pos < n_keys) {
      if (one_block) {
        off = base < 0 ? -1 : base + static_cast<int64_t>(key) * D;
      } else {
        const int32_t block = table[pos / bs];
        if (block >= 0 && block < a.num_blocks) off = ((static_cast<int64_t>(block) * a.num_kv_heads + g) * bs + pos % bs) * D;
      }
    }
    const bool ok = off >= 0 && col < D;
    bf16* kd = Ks + key * Smem<DP>::kStride + col;
    bf16* vd = Vs + key * Smem<DP>::kStride + col;
    const bf16* krow = kc + (ok ? off : 0);  // the key's row of head_dim values
    const bf16* vrow = vc + (ok ? off : 0);
    if constexpr (kFused) {
      if (ok && pos >= step.dec) {
        const int64_t ts = step.cu + (pos - step.dec);  // <= the tile's last row: a row of the launch
        const int64_t qi = ts - step.t0;                 // the tile's own rows need no lookup (decode: all)
        if ((qi >= 0 && qi < kRows && (step.own >> qi) & 1u) || a.batch_id_per_token[ts] == b) {
          const int64_t src = (ts * a.num_kv_heads + g) * D;
          krow = k + src, vrow = v + src;
        }
      }
    }
    if (kVec) {
      CpAsync16(kd, ok ? krow + col : kc, ok);
      CpAsync16(vd, ok ? vrow + col : vc, ok);
    } else {
      *reinterpret_cast<uint4*>(kd) = Load8(krow, col, D, ok);
      *reinterpret_cast<uint4*>(vd) = Load8(vrow, col, D, ok);
    }
  }
}

__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x = lo (lower 16 bits)
  return *reinterpret_cast<const uint32_t*>(&v);
}

// The online-softmax state of one warp over its keys: rows lane / 4 (index 0) and lane / 4 + 8 (1).
template <int DP>
struct WarpState {
  float m[2], l[2];           // running max (log2 domain), this thread's share of the exp sum
  float acc[DP / 8][4];       // O fragments: columns 8n + 2 (lane % 4) + {0, 1}
  __device__ __forceinline__ void Reset() {
#pragma unroll
    for (int r = 0; r < 2; ++r) m[r] = -INFINITY, l[r] = 0.0f;
#pragma unroll
    for (int n = 0; n < DP / 8; ++n)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[n][j] = 0.0f;
  }
};

// The Q operand fragments of a warp: kept in registers up to head_dim 128 (read from shared memory per tile above).
template <int DP>
struct QFrags {
  static constexpr bool kInRegs = DP <= 128;
  uint32_t v[kInRegs ? DP / 16 : 1][4];
  __device__ __forceinline__ void Load(const bf16* Qs, int lane) {
    if constexpr (kInRegs) {
#pragma unroll
      for (int kk = 0; kk < DP; kk += 16) LdMatrixX4(v[kk / 16], Qs + (lane % 16) * Smem<DP>::kStride + kk + (lane / 16) * 8);
    }
  }
};

// One warp's 16 keys [kb, kb + 16) of the staged tile: S, mask, rescale, P V.
template <int DP>
__device__ __forceinline__ void WarpTile(WarpState<DP>& st, const QFrags<DP>& qf, const bf16* Qs, const bf16* Ks,
                                         const bf16* Vs, int warp, int lane, int kb, const int (&lim)[2],
                                         float scale_log2, bool zero_acc) {
  constexpr int S = Smem<DP>::kStride;
  float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};  // [key n-tile][fragment]
#pragma unroll
  for (int kk = 0; kk < DP; kk += 16) {
    uint32_t qa[4], kb4[4];
    if constexpr (QFrags<DP>::kInRegs) {
#pragma unroll
      for (int i = 0; i < 4; ++i) qa[i] = qf.v[kk / 16][i];
    } else {
      LdMatrixX4(qa, Qs + (lane % 16) * S + kk + (lane / 16) * 8);
    }
    LdMatrixX4(kb4, Ks + (16 * warp + (lane % 8) + (lane / 16) * 8) * S + kk + ((lane / 8) % 2) * 8);
    const uint32_t b0[2] = {kb4[0], kb4[1]}, b1[2] = {kb4[2], kb4[3]};
    Mma(s[0], qa, b0);
    Mma(s[1], qa, b1);
  }
  // Scale, mask and the row max over this thread's 4 keys, then over the 4 lanes of the row.
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int n = 0; n < 2; ++n) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int key = kb + 8 * n + 2 * (lane % 4) + (j & 1);
      s[n][j] = key <= lim[j / 2] ? __fmul_rn(s[n][j], scale_log2) : -INFINITY;
      mx[j / 2] = fmaxf(mx[j / 2], s[n][j]);
    }
  }
  float corr[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    const float m_new = fmaxf(st.m[r], mx[r]);
    const float base = m_new == -INFINITY ? 0.0f : m_new;  // a row with no key yet stays at zero
    corr[r] = exp2f(__fsub_rn(st.m[r], base));
    st.m[r] = m_new;
    mx[r] = base;
  }
  float rowsum[2] = {0.f, 0.f};
#pragma unroll
  for (int n = 0; n < 2; ++n) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      s[n][j] = exp2f(__fsub_rn(s[n][j], mx[j / 2]));
      rowsum[j / 2] = __fadd_rn(rowsum[j / 2], s[n][j]);
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) st.l[r] = __fadd_rn(__fmul_rn(st.l[r], corr[r]), rowsum[r]);
  // P as the A operand: the S fragments of key n-tiles 0 and 1 are its k columns 0-7 and 8-15.
  const uint32_t pa[4] = {PackBf16(s[0][0], s[0][1]), PackBf16(s[0][2], s[0][3]), PackBf16(s[1][0], s[1][1]),
                          PackBf16(s[1][2], s[1][3])};
  if (!zero_acc) {  // a zero accumulator (a chunk's first tile) stays zero: corr is finite
#pragma unroll
    for (int n = 0; n < DP / 8; ++n) {
#pragma unroll
      for (int j = 0; j < 4; ++j) st.acc[n][j] = __fmul_rn(st.acc[n][j], corr[j / 2]);
    }
  }
#pragma unroll
  for (int n0 = 0; n0 < DP; n0 += 16) {
    uint32_t vb[4];
    LdMatrixX4Trans(vb, Vs + (16 * warp + (lane % 8) + ((lane / 8) % 2) * 8) * S + n0 + (lane / 16) * 8);
    const uint32_t b0[2] = {vb[0], vb[1]}, b1[2] = {vb[2], vb[3]};
    Mma(st.acc[n0 / 8], pa, b0);
    Mma(st.acc[n0 / 8 + 1], pa, b1);
  }
}

// The rows of a ChunkKernel block (filled once, read by every thread) and the chunk merge's per-row values.
struct TileRows {
  int64_t p[kRows];  // position, -1: not a row of this block
  int t[kRows], h[kRows];
  float warp_m[kWarps][kRows], warp_l[kWarps][kRows];
};

// The end of chunk c: the four warp states merge in warp order (through `merge`, the ring stage just consumed:
// [warp][row][DP + 8] floats, float2 stores free of bank conflicts) into the chunk's (m, l, O); rows with p < 128
// write out = O / l (zero from position bad_from on: a missing block), the others the chunk's state. Only rows that
// reach chunk c take part. Leaves `merge` free.
template <int DP>
__device__ __forceinline__ void MergeChunk(const Params& a, const Tiling& g, WarpState<DP>& st, TileRows& rows,
                                           float* merge, int c, int warp, int lane, int64_t bad_from,
                                           bf16* __restrict__ out,
                                           float* __restrict__ ws_o, float* __restrict__ ws_ml) {
  constexpr int kMS = DP + 8;
  static_assert(kWarps * kRows * kMS * 4 <= 2 * Smem<DP>::kTile * 2, "the warp merge fits in one ring stage");
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    st.l[r] = __fadd_rn(st.l[r], __shfl_xor_sync(0xffffffffu, st.l[r], 1));
    st.l[r] = __fadd_rn(st.l[r], __shfl_xor_sync(0xffffffffu, st.l[r], 2));
  }
  if (lane % 4 == 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r) rows.warp_m[warp][lane / 4 + 8 * r] = st.m[r], rows.warp_l[warp][lane / 4 + 8 * r] = st.l[r];
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = lane / 4 + 8 * r;
    const int64_t p = rows.p[row];
    if (p < 0 || p / kChunkKeys < c) continue;  // not a row, or it does not reach chunk c
    float* dst = merge + (warp * kRows + row) * kMS + 2 * (lane % 4);
#pragma unroll
    for (int n = 0; n < DP / 8; ++n) *reinterpret_cast<float2*>(dst + 8 * n) = make_float2(st.acc[n][2 * r], st.acc[n][2 * r + 1]);
  }
  __syncthreads();
  // Threads over (row, 4 columns) units, row-major: the rows that reach chunk c (decode: the first hu rows) fill the
  // first units, so every thread has about the same share. Each unit computes its row's m, warp weights
  // exp2(m_w - m) and l in warp order itself (the same bits in each), then its 4 columns (16-byte reads of
  // `merge`, a 16-byte store of the chunk's state where the workspace allows).
  const int D = a.head_dim, groups = (D + 3) / 4;
  const bool vec_ws = D % 4 == 0 && reinterpret_cast<uintptr_t>(ws_o) % 16 == 0;
  for (int u = threadIdx.x; u < kRows * groups; u += kThreads) {
    const int r = u / groups, d0 = 4 * (u % groups);
    const int64_t p = rows.p[r];
    if (p < 0 || p / kChunkKeys < c) continue;  // not a row, or it does not reach chunk c
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m = fmaxf(m, rows.warp_m[w][r]);  // finite: key 128c <= p is in
    float f[kWarps], l = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      f[w] = exp2f(__fsub_rn(rows.warp_m[w][r], m));
      l = __fadd_rn(l, __fmul_rn(rows.warp_l[w][r], f[w]));
    }
    const int t = rows.t[r], h = rows.h[r];
    const int64_t i = PartialIndex(a, g, t, h, c);
    if (p >= kChunkKeys && d0 == 0) ws_ml[2 * i] = m, ws_ml[2 * i + 1] = l;
    float o[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float4 x = *reinterpret_cast<const float4*>(merge + (w * kRows + r) * kMS + d0);
      o[0] = __fadd_rn(o[0], __fmul_rn(x.x, f[w]));
      o[1] = __fadd_rn(o[1], __fmul_rn(x.y, f[w]));
      o[2] = __fadd_rn(o[2], __fmul_rn(x.z, f[w]));
      o[3] = __fadd_rn(o[3], __fmul_rn(x.w, f[w]));
    }
    if (p >= kChunkKeys && vec_ws) {
      *reinterpret_cast<float4*>(ws_o + i * D + d0) = make_float4(o[0], o[1], o[2], o[3]);
      continue;
    }
    bf16* o_row = out + (static_cast<int64_t>(t) * a.num_heads + h) * D;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int d = d0 + j;
      if (d >= D) break;
      if (p < kChunkKeys) {
        o_row[d] = __float2bfloat16_rn(p >= bad_from ? 0.0f : __fdiv_rn(o[j], l));
      } else {
        ws_o[i * D + d] = o[j];
      }
    }
  }
  __syncthreads();  // `merge` and the row values are free
}

// The fused kernel's end for a tile with more than one chunk: each (row, head, column) with p >= 128 merges its chunk
// states 0 .. p / 128 in chunk order (CombineKernel's arithmetic; every thread recomputes the row's m, weights and
// l, in the same order: the same bits), or is zero from position bad_from on. The cluster's blocks share the
// elements; the states are read from L2 (written by the cluster's blocks before ClusterSync).
__device__ __forceinline__ void MergeTileRows(const Params& a, const Tiling& g, const TileRows& rows, int64_t bad_from,
                                              int part, int parts, const float* __restrict__ ws_o,
                                              const float* __restrict__ ws_ml, bf16* __restrict__ out) {
  const int D = a.head_dim;
  for (int e = part * kThreads + threadIdx.x; e < kRows * D; e += parts * kThreads) {
    const int r = e / D, d = e % D;
    const int64_t p = rows.p[r];
    if (p < kChunkKeys) continue;  // not a row, or ChunkKernel's MergeChunk wrote it
    bf16* o_row = out + (static_cast<int64_t>(rows.t[r]) * a.num_heads + rows.h[r]) * D;
    if (p >= bad_from) {
      o_row[d] = __float2bfloat16_rn(0.0f);
      continue;
    }
    const int n_chunks = static_cast<int>(p / kChunkKeys) + 1;
    const int64_t i0 = PartialIndex(a, g, rows.t[r], rows.h[r], 0);
    float m = -INFINITY;
#pragma unroll 8
    for (int c = 0; c < n_chunks; ++c) m = fmaxf(m, __ldcg(ws_ml + 2 * (i0 + c)));
    float l = 0.0f, o = 0.0f;
#pragma unroll 8
    for (int c = 0; c < n_chunks; ++c) {
      const float f = exp2f(__fsub_rn(__ldcg(ws_ml + 2 * (i0 + c)), m));
      l = __fadd_rn(l, __fmul_rn(__ldcg(ws_ml + 2 * (i0 + c) + 1), f));
      o = __fadd_rn(o, __fmul_rn(__ldcg(ws_o + (i0 + c) * D + d), f));
    }
    o_row[d] = __float2bfloat16_rn(__fdiv_rn(o, l));
  }
}

// kFused == false: launch 2 of 3 (file comment). kFused == true (sm_90, one launch): the append of row t0 and the
// zero rows are done here too, this step's keys are read from k and v, and a tile's splits form one cluster that
// merges the chunk states itself after ClusterSync.
template <int DP, bool kVec, bool kFused>
__global__ void __launch_bounds__(kThreads)
    ChunkKernel(Params a, Tiling g, const bf16* __restrict__ q, const bf16* __restrict__ k,
                const bf16* __restrict__ v, bf16* __restrict__ kc, bf16* __restrict__ vc, bf16* __restrict__ out,
                float* __restrict__ ws_o, float* __restrict__ ws_ml, int cluster_merge) {
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* Qs = reinterpret_cast<bf16*>(smem);
  bf16* ring = Qs + Smem<DP>::kQ;  // stage s: K at ring + 2s tiles, V one tile further
  __shared__ TileRows rows;
  __shared__ int lead_slot;  // row t0's slot, -1 unless it is computed and the first row of its query tile
  __shared__ Row row0;       // row t0 (kFused: for its append)
  __shared__ int row0_zero;  // kFused: row t0 is in no computed query tile (its heads of this block are zero)
  __shared__ int first_bad;  // kFused: the slot's first missing block among the tile's positions (INT_MAX: none)
  __shared__ int32_t first_entries[kStages];  // table entries of tile slots 0, 1 (OneBlockTiles), read early

  if (kFused) WaitPrevious();  // the previous kernel of the stream may write any input
  LaunchDependents();
  const int t0 = blockIdx.x, T = gridDim.x;
  const int kvh = blockIdx.y / g.nsg, sg = blockIdx.y % g.nsg;
  const int D = a.head_dim;
  // Q first (the index tensors are not needed to read it): a row that turns out not to be computed only feeds
  // its own MMA row, which is never stored.
  if (kVec) {
    for (int e = threadIdx.x; e < kRows * (DP / 8); e += kThreads) {
      const int r = e / (DP / 8), col = (e % (DP / 8)) * 8, qi = r / g.hu, hj = sg * g.hu + r % g.hu;
      const bool ok = qi < g.qt && hj < g.group && t0 + qi < T && col < D;
      const bf16* src = ok ? q + (static_cast<int64_t>(t0 + qi) * a.num_heads + kvh * g.group + hj) * D + col : q;
      CpAsync16(Qs + r * Smem<DP>::kStride + col, src, ok);
    }
    CpAsyncCommit();
  }
  if (threadIdx.x < kRows) {  // every row and the tile's first one, in parallel: two dependent loads, not four
    const int r = threadIdx.x, qi = r / g.hu, hj = sg * g.hu + r % g.hu;
    const int t = t0 + qi;
    const bool in_tile = qi < g.qt && hj < g.group && t < T;
    const int b_lead = a.batch_id_per_token[t0], b_row = in_tile ? a.batch_id_per_token[t] : -1;
    const SlotLens s_lead = LoadSlotLens(a, b_lead), s_row = LoadSlotLens(a, b_row);
    const Row lead = RowOf(a, t0, s_lead), rp = RowOf(a, t, s_row);
    const int64_t p = lead.slot >= 0 && rp.slot == lead.slot ? rp.pos : -1;
    rows.p[r] = p;
    rows.t[r] = t;
    rows.h[r] = kvh * g.group + hj;
    if (r == 0) {
      lead_slot = lead.slot >= 0 && lead.local % g.qt == 0 ? lead.slot : -1;
      row0 = lead;
      first_bad = INT32_MAX;
    }
  }
  const int z = blockIdx.z, splits = gridDim.z;
  // Tile slot i of this block: tile i % 2 of chunk z + S (i / 2) (the main loop's order below).
  auto slot_key0 = [&](int i) {
    return static_cast<int64_t>(z + splits * (i / 2)) * kChunkKeys + (i % 2) * kTileKeys;
  };
  if (threadIdx.x >= 64 && threadIdx.x < 64 + kStages) {  // the first tiles' table entries, beside the rows' loads
    const int i = threadIdx.x - 64;
    const int b0 = a.batch_id_per_token[t0];
    int32_t e = -1;
    // Key slot_key0(i) < max_blocks * block_size: a table column (if the tile is past the row's keys, unused).
    if (OneBlockTiles(a) && b0 >= 0 && b0 < a.bsz && z + splits * (i / 2) < g.nc &&
        slot_key0(i) < static_cast<int64_t>(a.max_blocks) * a.block_size) {
      e = a.block_tables[static_cast<int64_t>(b0) * a.max_blocks + slot_key0(i) / a.block_size];
    }
    first_entries[i] = e;
  }
  // Fused, split 0 of head group 0: row t0's k, v of kv head kvh (16 bytes a thread of warp 3) read beside the rows'
  // loads and stored after the block's first tiles are issued (append_row0), so the copy never delays them.
  const int row_unit = static_cast<int>(threadIdx.x) - 96;
  const bool row_copier = kFused && kVec && z == 0 && sg == 0 && row_unit >= 0 && row_unit * 8 < D;
  uint4 k_row{}, v_row{};
  if (row_copier) {
    const int64_t src = (static_cast<int64_t>(t0) * a.num_kv_heads + kvh) * D + row_unit * 8;
    k_row = *reinterpret_cast<const uint4*>(k + src);
    v_row = *reinterpret_cast<const uint4*>(v + src);
  }
  if (kFused && threadIdx.x == 32) {  // is row t0 in a computed query tile (its own or an earlier row's)?
    const Row r0 = ResolveRowFast(a, t0);
    int zero = r0.slot < 0;
    if (!zero && r0.local % g.qt != 0) zero = ResolveRowFast(a, t0 - r0.local % g.qt).slot != r0.slot;
    row0_zero = zero;
  }
  __syncthreads();
  if (!kFused) WaitPrevious();  // the append's cache writes are visible from here on
  // Fused: AppendKernel's work for row t0, kv head kvh, by split 0 of head group 0 (paged_kv.cuh's CopyRowToCache
  // writes; with 16-byte units from the registers read above).
  auto append_row0 = [&]() {
    if (!kFused || z != 0 || sg != 0 || row0.slot < 0 || (kVec && !row_copier)) return;
    const int64_t block = BlockOf(a, row0.slot, row0.pos);
    if (block < 0) return;
    const int64_t offset = row0.pos % a.block_size;
    if (kVec) {
      const int64_t dst = ((block * a.num_kv_heads + kvh) * a.block_size + offset) * D + row_unit * 8;
      *reinterpret_cast<uint4*>(kc + dst) = k_row;
      *reinterpret_cast<uint4*>(vc + dst) = v_row;
    } else {
      specworker::paged::CopyRowToCache<bf16, bf16>(a, t0, block, offset, kvh, kvh + 1, k, v, kc, vc);
    }
  };
  if (kFused && z == 0) {
    if (cluster_merge && row0_zero) {  // CombineKernel's zero row, for this block's heads
      for (int e = threadIdx.x; e < g.hu * D; e += kThreads) {
        const int hj = sg * g.hu + e / D;
        if (hj < g.group) out[(static_cast<int64_t>(t0) * a.num_heads + kvh * g.group + hj) * D + e % D] = __float2bfloat16_rn(0.0f);
      }
    }
  }
  int64_t p_max = -1;
  for (int r = 0; r < kRows; ++r) p_max = p_max > rows.p[r] ? p_max : rows.p[r];
  const int64_t n_keys = p_max + 1;
  const int n_chunks = CeilDiv(n_keys, kChunkKeys);
  const int b = lead_slot;
  // Unfused: the blocks past the tile's chunks leave. Fused: a tile of several chunks keeps its whole cluster (the
  // same decision in every block of it) for the merge.
  const bool merge_here = kFused && cluster_merge;
  if (b < 0 || (merge_here ? n_chunks == 1 && z > 0 : z >= n_chunks)) {
    append_row0();
    CpAsyncWait<0>();
    return;
  }
  if (merge_here) {  // CombineKernel's missing-block check, once for the tile: row r is zero if p_r >= bad_from
    for (int64_t j = threadIdx.x; j <= p_max / a.block_size; j += kThreads) {
      if (BlockOf(a, b, j * a.block_size) < 0) atomicMin(&first_bad, static_cast<int>(j));
    }
    __syncthreads();
  }
  const int64_t bad_from = merge_here && first_bad != INT32_MAX ? static_cast<int64_t>(first_bad) * a.block_size : INT64_MAX;
  if (z < n_chunks) {
    if (!kVec) {
      for (int e = threadIdx.x; e < kRows * DP; e += kThreads) {
        const int r = e / DP, d = e % DP;
        bf16 x = __float2bfloat16_rn(0.0f);
        if (rows.p[r] >= 0 && d < D) x = q[(static_cast<int64_t>(rows.t[r]) * a.num_heads + rows.h[r]) * D + d];
        Qs[r * Smem<DP>::kStride + d] = x;
      }
    }
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    // The last key each fragment row may see (positions fit in int32: the launcher checks).
    const int lim[2] = {static_cast<int>(rows.p[lane / 4]), static_cast<int>(rows.p[lane / 4 + 8])};
    const float scale_log2 = __fmul_rn(a.scale, kLog2e);
    uint32_t own = 0;
    for (int qi = 0; qi < g.qt; ++qi) own |= rows.p[qi * g.hu] >= 0 ? 1u << qi : 0u;
    const Step st_step{static_cast<int64_t>(t0) - row0.local, row0.pos - row0.local, t0, own};

    // A slot past the keys loads and computes nothing. A tile's table entry is read one tile ahead of its load.
    const int n_slots = 2 * ((n_chunks - 1 - z) / splits + 1);
    const int32_t* table = a.block_tables + static_cast<int64_t>(b) * a.max_blocks;
    auto entry = [&](int i) -> int32_t {
      return OneBlockTiles(a) && i < n_slots && slot_key0(i) < n_keys ? table[slot_key0(i) / a.block_size] : -1;
    };
    auto issue = [&](int i, int32_t tile_block) {
      const int key0 = static_cast<int>(slot_key0(i));  // < n_keys when used
      bf16* stage = ring + 2 * (i % kStages) * Smem<DP>::kTile;
      if (key0 < n_keys) {
        LoadTile<DP, kVec, kFused>(a, b, kvh, key0, n_keys, st_step, tile_block, k, v, kc, vc, stage,
                                   stage + Smem<DP>::kTile);
      }
      CpAsyncCommit();
    };
#pragma unroll
    for (int i = 0; i < kStages; ++i) issue(i, first_entries[i]);
    append_row0();  // split 0 computes chunk 0: it gets here
    int32_t next_entry = entry(kStages);
    WarpState<DP> st;
    st.Reset();
    QFrags<DP> qf;
    for (int i = 0; i < n_slots; ++i) {
      CpAsyncWait<kStages - 1>();  // tile slot i has landed (this thread's copies; Q's too) ...
      __syncthreads();             // ... and everyone's
      if (i == 0) qf.Load(Qs, lane);
      const int c = z + splits * (i / 2);
      bf16* stage = ring + 2 * (i % kStages) * Smem<DP>::kTile;
      const int kb = c * kChunkKeys + (i % 2) * kTileKeys + 16 * warp;
      if (kb < n_keys) {  // a warp past the keys would add exact zeros: skipping it changes no bit
        WarpTile<DP>(st, qf, Qs, stage, stage + Smem<DP>::kTile, warp, lane, kb, lim, scale_log2, i % 2 == 0);
      }
      __syncthreads();  // every warp is done with this stage
      if (i % 2 == 1) {
        MergeChunk<DP>(a, g, st, rows, reinterpret_cast<float*>(stage), c, warp, lane, bad_from, out, ws_o, ws_ml);
        st.Reset();
      }
      if (i + kStages < n_slots) {
        issue(i + kStages, next_entry);
        next_entry = entry(i + kStages + 1);
      } else {
        CpAsyncCommit();  // an empty group keeps the wait count
      }
    }
  }
  CpAsyncWait<0>();
  if (merge_here && n_chunks > 1) {
    __threadfence();
    if (splits > 1) {
      ClusterSync();
    } else {
      __syncthreads();
    }
    MergeTileRows(a, g, rows, bad_from, z, splits, ws_o, ws_ml, out);
  }
}

// The combine of grids that fit the GPU at once (launcher): one block per (packed row, head), min(head_dim rounded up
// to a warp, 128) threads over head_dim: zero a row that cannot be computed, merge the chunk states of a row with
// p >= 128 in chunk order (up to kCombinePre chunks with no barrier after the wait).
__global__ void __launch_bounds__(kThreads)
    CombineKernel(Params a, Tiling g, const float* __restrict__ ws_o, const float* __restrict__ ws_ml,
                  bf16* __restrict__ out) {
  extern __shared__ float s_f[];  // [nc]: exp2(m_c - m) of each chunk, then l in s_f[nc]; m_c, l_c first
  const int t = blockIdx.x, h = blockIdx.y;
  const int D = a.head_dim;
  bf16* o_row = out + (static_cast<int64_t>(t) * a.num_heads + h) * D;
  const Row r = ResolveRowFast(a, t);
  int bad = r.slot < 0;
  if (!bad) {
    // The row's query tile must have been computed: its first row resolves to the same slot.
    const Row lead = r.local % g.qt == 0 ? r : ResolveRowFast(a, t - r.local % g.qt);
    bad = lead.slot != r.slot;
    for (int64_t j = threadIdx.x; !bad && j <= r.pos / a.block_size; j += blockDim.x) {
      bad |= BlockOf(a, r.slot, j * a.block_size) < 0;  // a block among positions 0..p is missing
    }
  }
  bad = __syncthreads_or(bad);
  WaitPrevious();  // the chunk kernel's states and rows are visible from here on (every block waits)
  if (bad) {
    for (int d = threadIdx.x; d < D; d += blockDim.x) o_row[d] = __float2bfloat16_rn(0.0f);
    return;
  }
  if (r.pos < kChunkKeys) return;  // one chunk: ChunkKernel wrote the row
  const int n_chunks = static_cast<int>(r.pos / kChunkKeys) + 1;
  const int64_t i0 = PartialIndex(a, g, t, h, 0);
  // The first kPre chunk states of this thread's first column, read beside the chunks' m and l (one round trip).
  float o_pre[kCombinePre];
#pragma unroll
  for (int c = 0; c < kCombinePre; ++c) {
    o_pre[c] = c < n_chunks && threadIdx.x < D ? ws_o[(i0 + c) * D + threadIdx.x] : 0.0f;
  }
  if (n_chunks <= kCombinePre) {
    // At most kCombinePre chunks: lane c of each warp reads chunk c's m and l, every lane takes them by shuffle and
    // computes the weights and l in chunk order itself (thread 0's arithmetic below): no barrier after the wait.
    if (threadIdx.x / 32 * 32 >= D) return;  // whole warps with no column (the shuffles need every lane)
    const int lane = threadIdx.x % 32;
    const float m_lane = lane < n_chunks ? ws_ml[2 * (i0 + lane)] : 0.0f;
    const float l_lane = lane < n_chunks ? ws_ml[2 * (i0 + lane) + 1] : 0.0f;
    float m = -INFINITY;
#pragma unroll
    for (int c = 0; c < kCombinePre; ++c) {
      const float m_c = __shfl_sync(0xffffffffu, m_lane, c);
      if (c < n_chunks) m = fmaxf(m, m_c);
    }
    float l = 0.0f, o = 0.0f;
#pragma unroll
    for (int c = 0; c < kCombinePre; ++c) {
      const float m_c = __shfl_sync(0xffffffffu, m_lane, c), l_c = __shfl_sync(0xffffffffu, l_lane, c);
      if (c < n_chunks) {
        const float f = exp2f(__fsub_rn(m_c, m));
        l = __fadd_rn(l, __fmul_rn(l_c, f));
        o = __fadd_rn(o, __fmul_rn(o_pre[c], f));
      }
    }
    if (threadIdx.x < D) o_row[threadIdx.x] = __float2bfloat16_rn(__fdiv_rn(o, l));
    for (int d = threadIdx.x + blockDim.x; d < D; d += blockDim.x) {  // head_dim past 128: the same l, weights
      float o2 = 0.0f;
      for (int c = 0; c < n_chunks; ++c) {
        o2 = __fadd_rn(o2, __fmul_rn(ws_o[(i0 + c) * D + d], exp2f(__fsub_rn(ws_ml[2 * (i0 + c)], m))));
      }
      o_row[d] = __float2bfloat16_rn(__fdiv_rn(o2, l));
    }
    return;
  }
  float* s_m = s_f + g.nc + 1;  // [nc] m_c, then [nc] l_c
  for (int c = threadIdx.x; c < n_chunks; c += blockDim.x) s_m[c] = ws_ml[2 * (i0 + c)], s_m[g.nc + c] = ws_ml[2 * (i0 + c) + 1];
  __syncthreads();
  if (threadIdx.x == 0) {  // one thread, chunk order: the weights and the sum
    float m = -INFINITY;
    for (int c = 0; c < n_chunks; ++c) m = fmaxf(m, s_m[c]);
    float l = 0.0f;
    for (int c = 0; c < n_chunks; ++c) {
      s_f[c] = exp2f(__fsub_rn(s_m[c], m));
      l = __fadd_rn(l, __fmul_rn(s_m[g.nc + c], s_f[c]));
    }
    s_f[g.nc] = l;
  }
  __syncthreads();
  const float l = s_f[g.nc];
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float o = 0.0f;
    int c = 0;
    if (d == threadIdx.x) {
#pragma unroll
      for (; c < kCombinePre; ++c) {
        if (c < n_chunks) o = __fadd_rn(o, __fmul_rn(o_pre[c], s_f[c]));
      }
    }
#pragma unroll 8
    for (; c < n_chunks; ++c) o = __fadd_rn(o, __fmul_rn(ws_o[(i0 + c) * D + d], s_f[c]));
    o_row[d] = __float2bfloat16_rn(__fdiv_rn(o, l));
  }
}

// The combine of larger grids (launcher): one warp per (packed row, head) (blocks of 32 threads: up to 32 resident
// per SM, so a large batch needs few waves; each block's own latency is longer than CombineKernel's), the same
// arithmetic. Lane c of each step of 32 chunks reads chunk c's m and l; every lane takes them by shuffle and computes
// the weights and l in chunk order itself. Lanes over columns, W at a time (W = 4: 16-byte workspace reads, where
// head_dim % 4 == 0 and the workspace is 16-byte aligned); the first kPre chunk states of a lane's columns are read
// beside the first m and l (one round trip after the wait for rows of at most kPre chunks).
template <int W, int kPre>
__global__ void __launch_bounds__(32, W * kPre == 32 ? 32 : 20)  // registers: 64 (32 blocks an SM) / 96 (21)
    CombineWarpKernel(Params a, Tiling g, const float* __restrict__ ws_o, const float* __restrict__ ws_ml,
                      bf16* __restrict__ out) {
  constexpr unsigned kAll = 0xffffffffu;
  const int t = blockIdx.x, h = blockIdx.y, lane = threadIdx.x;
  const int D = a.head_dim;
  bf16* o_row = out + (static_cast<int64_t>(t) * a.num_heads + h) * D;
  const Row r = ResolveRowFast(a, t);
  bool bad = r.slot < 0;
  if (!bad) {
    // The row's query tile must have been computed: its first row resolves to the same slot.
    const Row lead = r.local % g.qt == 0 ? r : ResolveRowFast(a, t - r.local % g.qt);
    bad = lead.slot != r.slot;
    for (int64_t j = lane; !bad && j <= r.pos / a.block_size; j += 32) {
      bad |= BlockOf(a, r.slot, j * a.block_size) < 0;  // a block among positions 0..p is missing
    }
  }
  bad = __any_sync(kAll, bad);
  WaitPrevious();  // the chunk kernel's states and rows are visible from here on (every block waits)
  if (bad) {
    for (int d = lane; d < D; d += 32) o_row[d] = __float2bfloat16_rn(0.0f);
    return;
  }
  if (r.pos < kChunkKeys) return;  // one chunk: ChunkKernel wrote the row
  const int n_chunks = static_cast<int>(r.pos / kChunkKeys) + 1;
  const int64_t i0 = PartialIndex(a, g, t, h, 0);
  // Chunk c's W states of columns d0 ..: 0 where the lane has no columns.
  auto load_o = [&](int c, int d0, float (&x)[W]) {
    if (d0 < D) {
      const float* src = ws_o + (i0 + c) * D + d0;
      if constexpr (W == 4) {
        const float4 v = *reinterpret_cast<const float4*>(src);
        x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
      } else {
        x[0] = *src;
      }
    } else {
#pragma unroll
      for (int j = 0; j < W; ++j) x[j] = 0.0f;
    }
  };
  float o_pre[kPre][W];
#pragma unroll
  for (int c = 0; c < kPre; ++c) {
    if (c < n_chunks) {
      load_o(c, lane * W, o_pre[c]);
    } else {
#pragma unroll
      for (int j = 0; j < W; ++j) o_pre[c][j] = 0.0f;
    }
  }
  const float m_lane = lane < n_chunks ? ws_ml[2 * (i0 + lane)] : 0.0f;  // chunks 0 .. 31
  const float l_lane = lane < n_chunks ? ws_ml[2 * (i0 + lane) + 1] : 0.0f;
  float m = -INFINITY;  // over the chunks in chunk order
#pragma unroll
  for (int c = 0; c < 32; ++c) {
    const float m_c = __shfl_sync(kAll, m_lane, c);
    if (c < n_chunks) m = fmaxf(m, m_c);
  }
  for (int c0 = 32; c0 < n_chunks; c0 += 32) {
    const float m_step = c0 + lane < n_chunks ? ws_ml[2 * (i0 + c0 + lane)] : 0.0f;
    for (int c = 0; c < 32 && c0 + c < n_chunks; ++c) m = fmaxf(m, __shfl_sync(kAll, m_step, c));
  }
  for (int base = 0; base < D; base += 32 * W) {  // passes over the columns (more than one past 128 columns)
    const int d0 = base + lane * W;
    if (base > 0) {
#pragma unroll
      for (int c = 0; c < kPre; ++c) {
        if (c < n_chunks) load_o(c, d0, o_pre[c]);
      }
    }
    float l = 0.0f, o[W];
#pragma unroll
    for (int j = 0; j < W; ++j) o[j] = 0.0f;
#pragma unroll
    for (int c = 0; c < kPre; ++c) {  // chunks 0 .. kPre - 1
      const float m_c = __shfl_sync(kAll, m_lane, c), l_c = __shfl_sync(kAll, l_lane, c);
      if (c < n_chunks) {
        const float f = exp2f(__fsub_rn(m_c, m));
        l = __fadd_rn(l, __fmul_rn(l_c, f));
#pragma unroll
        for (int j = 0; j < W; ++j) o[j] = __fadd_rn(o[j], __fmul_rn(o_pre[c][j], f));
      }
    }
    float m_step = m_lane, l_step = l_lane;  // chunks 32 s .. 32 s + 31 of the current step s
    for (int c = kPre; c < n_chunks; ++c) {  // chunks kPre .. (rows of more than kPre chunks)
      if (c % 32 == 0) {
        m_step = c + lane < n_chunks ? ws_ml[2 * (i0 + c + lane)] : 0.0f;
        l_step = c + lane < n_chunks ? ws_ml[2 * (i0 + c + lane) + 1] : 0.0f;
      }
      const float m_c = __shfl_sync(kAll, m_step, c % 32), l_c = __shfl_sync(kAll, l_step, c % 32);
      const float f = exp2f(__fsub_rn(m_c, m));
      l = __fadd_rn(l, __fmul_rn(l_c, f));
      float x[W];
      load_o(c, d0, x);
#pragma unroll
      for (int j = 0; j < W; ++j) o[j] = __fadd_rn(o[j], __fmul_rn(x[j], f));
    }
    if (d0 < D) {
#pragma unroll
      for (int j = 0; j < W; ++j) o_row[d0 + j] = __float2bfloat16_rn(__fdiv_rn(o[j], l));
    }
  }
}

Tiling MakeTiling(int num_heads, int num_kv_heads, int block_size, int max_blocks) {
  Tiling g{};
  g.group = num_heads / num_kv_heads;
  g.hu = g.group < kRows ? g.group : kRows;
  g.qt = kRows / g.hu;
  g.nsg = CeilDiv(g.group, g.hu);
  g.nc = CeilDiv(static_cast<int64_t>(max_blocks) * block_size, kChunkKeys);
  return g;
}

// A chunk kernel's attributes: `bytes` of dynamic shared memory, all of L1 as shared memory (the blocks per SM are
// bounded by their shared memory; cp.async.cg skips L1), clusters past 8 blocks when big_cluster.
template <typename Kernel>
cudaError_t SetChunkAttributes(Kernel kernel, int bytes, bool big_cluster) {
  cudaError_t err = cudaSuccess;
  if (bytes > 48 * 1024) err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err == cudaSuccess) {
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  }
  if (err == cudaSuccess && big_cluster) err = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  return err;
}

// kernel<<<grid, threads, bytes, stream>>>(args...), as a programmatic dependent launch when pdl, in clusters of
// (1, 1, cluster_z) when cluster_z > 1.
template <typename... KArgs, typename... Args>
cudaError_t Launch(bool pdl, int cluster_z, void (*kernel)(KArgs...), dim3 grid, int threads, int bytes,
                   cudaStream_t stream, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = static_cast<size_t>(bytes);
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  int n = 0;
  if (pdl) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster_z > 1) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = 1;
    attr[n].val.clusterDim.y = 1;
    attr[n++].val.clusterDim.z = static_cast<unsigned>(cluster_z);
  }
  cfg.attrs = attr;
  cfg.numAttrs = n;
  return cudaLaunchKernelEx(&cfg, kernel, args...);
}

// The three-launch chunk kernel's resident blocks per SM (its shared-memory attributes set first); 0 on an error.
template <int DP, bool kVec>
int ChunkBlocksPerSm() {
  auto kernel = ChunkKernel<DP, kVec, false>;
  const int bytes = Smem<DP>::kBytes;
  int n = 0;
  if (SetChunkAttributes(kernel, bytes, false) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, bytes) != cudaSuccess) {
    return 0;
  }
  return n;
}

template <bool kVec>
int ChunkBlocksPerSmFor(int dp) {
  switch (dp) {
    case 32: return ChunkBlocksPerSm<32, kVec>();
    case 64: return ChunkBlocksPerSm<64, kVec>();
    case 128: return ChunkBlocksPerSm<128, kVec>();
    default: return ChunkBlocksPerSm<256, kVec>();
  }
}

template <int DP, bool kVec, bool kFused>
int LaunchChunks(bool pdl, int splits, int cluster_merge, const Params& a, const Tiling& g, const bf16* q, const bf16* k,
                 const bf16* v, bf16* kc, bf16* vc, bf16* out, float* ws_o, float* ws_ml, int token_cap,
                 cudaStream_t stream) {
  auto kernel = ChunkKernel<DP, kVec, kFused>;
  const int bytes = Smem<DP>::kBytes;
  const int cluster = kFused && cluster_merge ? splits : 1;
  const cudaError_t err = SetChunkAttributes(kernel, bytes, cluster > 8);
  if (err != cudaSuccess) return static_cast<int>(err);
  const dim3 grid(static_cast<unsigned>(token_cap), static_cast<unsigned>(a.num_kv_heads * g.nsg),
                  static_cast<unsigned>(splits));
  return static_cast<int>(Launch(pdl, cluster, kernel, grid, kThreads, bytes, stream, a, g, q, k, v, kc, vc, out, ws_o,
                                 ws_ml, cluster_merge));
}

template <bool kVec, bool kFused>
int LaunchFor(int dp, bool pdl, int splits, int cluster_merge, const Params& a, const Tiling& g, const bf16* q, const bf16* k,
              const bf16* v, bf16* kc, bf16* vc, bf16* out, float* ws_o, float* ws_ml, int token_cap,
              cudaStream_t stream) {
  switch (dp) {
    case 32: return LaunchChunks<32, kVec, kFused>(pdl, splits, cluster_merge, a, g, q, k, v, kc, vc, out, ws_o, ws_ml,
                                                     token_cap, stream);
    case 64: return LaunchChunks<64, kVec, kFused>(pdl, splits, cluster_merge, a, g, q, k, v, kc, vc, out, ws_o, ws_ml,
                                                     token_cap, stream);
    case 128: return LaunchChunks<128, kVec, kFused>(pdl, splits, cluster_merge, a, g, q, k, v, kc, vc, out, ws_o, ws_ml,
                                                     token_cap, stream);
    default: return LaunchChunks<256, kVec, kFused>(pdl, splits, cluster_merge, a, g, q, k, v, kc, vc, out, ws_o, ws_ml,
                                                     token_cap, stream);
  }
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

extern "C" int64_t specworker_paged_attention_bf16_workspace_bytes(int token_cap, int num_heads, int head_dim,
                                                                   int block_size, int max_blocks_per_seq) {
  if (token_cap < 0 || num_heads < 0 || head_dim < 0 || block_size < 1 || max_blocks_per_seq < 0) return -1;
  const int64_t nc = CeilDiv(static_cast<int64_t>(max_blocks_per_seq) * block_size, kChunkKeys);
  return static_cast<int64_t>(token_cap) * num_heads * nc * (head_dim + 2) * 4;
}

extern "C" int specworker_paged_attention_bf16_launch(
    const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, __nv_bfloat16* key_cache,
    __nv_bfloat16* value_cache, const int32_t* block_tables, const int32_t* cu_seqlens_q,
    const int32_t* seq_lens_decoder, const int32_t* seq_lens_this_time, const int32_t* batch_id_per_token,
    __nv_bfloat16* out, float* workspace, int64_t workspace_bytes, int token_cap, int bsz, int num_heads,
    int num_kv_heads, int head_dim, int num_blocks, int block_size, int max_blocks_per_seq, float scale,
    cudaStream_t stream) {
  if (token_cap < 0 || bsz < 0 || num_heads < 1 || num_kv_heads < 1 || num_heads % num_kv_heads != 0 ||
      num_kv_heads > kMaxGrid || head_dim < 1 || head_dim > kMaxHeadDim || num_blocks < 0 || block_size < 1 ||
      max_blocks_per_seq < 0 || static_cast<int64_t>(max_blocks_per_seq) * block_size > INT32_MAX ||
      num_heads > kMaxGrid) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  const Tiling g = MakeTiling(num_heads, num_kv_heads, block_size, max_blocks_per_seq);
  if (static_cast<int64_t>(num_kv_heads) * g.nsg > kMaxGrid) return static_cast<int>(cudaErrorInvalidValue);
  const int64_t need = specworker_paged_attention_bf16_workspace_bytes(token_cap, num_heads, head_dim,
                                                                       block_size, max_blocks_per_seq);
  if (workspace_bytes < need || (need > 0 && workspace == nullptr)) return static_cast<int>(cudaErrorInvalidValue);
  if (token_cap == 0) return static_cast<int>(cudaSuccess);
  int device = 0, major = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  if (err != cudaSuccess) return static_cast<int>(err);
  if (major < 8) return static_cast<int>(cudaErrorNotSupported);  // no bf16 MMA / cp.async before sm_80
  const int dp = head_dim <= 32 ? 32 : head_dim <= 64 ? 64 : head_dim <= 128 ? 128 : 256;
  const bool vec = head_dim % 8 == 0 && Aligned16(q) && Aligned16(k) && Aligned16(v) && Aligned16(key_cache) &&
                   Aligned16(value_cache);
  // Splits only spread the chunks over more blocks (file comment): enough to fill the GPU at small batch.
  const int64_t units = static_cast<int64_t>(token_cap) * num_kv_heads * g.nsg;  // grid blocks per split
  // Query tiles with work, about: one per slot (decode, verify), or token_cap / qt (long prefill).
  const int64_t tiles = token_cap < bsz ? token_cap : bsz > CeilDiv(token_cap, g.qt) ? bsz : CeilDiv(token_cap, g.qt);
  const int64_t work_units = (tiles < 1 ? 1 : tiles) * num_kv_heads * g.nsg;
  const int64_t max_splits = g.nc < kMaxGrid ? g.nc : kMaxGrid;
  auto clamp_splits = [&](int64_t s) { return static_cast<int>(s < 1 ? 1 : s < max_splits ? s : max_splits); };
  int splits = clamp_splits(CeilDiv(kTargetBlocks, units));
  // Programmatic dependent launches from sm_90, on a stream of the caller's own (not the legacy or per-thread
  // default stream). There, a small grid of many splits (small batch, long history) takes one fused launch (a
  // cluster per query tile); else three launches, the path the GPU tests compare the fused one with (same bits).
  const bool pdl = major >= 9 && stream != nullptr && stream != cudaStreamLegacy && stream != cudaStreamPerThread;
  const int max_cluster = dp < 256 ? kMaxCluster : 8;  // head_dim 256: one block per SM, 8 per cluster (portable)
  const bool fused = pdl && dp <= kFusedMaxHeadDim && splits >= kFusedMinSplits && splits <= max_cluster &&
                     units * splits > kFusedMinBlocks && units * splits <= kFusedMaxBlocks;
  bool two_launches = false;
  int sms = 0;
  if (!fused) {
    // About kWaves waves of the three-launch chunk kernel's resident blocks, counting the query tiles with work (fewer,
    // longer blocks than kTargetBlocks where fewer fit per SM: at head_dim 128, 3 per SM; more splits for verify
    // steps, whose token_cap rows are a quarter as many tiles).
    err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (err != cudaSuccess) return static_cast<int>(err);
    const int per_sm = vec ? ChunkBlocksPerSmFor<true>(dp) : ChunkBlocksPerSmFor<false>(dp);
    if (per_sm > 0) splits = clamp_splits(kWaves * per_sm * sms / work_units);
    two_launches = pdl && units * splits >= kTwoLaunchMinBlocks && units * splits <= kTwoLaunchMaxBlocks;
  }

  const Params a{block_tables, cu_seqlens_q, seq_lens_decoder, seq_lens_this_time, batch_id_per_token, bsz,
                 num_heads, num_kv_heads, head_dim, num_blocks, block_size, max_blocks_per_seq, scale};
  float* ws_o = workspace;
  float* ws_ml = workspace + static_cast<int64_t>(token_cap) * num_heads * g.nc * head_dim;
  if (fused || two_launches) {  // the chunk kernel appends; fused: its clusters merge, no combine launch
    const int rc = vec ? LaunchFor<true, true>(dp, true, splits, fused, a, g, q, k, v, key_cache, value_cache, out,
                                               ws_o, ws_ml, token_cap, stream)
                       : LaunchFor<false, true>(dp, true, splits, fused, a, g, q, k, v, key_cache, value_cache, out,
                                                ws_o, ws_ml, token_cap, stream);
    if (rc != 0 || fused) return rc;
  } else {
    if (vec) {
      AppendRowKernel<uint4><<<token_cap, kThreads, 0, stream>>>(a, k, v, key_cache, value_cache);
    } else {
      AppendRowKernel<bf16><<<token_cap, kThreads, 0, stream>>>(a, k, v, key_cache, value_cache);
    }
    err = cudaGetLastError();
    if (err != cudaSuccess) return static_cast<int>(err);
    const int rc = vec ? LaunchFor<true, false>(dp, pdl, splits, 0, a, g, q, k, v, key_cache, value_cache, out,
                                                ws_o, ws_ml, token_cap, stream)
                       : LaunchFor<false, false>(dp, pdl, splits, 0, a, g, q, k, v, key_cache, value_cache, out,
                                                 ws_o, ws_ml, token_cap, stream);
    if (rc != 0) return rc;
  }
  // Combine: CombineKernel's blocks (64 registers a thread: 8 an SM at 128 threads, 16 at 64, 32 at 32) where they
  // all fit the GPU at once, else a warp per (row, head) (H100, issue22k: Llama-3-8B batch 128 decode, 4096 blocks,
  // 119 -> 112 us; SmolLM2 ctx 2048 batch 1 decode, 9 blocks, 7.6 -> 8.3 us with warps). The same arithmetic in both.
  const int combine_threads = head_dim < kThreads ? (head_dim + 31) / 32 * 32 : kThreads;
  if (static_cast<int64_t>(token_cap) * num_heads <= static_cast<int64_t>(8 * kThreads / combine_threads) * sms) {
    // The chunk weights and l, then each chunk's m and l, rounded up and padded: the unrolled chunk loop may load
    // the weights 4 at a time.
    const int combine_bytes = ((3 * g.nc + 1 + 7) / 8 * 8 + 8) * 4;
    if (combine_bytes > 48 * 1024) {
      err = cudaFuncSetAttribute(CombineKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, combine_bytes);
      if (err != cudaSuccess) return static_cast<int>(err);
    }
    return static_cast<int>(Launch(pdl, 1, CombineKernel, dim3(token_cap, num_heads), combine_threads, combine_bytes,
                                   stream, a, g, static_cast<const float*>(ws_o), static_cast<const float*>(ws_ml),
                                   out));
  }
  // 16-byte workspace reads where the columns allow; the first 8 chunk states of a lane read ahead where no row has
  // more chunks (fewer registers: all 32 blocks an SM resident), else 16.
  const bool vec_ws = head_dim % 4 == 0 && Aligned16(ws_o);
  auto combine = vec_ws ? (g.nc <= 8 ? CombineWarpKernel<4, 8> : CombineWarpKernel<4, 16>) : CombineWarpKernel<1, 16>;
  return static_cast<int>(Launch(pdl, 1, combine, dim3(token_cap, num_heads), 32, 0, stream, a, g,
                                 static_cast<const float*>(ws_o), static_cast<const float*>(ws_ml), out));
}
