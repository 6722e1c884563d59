// paged_attention CUDA kernels for float32 and float16 (bfloat16 runs on tensor cores: paged_attention_bf16.cu):
// append this step's K/V to the paged cache, then causal attention of each packed query row over its slot's cache (definition: cpu_ops/paged_attention.cc).
//   q [T_cap, H, D]; k, v [T_cap, KVH, D]; key_cache, value_cache [num_blocks, KVH, block_size, D]
//   (in place); block_tables [>= bsz, max_blocks]; cu_seqlens_q [bsz + 1]; seq_lens_decoder,
//   seq_lens_this_time [bsz]; batch_id_per_token [T_cap]  ->  out [T_cap, H, D].
// Two launches on the caller's stream, so the second sees every write of the first:
//   1. AppendKernel: one block per packed row, threads over KVH * D, copies k[t] and v[t] to the
//      row's position p = seq_lens_decoder[b] + (t - cu_seqlens_q[b]).
//   2. AttentionKernel: one block of 128 threads (4 warps) per (row, head), grid T_cap x H. Keys
//      0..p are read from the cache (this step's keys included, written by launch 1) in tiles of
//      32 keys starting at key 0. Per tile: warp w scores keys 8w .. 8w+7, each as a dot product
//      split over the lanes (lane l sums dims l, l+32, ... in order) and a xor-butterfly over the
//      32 lanes; then a sequential max over the tile, online-softmax rescale by exp(m_old - m_new),
//      the tile's weights exp(s - m_new) summed in key order, and each thread's dims (x, x + 128)
//      accumulated over the tile's keys in key order.
// Batch invariance: that sequence of float32 operations depends only on head_dim and p (the tile
// split is fixed by the key index, the reduction trees by the lane and thread index), never on
// the batch, T_cap, the slot's other queries or the block numbering. So a query gives the same
// bits alone (1-token decode), among its slot's k + 1 verify queries, or in any batch.
// Bounds checks replace the CPU op's errors (no host sync): a row with batch id outside [0, bsz),
// a local index outside [0, seq_lens_this_time[b]), seq_lens_decoder[b] < 0, or a position past
// max_blocks * block_size is neither written nor computed (zero output row); a row whose own
// block id is outside [0, num_blocks) is not written, and a row that needs such a block for any
// of its positions 0..p gets a zero output row. Tokens past T_cap (T > T_cap) have no row: they
// are neither written nor computed.
#include <math.h>

#include <cuda_fp16.h>

#include "dtype_convert.cuh"

#include "paged_attention.h"
#include "paged_kv.cuh"

