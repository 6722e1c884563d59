// speculate_update: commits one verified step to the per-slot lengths and the next step's first
// query token (docs/spec.md §4.5 last item; FastDeploy era [B] speculate_update, with era [C]'s fixes).
// In place; FastDeploy's argument order, mask_rollback optional.
//   seq_lens_encoder, seq_lens_decoder  [N] i32 (in/out)   E_b, Dec_b
//   not_need_stop                       [1] bool (in/out)  on the inputs' device, never the host
//   draft_tokens                        [N, D] i64 (in/out) column 0 = last accepted token
//   actual_draft_token_nums             [N] i32 (in/out)   adaptive draft length (ngram)
//   accept_tokens [N, D] i64, accept_num [N] i32           what verify emitted this step
//   stop_flags [N] bool, seq_lens_this_time [bsz] i32 (L_b), is_block_step [N] bool,
//   stop_nums [1] i64                                      read only
//   mask_rollback                       [N] i32, optional (in/out)
// bsz = seq_lens_this_time rows; N = stop_flags rows >= bsz. The other per-slot buffers need
// >= bsz rows, [n] or FastDeploy's [n, 1]; draft_tokens and accept_tokens >= bsz rows, equal D.
//
// Per slot b < bsz, n = accept_num[b]:
//   paused (is_block_step)   nothing is read or written; counts as stopped.
//   E_b > 0                  the prefill (chunk) is in the KV cache: Dec += E, E = 0,
//                            mask_rollback = 0; stopped or not.
//   stopped, E_b <= 0        Dec unchanged (set_value_by_flags_and_idx zeroes it),
//                            mask_rollback = 0; counts as stopped.
//   running decode           Dec += n; mask_rollback = L - n (draft KV entries to discard);
//                            if L > 1: actual_draft grows by 2 capped at D - 1 when every
//                            draft was accepted (n - 1 == actual_draft), else shrinks by 1,
//                            floor 1.
//   n > 0, not paused        draft_tokens[b, 0] = accept_tokens[b, n - 1] (a slot that stopped
//                            this step too; harmless, its row is not fed again).
// Slots bsz <= b < N count as stopped. not_need_stop[0] = #stopped < stop_nums[0].
// seq_lens_this_time is never written: the proposer still reads the target's L of this step.
//
// Differences from FastDeploy [B], on purpose:
//   - accept_num[b] is read only for live slots (FastDeploy reads it for all 512 threads) and
//     draft_tokens[b, 0] is written only when n > 0 (FastDeploy reads accept_tokens[b, -1]).
//   - paused slots count as stopped (era [C]); in [B] a paused slot b < bsz counts as running.
//   - stopped slots keep actual_draft and Dec (the era-[B] adaptive rule also ran on them).
//   - any bsz and N (FastDeploy: one block of 512 threads); not_need_stop stays on the device
//     (FastDeploy copies it to the host and back with a blocking copy).
// Call order in a step: verify -> host copy of accept_tokens/accept_num/stop_flags -> this op
// -> speculate_set_value_by_flags_and_idx -> proposer. The two state ops do not commute on
// stopped slots (set_value zeroes accept_num and Dec, which this op reads/extends).
//
// Bad values, CPU vs CUDA: the CPU kernel raises, before writing anything, when accept_num of
// a live unpaused slot is outside [0, D] (it indexes accept_tokens). The CUDA kernel cannot
// raise without a host sync; it clamps n to [0, D] for every use instead.
#include <algorithm>
#include <utility>

#include "op_checks.h"

#ifdef SPECWORKER_WITH_CUDA
#include "speculate_update_cuda.h"
#endif

