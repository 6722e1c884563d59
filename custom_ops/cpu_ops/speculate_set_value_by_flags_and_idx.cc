// speculate_set_value_by_flags_and_idx: appends this step's accepted tokens to the target
// history and clears stopped slots (docs/spec.md §3 pre_ids, §4.5 last item; docs/spec.md §8.11). In place;
// FastDeploy's argument order.
//   pre_ids_all          [N, S] i64 (in/out)  generated history (share_inputs "pre_ids")
//   accept_tokens        [N, D] i64           what verify emitted this step
//   accept_num           [N] i32 (in/out)     n_b
//   stop_flags           [N] bool
//   seq_lens_this_time   [bsz] i32            only its size is used (bsz)
//   seq_lens_encoder     [N] i32              E_b
//   seq_lens_decoder     [N] i32 (in/out)     Dec_b
//   step_idx             [N] i64              tokens generated so far, this step's included
// Every [N] / [N, *] buffer needs >= bsz rows ([n] or FastDeploy's [n, 1]); rows past bsz are
// not touched.
//
// Per slot b < bsz, n = accept_num[b]:
//   1. History. If n > 0 and the slot holds a sequence (E_b != 0 or Dec_b != 0; FastDeploy's
//      test for an idle slot whose flag is not set), pre_ids_all[b, step_idx - j] =
//      accept_tokens[b, n - 1 - j] for j < n: the accepted tokens occupy history positions
//      step_idx - n + 1 .. step_idx (position 0 is unused). A write whose position is < 1 or
//      >= S is skipped, the others still happen (era [C] skipped the whole slot past S).
//   2. Stopped slot (stop_flags[b]): accept_num[b] = 0, Dec_b = 0, after step 1.
// Step 1 runs whatever the stop flag: a slot that stopped in this step's verify (stop flag set,
// n > 0) gets its final tokens (EOS or the length-stop token included) into the history.
// FastDeploy [B] skipped stopped slots entirely, so the last tokens of every finished request
// never reached pre_ids. A slot stopped in an earlier step has n = 0 (this op zeroed it then,
// and verify does not emit for stopped slots), so nothing is re-appended.
//
// Ordering: the engine receives a stopped slot's tokens from the host copy of accept_tokens /
// accept_num / stop_flags that the ModelRunner enqueues right after verify, on the same stream
// and before this op; this op zeroing accept_num afterwards does not affect that copy. Run
// after speculate_update (it moves a finished prefill's E into Dec, which this op then zeroes
// for a stopped slot); the proposer runs after both and needs accept_num only for running slots.
//
// Bad values, CPU vs CUDA: the CPU kernel raises, before writing anything, when accept_num of
// a slot b < bsz is outside [0, D] (it indexes accept_tokens). The CUDA kernel cannot raise
// without a host sync; it clamps n to [0, D] instead. History positions outside [1, S) are
// skipped on both.
#include <utility>

#include "op_checks.h"

#ifdef SPECWORKER_WITH_CUDA
#include "speculate_set_value_by_flags_and_idx_cuda.h"
#endif

