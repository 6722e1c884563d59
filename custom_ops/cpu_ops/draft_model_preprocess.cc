// draft_model_preprocess: the target's state after verification -> the draft's state for this
// round (docs/spec.md §5; docs/spec.md §8.12, era [C] "shadow state"). In place.
//   draft:  draft_tokens [N, Dd] i64, input_ids [N, S] i64, stop_flags [bsz] bool,
//           seq_lens_this_time / seq_lens_encoder / seq_lens_decoder [bsz] i32, step_idx [bsz] i64,
//           not_need_stop [1] bool, pre_ids [N, Sp] i64                         (all updated)
//   target: accept_tokens [N, Da] i64, accept_num [bsz] i32, target_model_seq_lens_encoder
//           (unused, FastDeploy's signature) / target_model_seq_lens_decoder [bsz] i32,
//           target_model_step_idx [bsz] i64, target_model_stop_flags [bsz] bool,
//           max_dec_len [bsz] i64, target_model_draft_tokens [N, Dt] i64 (updated),
//           target_model_is_block_step [bsz] bool, optional [ours]
//   attrs:  num_model_steps >= 1, is_splitwise_prefill ([C]), truncate_first_token ([B], ours here)
// Per-slot inputs may be [bsz] or FastDeploy's [bsz, 1]; row buffers have N >= bsz rows.
//
// Per slot b < bsz:
//   target_model_draft_tokens[b, 1:] = -1 (slot 0, the last accepted token, stays).
//   Skip (stop = true, L = E = Dec = step_idx = 0) when the target slot is stopped or paused
//   (is_block_step), or when step_idx_t + num_model_steps >= max_dec_len (unless
//   is_splitwise_prefill). Nothing needs keeping for a paused slot: on resume the decode branch
//   re-derives Dec and step_idx from the target (the draft KV cache is not this op's state).
//   Draft prefill (E > 0; the target finished its prefill this step, accept_tokens[b, 0] is its
//   first token): the draft prompt is the target prompt shifted left by one, so the first token
//   completes it at input_ids[b, E - 1] and L = E (truncate_first_token; otherwise it is
//   appended at input_ids[b, E] and L = E + 1); pre_ids[b, 0] = it; step_idx = step_idx_t - 1;
//   Dec is kept (the prefix-cache start written at insertion).
//   Draft decode, n = accept_num[b]: Dec = Dec_t - n and step_idx = step_idx_t - n, re-derived
//   each round ([C]; [A]/[B] rolled back the draft's own progress, which drifted); the draft's
//   KV entries of rejected drafts are overwritten. draft_tokens[b, 0:n] = accept_tokens[b, 0:n];
//   pre_ids[b, step_idx_t - n + i] = accept_tokens[b, i] (the draft's history is 0-based:
//   pre_ids_draft[j] holds generated token j + 1; positions >= Sp are skipped); L = n.
//   not_need_stop[0] = any slot not skipped (kept on the device; never copied to the host).
//
// Bad values, CPU vs CUDA: the CPU kernel raises, before writing anything, for a running decode
// slot with accept_num outside [0, min(Da, Dd)] or a pre_ids position < 0, and for a draft
// prefill whose first-token position is >= S. The CUDA kernel cannot raise without a host sync:
// it clamps accept_num into [0, min(Da, Dd)] (and uses the clamped n everywhere) and skips
// writes outside input_ids / pre_ids.
#include "op_checks.h"

#ifdef SPECWORKER_WITH_CUDA
#include "draft_model_preprocess_cuda.h"
#endif

