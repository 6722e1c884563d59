// get_padding_offset: packs this step's query tokens and builds the varlen index (docs/spec.md §4.1).
//   input_ids          [N, S] int64, optional (N >= bsz; None: index outputs only)
//   seq_lens_this_time [bsz] or [bsz, 1] int32, L_b
//   draft_tokens       [N, D] int64, optional, given together with seq_lens_encoder
//   seq_lens_encoder   [bsz] or [bsz, 1] int32, optional, E_b > 0 marks a prefill slot
//   token_num_cpu      int64 attribute: output capacity, >= T = sum(L_b)
// -> ids_remove_padding [token_num_cpu] int64 ([0] when input_ids is None; the wrapper
//    returns None), batch_id_per_token [token_num_cpu] int32, cu_seqlens_q and
//    cu_seqlens_k [bsz + 1] int32 (equal).
// Row t = cu_q[b] + i (i < L_b) is slot b's i-th token: draft_tokens[b, i] on a decode slot
// (drafts given and E_b <= 0), else input_ids[b, i]. Rows t >= T hold -1 in both outputs.
//
// Bad values, CPU vs CUDA: the CPU kernel raises for L_b < 0, T > token_num_cpu, L_b > D on a
// decode slot and L_b > S on a slot reading input_ids. The CUDA kernel cannot raise without a
// host sync, so it stays in bounds instead: a negative L_b counts as 0, rows past token_num_cpu
// are not written (cu_seqlens_* still hold the full sums), and a source index past D (decode)
// or S (prefill) yields token -1. Shape and dtype checks run before dispatch, for both.
#include <algorithm>
#include <climits>

#include "op_checks.h"

#ifdef SPECWORKER_WITH_CUDA
#include "get_padding_offset_cuda.h"
#endif

namespace {

constexpr const char* kOp = "get_padding_offset";

void CheckArgs(const paddle::optional<paddle::Tensor>& input_ids,
               const paddle::Tensor& seq_lens_this_time,
               const paddle::optional<paddle::Tensor>& draft_tokens,
               const paddle::optional<paddle::Tensor>& seq_lens_encoder, int64_t token_num_cpu) {
  const int64_t bsz = specworker::CheckPerSlot(kOp, "seq_lens_this_time", seq_lens_this_time,
                                               paddle::DataType::INT32);
  specworker::CheckPaired(kOp, "draft_tokens", draft_tokens, "seq_lens_encoder",
                          seq_lens_encoder);
  PD_CHECK(input_ids || !draft_tokens, kOp,
           ": draft_tokens was given but input_ids is None; the index-only form "
           "(input_ids=None) selects no tokens, so pass draft_tokens=None and "
           "seq_lens_encoder=None");
  // batch ids and cu_seqlens are int32, so every row index must fit in one.
  PD_CHECK(token_num_cpu >= 0 && token_num_cpu <= INT32_MAX, kOp, ": token_num_cpu = ",
           token_num_cpu, ", expected 0 <= token_num_cpu <= ", INT32_MAX);
  if (input_ids) {
    specworker::CheckSlotRows(kOp, "input_ids", *input_ids, paddle::DataType::INT64, bsz);
    specworker::CheckSamePlace(kOp, "input_ids", *input_ids, seq_lens_this_time,
                               "seq_lens_this_time");
  }
  if (draft_tokens) {
    specworker::CheckSlotRows(kOp, "draft_tokens", *draft_tokens, paddle::DataType::INT64, bsz);
    specworker::CheckPerSlot(kOp, "seq_lens_encoder", *seq_lens_encoder,
                             paddle::DataType::INT32, bsz);
    specworker::CheckSamePlace(kOp, "draft_tokens", *draft_tokens, seq_lens_this_time,
                               "seq_lens_this_time");
    specworker::CheckSamePlace(kOp, "seq_lens_encoder", *seq_lens_encoder, seq_lens_this_time,
                               "seq_lens_this_time");
  }
}

// Raises for any length that would read or write out of bounds; nothing is written before.
void CheckLengthsCPU(const int32_t* lens, const int32_t* enc, int64_t bsz, bool reads_ids,
                     int64_t S, int64_t D, int64_t token_num_cpu) {
  int64_t total = 0;
  for (int64_t b = 0; b < bsz; ++b) {
    const int32_t n = lens[b];
    PD_CHECK(n >= 0, kOp, ": seq_lens_this_time[", b, "] = ", n, ", expected >= 0");
    if (enc != nullptr && enc[b] <= 0) {
      PD_CHECK(n <= D, kOp, ": seq_lens_this_time[", b, "] = ", n,
               " exceeds the draft_tokens width D = ", D, " on decode slot ", b,
               " (seq_lens_encoder[", b, "] = ", enc[b], ")");
    } else if (reads_ids) {
      PD_CHECK(n <= S, kOp, ": seq_lens_this_time[", b, "] = ", n,
               " exceeds the input_ids width S = ", S, " on slot ", b,
               " (it reads input_ids[", b, ", 0:", n, "])");
    }
    total += n;
  }
  PD_CHECK(total <= token_num_cpu, kOp, ": sum(seq_lens_this_time) = ", total,
           " exceeds token_num_cpu = ", token_num_cpu, " (the output capacity)");
}

std::vector<paddle::Tensor> GetPaddingOffsetCPU(
    const paddle::optional<paddle::Tensor>& input_ids, const paddle::Tensor& seq_lens_this_time,
    const paddle::optional<paddle::Tensor>& draft_tokens,
    const paddle::optional<paddle::Tensor>& seq_lens_encoder, int64_t token_num_cpu) {
  const int64_t bsz = seq_lens_this_time.shape()[0];
  const int64_t S = input_ids ? input_ids->shape()[1] : 0;
  const int64_t D = draft_tokens ? draft_tokens->shape()[1] : 0;
  const int32_t* lens = seq_lens_this_time.data<int32_t>();
  const int32_t* enc = seq_lens_encoder ? seq_lens_encoder->data<int32_t>() : nullptr;
  CheckLengthsCPU(lens, enc, bsz, input_ids.is_initialized(), S, D, token_num_cpu);

  const auto place = seq_lens_this_time.place();
  auto ids_out = paddle::empty({input_ids ? token_num_cpu : 0}, paddle::DataType::INT64, place);
  auto batch_out = paddle::empty({token_num_cpu}, paddle::DataType::INT32, place);
  auto cu_q_out = paddle::empty({bsz + 1}, paddle::DataType::INT32, place);
  auto cu_k_out = paddle::empty({bsz + 1}, paddle::DataType::INT32, place);
  const int64_t* ids = input_ids ? input_ids->data<int64_t>() : nullptr;
  const int64_t* drafts = draft_tokens ? draft_tokens->data<int64_t>() : nullptr;
  int64_t* packed = input_ids ? ids_out.data<int64_t>() : nullptr;
  int32_t* batch_id = batch_out.data<int32_t>();
  int32_t* cu_q = cu_q_out.data<int32_t>();

  cu_q[0] = 0;
  for (int64_t b = 0; b < bsz; ++b) {
    const int32_t start = cu_q[b];
    cu_q[b + 1] = start + lens[b];
    const bool decode = enc != nullptr && enc[b] <= 0;
    for (int32_t i = 0; i < lens[b]; ++i) {
      batch_id[start + i] = static_cast<int32_t>(b);
      if (packed != nullptr) packed[start + i] = decode ? drafts[b * D + i] : ids[b * S + i];
    }
  }
  for (int64_t t = cu_q[bsz]; t < token_num_cpu; ++t) {
    batch_id[t] = -1;
    if (packed != nullptr) packed[t] = -1;
  }
  std::copy(cu_q, cu_q + bsz + 1, cu_k_out.data<int32_t>());
  return {ids_out, batch_out, cu_q_out, cu_k_out};
}

}  // namespace

