// reasoning_phase_token_constraint: reasoning-boundary status machine per slot, then the
// allowed-token mask on the first logit row of each slot in status 2 (docs/spec.md §8.7).
//   logits [rows, V] f32 (in place), pre_ids [N, S] i64, stop_flags [N] bool,
//   seq_lens_this_time [bsz] i32 (only its length is used), seq_lens_encoder [bsz] i32,
//   step_idx [N] i64, allowed_tokens [A] i64, reasoning_status [N] i32 (in place),
//   batch_id_per_token_output [>= rows] i32, cu_seqlens_q_output [bsz + 1] i32,
//   enable_thinking [N] bool; attrs think_end_id, line_break_id. Per-slot inputs may also be
//   FastDeploy's [N, 1]; N >= bsz.
// 1. For b < bsz, unless stop_flags[b] or status 3, with t_k = pre_ids[b, step_idx[b] - k]
//    (-1 outside [0, S)): 0 -> 2 for the first token of a non-thinking request
//    (!enable_thinking, seq_lens_encoder > 0, step_idx == 0), else 0 -> 1 when </think> is in
//    t0..t3; then 1 (also one just set) with step_idx >= 3 -> 2 on (t3..t0) = (\n, </think>,
//    \n, \n), else -> 3 when </think> left t0..t3; 2 -> 3.
// 2. Row t of slot b = batch_id_per_token_output[t], if t == cu_seqlens_q_output[b] and the
//    updated status is 2 and A > 0: every logit -1e10 except allowed ids in [0, V), which keep
//    their value. Other rows are untouched.
// On CPU a batch id outside [-1, bsz) is an error, as is a prefix sum inconsistent with the rows
// (op_checks.h CheckOutputRows: cu_seqlens_q_output[0] != 0, a decreasing cu, T_out =
// cu_seqlens_q_output[bsz] > rows > 0: a slot in status 2 whose first row is not in logits would
// silently stay unconstrained), all raised before anything is written. The CUDA kernel
// cannot read those device values on the host: it runs one block per logits row (nothing past
// the tensor is read or written) and skips a row whose batch id is outside [0, bsz).
#include <limits>
#include <utility>
#include <vector>

#include "op_checks.h"

#ifdef SPECWORKER_WITH_CUDA
#include "reasoning_phase_token_constraint_cuda.h"
#endif

namespace {

constexpr const char* kOp = "reasoning_phase_token_constraint";
constexpr float kMasked = -1e10f;

int64_t HistoryAt(const int64_t* row, int64_t pos, int64_t S) {
  return (pos >= 0 && pos < S) ? row[pos] : -1;
}

void ReasoningPhaseTokenConstraintCPU(
    paddle::Tensor& logits, const paddle::Tensor& pre_ids, const paddle::Tensor& stop_flags,
    const paddle::Tensor& seq_lens_encoder, const paddle::Tensor& step_idx,
    const paddle::Tensor& allowed_tokens, paddle::Tensor& reasoning_status,
    const paddle::Tensor& batch_id_per_token_output, const paddle::Tensor& cu_seqlens_q_output,
    const paddle::Tensor& enable_thinking, int64_t bsz, int64_t think_end_id,
    int64_t line_break_id) {
  const int64_t rows = logits.shape()[0];
  const int32_t* batch_ids = batch_id_per_token_output.data<int32_t>();
  const int32_t* cu = cu_seqlens_q_output.data<int32_t>();
  for (int64_t t = 0; t < rows; ++t) {  // every index is checked before anything is written
    PD_CHECK(batch_ids[t] >= -1 && batch_ids[t] < bsz, kOp, ": batch_id_per_token_output[", t,
             "] = ", batch_ids[t], ", expected -1 (no slot) or a slot in [0, bsz = ", bsz, ")");
  }
  specworker::CheckOutputRows(kOp, "logits", rows, cu, bsz);

  const int64_t S = pre_ids.shape()[1];
  const int64_t* history = pre_ids.data<int64_t>();
  const bool* stopped = stop_flags.data<bool>();
  const int32_t* encoder = seq_lens_encoder.data<int32_t>();
  const int64_t* steps = step_idx.data<int64_t>();
  const bool* thinking = enable_thinking.data<bool>();
  int32_t* status = reasoning_status.data<int32_t>();

  for (int64_t b = 0; b < bsz; ++b) {
    if (stopped[b] || status[b] == 3) continue;
    const int64_t step = steps[b];
    const int64_t* h = history + b * S;
    const int64_t t0 = HistoryAt(h, step, S);
    const int64_t t1 = HistoryAt(h, step - 1, S);
    const int64_t t2 = HistoryAt(h, step - 2, S);
    const int64_t t3 = HistoryAt(h, step - 3, S);
    const bool end_seen =
        t0 == think_end_id || t1 == think_end_id || t2 == think_end_id || t3 == think_end_id;
    int32_t next = status[b];
    if (status[b] == 0) {
      if (!thinking[b] && encoder[b] > 0 && step == 0) {
        next = 2;
      } else if (end_seen) {
        next = 1;
      }
    }
    if (next == 1 && step >= 3) {
      if (t3 == line_break_id && t2 == think_end_id && t1 == line_break_id &&
          t0 == line_break_id) {
        next = 2;
      } else if (!end_seen) {
        next = 3;
      }
    } else if (status[b] == 2) {
      next = 3;
    }
    status[b] = next;
  }

  const int64_t V = logits.shape()[1];
  const int64_t A = allowed_tokens.numel();
  for (int64_t t = 0; t < rows; ++t) {
    const int32_t b = batch_ids[t];
    if (b < 0 || A == 0 || cu[b] != t || status[b] != 2) continue;
    float* x = logits.data<float>() + t * V;
    const int64_t* allowed = allowed_tokens.data<int64_t>();
    std::vector<char> keep(V, 0);
    for (int64_t a = 0; a < A; ++a) {
      if (allowed[a] >= 0 && allowed[a] < V) keep[allowed[a]] = 1;
    }
    for (int64_t v = 0; v < V; ++v) {
      if (!keep[v]) x[v] = kMasked;
    }
  }
}

}  // namespace