namespace {

constexpr const char* kOp = "speculate_set_value_by_flags_and_idx";

void CheckArgs(const paddle::Tensor& pre_ids_all, const paddle::Tensor& accept_tokens,
               const paddle::Tensor& accept_num, const paddle::Tensor& stop_flags,
               const paddle::Tensor& seq_lens_this_time, const paddle::Tensor& seq_lens_encoder,
               const paddle::Tensor& seq_lens_decoder, const paddle::Tensor& step_idx) {
  using paddle::DataType;
  using specworker::CheckPerSlotRows;
  const int64_t bsz =
      specworker::CheckPerSlot(kOp, "seq_lens_this_time", seq_lens_this_time, DataType::INT32);
  specworker::CheckSlotRows(kOp, "pre_ids_all", pre_ids_all, DataType::INT64, bsz);
  specworker::CheckSlotRows(kOp, "accept_tokens", accept_tokens, DataType::INT64, bsz);
  CheckPerSlotRows(kOp, "accept_num", accept_num, DataType::INT32, bsz);
  CheckPerSlotRows(kOp, "stop_flags", stop_flags, DataType::BOOL, bsz);
  CheckPerSlotRows(kOp, "seq_lens_encoder", seq_lens_encoder, DataType::INT32, bsz);
  CheckPerSlotRows(kOp, "seq_lens_decoder", seq_lens_decoder, DataType::INT32, bsz);
  CheckPerSlotRows(kOp, "step_idx", step_idx, DataType::INT64, bsz);
  const std::pair<const char*, const paddle::Tensor*> others[] = {
      {"pre_ids_all", &pre_ids_all},     {"accept_tokens", &accept_tokens},
      {"accept_num", &accept_num},       {"stop_flags", &stop_flags},
      {"seq_lens_encoder", &seq_lens_encoder}, {"seq_lens_decoder", &seq_lens_decoder},
      {"step_idx", &step_idx}};
  for (const auto& [name, t] : others) {
    specworker::CheckSamePlace(kOp, name, *t, seq_lens_this_time, "seq_lens_this_time");
  }
}

void SpeculateSetValueByFlagsAndIdxCPU(paddle::Tensor& pre_ids_all,
                                       const paddle::Tensor& accept_tokens,
                                       paddle::Tensor& accept_num,
                                       const paddle::Tensor& stop_flags,
                                       const paddle::Tensor& seq_lens_this_time,
                                       const paddle::Tensor& seq_lens_encoder,
                                       paddle::Tensor& seq_lens_decoder,
                                       const paddle::Tensor& step_idx) {
  const int64_t bsz = seq_lens_this_time.shape()[0];
  const int64_t S = pre_ids_all.shape()[1];
  const int64_t D = accept_tokens.shape()[1];
  int32_t* n_acc = accept_num.data<int32_t>();
  for (int64_t b = 0; b < bsz; ++b) {
    PD_CHECK(n_acc[b] >= 0 && n_acc[b] <= D, kOp, ": accept_num[", b, "] = ", n_acc[b],
             ", expected 0 <= accept_num <= D = ", D, " (it indexes accept_tokens[", b, "])");
  }

  int64_t* history = pre_ids_all.data<int64_t>();
  int32_t* dec = seq_lens_decoder.data<int32_t>();
  const int64_t* accepted = accept_tokens.data<int64_t>();
  const bool* stop = stop_flags.data<bool>();
  const int32_t* enc = seq_lens_encoder.data<int32_t>();
  const int64_t* step = step_idx.data<int64_t>();
  for (int64_t b = 0; b < bsz; ++b) {
    const int32_t n = n_acc[b];
    if (n > 0 && (enc[b] != 0 || dec[b] != 0)) {
      for (int32_t j = 0; j < n; ++j) {
        const int64_t pos = step[b] - j;
        if (pos >= 1 && pos < S) history[b * S + pos] = accepted[b * D + n - 1 - j];
      }
    }
    if (stop[b]) {
      n_acc[b] = 0;
      dec[b] = 0;
    }
  }
}

}  // namespace

void SpeculateSetValueByFlagsAndIdx(paddle::Tensor& pre_ids_all,
                                    const paddle::Tensor& accept_tokens,
                                    paddle::Tensor& accept_num,
                                    const paddle::Tensor& stop_flags,
                                    const paddle::Tensor& seq_lens_this_time,
                                    const paddle::Tensor& seq_lens_encoder,
                                    paddle::Tensor& seq_lens_decoder,
                                    const paddle::Tensor& step_idx) {
  specworker::CheckGiven(kOp, {{"pre_ids_all", &pre_ids_all}, {"accept_tokens", &accept_tokens},
                               {"accept_num", &accept_num}, {"stop_flags", &stop_flags},
                               {"seq_lens_this_time", &seq_lens_this_time},
                               {"seq_lens_encoder", &seq_lens_encoder},
                               {"seq_lens_decoder", &seq_lens_decoder}, {"step_idx", &step_idx}});
  CheckArgs(pre_ids_all, accept_tokens, accept_num, stop_flags, seq_lens_this_time,
            seq_lens_encoder, seq_lens_decoder, step_idx);
  if (seq_lens_this_time.is_gpu()) {
#ifdef SPECWORKER_WITH_CUDA
    SpeculateSetValueByFlagsAndIdxCUDA(pre_ids_all, accept_tokens, accept_num, stop_flags,
                                       seq_lens_this_time, seq_lens_encoder, seq_lens_decoder,
                                       step_idx);
    return;
#else
    PD_THROW(kOp, ": got a GPU tensor but the extension was built without CUDA");
#endif
  }
  SpeculateSetValueByFlagsAndIdxCPU(pre_ids_all, accept_tokens, accept_num, stop_flags,
                                    seq_lens_this_time, seq_lens_encoder, seq_lens_decoder,
                                    step_idx);
}

PD_BUILD_OP(speculate_set_value_by_flags_and_idx)
    .Inputs({"pre_ids_all", "accept_tokens", "accept_num", "stop_flags", "seq_lens_this_time",
             "seq_lens_encoder", "seq_lens_decoder", "step_idx"})
    .Outputs({"pre_ids_all_out", "accept_num_out", "seq_lens_decoder_out"})
    .SetInplaceMap({{"pre_ids_all", "pre_ids_all_out"},
                    {"accept_num", "accept_num_out"},
                    {"seq_lens_decoder", "seq_lens_decoder_out"}})
    .SetKernelFn(PD_KERNEL(SpeculateSetValueByFlagsAndIdx));
