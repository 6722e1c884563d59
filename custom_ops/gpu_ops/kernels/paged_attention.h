// Framework-neutral launcher for paged_attention (see paged_attention.cu).
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Element type of q, k, v, the caches and out: the launcher's dtype argument. bfloat16 (code 2) has its own
// tensor-core launcher, specworker_paged_attention_bf16_launch (paged_attention_bf16.h); this one refuses it.
enum {
  SPECWORKER_ATTENTION_FLOAT32 = 0,
  SPECWORKER_ATTENTION_FLOAT16 = 1,
  SPECWORKER_ATTENTION_BFLOAT16 = 2,
};

// Appends this step's k/v rows to the paged cache (in place), then writes out = causal attention
// of every packed query row over its slot's cache positions 0..p. All pointers are device pointers:
//   q [token_cap, num_heads, head_dim]; k, v [token_cap, num_kv_heads, head_dim]
//   key_cache, value_cache [num_blocks, num_kv_heads, block_size, head_dim], updated in place
//   block_tables [>= bsz, max_blocks_per_seq] int32 (-1 = unallocated)
//   cu_seqlens_q [bsz + 1], seq_lens_decoder [>= bsz], seq_lens_this_time [bsz],
//   batch_id_per_token [token_cap] int32; out [token_cap, num_heads, head_dim], fully written.
// Index values are bound-checked, not reported (no host sync): a row whose slot, local index or
// position is out of range, or whose slot lacks a valid block for any of positions 0..p, gets a
// zero output row; a row whose own position has no valid block is not written to the cache.
// Returns the cudaError_t as an int: cudaErrorInvalidValue for bad sizes (num_heads not a
// multiple of num_kv_heads, head_dim outside [1, 256], num_heads > 65535, a dtype other than float32 / float16, ...);
// else the launches' error (0 on success). No launch when token_cap == 0.
int specworker_paged_attention_launch(const void* q, const void* k, const void* v,
                                      void* key_cache, void* value_cache,
                                      const int32_t* block_tables, const int32_t* cu_seqlens_q,
                                      const int32_t* seq_lens_decoder,
                                      const int32_t* seq_lens_this_time,
                                      const int32_t* batch_id_per_token, void* out, int token_cap,
                                      int bsz, int num_heads, int num_kv_heads, int head_dim,
                                      int num_blocks, int block_size, int max_blocks_per_seq,
                                      float scale, int dtype, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