std::vector<paddle::Tensor> GetPaddingOffset(
    const paddle::optional<paddle::Tensor>& input_ids, const paddle::Tensor& seq_lens_this_time,
    const paddle::optional<paddle::Tensor>& draft_tokens,
    const paddle::optional<paddle::Tensor>& seq_lens_encoder, int64_t token_num_cpu) {
  specworker::CheckGiven(kOp, {{"seq_lens_this_time", &seq_lens_this_time}});
  CheckArgs(input_ids, seq_lens_this_time, draft_tokens, seq_lens_encoder, token_num_cpu);
  if (seq_lens_this_time.is_gpu()) {
#ifdef SPECWORKER_WITH_CUDA
    return GetPaddingOffsetCUDA(input_ids, seq_lens_this_time, draft_tokens, seq_lens_encoder,
                                token_num_cpu);
#else
    PD_THROW(kOp, ": got a GPU tensor but the extension was built without CUDA");
#endif
  }
  return GetPaddingOffsetCPU(input_ids, seq_lens_this_time, draft_tokens, seq_lens_encoder,
                             token_num_cpu);
}

std::vector<std::vector<int64_t>> GetPaddingOffsetInferShape(
    const paddle::optional<std::vector<int64_t>>& input_ids,
    const std::vector<int64_t>& seq_lens_this_time,
    const paddle::optional<std::vector<int64_t>>& /*draft_tokens*/,
    const paddle::optional<std::vector<int64_t>>& /*seq_lens_encoder*/, int64_t token_num_cpu) {
  const int64_t cu = seq_lens_this_time[0] < 0 ? -1 : seq_lens_this_time[0] + 1;
  return {{input_ids ? token_num_cpu : 0}, {token_num_cpu}, {cu}, {cu}};
}

std::vector<paddle::DataType> GetPaddingOffsetInferDtype(
    const paddle::optional<paddle::DataType>&, const paddle::DataType&,
    const paddle::optional<paddle::DataType>&, const paddle::optional<paddle::DataType>&) {
  return {paddle::DataType::INT64, paddle::DataType::INT32, paddle::DataType::INT32,
          paddle::DataType::INT32};
}

PD_BUILD_OP(get_padding_offset)
    .Inputs({paddle::Optional("input_ids"), "seq_lens_this_time",
             paddle::Optional("draft_tokens"), paddle::Optional("seq_lens_encoder")})
    .Outputs({"ids_remove_padding", "batch_id_per_token", "cu_seqlens_q", "cu_seqlens_k"})
    .Attrs({"token_num_cpu: int64_t"})
    .SetKernelFn(PD_KERNEL(GetPaddingOffset))
    .SetInferShapeFn(PD_INFER_SHAPE(GetPaddingOffsetInferShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(GetPaddingOffsetInferDtype));