namespace {

constexpr const char* kOp = "draft_model_preprocess";

using paddle::DataType;

void CheckArgs(const paddle::Tensor& draft_tokens, const paddle::Tensor& input_ids,
               const paddle::Tensor& stop_flags, const paddle::Tensor& seq_lens_this_time,
               const paddle::Tensor& seq_lens_encoder, const paddle::Tensor& seq_lens_decoder,
               const paddle::Tensor& step_idx, const paddle::Tensor& not_need_stop,
               const paddle::Tensor& pre_ids, const paddle::Tensor& accept_tokens,
               const paddle::Tensor& accept_num,
               const paddle::Tensor& target_model_seq_lens_encoder,
               const paddle::Tensor& target_model_seq_lens_decoder,
               const paddle::Tensor& target_model_step_idx,
               const paddle::Tensor& target_model_stop_flags, const paddle::Tensor& max_dec_len,
               const paddle::Tensor& target_model_draft_tokens,
               const paddle::optional<paddle::Tensor>& target_model_is_block_step,
               int num_model_steps) {
  using specworker::CheckPerSlot;
  using specworker::CheckSlotRows;
  const int64_t bsz =
      CheckPerSlot(kOp, "seq_lens_this_time", seq_lens_this_time, DataType::INT32);
  CheckPerSlot(kOp, "stop_flags", stop_flags, DataType::BOOL, bsz);
  CheckPerSlot(kOp, "seq_lens_encoder", seq_lens_encoder, DataType::INT32, bsz);
  CheckPerSlot(kOp, "seq_lens_decoder", seq_lens_decoder, DataType::INT32, bsz);
  CheckPerSlot(kOp, "step_idx", step_idx, DataType::INT64, bsz);
  CheckPerSlot(kOp, "accept_num", accept_num, DataType::INT32, bsz);
  CheckPerSlot(kOp, "target_model_seq_lens_encoder", target_model_seq_lens_encoder,
               DataType::INT32, bsz);
  CheckPerSlot(kOp, "target_model_seq_lens_decoder", target_model_seq_lens_decoder,
               DataType::INT32, bsz);
  CheckPerSlot(kOp, "target_model_step_idx", target_model_step_idx, DataType::INT64, bsz);
  CheckPerSlot(kOp, "target_model_stop_flags", target_model_stop_flags, DataType::BOOL, bsz);
  CheckPerSlot(kOp, "max_dec_len", max_dec_len, DataType::INT64, bsz);
  if (target_model_is_block_step) {
    CheckPerSlot(kOp, "target_model_is_block_step", *target_model_is_block_step, DataType::BOOL,
                 bsz);
  }
  CheckSlotRows(kOp, "draft_tokens", draft_tokens, DataType::INT64, bsz);
  CheckSlotRows(kOp, "input_ids", input_ids, DataType::INT64, bsz);
  CheckSlotRows(kOp, "pre_ids", pre_ids, DataType::INT64, bsz);
  CheckSlotRows(kOp, "target_model_draft_tokens", target_model_draft_tokens, DataType::INT64,
                bsz);
  const int64_t Da = CheckSlotRows(kOp, "accept_tokens", accept_tokens, DataType::INT64, bsz);
  PD_CHECK(Da >= 1, kOp, ": accept_tokens has shape ",
           specworker::ShapeStr(accept_tokens.shape()), ", expected at least one column");
  specworker::CheckDtype(kOp, "not_need_stop", not_need_stop, DataType::BOOL);
  PD_CHECK(not_need_stop.shape() == std::vector<int64_t>{1}, kOp, ": not_need_stop has shape ",
           specworker::ShapeStr(not_need_stop.shape()), ", expected [1]");
  PD_CHECK(num_model_steps >= 1, kOp, ": num_model_steps = ", num_model_steps,
           ", expected >= 1");
  const std::pair<const char*, const paddle::Tensor*> others[] = {
      {"draft_tokens", &draft_tokens},
      {"input_ids", &input_ids},
      {"stop_flags", &stop_flags},
      {"seq_lens_encoder", &seq_lens_encoder},
      {"seq_lens_decoder", &seq_lens_decoder},
      {"step_idx", &step_idx},
      {"not_need_stop", &not_need_stop},
      {"pre_ids", &pre_ids},
      {"accept_tokens", &accept_tokens},
      {"accept_num", &accept_num},
      {"target_model_seq_lens_encoder", &target_model_seq_lens_encoder},
      {"target_model_seq_lens_decoder", &target_model_seq_lens_decoder},
      {"target_model_step_idx", &target_model_step_idx},
      {"target_model_stop_flags", &target_model_stop_flags},
      {"max_dec_len", &max_dec_len},
      {"target_model_draft_tokens", &target_model_draft_tokens},
  };
  for (const auto& [name, t] : others) {
    specworker::CheckSamePlace(kOp, name, *t, seq_lens_this_time, "seq_lens_this_time");
  }
  if (target_model_is_block_step) {
    specworker::CheckSamePlace(kOp, "target_model_is_block_step", *target_model_is_block_step,
                               seq_lens_this_time, "seq_lens_this_time");
  }
}

struct Slots {
  int64_t* draft_tokens;
  int64_t* input_ids;
  bool* stop;
  int32_t* lens;
  int32_t* enc;
  int32_t* dec;
  int64_t* step;
  int64_t* pre_ids;
  const int64_t* accept_tokens;
  const int32_t* accept_num;
  const int32_t* t_dec;
  const int64_t* t_step;
  const bool* t_stop;
  const int64_t* max_dec_len;
  int64_t* t_drafts;
  const bool* paused;  // nullptr when target_model_is_block_step is omitted
  int64_t Dd, S, Sp, Da, Dt;
};

bool Skipped(const Slots& s, int64_t b, int num_model_steps, bool is_splitwise_prefill) {
  if (s.t_stop[b] || (s.paused != nullptr && s.paused[b])) return true;
  return !is_splitwise_prefill && s.t_step[b] + num_model_steps >= s.max_dec_len[b];
}

// Raises for every value that would index out of range; runs before anything is written.
void CheckValues(const Slots& s, int64_t bsz, int num_model_steps, bool is_splitwise_prefill,
                 bool truncate_first_token) {
  for (int64_t b = 0; b < bsz; ++b) {
    if (Skipped(s, b, num_model_steps, is_splitwise_prefill)) continue;
    if (s.enc[b] > 0) {
      const int64_t pos = truncate_first_token ? s.enc[b] - 1 : s.enc[b];
      PD_CHECK(pos < s.S, kOp, ": slot ", b, " is a draft prefill with seq_lens_encoder = ",
               s.enc[b], "; its first token goes to input_ids[", b, ", ", pos,
               "] but input_ids has width S = ", s.S);
      continue;
    }
    const int32_t n = s.accept_num[b];
    PD_CHECK(n >= 0 && n <= s.Da && n <= s.Dd, kOp, ": accept_num[", b, "] = ", n,
             " on running decode slot ", b, ", expected 0 <= accept_num <= min(accept_tokens width ",
             s.Da, ", draft_tokens width ", s.Dd, ")");
    PD_CHECK(n == 0 || s.t_step[b] - n >= 0, kOp, ": slot ", b, " writes pre_ids from position ",
             "target_model_step_idx - accept_num = ", s.t_step[b], " - ", n, " < 0");
  }
}

void DraftModelPreprocessCPU(const Slots& s, int64_t bsz, bool* not_need_stop,
                             int num_model_steps, bool is_splitwise_prefill,
                             bool truncate_first_token) {
  bool any_running = false;
  for (int64_t b = 0; b < bsz; ++b) {
    for (int64_t i = 1; i < s.Dt; ++i) s.t_drafts[b * s.Dt + i] = -1;
    if (Skipped(s, b, num_model_steps, is_splitwise_prefill)) {
      s.stop[b] = true;
      s.lens[b] = s.enc[b] = s.dec[b] = 0;
      s.step[b] = 0;
      continue;
    }
    any_running = true;
    s.stop[b] = false;
    const int64_t* accepted = s.accept_tokens + b * s.Da;
    if (s.enc[b] > 0) {
      const int64_t pos = truncate_first_token ? s.enc[b] - 1 : s.enc[b];
      s.input_ids[b * s.S + pos] = accepted[0];
      if (s.Sp > 0) s.pre_ids[b * s.Sp] = accepted[0];
      s.lens[b] = truncate_first_token ? s.enc[b] : s.enc[b] + 1;
      s.step[b] = s.t_step[b] - 1;
      continue;
    }
    const int32_t n = s.accept_num[b];
    s.dec[b] = s.t_dec[b] - n;
    s.step[b] = s.t_step[b] - n;
    for (int32_t i = 0; i < n; ++i) {
      s.draft_tokens[b * s.Dd + i] = accepted[i];
      const int64_t pos = s.t_step[b] - n + i;
      if (pos < s.Sp) s.pre_ids[b * s.Sp + pos] = accepted[i];
    }
    s.lens[b] = n;
  }
  not_need_stop[0] = any_running;
}

template <typename T>
T* Mut(const paddle::Tensor& x) {
  return const_cast<T*>(x.data<T>());
}

}  // namespace

