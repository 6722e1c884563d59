// rebuild_padding: gathers the hidden rows that need logits (docs/spec.md §4.4).
//   tmp_out [token_num, H] float32/float16/bfloat16 (packed transformer output),
//   cu_seqlens_q [bsz + 1], seq_len_this_time / seq_lens_decoder / seq_lens_encoder [bsz] (or
//   [bsz, 1]) int32, optional pair batch_id_per_token_output [capacity] + cu_seqlens_q_output
//   [bsz + 1] int32, optional first_token_out [bsz, H] (in place), attr enable_logprob.
//   -> out [bsz, H] (no output index: row b is slot b) or [capacity, H] (row t is slot
//      batch_id_per_token_output[t] at local index t - cu_seqlens_q_output[b]).
// A prefill slot (E_b > 0) yields its last prompt token cu_q[b] + E_b - 1, a decode slot its token
// cu_q[b] + local index; idle slots (L_b == 0), FastDeploy's skipped slots (E_b == 0 and
// Dec_b == 0), and -1 rows are zeros. enable_logprob: first_token_out[b] of each prefill slot with
// an output row <- tmp_out[cu_q[b] + E_b - 2], or zeros when E_b == 1 (there is no earlier prompt row
// this step; zeros rather than the stale row of the slot's previous request).
// Unlike FastDeploy's CPU op, decode rows use their local index (FastDeploy's copies the slot's first
// token into every row). Out-of-range indices raise here; the CUDA kernel writes a zero row instead.
#include <cstring>

#include "op_checks.h"

#ifdef SPECWORKER_WITH_CUDA
#include "rebuild_padding_cuda.h"
#endif

