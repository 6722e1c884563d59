// eagle_get_hidden_states: the target's hidden states -> the draft's input hidden states
// (docs/spec.md §5; docs/spec.md §8.13, era [C] sizing: no host sync, count on the device).
//   input                          [T, H] float32 / float16 / bfloat16, the target's packed rows
//   seq_lens_this_time             [bsz] i32, draft L_b after draft_model_preprocess
//   seq_lens_encoder               [bsz] i32, draft E_b after draft_model_preprocess
//   seq_lens_decoder, stop_flags   [bsz] i32 / bool, unused (FastDeploy's signature)
//   accept_num                     [bsz] i32, tokens verify emitted for slot b
//   target_model_seq_lens_this_time [bsz] i32, the target's L_b of the step just finished
//   target_model_seq_lens_encoder  [bsz] i32, unused (FastDeploy's signature)
//   actual_draft_token_num         int attribute, unused (FastDeploy's signature)
// -> out [T, H] (input's dtype), output_token_num [1] i32.
// Slot b owns the target rows [cu_t[b], cu_t[b] + L_t[b]), cu_t the exclusive prefix sum of the
// target's L. It hands the draft the first k_b of them: k_b = 0 if the draft slot is stopped
// (L_b == 0), E_b for a draft prefill (E_b > 0: target row j pairs with draft token j + 1, the
// prompt shifted by one), else accept_num[b] (the hidden states of the last accepted token and
// of the accepted drafts). Output row cu_out[b] + j = input row cu_t[b] + j (j < k_b), cu_out the
// exclusive prefix sum of k; output_token_num = cu_out[bsz]. k_b equals the draft's L_b, so the
// rows line up with the draft's ids_remove_padding. Rows [output_token_num, T) are zero.
// The output is sized from the bound T (k_b <= L_t[b]), so no count is read on the host.
//
// Bad values, CPU vs CUDA: the CPU op raises for a negative L, k_b > L_t[b], k_b != L_b or
// sum(L_t) > T. The CUDA kernel cannot raise without a host sync; it clamps k_b into
// [0, max(L_t[b], 0)], zeroes an output row whose source row is >= T and writes no row >= T
// (output_token_num is clamped to T).
#include <climits>
#include <cstring>

#include "op_checks.h"

#ifdef SPECWORKER_WITH_CUDA
#include "eagle_get_hidden_states_cuda.h"
#endif

