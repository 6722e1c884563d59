// speculate_pre_process: the whole of pre_process in one op (docs/spec.md §4.3, [ours]; FastDeploy [C]).
//   input_ids          [N, S] int64 (N >= bsz)
//   seq_lens_this_time [bsz] or [bsz, 1] int32, L_b
//   draft_tokens       [N, D] int64, optional: speculative (decode slots read it); None: every
//                      slot reads input_ids and D counts as 1
//   seq_lens_encoder   [bsz] or [bsz, 1] int32, E_b (> 0: prefill); seq_lens_decoder likewise,
//                      unused (FastDeploy's signature)
//   token_num_cpu      int64 attribute: input-side capacity, >= T = sum(L_b)
// -> ids_remove_padding, batch_id_per_token [token_num_cpu]; cu_seqlens_q, cu_seqlens_k,
//    cu_seqlens_q_output [bsz + 1] int32; batch_id_per_token_output [bsz * D] int32 (-1 past
//    T_out); real_output_token_num [1] int32 (T_out, on the device); seq_lens_output [bsz] int32.
// The first seven outputs are FastDeploy's, in its order; seq_lens_output is appended.
// The outputs equal get_padding_offset(input_ids, L, draft_tokens, E or None, token_num_cpu),
// O = speculate_get_seq_lens_output(L, E, Dec) and get_padding_offset(None, O, None, None,
// bsz * D): the CPU kernel is that composition (the same code as the unfused path), the CUDA
// kernel computes it in one launch. The CPU kernel raises for L_b < 0, L_b > D on a decode slot,
// L_b > S on a slot reading input_ids, T > token_num_cpu and T_out > bsz * D (only possible
// without drafts, when a decode slot feeds several tokens); the CUDA kernel stays in bounds
// instead, like the unfused kernels (see kernels/speculate_pre_process.cu).
#include <climits>

#include "op_checks.h"

// The unfused ops (cpu_ops/get_padding_offset.cc, cpu_ops/speculate_get_seq_lens_output.cc).
std::vector<paddle::Tensor> GetPaddingOffset(
    const paddle::optional<paddle::Tensor>& input_ids, const paddle::Tensor& seq_lens_this_time,
    const paddle::optional<paddle::Tensor>& draft_tokens,
    const paddle::optional<paddle::Tensor>& seq_lens_encoder, int64_t token_num_cpu);
std::vector<paddle::Tensor> SpeculateGetSeqLensOutput(const paddle::Tensor& seq_lens_this_time,
                                                      const paddle::Tensor& seq_lens_encoder,
                                                      const paddle::Tensor& seq_lens_decoder);

#ifdef SPECWORKER_WITH_CUDA
#include "speculate_pre_process_cuda.h"
#endif

