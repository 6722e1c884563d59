// hybrid_mtp_ngram CUDA kernel: n-gram drafts after the MTP drafts of every decoding slot in one
// launch (docs/spec.md §5.8; the CPU op in custom_ops/cpu_ops/hybrid_mtp_ngram.cc states the rule).
//   in:     input_ids [>= bsz, S_in] i64 (prompt), input_ids_len, step_idx, max_dec_len [>= bsz]
//           i64, pre_ids [>= bsz, S] i64 (generated tokens at columns 1 .. step_idx),
//           draft_token_num, seq_lens_decoder [>= bsz] i32, seq_lens_encoder [>= bsz] i32 or NULL
//   in/out: draft_tokens [>= bsz, D] i64 (MTP drafts in columns 1 .. s read, columns s + 1 ..
//           written), seq_lens_this_time [bsz] i32
// Parallelization: one block of kThreads threads per slot (grid = bsz, so any bsz), no scratch
// buffer, no atomics, no host sync. The history is h = prompt ++ generated ++ the s MTP drafts,
// length Lh; the block runs specworker_ngram::BlockContinuationStart (ngram_search.cuh, shared with
// ngram_match) on it, then writes the m = min(budget - s, Lh - start) tokens from start after the
// MTP drafts and the -1 tail. The tokens read lie in columns <= s, the ones written in columns > s,
// so the copy has no read-after-write hazard between threads.
// Bounds: input_ids_len is clamped to [0, S_in] and step_idx to [0, S - 1] for the history (the
// CPU op raises instead); rows >= bsz and columns 0 .. s of draft_tokens are never touched.
#include "hybrid_mtp_ngram.h"
#include "ngram_search.cuh"

namespace {

using specworker_ngram::kThreads;
using ll = long long;

struct History {
  const int64_t* prompt;     // row b of input_ids
  const int64_t* generated;  // row b of pre_ids; token j (1-based) at generated[j]
  const int64_t* drafts;     // row b of draft_tokens; MTP draft j (1-based) at drafts[j]
  ll prompt_len, history_len;  // P, P + G

  __device__ __forceinline__ int64_t operator()(ll x) const {
    if (x < prompt_len) return prompt[x];
    if (x < history_len) return generated[x - prompt_len + 1];
    return drafts[x - history_len + 1];
  }
};

__global__ void __launch_bounds__(kThreads)
    HybridMtpNgramKernel(const int64_t* __restrict__ input_ids,
                         const int64_t* __restrict__ prompt_lens,
                         const int64_t* __restrict__ pre_ids, const int64_t* __restrict__ step_idx,
                         const int32_t* __restrict__ draft_token_num, int64_t* drafts,
                         int32_t* __restrict__ lens, const int32_t* __restrict__ dec,
                         const int64_t* __restrict__ max_dec_len, const int32_t* __restrict__ enc,
                         int S_in, int S, int D, int max_ngram_size, int min_ngram_size,
                         int max_draft_tokens, int s) {
  const int b = blockIdx.x;
  const int tid = threadIdx.x;
  // Block-uniform exit: every thread reads the same slot state.
  if ((enc != nullptr && enc[b] > 0) || dec[b] == 0 || lens[b] != 1 + s) return;
  const ll p = min(max(static_cast<ll>(prompt_lens[b]), 0LL), static_cast<ll>(S_in));
  const ll g = min(max(static_cast<ll>(step_idx[b]), 0LL), static_cast<ll>(S - 1));
  const ll length = p + g + s;
  int64_t* row = drafts + static_cast<ll>(b) * D;
  const History h{input_ids + static_cast<ll>(b) * S_in, pre_ids + static_cast<ll>(b) * S, row,
                  p, p + g};
  const ll room = static_cast<ll>(max_dec_len[b]) - step_idx[b] - 1;
  const ll budget = min(min(static_cast<ll>(draft_token_num[b]), static_cast<ll>(max_draft_tokens)),
                        min(static_cast<ll>(D - 1), room));
  const ll extra = budget - s;

  const ll start = specworker_ngram::BlockContinuationStart(h, length, max_ngram_size,
                                                            min_ngram_size, extra > 0);
  const ll m = start < 0 ? 0 : min(extra, length - start);
  // Every thread has read lens[b] (the exit test) before the barrier inside the search.
  for (int j = 1 + s + tid; j < D; j += kThreads) {
    const ll t = j - 1 - s;
    row[j] = t < m ? h(start + t) : -1;
  }
  if (tid == 0) lens[b] = static_cast<int32_t>(1 + s + m);
}

}  // namespace

extern "C" int specworker_hybrid_mtp_ngram_launch(
    const int64_t* input_ids, const int64_t* input_ids_len, const int64_t* pre_ids,
    const int64_t* step_idx, const int32_t* draft_token_num, int64_t* draft_tokens,
    int32_t* seq_lens_this_time, const int32_t* seq_lens_decoder, const int64_t* max_dec_len,
    const int32_t* seq_lens_encoder, int bsz, int input_ids_stride, int pre_ids_stride,
    int draft_tokens_stride, int max_ngram_size, int min_ngram_size, int max_draft_tokens,
    int num_model_steps, cudaStream_t stream) {
  const bool bad_sizes = bsz < 0 || input_ids_stride < 0 || pre_ids_stride < 1 ||
                         draft_tokens_stride < 1 || min_ngram_size < 1 ||
                         max_ngram_size < min_ngram_size ||
                         max_ngram_size > SPECWORKER_NGRAM_MAX_SIZE || max_draft_tokens < 0 ||
                         num_model_steps < 0 || num_model_steps > draft_tokens_stride - 1;
  const bool bad_ptrs =
      bsz > 0 && ((input_ids == nullptr && input_ids_stride > 0) || input_ids_len == nullptr ||
                  pre_ids == nullptr || step_idx == nullptr || draft_token_num == nullptr ||
                  draft_tokens == nullptr || seq_lens_this_time == nullptr ||
                  seq_lens_decoder == nullptr || max_dec_len == nullptr);
  if (bad_sizes || bad_ptrs) return static_cast<int>(cudaErrorInvalidValue);
  if (bsz == 0) return static_cast<int>(cudaSuccess);
  HybridMtpNgramKernel<<<bsz, kThreads, 0, stream>>>(
      input_ids, input_ids_len, pre_ids, step_idx, draft_token_num, draft_tokens,
      seq_lens_this_time, seq_lens_decoder, max_dec_len, seq_lens_encoder, input_ids_stride,
      pre_ids_stride, draft_tokens_stride, max_ngram_size, min_ngram_size, max_draft_tokens,
      num_model_steps);
  return static_cast<int>(cudaGetLastError());
}