namespace {

constexpr const char* kOp = "eagle_get_hidden_states";

using paddle::DataType;

void CheckArgs(const paddle::Tensor& input, const paddle::Tensor& seq_lens_this_time,
               const paddle::Tensor& seq_lens_encoder, const paddle::Tensor& seq_lens_decoder,
               const paddle::Tensor& stop_flags, const paddle::Tensor& accept_num,
               const paddle::Tensor& target_model_seq_lens_this_time,
               const paddle::Tensor& target_model_seq_lens_encoder) {
  using specworker::CheckPerSlot;
  const auto dt = input.dtype();
  PD_CHECK(dt == DataType::FLOAT32 || dt == DataType::FLOAT16 || dt == DataType::BFLOAT16, kOp,
           ": input has dtype ", specworker::DtypeStr(dt),
           ", expected float32, float16 or bfloat16");
  specworker::CheckRank(kOp, "input", input, 2);
  const int64_t bsz =
      CheckPerSlot(kOp, "seq_lens_this_time", seq_lens_this_time, DataType::INT32);
  CheckPerSlot(kOp, "seq_lens_encoder", seq_lens_encoder, DataType::INT32, bsz);
  CheckPerSlot(kOp, "seq_lens_decoder", seq_lens_decoder, DataType::INT32, bsz);
  CheckPerSlot(kOp, "stop_flags", stop_flags, DataType::BOOL, bsz);
  CheckPerSlot(kOp, "accept_num", accept_num, DataType::INT32, bsz);
  CheckPerSlot(kOp, "target_model_seq_lens_this_time", target_model_seq_lens_this_time,
               DataType::INT32, bsz);
  CheckPerSlot(kOp, "target_model_seq_lens_encoder", target_model_seq_lens_encoder,
               DataType::INT32, bsz);
  PD_CHECK(input.shape()[0] <= INT32_MAX && input.shape()[1] <= INT32_MAX, kOp,
           ": input has shape ", specworker::ShapeStr(input.shape()),
           ", expected at most ", INT32_MAX, " rows and columns");
  const std::pair<const char*, const paddle::Tensor*> others[] = {
      {"input", &input},
      {"seq_lens_encoder", &seq_lens_encoder},
      {"seq_lens_decoder", &seq_lens_decoder},
      {"stop_flags", &stop_flags},
      {"accept_num", &accept_num},
      {"target_model_seq_lens_this_time", &target_model_seq_lens_this_time},
      {"target_model_seq_lens_encoder", &target_model_seq_lens_encoder},
  };
  for (const auto& [name, t] : others) {
    specworker::CheckSamePlace(kOp, name, *t, seq_lens_this_time, "seq_lens_this_time");
  }
}

// Rows of slot b's target rows the draft keeps (a prefix of them).
int64_t RowsKept(int32_t draft_len, int32_t draft_enc, int32_t accept_num) {
  if (draft_len == 0) return 0;
  return draft_enc > 0 ? draft_enc : accept_num;
}

std::vector<paddle::Tensor> EagleGetHiddenStatesCPU(
    const paddle::Tensor& input, const paddle::Tensor& seq_lens_this_time,
    const paddle::Tensor& seq_lens_encoder, const paddle::Tensor& accept_num,
    const paddle::Tensor& target_model_seq_lens_this_time) {
  const int64_t T = input.shape()[0];
  const int64_t H = input.shape()[1];
  const int64_t bsz = seq_lens_this_time.shape()[0];
  const int32_t* draft_len = seq_lens_this_time.data<int32_t>();
  const int32_t* draft_enc = seq_lens_encoder.data<int32_t>();
  const int32_t* accepted = accept_num.data<int32_t>();
  const int32_t* target_len = target_model_seq_lens_this_time.data<int32_t>();

  int64_t rows_in = 0;
  for (int64_t b = 0; b < bsz; ++b) {
    PD_CHECK(draft_len[b] >= 0, kOp, ": seq_lens_this_time[", b, "] = ", draft_len[b],
             ", expected >= 0");
    PD_CHECK(target_len[b] >= 0, kOp, ": target_model_seq_lens_this_time[", b, "] = ",
             target_len[b], ", expected >= 0");
    const int64_t kept = RowsKept(draft_len[b], draft_enc[b], accepted[b]);
    PD_CHECK(kept >= 0 && kept <= target_len[b], kOp, ": slot ", b, " keeps ", kept,
             " target rows (seq_lens_encoder = ", draft_enc[b], ", accept_num = ", accepted[b],
             ") but the target ran target_model_seq_lens_this_time = ", target_len[b]);
    PD_CHECK(kept == draft_len[b], kOp, ": slot ", b, " keeps ", kept,
             " target rows but the draft feeds seq_lens_this_time = ", draft_len[b],
             " tokens; run draft_model_preprocess (truncate_first_token) first");
    rows_in += target_len[b];
  }
  PD_CHECK(rows_in <= T, kOp, ": sum(target_model_seq_lens_this_time) = ", rows_in,
           " exceeds the rows of input T = ", T);

  const auto place = input.place();
  auto out = paddle::empty({T, H}, input.dtype(), place);
  auto count = paddle::empty({1}, DataType::INT32, place);
  const size_t row_bytes = static_cast<size_t>(H) * (input.dtype() == DataType::FLOAT32 ? 4 : 2);
  const char* src = static_cast<const char*>(input.data());
  char* dst = static_cast<char*>(out.data());
  int64_t rows_out = 0;
  rows_in = 0;
  for (int64_t b = 0; b < bsz; ++b) {
    const int64_t kept = RowsKept(draft_len[b], draft_enc[b], accepted[b]);
    if (kept > 0) {
      std::memcpy(dst + rows_out * row_bytes, src + rows_in * row_bytes, kept * row_bytes);
    }
    rows_in += target_len[b];
    rows_out += kept;
  }
  if (T > rows_out) std::memset(dst + rows_out * row_bytes, 0, (T - rows_out) * row_bytes);
  count.data<int32_t>()[0] = static_cast<int32_t>(rows_out);
  return {out, count};
}

}  // namespace