void DraftModelPreprocess(const paddle::Tensor& draft_tokens, const paddle::Tensor& input_ids,
                          const paddle::Tensor& stop_flags,
                          const paddle::Tensor& seq_lens_this_time,
                          const paddle::Tensor& seq_lens_encoder,
                          const paddle::Tensor& seq_lens_decoder, const paddle::Tensor& step_idx,
                          const paddle::Tensor& not_need_stop, const paddle::Tensor& pre_ids,
                          const paddle::Tensor& accept_tokens, const paddle::Tensor& accept_num,
                          const paddle::Tensor& target_model_seq_lens_encoder,
                          const paddle::Tensor& target_model_seq_lens_decoder,
                          const paddle::Tensor& target_model_step_idx,
                          const paddle::Tensor& target_model_stop_flags,
                          const paddle::Tensor& max_dec_len,
                          const paddle::Tensor& target_model_draft_tokens,
                          const paddle::optional<paddle::Tensor>& target_model_is_block_step,
                          int num_model_steps, bool is_splitwise_prefill,
                          bool truncate_first_token) {
  specworker::CheckGiven(kOp, {{"draft_tokens", &draft_tokens}, {"input_ids", &input_ids},
                               {"stop_flags", &stop_flags},
                               {"seq_lens_this_time", &seq_lens_this_time},
                               {"seq_lens_encoder", &seq_lens_encoder},
                               {"seq_lens_decoder", &seq_lens_decoder}, {"step_idx", &step_idx},
                               {"not_need_stop", &not_need_stop}, {"pre_ids", &pre_ids},
                               {"accept_tokens", &accept_tokens}, {"accept_num", &accept_num},
                               {"target_model_seq_lens_encoder", &target_model_seq_lens_encoder},
                               {"target_model_seq_lens_decoder", &target_model_seq_lens_decoder},
                               {"target_model_step_idx", &target_model_step_idx},
                               {"target_model_stop_flags", &target_model_stop_flags},
                               {"max_dec_len", &max_dec_len},
                               {"target_model_draft_tokens", &target_model_draft_tokens}});
  CheckArgs(draft_tokens, input_ids, stop_flags, seq_lens_this_time, seq_lens_encoder,
            seq_lens_decoder, step_idx, not_need_stop, pre_ids, accept_tokens, accept_num,
            target_model_seq_lens_encoder, target_model_seq_lens_decoder, target_model_step_idx,
            target_model_stop_flags, max_dec_len, target_model_draft_tokens,
            target_model_is_block_step, num_model_steps);
  if (seq_lens_this_time.is_gpu()) {
#ifdef SPECWORKER_WITH_CUDA
    DraftModelPreprocessCUDA(draft_tokens, input_ids, stop_flags, seq_lens_this_time,
                             seq_lens_encoder, seq_lens_decoder, step_idx, not_need_stop, pre_ids,
                             accept_tokens, accept_num, target_model_seq_lens_decoder,
                             target_model_step_idx, target_model_stop_flags, max_dec_len,
                             target_model_draft_tokens, target_model_is_block_step,
                             num_model_steps, is_splitwise_prefill, truncate_first_token);
    return;
#else
    PD_THROW(kOp, ": got a GPU tensor but the extension was built without CUDA");
#endif
  }
  const Slots s{Mut<int64_t>(draft_tokens),
                Mut<int64_t>(input_ids),
                Mut<bool>(stop_flags),
                Mut<int32_t>(seq_lens_this_time),
                Mut<int32_t>(seq_lens_encoder),
                Mut<int32_t>(seq_lens_decoder),
                Mut<int64_t>(step_idx),
                Mut<int64_t>(pre_ids),
                accept_tokens.data<int64_t>(),
                accept_num.data<int32_t>(),
                target_model_seq_lens_decoder.data<int32_t>(),
                target_model_step_idx.data<int64_t>(),
                target_model_stop_flags.data<bool>(),
                max_dec_len.data<int64_t>(),
                Mut<int64_t>(target_model_draft_tokens),
                target_model_is_block_step ? target_model_is_block_step->data<bool>() : nullptr,
                draft_tokens.shape()[1],
                input_ids.shape()[1],
                pre_ids.shape()[1],
                accept_tokens.shape()[1],
                target_model_draft_tokens.shape()[1]};
  const int64_t bsz = seq_lens_this_time.shape()[0];
  CheckValues(s, bsz, num_model_steps, is_splitwise_prefill, truncate_first_token);
  DraftModelPreprocessCPU(s, bsz, Mut<bool>(not_need_stop), num_model_steps,
                          is_splitwise_prefill, truncate_first_token);
}