namespace {

using specworker::FromFloat;
using specworker::ToFloat;
using specworker::paged::AppendKernel;
using specworker::paged::BlockOf;
using specworker::paged::Params;
using specworker::paged::ResolveRow;
using specworker::paged::RowPos;

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kTile = 32;                      // keys per tile
constexpr int kKeysPerWarp = kTile / kWarps;   // 8
constexpr int kMaxHeadDim = 256;
constexpr int kQPerLane = kMaxHeadDim / 32;    // q elements each lane keeps in registers
constexpr int kDimsPerThread = kMaxHeadDim / kThreads;  // output dims each thread accumulates

template <typename T>
__global__ void __launch_bounds__(kThreads)
    AttentionKernel(Params a, const T* __restrict__ q, const T* __restrict__ key_cache,
                    const T* __restrict__ value_cache, T* __restrict__ out) {
  __shared__ float s_weight[kTile];  // the tile's scores, then its softmax weights
  __shared__ int64_t s_row[kTile];   // element offset of each tile key's row in the caches
  const int t = blockIdx.x;
  const int h = blockIdx.y;
  const int D = a.head_dim;
  T* o = out + (static_cast<int64_t>(t) * a.num_heads + h) * D;

  const RowPos r = ResolveRow(a, t);
  int missing = 0;  // a block among positions 0..p is not a valid block id
  if (r.slot >= 0) {
    for (int64_t j = threadIdx.x; j <= r.pos / a.block_size; j += kThreads) {
      missing |= BlockOf(a, r.slot, j * a.block_size) < 0;
    }
  }
  if (__syncthreads_or(missing) || r.slot < 0) {
    for (int x = threadIdx.x; x < D; x += kThreads) o[x] = FromFloat<T>(0.0f);
    return;
  }

  const int kv_head = h / (a.num_heads / a.num_kv_heads);
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const T* qh = q + (static_cast<int64_t>(t) * a.num_heads + h) * D;
  float qreg[kQPerLane];
#pragma unroll
  for (int i = 0; i < kQPerLane; ++i) {
    const int x = lane + 32 * i;
    qreg[i] = x < D ? ToFloat(qh[x]) : 0.0f;
  }
  float acc[kDimsPerThread];
#pragma unroll
  for (int i = 0; i < kDimsPerThread; ++i) acc[i] = 0.0f;
  float m = -INFINITY;  // running max of the scores
  float l = 0.0f;       // running sum of exp(score - m)

  const int64_t num_keys = r.pos + 1;
  for (int64_t start = 0; start < num_keys; start += kTile) {
    const int n = static_cast<int>(num_keys - start < kTile ? num_keys - start : kTile);
    // Scores: warp w takes keys 8w .. 8w+7 of the tile; keys past n are never read.
    for (int u = 0; u < kKeysPerWarp; ++u) {
      const int j = warp * kKeysPerWarp + u;
      if (j >= n) break;  // uniform across the warp
      const int64_t pos = start + j;
      const int64_t block = a.block_tables[static_cast<int64_t>(r.slot) * a.max_blocks + pos / a.block_size];
      const int64_t row = ((block * a.num_kv_heads + kv_head) * a.block_size + pos % a.block_size) * D;
      const T* kj = key_cache + row;
      float part = 0.0f;
#pragma unroll
      for (int i = 0; i < kQPerLane; ++i) {
        const int x = lane + 32 * i;
        if (x < D) part += qreg[i] * ToFloat(kj[x]);
      }
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) {
        part += __shfl_xor_sync(0xffffffffu, part, offset);
      }
      if (lane == 0) {
        s_weight[j] = part * a.scale;
        s_row[j] = row;
      }
    }
    __syncthreads();
    float tile_max = -INFINITY;
    for (int j = 0; j < n; ++j) tile_max = fmaxf(tile_max, s_weight[j]);
    const float m_new = fmaxf(m, tile_max);
    const float correction = expf(m - m_new);  // 0 on the first tile (m = -inf)
    __syncthreads();  // every thread has read the scores before they become weights
    if (threadIdx.x < n) s_weight[threadIdx.x] = expf(s_weight[threadIdx.x] - m_new);
    __syncthreads();
    float tile_sum = 0.0f;
    for (int j = 0; j < n; ++j) tile_sum += s_weight[j];
    l = l * correction + tile_sum;
#pragma unroll
    for (int i = 0; i < kDimsPerThread; ++i) {
      const int x = threadIdx.x + kThreads * i;
      if (x < D) {
        float tile_acc = 0.0f;
        for (int j = 0; j < n; ++j) tile_acc += s_weight[j] * ToFloat(value_cache[s_row[j] + x]);
        acc[i] = acc[i] * correction + tile_acc;
      }
    }
    m = m_new;
    __syncthreads();  // the next tile overwrites s_weight and s_row
  }
#pragma unroll
  for (int i = 0; i < kDimsPerThread; ++i) {
    const int x = threadIdx.x + kThreads * i;
    if (x < D) o[x] = FromFloat<T>(acc[i] / l);
  }
}

template <typename T>
int Launch(const Params& a, const void* q, const void* k, const void* v, void* key_cache,
           void* value_cache, void* out, int token_cap, cudaStream_t stream) {
  AppendKernel<T><<<token_cap, kThreads, 0, stream>>>(
      a, static_cast<const T*>(k), static_cast<const T*>(v), static_cast<T*>(key_cache),
      static_cast<T*>(value_cache));
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return static_cast<int>(err);
  const dim3 grid(static_cast<unsigned>(token_cap), static_cast<unsigned>(a.num_heads));
  AttentionKernel<T><<<grid, kThreads, 0, stream>>>(
      a, static_cast<const T*>(q), static_cast<const T*>(key_cache),
      static_cast<const T*>(value_cache), static_cast<T*>(out));
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

extern "C" int specworker_paged_attention_launch(
    const void* q, const void* k, const void* v, void* key_cache, void* value_cache,
    const int32_t* block_tables, const int32_t* cu_seqlens_q, const int32_t* seq_lens_decoder,
    const int32_t* seq_lens_this_time, const int32_t* batch_id_per_token, void* out, int token_cap,
    int bsz, int num_heads, int num_kv_heads, int head_dim, int num_blocks, int block_size,
    int max_blocks_per_seq, float scale, int dtype, cudaStream_t stream) {
  if (token_cap < 0 || bsz < 0 || num_heads < 1 || num_heads > 65535 || num_kv_heads < 1 ||
      num_heads % num_kv_heads != 0 || head_dim < 1 || head_dim > kMaxHeadDim || num_blocks < 0 ||
      block_size < 1 || max_blocks_per_seq < 0) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  if (token_cap == 0) return static_cast<int>(cudaSuccess);
  const Params a{block_tables, cu_seqlens_q, seq_lens_decoder, seq_lens_this_time,
                 batch_id_per_token, bsz, num_heads, num_kv_heads, head_dim, num_blocks,
                 block_size, max_blocks_per_seq, scale};
  switch (dtype) {
    case SPECWORKER_ATTENTION_FLOAT32:
      return Launch<float>(a, q, k, v, key_cache, value_cache, out, token_cap, stream);
    case SPECWORKER_ATTENTION_FLOAT16:
      return Launch<__half>(a, q, k, v, key_cache, value_cache, out, token_cap, stream);
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
}