namespace {

constexpr const char* kOp = "speculate_pre_process";

void CheckArgs(const paddle::Tensor& input_ids, const paddle::Tensor& seq_lens_this_time,
               const paddle::optional<paddle::Tensor>& draft_tokens,
               const paddle::Tensor& seq_lens_encoder, const paddle::Tensor& seq_lens_decoder,
               int64_t token_num_cpu) {
  const int64_t bsz = specworker::CheckPerSlot(kOp, "seq_lens_this_time", seq_lens_this_time,
                                               paddle::DataType::INT32);
  specworker::CheckSlotRows(kOp, "input_ids", input_ids, paddle::DataType::INT64, bsz);
  specworker::CheckPerSlot(kOp, "seq_lens_encoder", seq_lens_encoder, paddle::DataType::INT32,
                           bsz);
  specworker::CheckPerSlot(kOp, "seq_lens_decoder", seq_lens_decoder, paddle::DataType::INT32,
                           bsz);
  specworker::CheckSamePlace(kOp, "input_ids", input_ids, seq_lens_this_time,
                             "seq_lens_this_time");
  specworker::CheckSamePlace(kOp, "seq_lens_encoder", seq_lens_encoder, seq_lens_this_time,
                             "seq_lens_this_time");
  specworker::CheckSamePlace(kOp, "seq_lens_decoder", seq_lens_decoder, seq_lens_this_time,
                             "seq_lens_this_time");
  int64_t width = 1;
  if (draft_tokens) {
    width = specworker::CheckSlotRows(kOp, "draft_tokens", *draft_tokens,
                                      paddle::DataType::INT64, bsz);
    PD_CHECK(width >= 1, kOp, ": draft_tokens has shape ",
             specworker::ShapeStr(draft_tokens->shape()), ", expected [N, k + 1] with k >= 0");
    specworker::CheckSamePlace(kOp, "draft_tokens", *draft_tokens, seq_lens_this_time,
                               "seq_lens_this_time");
  }
  // batch ids and cu_seqlens are int32, so every row index must fit in one.
  PD_CHECK(token_num_cpu >= 0 && token_num_cpu <= INT32_MAX, kOp, ": token_num_cpu = ",
           token_num_cpu, ", expected 0 <= token_num_cpu <= ", INT32_MAX);
  specworker::CheckFitsInt32(kOp, "output capacity bsz * D", bsz * width);
}

// Raises for any length the unfused ops would reject, naming this op; nothing is written before.
void CheckLengthsCPU(const paddle::Tensor& input_ids, const paddle::Tensor& seq_lens_this_time,
                     const paddle::optional<paddle::Tensor>& draft_tokens,
                     const paddle::Tensor& seq_lens_encoder, int64_t token_num_cpu) {
  const int64_t bsz = seq_lens_this_time.shape()[0];
  const int64_t S = input_ids.shape()[1];
  const int64_t D = draft_tokens ? draft_tokens->shape()[1] : 1;
  const int32_t* lens = seq_lens_this_time.data<int32_t>();
  const int32_t* enc = seq_lens_encoder.data<int32_t>();
  int64_t total = 0;
  int64_t total_out = 0;
  for (int64_t b = 0; b < bsz; ++b) {
    const int32_t n = lens[b];
    PD_CHECK(n >= 0, kOp, ": seq_lens_this_time[", b, "] = ", n, ", expected >= 0");
    if (draft_tokens && enc[b] <= 0) {
      PD_CHECK(n <= D, kOp, ": seq_lens_this_time[", b, "] = ", n,
               " exceeds the draft_tokens width D = ", D, " on decode slot ", b,
               " (seq_lens_encoder[", b, "] = ", enc[b], ")");
    } else {
      PD_CHECK(n <= S, kOp, ": seq_lens_this_time[", b, "] = ", n,
               " exceeds the input_ids width S = ", S, " on slot ", b, " (it reads input_ids[", b,
               ", 0:", n, "])");
    }
    total += n;
    total_out += (n == 0) ? 0 : (n == 1 || enc[b] != 0) ? 1 : n;
  }
  PD_CHECK(total <= token_num_cpu, kOp, ": sum(seq_lens_this_time) = ", total,
           " exceeds token_num_cpu = ", token_num_cpu, " (the input-side capacity)");
  PD_CHECK(total_out <= bsz * D, kOp, ": the step needs ", total_out,
           " logit rows, more than the output capacity bsz * D = ", bsz * D,
           " (without draft_tokens every decode slot must feed at most one token)");
}

std::vector<paddle::Tensor> SpeculatePreProcessCPU(
    const paddle::Tensor& input_ids, const paddle::Tensor& seq_lens_this_time,
    const paddle::optional<paddle::Tensor>& draft_tokens, const paddle::Tensor& seq_lens_encoder,
    const paddle::Tensor& seq_lens_decoder, int64_t token_num_cpu) {
  CheckLengthsCPU(input_ids, seq_lens_this_time, draft_tokens, seq_lens_encoder, token_num_cpu);
  const int64_t bsz = seq_lens_this_time.shape()[0];
  const int64_t capacity = bsz * (draft_tokens ? draft_tokens->shape()[1] : 1);
  const paddle::optional<paddle::Tensor> no_tensor = paddle::none;
  const paddle::optional<paddle::Tensor> enc =
      draft_tokens ? paddle::optional<paddle::Tensor>(seq_lens_encoder) : no_tensor;
  auto in = GetPaddingOffset(input_ids, seq_lens_this_time, draft_tokens, enc, token_num_cpu);
  auto rows = SpeculateGetSeqLensOutput(seq_lens_this_time, seq_lens_encoder, seq_lens_decoder);
  auto out = GetPaddingOffset(no_tensor, rows[0], no_tensor, no_tensor, capacity);
  auto num_out = paddle::empty({1}, paddle::DataType::INT32, seq_lens_this_time.place());
  num_out.data<int32_t>()[0] = out[2].data<int32_t>()[bsz];
  return {in[0], in[1], in[2], in[3], out[2], out[1], num_out, rows[0]};
}

}  // namespace

