// speculate_get_seq_lens_output: logit rows O_b each slot needs this step (docs/spec.md §4.2).
//   seq_lens_this_time, seq_lens_encoder, seq_lens_decoder: [bsz] or [bsz, 1] int32
// -> seq_lens_output [bsz] int32: 0 if L_b == 0; 1 if L_b == 1; 1 if E_b != 0 (prefill: only
//    the chunk's last prompt token needs a logit); else L_b (decode: last accepted token and
//    every draft). seq_lens_decoder is unused; it is shape-checked for FastDeploy's signature.
// A negative L_b raises on CPU; the CUDA kernel cannot raise without a host sync and gives it
// 0 rows, like L_b == 0.
#include "op_checks.h"

#ifdef SPECWORKER_WITH_CUDA
#include "speculate_get_seq_lens_output_cuda.h"
#endif

namespace {

constexpr const char* kOp = "speculate_get_seq_lens_output";

std::vector<paddle::Tensor> SpeculateGetSeqLensOutputCPU(const paddle::Tensor& seq_lens_this_time,
                                                         const paddle::Tensor& seq_lens_encoder) {
  const int64_t bsz = seq_lens_this_time.shape()[0];
  const int32_t* lens = seq_lens_this_time.data<int32_t>();
  const int32_t* enc = seq_lens_encoder.data<int32_t>();
  for (int64_t b = 0; b < bsz; ++b) {
    PD_CHECK(lens[b] >= 0, kOp, ": seq_lens_this_time[", b, "] = ", lens[b], ", expected >= 0");
  }
  auto out = paddle::empty({bsz}, paddle::DataType::INT32, seq_lens_this_time.place());
  int32_t* rows = out.data<int32_t>();
  for (int64_t b = 0; b < bsz; ++b) {
    if (lens[b] == 0) {
      rows[b] = 0;
    } else if (lens[b] == 1 || enc[b] != 0) {
      rows[b] = 1;
    } else {
      rows[b] = lens[b];
    }
  }
  return {out};
}

}  // namespace

std::vector<paddle::Tensor> SpeculateGetSeqLensOutput(const paddle::Tensor& seq_lens_this_time,
                                                      const paddle::Tensor& seq_lens_encoder,
                                                      const paddle::Tensor& seq_lens_decoder) {
  specworker::CheckGiven(kOp, {{"seq_lens_this_time", &seq_lens_this_time},
                               {"seq_lens_encoder", &seq_lens_encoder},
                               {"seq_lens_decoder", &seq_lens_decoder}});
  const int64_t bsz = specworker::CheckPerSlot(kOp, "seq_lens_this_time", seq_lens_this_time,
                                               paddle::DataType::INT32);
  specworker::CheckPerSlot(kOp, "seq_lens_encoder", seq_lens_encoder, paddle::DataType::INT32,
                           bsz);
  specworker::CheckPerSlot(kOp, "seq_lens_decoder", seq_lens_decoder, paddle::DataType::INT32,
                           bsz);
  specworker::CheckSamePlace(kOp, "seq_lens_encoder", seq_lens_encoder, seq_lens_this_time,
                             "seq_lens_this_time");
  specworker::CheckSamePlace(kOp, "seq_lens_decoder", seq_lens_decoder, seq_lens_this_time,
                             "seq_lens_this_time");
  if (seq_lens_this_time.is_gpu()) {
#ifdef SPECWORKER_WITH_CUDA
    return SpeculateGetSeqLensOutputCUDA(seq_lens_this_time, seq_lens_encoder);
#else
    PD_THROW(kOp, ": got a GPU tensor but the extension was built without CUDA");
#endif
  }
  return SpeculateGetSeqLensOutputCPU(seq_lens_this_time, seq_lens_encoder);
}

std::vector<std::vector<int64_t>> SpeculateGetSeqLensOutputInferShape(
    const std::vector<int64_t>& seq_lens_this_time, const std::vector<int64_t>&,
    const std::vector<int64_t>&) {
  return {{seq_lens_this_time[0]}};
}

std::vector<paddle::DataType> SpeculateGetSeqLensOutputInferDtype(const paddle::DataType&,
                                                                  const paddle::DataType&,
                                                                  const paddle::DataType&) {
  return {paddle::DataType::INT32};
}

PD_BUILD_OP(speculate_get_seq_lens_output)
    .Inputs({"seq_lens_this_time", "seq_lens_encoder", "seq_lens_decoder"})
    .Outputs({"seq_lens_output"})
    .SetKernelFn(PD_KERNEL(SpeculateGetSeqLensOutput))
    .SetInferShapeFn(PD_INFER_SHAPE(SpeculateGetSeqLensOutputInferShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(SpeculateGetSeqLensOutputInferDtype));
