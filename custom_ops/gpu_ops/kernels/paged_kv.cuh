// The paged KV cache as the paged_attention kernels see it (float32 / float16 path in paged_attention.cu,
// bf16 tensor-core path in paged_attention_bf16.cu): the step's index tensors, a packed row's slot and
// position, the block holding a position, and the kernel that appends this step's k/v rows to the cache.
// Header-only, no framework include.
#pragma once
#include <stdint.h>

namespace specworker {
namespace paged {

struct Params {
  const int32_t* block_tables;
  const int32_t* cu_seqlens_q;
  const int32_t* seq_lens_decoder;
  const int32_t* seq_lens_this_time;
  const int32_t* batch_id_per_token;
  int bsz, num_heads, num_kv_heads, head_dim, num_blocks, block_size, max_blocks;
  float scale;
};

struct RowPos {
  int slot;      // -1: the row is not computed (padding or an out-of-range index)
  int64_t pos;   // its position in the slot's sequence
};

// The row's slot and position, where the CPU op would raise: slot = -1.
__device__ inline RowPos ResolveRow(const Params& a, int t) {
  const RowPos none{-1, 0};
  const int b = a.batch_id_per_token[t];
  if (b < 0 || b >= a.bsz) return none;
  const int64_t local = static_cast<int64_t>(t) - a.cu_seqlens_q[b];
  if (local < 0 || local >= a.seq_lens_this_time[b]) return none;
  const int32_t dec = a.seq_lens_decoder[b];
  if (dec < 0) return none;
  const int64_t pos = dec + local;
  if (pos >= static_cast<int64_t>(a.max_blocks) * a.block_size) return none;
  return RowPos{b, pos};
}

// Block id holding position pos of slot b, or -1 when the table entry is not a block.
__device__ __forceinline__ int64_t BlockOf(const Params& a, int b, int64_t pos) {
  const int32_t block = a.block_tables[static_cast<int64_t>(b) * a.max_blocks + pos / a.block_size];
  return block >= 0 && block < a.num_blocks ? block : -1;
}

// Copies k[t] and v[t], kv heads h0 .. h1 - 1, to offset `offset` of cache block `block`; threads of the block over
// (head, column) in units of Vec (T itself, or a 16-byte type when head_dim % (16 / sizeof(T)) == 0 and the four
// pointers are 16-byte aligned).
template <typename T, typename Vec>
__device__ __forceinline__ void CopyRowToCache(const Params& a, int t, int64_t block, int64_t offset, int h0, int h1,
                                               const T* __restrict__ k, const T* __restrict__ v,
                                               T* __restrict__ key_cache, T* __restrict__ value_cache) {
  constexpr int per = sizeof(Vec) / sizeof(T);
  const int D = a.head_dim, n = (h1 - h0) * D / per;
  for (int e = threadIdx.x; e < n; e += blockDim.x) {
    const int h = h0 + e * per / D, d = e * per - (h - h0) * D;
    const int64_t dst = ((block * a.num_kv_heads + h) * a.block_size + offset) * D + d;
    const int64_t src = (static_cast<int64_t>(t) * a.num_kv_heads + h) * D + d;
    *reinterpret_cast<Vec*>(key_cache + dst) = *reinterpret_cast<const Vec*>(k + src);
    *reinterpret_cast<Vec*>(value_cache + dst) = *reinterpret_cast<const Vec*>(v + src);
  }
}

struct NoHook {
  __device__ void operator()() const {}
};

// One block per packed row: k[t], v[t] to the row's cache position; a row the CPU op would refuse, or whose block
// is not valid, writes nothing. Vec: the copy unit (CopyRowToCache); Hook runs first (the bf16 kernel's
// programmatic-launch trigger).
template <typename T, typename Vec = T, typename Hook = NoHook>
__global__ void AppendKernel(Params a, const T* __restrict__ k, const T* __restrict__ v,
                             T* __restrict__ key_cache, T* __restrict__ value_cache) {
  Hook()();
  const int t = blockIdx.x;
  const RowPos r = ResolveRow(a, t);
  if (r.slot < 0) return;
  const int64_t block = BlockOf(a, r.slot, r.pos);
  if (block < 0) return;
  CopyRowToCache<T, Vec>(a, t, block, r.pos % a.block_size, 0, a.num_kv_heads, k, v, key_cache, value_cache);
}

}  // namespace paged
}  // namespace specworker
