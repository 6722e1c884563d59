// draft_model_preprocess CUDA kernel (docs/spec.md §5; docs/spec.md §8.12, era [C] "shadow
// state"): the target's state after verification -> the draft's state for this round, in place.
//   draft:  draft_tokens [N, Dd], input_ids [N, S], pre_ids [N, Sp] i64; stop_flags [bsz] bool;
//           seq_lens_this_time / _encoder / _decoder [bsz] i32; step_idx [bsz] i64;
//           not_need_stop [1] bool
//   target: accept_tokens [N, Da] i64, accept_num [bsz] i32, seq_lens_decoder [bsz] i32,
//           step_idx [bsz] i64, stop_flags [bsz] bool, max_dec_len [bsz] i64,
//           is_block_step [bsz] bool (optional), draft_tokens [N, Dt] i64 (columns 1.. reset)
// Per slot (the rules are in cpu_ops/draft_model_preprocess.cc): skip (stopped, paused or near
// max_dec_len) -> stop, L = E = Dec = step_idx = 0; draft prefill -> the target's first token
// completes the shifted prompt; decode -> Dec and step_idx re-derived from the target, the
// accepted tokens copied to draft_tokens and pre_ids, L = n.
// Parallelization: one thread per slot, 256-thread blocks, ceil(bsz / 256) blocks, so any bsz
// works in one launch (FastDeploy: one block of 512 / 1024 threads, bsz capped). A slot's work
// is O(Dt + n) scalar stores. not_need_stop is cleared by a cudaMemsetAsync on the same stream,
// then each block ORs its slots (__syncthreads_or) and one thread stores true: every writer stores
// the same value, so no atomics and no second kernel.
// Out-of-range values stay in bounds (the CPU op raises instead): accept_num is clamped into
// [0, min(Da, Dd)] and the clamped n is used everywhere; input_ids / pre_ids writes outside the
// row are skipped; an accept_tokens row of width 0 reads as -1.
#include "draft_model_preprocess.h"

namespace {

constexpr int kThreads = 256;

struct Params {
  int64_t* draft_tokens;
  int64_t* input_ids;
  bool* stop;
  int32_t* lens;
  int32_t* enc;
  int32_t* dec;
  int64_t* step;
  bool* not_need_stop;
  int64_t* pre_ids;
  const int64_t* accept_tokens;
  const int32_t* accept_num;
  const int32_t* t_dec;
  const int64_t* t_step;
  const bool* t_stop;
  const int64_t* max_dec_len;
  int64_t* t_drafts;
  const bool* paused;
  int Dd, S, Sp, Da, Dt;
  int bsz;
  int num_model_steps;
  bool is_splitwise_prefill;
  bool truncate_first_token;
};

// Returns whether the draft slot runs this round.
__device__ __forceinline__ bool PreprocessSlot(const Params& p, int b) {
  int64_t* t_drafts = p.t_drafts + static_cast<long long>(b) * p.Dt;
  for (int i = 1; i < p.Dt; ++i) t_drafts[i] = -1;

  const int64_t t_step = p.t_step[b];
  bool skip = p.t_stop[b] || (p.paused != nullptr && p.paused[b]);
  if (!p.is_splitwise_prefill && t_step + p.num_model_steps >= p.max_dec_len[b]) skip = true;
  if (skip) {
    p.stop[b] = true;
    p.lens[b] = 0;
    p.enc[b] = 0;
    p.dec[b] = 0;
    p.step[b] = 0;
    return false;
  }
  p.stop[b] = false;
  const int64_t* accepted = p.accept_tokens + static_cast<long long>(b) * p.Da;
  const int32_t enc = p.enc[b];
  if (enc > 0) {  // the target finished its prefill; accepted[0] is its first token
    const int64_t first = p.Da > 0 ? accepted[0] : -1;
    const long long pos = p.truncate_first_token ? enc - 1LL : enc;
    if (pos < p.S) p.input_ids[static_cast<long long>(b) * p.S + pos] = first;
    if (p.Sp > 0) p.pre_ids[static_cast<long long>(b) * p.Sp] = first;
    p.lens[b] = p.truncate_first_token ? enc : enc + 1;
    p.step[b] = t_step - 1;
    return true;
  }
  // Shadow state ([C]): re-derived from the target every round, never rolled back.
  const int n = min(max(p.accept_num[b], 0), min(p.Da, p.Dd));
  p.dec[b] = p.t_dec[b] - n;
  p.step[b] = t_step - n;
  int64_t* drafts = p.draft_tokens + static_cast<long long>(b) * p.Dd;
  int64_t* history = p.pre_ids + static_cast<long long>(b) * p.Sp;
  for (int i = 0; i < n; ++i) {
    drafts[i] = accepted[i];
    const int64_t pos = t_step - n + i;
    if (pos >= 0 && pos < p.Sp) history[pos] = accepted[i];
  }
  p.lens[b] = n;
  return true;
}

__global__ void __launch_bounds__(kThreads) DraftModelPreprocessKernel(Params p) {
  const int b = blockIdx.x * kThreads + threadIdx.x;
  const bool running = b < p.bsz && PreprocessSlot(p, b);
  if (__syncthreads_or(running) && threadIdx.x == 0) *p.not_need_stop = true;
}

}  // namespace