PD_BUILD_OP(draft_model_preprocess)
    .Inputs({"draft_tokens", "input_ids", "stop_flags", "seq_lens_this_time", "seq_lens_encoder",
             "seq_lens_decoder", "step_idx", "not_need_stop", "pre_ids", "accept_tokens",
             "accept_num", "target_model_seq_lens_encoder", "target_model_seq_lens_decoder",
             "target_model_step_idx", "target_model_stop_flags", "max_dec_len",
             "target_model_draft_tokens", paddle::Optional("target_model_is_block_step")})
    .Outputs({"draft_tokens_out", "input_ids_out", "stop_flags_out", "seq_lens_this_time_out",
              "seq_lens_encoder_out", "seq_lens_decoder_out", "step_idx_out",
              "not_need_stop_out", "pre_ids_out", "target_model_draft_tokens_out"})
    .Attrs({"num_model_steps: int", "is_splitwise_prefill: bool", "truncate_first_token: bool"})
    .SetInplaceMap({{"draft_tokens", "draft_tokens_out"},
                    {"input_ids", "input_ids_out"},
                    {"stop_flags", "stop_flags_out"},
                    {"seq_lens_this_time", "seq_lens_this_time_out"},
                    {"seq_lens_encoder", "seq_lens_encoder_out"},
                    {"seq_lens_decoder", "seq_lens_decoder_out"},
                    {"step_idx", "step_idx_out"},
                    {"not_need_stop", "not_need_stop_out"},
                    {"pre_ids", "pre_ids_out"},
                    {"target_model_draft_tokens", "target_model_draft_tokens_out"}})
    .SetKernelFn(PD_KERNEL(DraftModelPreprocess));
