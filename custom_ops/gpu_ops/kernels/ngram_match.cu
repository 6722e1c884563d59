// ngram_match CUDA kernel: prompt-lookup drafts for every decoding slot in one launch
// (docs/spec.md "ngram_match"; the CPU op in custom_ops/cpu_ops/ngram_match.cc states the rule).
//   in:     input_ids [>= bsz, S_in] i64 (prompt), input_ids_len, step_idx, max_dec_len [>= bsz]
//           i64, pre_ids [>= bsz, S] i64 (generated tokens at columns 1 .. step_idx),
//           draft_token_num, seq_lens_encoder, seq_lens_decoder [>= bsz] i32, is_block_step
//           [>= bsz] bool or NULL
//   in/out: draft_tokens [>= bsz, D] i64 (columns 1 ..), seq_lens_this_time [bsz] i32
// Parallelization: one block of kThreads threads per slot (grid = bsz, so any bsz), no scratch
// buffer, no atomics, no host sync. The slot's history is h = prompt ++ generated, length Lh.
// Instead of FastDeploy's loop over n and start positions, the block runs
// specworker_ngram::BlockContinuationStart (ngram_search.cuh, shared with hybrid_mtp_ngram): one pass
// of the threads over the end positions of candidate occurrences and one block max-reduction give
// the CPU op's answer. The block then writes the m = min(budget, Lh - start) tokens from start and
// the -1 tail.
// Bounds: input_ids_len is clamped to [0, S_in] and step_idx to [0, S - 1] for the history (the
// CPU op raises instead); rows >= bsz and column 0 of draft_tokens are never touched.
#include "ngram_match.h"
#include "ngram_search.cuh"

namespace {

using specworker_ngram::kThreads;
constexpr int kMaxNgram = SPECWORKER_NGRAM_MAX_SIZE;

struct History {
  const int64_t* prompt;  // row b of input_ids
  const int64_t* generated;  // row b of pre_ids; token j (1-based) at generated[j]
  long long prompt_len;

  __device__ __forceinline__ int64_t operator()(long long x) const {
    return x < prompt_len ? prompt[x] : generated[x - prompt_len + 1];
  }
};

__global__ void __launch_bounds__(kThreads)
    NgramMatchKernel(const int64_t* __restrict__ input_ids, const int64_t* __restrict__ prompt_lens,
                     const int64_t* __restrict__ pre_ids, const int64_t* __restrict__ step_idx,
                     const int32_t* __restrict__ draft_token_num, int64_t* __restrict__ drafts,
                     int32_t* __restrict__ lens, const int32_t* __restrict__ enc,
                     const int32_t* __restrict__ dec, const int64_t* __restrict__ max_dec_len,
                     const bool* __restrict__ paused, int S_in, int S, int D, int max_ngram_size,
                     int max_draft_tokens, int min_ngram_size) {
  const int b = blockIdx.x;
  const int tid = threadIdx.x;
  // Block-uniform exits: every thread reads the same slot state.
  if (enc[b] > 0) return;  // prefill: the host set L
  if ((paused != nullptr && paused[b]) || dec[b] == 0) {
    if (tid == 0) lens[b] = 0;
    return;
  }
  using ll = long long;
  const ll p = min(max(static_cast<ll>(prompt_lens[b]), 0LL), static_cast<ll>(S_in));
  const ll g = min(max(static_cast<ll>(step_idx[b]), 0LL), static_cast<ll>(S - 1));
  const ll length = p + g;
  const History h{input_ids + static_cast<ll>(b) * S_in, pre_ids + static_cast<ll>(b) * S, p};
  const ll room = static_cast<ll>(max_dec_len[b]) - step_idx[b] - 1;
  const ll budget = min(min(static_cast<ll>(draft_token_num[b]), static_cast<ll>(max_draft_tokens)),
                        min(static_cast<ll>(D - 1), room));

  const ll start = specworker_ngram::BlockContinuationStart(h, length, max_ngram_size,
                                                            min_ngram_size, budget > 0);
  const ll m = start < 0 ? 0 : min(budget, length - start);
  int64_t* row = drafts + static_cast<ll>(b) * D;
  for (int j = 1 + tid; j < D; j += kThreads) row[j] = j - 1 < m ? h(start + j - 1) : -1;
  if (tid == 0) lens[b] = static_cast<int32_t>(1 + m);
}

}  // namespace

extern "C" int specworker_ngram_match_launch(
    const int64_t* input_ids, const int64_t* input_ids_len, const int64_t* pre_ids,
    const int64_t* step_idx, const int32_t* draft_token_num, int64_t* draft_tokens,
    int32_t* seq_lens_this_time, const int32_t* seq_lens_encoder, const int32_t* seq_lens_decoder,
    const int64_t* max_dec_len, const bool* is_block_step, int bsz, int input_ids_stride,
    int pre_ids_stride, int draft_tokens_stride, int max_ngram_size, int max_draft_tokens,
    int min_ngram_size, cudaStream_t stream) {
  const bool bad_sizes = bsz < 0 || input_ids_stride < 0 || pre_ids_stride < 1 ||
                         draft_tokens_stride < 1 || min_ngram_size < 1 ||
                         max_ngram_size < min_ngram_size || max_ngram_size > kMaxNgram ||
                         max_draft_tokens < 0;
  const bool bad_ptrs =
      bsz > 0 && ((input_ids == nullptr && input_ids_stride > 0) || input_ids_len == nullptr ||
                  pre_ids == nullptr || step_idx == nullptr || draft_token_num == nullptr ||
                  draft_tokens == nullptr || seq_lens_this_time == nullptr ||
                  seq_lens_encoder == nullptr || seq_lens_decoder == nullptr ||
                  max_dec_len == nullptr);
  if (bad_sizes || bad_ptrs) return static_cast<int>(cudaErrorInvalidValue);
  if (bsz == 0) return static_cast<int>(cudaSuccess);
  NgramMatchKernel<<<bsz, kThreads, 0, stream>>>(
      input_ids, input_ids_len, pre_ids, step_idx, draft_token_num, draft_tokens,
      seq_lens_this_time, seq_lens_encoder, seq_lens_decoder, max_dec_len, is_block_step,
      input_ids_stride, pre_ids_stride, draft_tokens_stride, max_ngram_size, max_draft_tokens,
      min_ngram_size);
  return static_cast<int>(cudaGetLastError());
}