extern "C" int specworker_draft_model_preprocess_launch(
    int64_t* draft_tokens, int draft_tokens_len, int64_t* input_ids, int input_ids_len,
    bool* stop_flags, int32_t* seq_lens_this_time, int32_t* seq_lens_encoder,
    int32_t* seq_lens_decoder, int64_t* step_idx, bool* not_need_stop, int64_t* pre_ids,
    int pre_ids_len, const int64_t* accept_tokens, int accept_tokens_len,
    const int32_t* accept_num, const int32_t* target_model_seq_lens_decoder,
    const int64_t* target_model_step_idx, const bool* target_model_stop_flags,
    const int64_t* max_dec_len, int64_t* target_model_draft_tokens,
    int target_model_draft_tokens_len, const bool* target_model_is_block_step, int bsz,
    int num_model_steps, int is_splitwise_prefill, int truncate_first_token,
    cudaStream_t stream) {
  const bool bad_sizes = bsz < 0 || num_model_steps < 1 || draft_tokens_len < 0 ||
                         input_ids_len < 0 || pre_ids_len < 0 || accept_tokens_len < 0 ||
                         target_model_draft_tokens_len < 0;
  // A NULL is only allowed where nothing would be read or written through it.
  const bool bad_ptrs =
      not_need_stop == nullptr ||
      (bsz > 0 &&
       (stop_flags == nullptr || seq_lens_this_time == nullptr || seq_lens_encoder == nullptr ||
        seq_lens_decoder == nullptr || step_idx == nullptr || accept_num == nullptr ||
        target_model_seq_lens_decoder == nullptr || target_model_step_idx == nullptr ||
        target_model_stop_flags == nullptr || max_dec_len == nullptr ||
        (draft_tokens_len > 0 && draft_tokens == nullptr) ||
        (input_ids_len > 0 && input_ids == nullptr) || (pre_ids_len > 0 && pre_ids == nullptr) ||
        (accept_tokens_len > 0 && accept_tokens == nullptr) ||
        (target_model_draft_tokens_len > 0 && target_model_draft_tokens == nullptr)));
  if (bad_sizes || bad_ptrs) return static_cast<int>(cudaErrorInvalidValue);
  cudaError_t err = cudaMemsetAsync(not_need_stop, 0, sizeof(bool), stream);
  if (err != cudaSuccess || bsz == 0) return static_cast<int>(err);
  Params p{draft_tokens,
           input_ids,
           stop_flags,
           seq_lens_this_time,
           seq_lens_encoder,
           seq_lens_decoder,
           step_idx,
           not_need_stop,
           pre_ids,
           accept_tokens,
           accept_num,
           target_model_seq_lens_decoder,
           target_model_step_idx,
           target_model_stop_flags,
           max_dec_len,
           target_model_draft_tokens,
           target_model_is_block_step,
           draft_tokens_len,
           input_ids_len,
           pre_ids_len,
           accept_tokens_len,
           target_model_draft_tokens_len,
           bsz,
           num_model_steps,
           is_splitwise_prefill != 0,
           truncate_first_token != 0};
  const int blocks = (bsz + kThreads - 1) / kThreads;
  DraftModelPreprocessKernel<<<blocks, kThreads, 0, stream>>>(p);
  return static_cast<int>(cudaGetLastError());
}