namespace {

constexpr const char* kOp = "rebuild_padding";

struct Indices {
  const int32_t* cu_seqlens_q;
  const int32_t* seq_len_this_time;
  const int32_t* seq_lens_decoder;
  const int32_t* seq_lens_encoder;
  const int32_t* batch_id_per_token_output;  // nullptr: one output row per slot
  const int32_t* cu_seqlens_q_output;
  int64_t token_num;
  int64_t bsz;
};

struct RowPlan {
  int64_t src = -1;         // tmp_out row copied into this output row; -1: zeros
  int64_t first_slot = -1;  // slot whose first_token_out row this output row writes; -1: none
  int64_t first_src = -1;   // tmp_out row for first_token_out[first_slot]; -1: zeros
};

// The checks of PlanRow in gpu_ops/kernels/rebuild_padding.cu, in the same order; where this one
// raises, the kernel writes a zero row.
RowPlan PlanRow(int64_t r, const Indices& a) {
  RowPlan p;
  int64_t b = r;
  if (a.batch_id_per_token_output != nullptr) {
    b = a.batch_id_per_token_output[r];
    if (b == -1) return p;  // past T_out
    PD_CHECK(b >= 0 && b < a.bsz, kOp, ": batch_id_per_token_output[", r, "] = ", b,
             ", expected -1 or a slot in [0, bsz = ", a.bsz, ")");
  }
  const int64_t len = a.seq_len_this_time[b];
  const int64_t enc = a.seq_lens_encoder[b];
  PD_CHECK(len >= 0, kOp, ": seq_len_this_time[", b, "] = ", len, ", expected >= 0");
  PD_CHECK(enc >= 0, kOp, ": seq_lens_encoder[", b, "] = ", enc, ", expected >= 0");
  if (len == 0 || (enc == 0 && a.seq_lens_decoder[b] == 0)) return p;
  PD_CHECK(enc <= len, kOp, ": seq_lens_encoder[", b, "] = ", enc, " exceeds seq_len_this_time[",
           b, "] = ", len, "; the last prompt token must be one of the slot's tokens this step");
  const int64_t start = a.cu_seqlens_q[b];
  PD_CHECK(start >= 0 && start + len <= a.token_num, kOp, ": slot ", b,
           " owns tmp_out rows [cu_seqlens_q[", b, "], cu_seqlens_q[", b, "] + seq_len_this_time[",
           b, "]) = [", start, ", ", start + len, "), outside tmp_out's [0, ", a.token_num, ")");
  int64_t local = 0;
  if (a.batch_id_per_token_output != nullptr) {
    const int64_t row_begin = a.cu_seqlens_q_output[b];
    const int64_t row_end = a.cu_seqlens_q_output[b + 1];
    PD_CHECK(r >= row_begin && r < row_end, kOp, ": output row ", r, " has batch id ", b,
             " but slot ", b, "'s rows are [cu_seqlens_q_output[", b, "], cu_seqlens_q_output[",
             b + 1, "]) = [", row_begin, ", ", row_end, ")");
    local = r - row_begin;
  }
  if (enc > 0) {
    p.src = start + enc - 1;
    p.first_slot = b;
    p.first_src = enc >= 2 ? p.src - 1 : -1;
  } else {
    PD_CHECK(local < len, kOp, ": output row ", r, " is local index ", local, " of decode slot ", b,
             ", expected < seq_len_this_time[", b, "] = ", len);
    p.src = start + local;
  }
  return p;
}

void CopyRow(const char* tmp_out, int64_t src, char* dst, size_t row_bytes) {
  if (src < 0) {
    std::memset(dst, 0, row_bytes);
  } else {
    std::memcpy(dst, tmp_out + src * static_cast<int64_t>(row_bytes), row_bytes);
  }
}

std::vector<paddle::Tensor> RebuildPaddingCPU(
    const paddle::Tensor& tmp_out, const paddle::Tensor& cu_seqlens_q,
    const paddle::Tensor& seq_len_this_time, const paddle::Tensor& seq_lens_decoder,
    const paddle::Tensor& seq_lens_encoder,
    const paddle::optional<paddle::Tensor>& batch_id_per_token_output,
    const paddle::optional<paddle::Tensor>& cu_seqlens_q_output,
    paddle::optional<paddle::Tensor>& first_token_out, bool enable_logprob, int elem_bytes) {
  const Indices a{cu_seqlens_q.data<int32_t>(),
                  seq_len_this_time.data<int32_t>(),
                  seq_lens_decoder.data<int32_t>(),
                  seq_lens_encoder.data<int32_t>(),
                  batch_id_per_token_output ? batch_id_per_token_output->data<int32_t>() : nullptr,
                  cu_seqlens_q_output ? cu_seqlens_q_output->data<int32_t>() : nullptr,
                  tmp_out.shape()[0],
                  seq_len_this_time.shape()[0]};
  const int64_t rows = batch_id_per_token_output ? batch_id_per_token_output->shape()[0] : a.bsz;
  const int64_t hidden = tmp_out.shape()[1];
  // Every row is checked before anything is written, so an error leaves first_token_out intact.
  std::vector<RowPlan> plans(rows);
  for (int64_t r = 0; r < rows; ++r) plans[r] = PlanRow(r, a);

  auto out = paddle::empty({rows, hidden}, tmp_out.dtype(), tmp_out.place());
  const size_t row_bytes = static_cast<size_t>(hidden) * elem_bytes;
  const char* src = static_cast<const char*>(tmp_out.data());
  char* dst = static_cast<char*>(out.data());
  char* first = enable_logprob ? static_cast<char*>(first_token_out->data()) : nullptr;
  for (int64_t r = 0; r < rows; ++r) {
    CopyRow(src, plans[r].src, dst + r * static_cast<int64_t>(row_bytes), row_bytes);
    if (first != nullptr && plans[r].first_slot >= 0) {
      CopyRow(src, plans[r].first_src, first + plans[r].first_slot * static_cast<int64_t>(row_bytes),
              row_bytes);
    }
  }
  return {out};
}

// Shapes, dtypes, places and pairs; returns the element size of tmp_out.
int CheckInputs(const paddle::Tensor& tmp_out, const paddle::Tensor& cu_seqlens_q,
                const paddle::Tensor& seq_len_this_time, const paddle::Tensor& seq_lens_decoder,
                const paddle::Tensor& seq_lens_encoder,
                const paddle::optional<paddle::Tensor>& batch_id_per_token_output,
                const paddle::optional<paddle::Tensor>& cu_seqlens_q_output,
                const paddle::optional<paddle::Tensor>& first_token_out, bool enable_logprob) {
  using specworker::CheckSamePlace;
  const int elem_bytes = specworker::CheckFloatDtype(kOp, "tmp_out", tmp_out);
  specworker::CheckRank(kOp, "tmp_out", tmp_out, 2);  // [token_num, H]
  const int64_t bsz =
      specworker::CheckPerSlot(kOp, "seq_len_this_time", seq_len_this_time, paddle::DataType::INT32);
  specworker::CheckPerSlot(kOp, "seq_lens_decoder", seq_lens_decoder, paddle::DataType::INT32, bsz);
  specworker::CheckPerSlot(kOp, "seq_lens_encoder", seq_lens_encoder, paddle::DataType::INT32, bsz);
  specworker::CheckCuSeqlens(kOp, "cu_seqlens_q", cu_seqlens_q, bsz);
  specworker::CheckPaired(kOp, "batch_id_per_token_output", batch_id_per_token_output,
                          "cu_seqlens_q_output", cu_seqlens_q_output);
  CheckSamePlace(kOp, "cu_seqlens_q", cu_seqlens_q, tmp_out, "tmp_out");
  CheckSamePlace(kOp, "seq_len_this_time", seq_len_this_time, tmp_out, "tmp_out");
  CheckSamePlace(kOp, "seq_lens_decoder", seq_lens_decoder, tmp_out, "tmp_out");
  CheckSamePlace(kOp, "seq_lens_encoder", seq_lens_encoder, tmp_out, "tmp_out");
  int64_t rows = bsz;
  if (batch_id_per_token_output) {
    specworker::CheckDtype(kOp, "batch_id_per_token_output", *batch_id_per_token_output,
                           paddle::DataType::INT32);
    specworker::CheckRank(kOp, "batch_id_per_token_output", *batch_id_per_token_output, 1);
    specworker::CheckCuSeqlens(kOp, "cu_seqlens_q_output", *cu_seqlens_q_output, bsz);
    CheckSamePlace(kOp, "batch_id_per_token_output", *batch_id_per_token_output, tmp_out, "tmp_out");
    CheckSamePlace(kOp, "cu_seqlens_q_output", *cu_seqlens_q_output, tmp_out, "tmp_out");
    rows = batch_id_per_token_output->shape()[0];
  }
  PD_CHECK(!enable_logprob || first_token_out, kOp,
           ": enable_logprob=True needs first_token_out [bsz, H] (got None)");
  if (first_token_out) {
    const auto& s = first_token_out->shape();
    PD_CHECK(first_token_out->dtype() == tmp_out.dtype(), kOp, ": first_token_out has dtype ",
             specworker::DtypeStr(first_token_out->dtype()), ", expected tmp_out's ",
             specworker::DtypeStr(tmp_out.dtype()));
    PD_CHECK(s.size() == 2 && s[0] == bsz && s[1] == tmp_out.shape()[1], kOp,
             ": first_token_out has shape ", specworker::ShapeStr(s), ", expected [bsz, H] = [",
             bsz, ", ", tmp_out.shape()[1], "]");
    CheckSamePlace(kOp, "first_token_out", *first_token_out, tmp_out, "tmp_out");
  }
  specworker::CheckFitsInt32(kOp, "token_num", tmp_out.shape()[0]);
  specworker::CheckFitsInt32(kOp, "H", tmp_out.shape()[1]);
  specworker::CheckFitsInt32(kOp, "output rows", rows);
  return elem_bytes;
}

}  // namespace

