// draft_model_postprocess: hands the proposer's drafts back to the target by setting the target's
// seq_lens_this_time for the next step (docs/spec.md §5; docs/spec.md §8.15).
//   base_model_draft_tokens       [N, D] int64: the target's draft_tokens; column 0 the last
//                                 accepted token, columns 1 .. the drafts, -1 = no draft
//   base_model_seq_lens_this_time [bsz] (or [bsz, 1]) int32, in place
//   base_model_seq_lens_encoder   [bsz] int32; base_model_stop_flags [bsz] bool
//   base_model_is_block_step      [bsz] bool, optional [ours]: target slot paused (preempted)
// Per slot b < bsz:
//   stopped or paused  -> L_b = 0;
//   prefill (E_b > 0)  -> L_b untouched (the scheduler sets the next chunk);
//   decode             -> L_b = 1 + the drafts in columns 1 .. before the first -1.
// [ours] Drafts must be contiguous. FastDeploy counted every entry != -1 anywhere in the row, so
// a gap (a -1 followed by a draft) made the target feed that -1 as a token. A gap is a bug
// upstream: the CPU kernel raises naming the slot and the columns (checked before any write); the
// CUDA kernel cannot raise without a host sync, so it counts the contiguous prefix only and
// never feeds the drafts past the gap. A running decode slot with column 0 = -1 (no last
// accepted token to feed) raises here too; the CUDA kernel counts it as above.
// [ours] A paused slot gets L_b = 0 whether or not its stop flag is set: speculate_verify,
// speculate_update and draft_model_preprocess (given is_block_step) all treat is_block_step alone
// as "not running", so without this input a slot paused without its stop flag was handed L_b = 1
// here and fed to the next step's forward (docs/spec.md §1, §2.2 item 10: paused slots have L = 0).
// Omitted, a paused slot must also be stopped, as FastDeploy's preemption does.
#include <vector>

#include "op_checks.h"

#ifdef SPECWORKER_WITH_CUDA
#include "draft_model_postprocess_cuda.h"
#endif

namespace {

constexpr const char* kOp = "draft_model_postprocess";
using paddle::DataType;

void CheckArgs(const paddle::Tensor& draft_tokens, const paddle::Tensor& seq_lens_this_time,
               const paddle::Tensor& seq_lens_encoder, const paddle::Tensor& stop_flags,
               const paddle::optional<paddle::Tensor>& is_block_step) {
  const int64_t bsz = specworker::CheckPerSlot(kOp, "base_model_seq_lens_this_time",
                                               seq_lens_this_time, DataType::INT32);
  specworker::CheckPerSlot(kOp, "base_model_seq_lens_encoder", seq_lens_encoder,
                           DataType::INT32, bsz);
  specworker::CheckPerSlot(kOp, "base_model_stop_flags", stop_flags, DataType::BOOL, bsz);
  const int64_t D = specworker::CheckSlotRows(kOp, "base_model_draft_tokens", draft_tokens,
                                              DataType::INT64, bsz);
  PD_CHECK(D >= 1 && D <= INT32_MAX, kOp, ": base_model_draft_tokens has shape ",
           specworker::ShapeStr(draft_tokens.shape()),
           ", expected [N, D] with 1 <= D (column 0 is the last accepted token)");
  specworker::CheckSamePlace(kOp, "base_model_draft_tokens", draft_tokens, seq_lens_this_time,
                             "base_model_seq_lens_this_time");
  specworker::CheckSamePlace(kOp, "base_model_seq_lens_encoder", seq_lens_encoder,
                             seq_lens_this_time, "base_model_seq_lens_this_time");
  specworker::CheckSamePlace(kOp, "base_model_stop_flags", stop_flags, seq_lens_this_time,
                             "base_model_seq_lens_this_time");
  if (is_block_step) {
    specworker::CheckPerSlot(kOp, "base_model_is_block_step", *is_block_step, DataType::BOOL, bsz);
    specworker::CheckSamePlace(kOp, "base_model_is_block_step", *is_block_step,
                               seq_lens_this_time, "base_model_seq_lens_this_time");
  }
}

// paused: nullptr when base_model_is_block_step is omitted.
bool Idle(const bool* stop, const bool* paused, int64_t b) {
  return stop[b] || (paused != nullptr && paused[b]);
}

bool Counted(const bool* stop, const bool* paused, const int32_t* enc, int64_t b) {
  return !Idle(stop, paused, b) && enc[b] <= 0;
}

// Raises for a counted slot whose row has no last accepted token or a gap in its drafts.
void CheckRowsCPU(const int64_t* drafts, int64_t D, const bool* stop, const bool* paused,
                  const int32_t* enc, int64_t bsz) {
  for (int64_t b = 0; b < bsz; ++b) {
    if (!Counted(stop, paused, enc, b)) continue;
    const int64_t* row = drafts + b * D;
    PD_CHECK(row[0] != -1, kOp, ": decode slot ", b, " is running but base_model_draft_tokens[",
             b, ", 0] = -1; column 0 must hold the last accepted token the target feeds first");
    int64_t first_empty = 1;
    while (first_empty < D && row[first_empty] != -1) ++first_empty;
    for (int64_t j = first_empty + 1; j < D; ++j) {
      PD_CHECK(row[j] == -1, kOp, ": slot ", b, " has a gap in base_model_draft_tokens: column ",
               first_empty, " is -1 but column ", j, " holds draft ", row[j],
               "; drafts must be contiguous from column 1 (a bug in the proposer)");
    }
  }
}

}  // namespace