std::vector<paddle::Tensor> SpeculatePreProcess(
    const paddle::Tensor& input_ids, const paddle::Tensor& seq_lens_this_time,
    const paddle::optional<paddle::Tensor>& draft_tokens, const paddle::Tensor& seq_lens_encoder,
    const paddle::Tensor& seq_lens_decoder, int64_t token_num_cpu) {
  specworker::CheckGiven(kOp, {{"input_ids", &input_ids},
                               {"seq_lens_this_time", &seq_lens_this_time},
                               {"seq_lens_encoder", &seq_lens_encoder},
                               {"seq_lens_decoder", &seq_lens_decoder}});
  CheckArgs(input_ids, seq_lens_this_time, draft_tokens, seq_lens_encoder, seq_lens_decoder,
            token_num_cpu);
  if (seq_lens_this_time.is_gpu()) {
#ifdef SPECWORKER_WITH_CUDA
    return SpeculatePreProcessCUDA(input_ids, seq_lens_this_time, draft_tokens, seq_lens_encoder,
                                   token_num_cpu);
#else
    PD_THROW(kOp, ": got a GPU tensor but the extension was built without CUDA");
#endif
  }
  return SpeculatePreProcessCPU(input_ids, seq_lens_this_time, draft_tokens, seq_lens_encoder,
                                seq_lens_decoder, token_num_cpu);
}

std::vector<std::vector<int64_t>> SpeculatePreProcessInferShape(
    const std::vector<int64_t>& /*input_ids*/, const std::vector<int64_t>& seq_lens_this_time,
    const paddle::optional<std::vector<int64_t>>& draft_tokens,
    const std::vector<int64_t>& /*seq_lens_encoder*/,
    const std::vector<int64_t>& /*seq_lens_decoder*/, int64_t token_num_cpu) {
  const int64_t bsz = seq_lens_this_time[0];
  const int64_t width = draft_tokens ? (*draft_tokens)[1] : 1;
  const int64_t cu = bsz < 0 ? -1 : bsz + 1;
  const int64_t capacity = (bsz < 0 || width < 0) ? -1 : bsz * width;
  return {{token_num_cpu}, {token_num_cpu}, {cu}, {cu}, {cu}, {capacity}, {1}, {bsz}};
}

std::vector<paddle::DataType> SpeculatePreProcessInferDtype(
    const paddle::DataType&, const paddle::DataType&, const paddle::optional<paddle::DataType>&,
    const paddle::DataType&, const paddle::DataType&) {
  const auto i32 = paddle::DataType::INT32;
  return {paddle::DataType::INT64, i32, i32, i32, i32, i32, i32, i32};
}

PD_BUILD_OP(speculate_pre_process)
    .Inputs({"input_ids", "seq_lens_this_time", paddle::Optional("draft_tokens"),
             "seq_lens_encoder", "seq_lens_decoder"})
    .Outputs({"ids_remove_padding", "batch_id_per_token", "cu_seqlens_q", "cu_seqlens_k",
              "cu_seqlens_q_output", "batch_id_per_token_output", "real_output_token_num",
              "seq_lens_output"})
    .Attrs({"token_num_cpu: int64_t"})
    .SetKernelFn(PD_KERNEL(SpeculatePreProcess))
    .SetInferShapeFn(PD_INFER_SHAPE(SpeculatePreProcessInferShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(SpeculatePreProcessInferDtype));