std::vector<paddle::Tensor> RebuildPadding(
    const paddle::Tensor& tmp_out, const paddle::Tensor& cu_seqlens_q,
    const paddle::Tensor& seq_len_this_time, const paddle::Tensor& seq_lens_decoder,
    const paddle::Tensor& seq_lens_encoder,
    const paddle::optional<paddle::Tensor>& batch_id_per_token_output,
    const paddle::optional<paddle::Tensor>& cu_seqlens_q_output,
    paddle::optional<paddle::Tensor>& first_token_out, bool enable_logprob) {
  specworker::CheckGiven(kOp, {{"tmp_out", &tmp_out}, {"cu_seqlens_q", &cu_seqlens_q},
                               {"seq_len_this_time", &seq_len_this_time},
                               {"seq_lens_decoder", &seq_lens_decoder},
                               {"seq_lens_encoder", &seq_lens_encoder}});
  const int elem_bytes =
      CheckInputs(tmp_out, cu_seqlens_q, seq_len_this_time, seq_lens_decoder, seq_lens_encoder,
                  batch_id_per_token_output, cu_seqlens_q_output, first_token_out, enable_logprob);
  if (tmp_out.is_gpu()) {
#ifdef SPECWORKER_WITH_CUDA
    return RebuildPaddingCUDA(tmp_out, cu_seqlens_q, seq_len_this_time, seq_lens_decoder,
                              seq_lens_encoder, batch_id_per_token_output, cu_seqlens_q_output,
                              first_token_out, enable_logprob);
#else
    PD_THROW(kOp, ": got a GPU tensor but the extension was built without CUDA");
#endif
  }
  return RebuildPaddingCPU(tmp_out, cu_seqlens_q, seq_len_this_time, seq_lens_decoder,
                           seq_lens_encoder, batch_id_per_token_output, cu_seqlens_q_output,
                           first_token_out, enable_logprob, elem_bytes);
}