std::vector<paddle::Tensor> EagleGetHiddenStates(
    const paddle::Tensor& input, const paddle::Tensor& seq_lens_this_time,
    const paddle::Tensor& seq_lens_encoder, const paddle::Tensor& seq_lens_decoder,
    const paddle::Tensor& stop_flags, const paddle::Tensor& accept_num,
    const paddle::Tensor& target_model_seq_lens_this_time,
    const paddle::Tensor& target_model_seq_lens_encoder, int /*actual_draft_token_num*/) {
  specworker::CheckGiven(kOp, {{"input", &input}, {"seq_lens_this_time", &seq_lens_this_time},
                               {"seq_lens_encoder", &seq_lens_encoder},
                               {"seq_lens_decoder", &seq_lens_decoder}, {"stop_flags", &stop_flags},
                               {"accept_num", &accept_num},
                               {"target_model_seq_lens_this_time", &target_model_seq_lens_this_time},
                               {"target_model_seq_lens_encoder", &target_model_seq_lens_encoder}});
  CheckArgs(input, seq_lens_this_time, seq_lens_encoder, seq_lens_decoder, stop_flags, accept_num,
            target_model_seq_lens_this_time, target_model_seq_lens_encoder);
  if (seq_lens_this_time.is_gpu()) {
#ifdef SPECWORKER_WITH_CUDA
    return EagleGetHiddenStatesCUDA(input, seq_lens_this_time, seq_lens_encoder, accept_num,
                                    target_model_seq_lens_this_time);
#else
    PD_THROW(kOp, ": got a GPU tensor but the extension was built without CUDA");
#endif
  }
  return EagleGetHiddenStatesCPU(input, seq_lens_this_time, seq_lens_encoder, accept_num,
                                 target_model_seq_lens_this_time);
}

std::vector<std::vector<int64_t>> EagleGetHiddenStatesInferShape(
    const std::vector<int64_t>& input, const std::vector<int64_t>&, const std::vector<int64_t>&,
    const std::vector<int64_t>&, const std::vector<int64_t>&, const std::vector<int64_t>&,
    const std::vector<int64_t>&, const std::vector<int64_t>&, int) {
  return {input, {1}};
}

std::vector<paddle::DataType> EagleGetHiddenStatesInferDtype(
    const paddle::DataType& input, const paddle::DataType&, const paddle::DataType&,
    const paddle::DataType&, const paddle::DataType&, const paddle::DataType&,
    const paddle::DataType&, const paddle::DataType&) {
  return {input, paddle::DataType::INT32};
}

PD_BUILD_OP(eagle_get_hidden_states)
    .Inputs({"input", "seq_lens_this_time", "seq_lens_encoder", "seq_lens_decoder", "stop_flags",
             "accept_num", "target_model_seq_lens_this_time", "target_model_seq_lens_encoder"})
    .Outputs({"out", "output_token_num"})
    .Attrs({"actual_draft_token_num: int"})
    .SetKernelFn(PD_KERNEL(EagleGetHiddenStates))
    .SetInferShapeFn(PD_INFER_SHAPE(EagleGetHiddenStatesInferShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(EagleGetHiddenStatesInferDtype));