void DraftModelPostprocess(const paddle::Tensor& base_model_draft_tokens,
                           paddle::Tensor& base_model_seq_lens_this_time,
                           const paddle::Tensor& base_model_seq_lens_encoder,
                           const paddle::Tensor& base_model_stop_flags,
                           const paddle::optional<paddle::Tensor>& base_model_is_block_step) {
  specworker::CheckGiven(kOp, {{"base_model_draft_tokens", &base_model_draft_tokens},
                               {"base_model_seq_lens_this_time", &base_model_seq_lens_this_time},
                               {"base_model_seq_lens_encoder", &base_model_seq_lens_encoder},
                               {"base_model_stop_flags", &base_model_stop_flags}});
  CheckArgs(base_model_draft_tokens, base_model_seq_lens_this_time, base_model_seq_lens_encoder,
            base_model_stop_flags, base_model_is_block_step);
  if (base_model_seq_lens_this_time.is_gpu()) {
#ifdef SPECWORKER_WITH_CUDA
    DraftModelPostprocessCUDA(base_model_draft_tokens, base_model_seq_lens_this_time,
                              base_model_seq_lens_encoder, base_model_stop_flags,
                              base_model_is_block_step);
    return;
#else
    PD_THROW(kOp, ": got GPU tensors but the extension was built without CUDA");
#endif
  }
  const int64_t bsz = base_model_seq_lens_this_time.shape()[0];
  const int64_t D = base_model_draft_tokens.shape()[1];
  const int64_t* drafts = base_model_draft_tokens.data<int64_t>();
  int32_t* lens = base_model_seq_lens_this_time.data<int32_t>();
  const int32_t* enc = base_model_seq_lens_encoder.data<int32_t>();
  const bool* stop = base_model_stop_flags.data<bool>();
  const bool* paused = base_model_is_block_step ? base_model_is_block_step->data<bool>() : nullptr;
  CheckRowsCPU(drafts, D, stop, paused, enc, bsz);
  for (int64_t b = 0; b < bsz; ++b) {
    if (Idle(stop, paused, b)) {
      lens[b] = 0;
    } else if (Counted(stop, paused, enc, b)) {
      const int64_t* row = drafts + b * D;
      int32_t n = 1;
      while (n < D && row[n] != -1) ++n;
      lens[b] = n;
    }
  }
}

PD_BUILD_OP(draft_model_postprocess)
    .Inputs({"base_model_draft_tokens", "base_model_seq_lens_this_time",
             "base_model_seq_lens_encoder", "base_model_stop_flags",
             paddle::Optional("base_model_is_block_step")})
    .Outputs({"base_model_seq_lens_this_time_out"})
    .SetInplaceMap({{"base_model_seq_lens_this_time", "base_model_seq_lens_this_time_out"}})
    .SetKernelFn(PD_KERNEL(DraftModelPostprocess));