std::vector<std::vector<int64_t>> RebuildPaddingInferShape(
    const std::vector<int64_t>& tmp_out, const std::vector<int64_t>& /*cu_seqlens_q*/,
    const std::vector<int64_t>& seq_len_this_time, const std::vector<int64_t>& /*seq_lens_decoder*/,
    const std::vector<int64_t>& /*seq_lens_encoder*/,
    const paddle::optional<std::vector<int64_t>>& batch_id_per_token_output,
    const paddle::optional<std::vector<int64_t>>& /*cu_seqlens_q_output*/,
    const paddle::optional<std::vector<int64_t>>& /*first_token_out*/) {
  const int64_t rows =
      batch_id_per_token_output ? (*batch_id_per_token_output)[0] : seq_len_this_time[0];
  return {{rows, tmp_out[1]}};
}

std::vector<paddle::DataType> RebuildPaddingInferDtype(
    const paddle::DataType& tmp_out, const paddle::DataType&, const paddle::DataType&,
    const paddle::DataType&, const paddle::DataType&, const paddle::optional<paddle::DataType>&,
    const paddle::optional<paddle::DataType>&, const paddle::optional<paddle::DataType>&) {
  return {tmp_out};
}

PD_BUILD_OP(rebuild_padding)
    .Inputs({"tmp_out", "cu_seqlens_q", "seq_len_this_time", "seq_lens_decoder",
             "seq_lens_encoder", paddle::Optional("batch_id_per_token_output"),
             paddle::Optional("cu_seqlens_q_output"), paddle::Optional("first_token_out")})
    .Outputs({"out", paddle::Optional("first_token_out_out")})
    .Attrs({"enable_logprob: bool"})
    .SetInplaceMap({{paddle::Optional("first_token_out"), paddle::Optional("first_token_out_out")}})
    .SetKernelFn(PD_KERNEL(RebuildPadding))
    .SetInferShapeFn(PD_INFER_SHAPE(RebuildPaddingInferShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(RebuildPaddingInferDtype));