namespace {

constexpr const char* kOp = "speculate_update";

void CheckArgs(const paddle::Tensor& seq_lens_encoder, const paddle::Tensor& seq_lens_decoder,
               const paddle::Tensor& not_need_stop, const paddle::Tensor& draft_tokens,
               const paddle::Tensor& actual_draft_token_nums, const paddle::Tensor& accept_tokens,
               const paddle::Tensor& accept_num, const paddle::Tensor& stop_flags,
               const paddle::Tensor& seq_lens_this_time, const paddle::Tensor& is_block_step,
               const paddle::Tensor& stop_nums,
               const paddle::optional<paddle::Tensor>& mask_rollback) {
  using paddle::DataType;
  using specworker::CheckPerSlotRows;
  const int64_t bsz =
      specworker::CheckPerSlot(kOp, "seq_lens_this_time", seq_lens_this_time, DataType::INT32);
  CheckPerSlotRows(kOp, "stop_flags", stop_flags, DataType::BOOL, bsz);
  CheckPerSlotRows(kOp, "seq_lens_encoder", seq_lens_encoder, DataType::INT32, bsz);
  CheckPerSlotRows(kOp, "seq_lens_decoder", seq_lens_decoder, DataType::INT32, bsz);
  CheckPerSlotRows(kOp, "actual_draft_token_nums", actual_draft_token_nums, DataType::INT32, bsz);
  CheckPerSlotRows(kOp, "accept_num", accept_num, DataType::INT32, bsz);
  CheckPerSlotRows(kOp, "is_block_step", is_block_step, DataType::BOOL, bsz);
  if (mask_rollback) {
    CheckPerSlotRows(kOp, "mask_rollback", *mask_rollback, DataType::INT32, bsz);
  }
  const int64_t D =
      specworker::CheckSlotRows(kOp, "draft_tokens", draft_tokens, DataType::INT64, bsz);
  PD_CHECK(D >= 1, kOp, ": draft_tokens has shape ", specworker::ShapeStr(draft_tokens.shape()),
           ", expected a width D = k + 1 >= 1");
  const int64_t accept_width =
      specworker::CheckSlotRows(kOp, "accept_tokens", accept_tokens, DataType::INT64, bsz);
  PD_CHECK(accept_width == D, kOp, ": accept_tokens has width ", accept_width,
           " but draft_tokens has width D = ", D, "; both are [N, k + 1]");
  specworker::CheckSingle(kOp, "not_need_stop", not_need_stop, DataType::BOOL);
  specworker::CheckSingle(kOp, "stop_nums", stop_nums, DataType::INT64);
  const std::pair<const char*, const paddle::Tensor*> others[] = {
      {"seq_lens_encoder", &seq_lens_encoder}, {"seq_lens_decoder", &seq_lens_decoder},
      {"not_need_stop", &not_need_stop},       {"draft_tokens", &draft_tokens},
      {"actual_draft_token_nums", &actual_draft_token_nums},
      {"accept_tokens", &accept_tokens},       {"accept_num", &accept_num},
      {"stop_flags", &stop_flags},             {"is_block_step", &is_block_step},
      {"stop_nums", &stop_nums}};
  for (const auto& [name, t] : others) {
    specworker::CheckSamePlace(kOp, name, *t, seq_lens_this_time, "seq_lens_this_time");
  }
  if (mask_rollback) {
    specworker::CheckSamePlace(kOp, "mask_rollback", *mask_rollback, seq_lens_this_time,
                               "seq_lens_this_time");
  }
}

void SpeculateUpdateCPU(paddle::Tensor& seq_lens_encoder, paddle::Tensor& seq_lens_decoder,
                        paddle::Tensor& not_need_stop, paddle::Tensor& draft_tokens,
                        paddle::Tensor& actual_draft_token_nums,
                        const paddle::Tensor& accept_tokens, const paddle::Tensor& accept_num,
                        const paddle::Tensor& stop_flags, const paddle::Tensor& seq_lens_this_time,
                        const paddle::Tensor& is_block_step, const paddle::Tensor& stop_nums,
                        paddle::optional<paddle::Tensor>& mask_rollback) {
  const int64_t bsz = seq_lens_this_time.shape()[0];
  const int64_t num_slots = stop_flags.shape()[0];
  const int64_t D = draft_tokens.shape()[1];
  const int32_t max_actual = static_cast<int32_t>(D - 1);
  const int32_t* n_acc = accept_num.data<int32_t>();
  const bool* paused = is_block_step.data<bool>();
  for (int64_t b = 0; b < bsz; ++b) {
    PD_CHECK(paused[b] || (n_acc[b] >= 0 && n_acc[b] <= D), kOp, ": accept_num[", b, "] = ",
             n_acc[b], ", expected 0 <= accept_num <= D = ", D,
             " (it indexes accept_tokens[", b, "])");
  }

  int32_t* enc = seq_lens_encoder.data<int32_t>();
  int32_t* dec = seq_lens_decoder.data<int32_t>();
  int32_t* actual = actual_draft_token_nums.data<int32_t>();
  int32_t* rollback = mask_rollback ? mask_rollback->data<int32_t>() : nullptr;
  int64_t* drafts = draft_tokens.data<int64_t>();
  const int64_t* accepted = accept_tokens.data<int64_t>();
  const bool* stop = stop_flags.data<bool>();
  const int32_t* lens = seq_lens_this_time.data<int32_t>();

  int64_t num_stopped = num_slots - bsz;  // padding slots
  for (int64_t b = 0; b < bsz; ++b) {
    if (paused[b]) {
      ++num_stopped;
      continue;
    }
    const int32_t n = n_acc[b];
    if (stop[b]) ++num_stopped;
    if (enc[b] > 0) {
      dec[b] += enc[b];
      enc[b] = 0;
      if (rollback != nullptr) rollback[b] = 0;
    } else if (stop[b]) {
      if (rollback != nullptr) rollback[b] = 0;
    } else {
      dec[b] += n;
      if (rollback != nullptr) rollback[b] = lens[b] - n;
      if (lens[b] > 1) {
        actual[b] = n - 1 == actual[b] ? std::min(actual[b] + 2, max_actual)
                                        : std::max(actual[b] - 1, 1);
      }
    }
    if (n > 0) drafts[b * D] = accepted[b * D + n - 1];
  }
  not_need_stop.data<bool>()[0] = num_stopped < stop_nums.data<int64_t>()[0];
}

}  // namespace