void ReasoningPhaseTokenConstraint(
    paddle::Tensor& logits, const paddle::Tensor& pre_ids, const paddle::Tensor& stop_flags,
    const paddle::Tensor& seq_lens_this_time, const paddle::Tensor& seq_lens_encoder,
    const paddle::Tensor& step_idx, const paddle::Tensor& allowed_tokens,
    paddle::Tensor& reasoning_status, const paddle::Tensor& batch_id_per_token_output,
    const paddle::Tensor& cu_seqlens_q_output, const paddle::Tensor& enable_thinking,
    int64_t think_end_id, int64_t line_break_id) {
  specworker::CheckGiven(kOp, {{"logits", &logits}, {"pre_ids", &pre_ids},
                               {"stop_flags", &stop_flags},
                               {"seq_lens_this_time", &seq_lens_this_time},
                               {"seq_lens_encoder", &seq_lens_encoder}, {"step_idx", &step_idx},
                               {"allowed_tokens", &allowed_tokens},
                               {"reasoning_status", &reasoning_status},
                               {"batch_id_per_token_output", &batch_id_per_token_output},
                               {"cu_seqlens_q_output", &cu_seqlens_q_output},
                               {"enable_thinking", &enable_thinking}});
  using specworker::ShapeStr;
  specworker::CheckDtype(kOp, "logits", logits, paddle::DataType::FLOAT32);
  specworker::CheckRank(kOp, "logits", logits, 2);
  specworker::CheckDtype(kOp, "pre_ids", pre_ids, paddle::DataType::INT64);
  specworker::CheckRank(kOp, "pre_ids", pre_ids, 2);
  const int64_t N = pre_ids.shape()[0];
  const int64_t bsz =
      specworker::CheckPerSlot(kOp, "seq_lens_this_time", seq_lens_this_time, paddle::DataType::INT32);
  specworker::CheckPerSlot(kOp, "seq_lens_encoder", seq_lens_encoder, paddle::DataType::INT32, bsz);
  specworker::CheckPerSlot(kOp, "stop_flags", stop_flags, paddle::DataType::BOOL, N);
  specworker::CheckPerSlot(kOp, "step_idx", step_idx, paddle::DataType::INT64, N);
  specworker::CheckPerSlot(kOp, "reasoning_status", reasoning_status, paddle::DataType::INT32, N);
  specworker::CheckPerSlot(kOp, "enable_thinking", enable_thinking, paddle::DataType::BOOL, N);
  PD_CHECK(bsz <= N, kOp, ": seq_lens_this_time has ", bsz, " slots but pre_ids has shape ",
           ShapeStr(pre_ids.shape()), "; expected bsz <= N (rows of the per-slot buffers)");
  specworker::CheckDtype(kOp, "allowed_tokens", allowed_tokens, paddle::DataType::INT64);
  specworker::CheckRank(kOp, "allowed_tokens", allowed_tokens, 1);
  specworker::CheckDtype(kOp, "batch_id_per_token_output", batch_id_per_token_output,
                         paddle::DataType::INT32);
  specworker::CheckRank(kOp, "batch_id_per_token_output", batch_id_per_token_output, 1);
  PD_CHECK(batch_id_per_token_output.shape()[0] >= logits.shape()[0], kOp,
           ": batch_id_per_token_output has ", batch_id_per_token_output.shape()[0],
           " entries, expected at least one per logits row (", logits.shape()[0], ")");
  specworker::CheckDtype(kOp, "cu_seqlens_q_output", cu_seqlens_q_output, paddle::DataType::INT32);
  PD_CHECK(cu_seqlens_q_output.shape().size() == 1 && cu_seqlens_q_output.shape()[0] == bsz + 1,
           kOp, ": cu_seqlens_q_output has shape ", ShapeStr(cu_seqlens_q_output.shape()),
           ", expected [bsz + 1] = [", bsz + 1, "]");
  const int64_t int_max = std::numeric_limits<int32_t>::max();
  PD_CHECK(logits.shape()[0] <= int_max && logits.shape()[1] <= int_max && N <= int_max &&
               pre_ids.shape()[1] <= int_max && allowed_tokens.shape()[0] <= int_max,
           kOp, ": sizes must be < 2^31 (logits ", ShapeStr(logits.shape()), ", pre_ids ",
           ShapeStr(pre_ids.shape()), ", allowed_tokens ", ShapeStr(allowed_tokens.shape()), ")");
  const std::pair<const char*, const paddle::Tensor*> others[] = {
      {"pre_ids", &pre_ids}, {"stop_flags", &stop_flags},
      {"seq_lens_this_time", &seq_lens_this_time}, {"seq_lens_encoder", &seq_lens_encoder},
      {"step_idx", &step_idx}, {"allowed_tokens", &allowed_tokens},
      {"reasoning_status", &reasoning_status},
      {"batch_id_per_token_output", &batch_id_per_token_output},
      {"cu_seqlens_q_output", &cu_seqlens_q_output}, {"enable_thinking", &enable_thinking}};
  for (const auto& [name, x] : others) specworker::CheckSamePlace(kOp, name, *x, logits, "logits");

  if (logits.is_gpu()) {
#ifdef SPECWORKER_WITH_CUDA
    ReasoningPhaseTokenConstraintCUDA(logits, pre_ids, stop_flags, seq_lens_encoder, step_idx,
                                      allowed_tokens, reasoning_status, batch_id_per_token_output,
                                      cu_seqlens_q_output, enable_thinking, bsz, think_end_id,
                                      line_break_id);
    return;
#else
    PD_THROW(kOp, ": got a GPU tensor but the extension was built without CUDA");
#endif
  }
  ReasoningPhaseTokenConstraintCPU(logits, pre_ids, stop_flags, seq_lens_encoder, step_idx,
                                   allowed_tokens, reasoning_status, batch_id_per_token_output,
                                   cu_seqlens_q_output, enable_thinking, bsz, think_end_id,
                                   line_break_id);
}

PD_BUILD_OP(reasoning_phase_token_constraint)
    .Inputs({"logits", "pre_ids", "stop_flags", "seq_lens_this_time", "seq_lens_encoder",
             "step_idx", "allowed_tokens", "reasoning_status", "batch_id_per_token_output",
             "cu_seqlens_q_output", "enable_thinking"})
    .Outputs({"logits_out", "reasoning_status_out"})
    .Attrs({"think_end_id: int64_t", "line_break_id: int64_t"})
    .SetInplaceMap({{"logits", "logits_out"}, {"reasoning_status", "reasoning_status_out"}})
    .SetKernelFn(PD_KERNEL(ReasoningPhaseTokenConstraint));