void SpeculateUpdate(paddle::Tensor& seq_lens_encoder, paddle::Tensor& seq_lens_decoder,
                     paddle::Tensor& not_need_stop, paddle::Tensor& draft_tokens,
                     paddle::Tensor& actual_draft_token_nums, const paddle::Tensor& accept_tokens,
                     const paddle::Tensor& accept_num, const paddle::Tensor& stop_flags,
                     const paddle::Tensor& seq_lens_this_time, const paddle::Tensor& is_block_step,
                     const paddle::Tensor& stop_nums,
                     paddle::optional<paddle::Tensor>& mask_rollback) {
  specworker::CheckGiven(kOp, {{"seq_lens_encoder", &seq_lens_encoder},
                               {"seq_lens_decoder", &seq_lens_decoder},
                               {"not_need_stop", &not_need_stop}, {"draft_tokens", &draft_tokens},
                               {"actual_draft_token_nums", &actual_draft_token_nums},
                               {"accept_tokens", &accept_tokens}, {"accept_num", &accept_num},
                               {"stop_flags", &stop_flags},
                               {"seq_lens_this_time", &seq_lens_this_time},
                               {"is_block_step", &is_block_step}, {"stop_nums", &stop_nums}});
  CheckArgs(seq_lens_encoder, seq_lens_decoder, not_need_stop, draft_tokens,
            actual_draft_token_nums, accept_tokens, accept_num, stop_flags, seq_lens_this_time,
            is_block_step, stop_nums, mask_rollback);
  if (seq_lens_this_time.is_gpu()) {
#ifdef SPECWORKER_WITH_CUDA
    SpeculateUpdateCUDA(seq_lens_encoder, seq_lens_decoder, not_need_stop, draft_tokens,
                        actual_draft_token_nums, accept_tokens, accept_num, stop_flags,
                        seq_lens_this_time, is_block_step, stop_nums, mask_rollback);
    return;
#else
    PD_THROW(kOp, ": got a GPU tensor but the extension was built without CUDA");
#endif
  }
  SpeculateUpdateCPU(seq_lens_encoder, seq_lens_decoder, not_need_stop, draft_tokens,
                     actual_draft_token_nums, accept_tokens, accept_num, stop_flags,
                     seq_lens_this_time, is_block_step, stop_nums, mask_rollback);
}

PD_BUILD_OP(speculate_update)
    .Inputs({"seq_lens_encoder", "seq_lens_decoder", "not_need_stop", "draft_tokens",
             "actual_draft_token_nums", "accept_tokens", "accept_num", "stop_flags",
             "seq_lens_this_time", "is_block_step", "stop_nums",
             paddle::Optional("mask_rollback")})
    .Outputs({"seq_lens_encoder_out", "seq_lens_decoder_out", "not_need_stop_out",
              "draft_tokens_out", "actual_draft_token_nums_out",
              paddle::Optional("mask_rollback_out")})
    .SetInplaceMap({{"seq_lens_encoder", "seq_lens_encoder_out"},
                    {"seq_lens_decoder", "seq_lens_decoder_out"},
                    {"not_need_stop", "not_need_stop_out"},
                    {"draft_tokens", "draft_tokens_out"},
                    {"actual_draft_token_nums", "actual_draft_token_nums_out"},
                    {paddle::Optional("mask_rollback"), paddle::Optional("mask_rollback_out")}})
    .SetKernelFn(PD_KERNEL(SpeculateUpdate));
