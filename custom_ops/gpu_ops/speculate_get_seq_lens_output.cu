// Paddle CUDA binding for speculate_get_seq_lens_output: allocate, launch, report. Checks run
// in cpu_ops/speculate_get_seq_lens_output.cc before dispatch.
#include "op_checks.h"
#include "speculate_get_seq_lens_output_cuda.h"
#include "kernels/speculate_get_seq_lens_output.h"

std::vector<paddle::Tensor> SpeculateGetSeqLensOutputCUDA(const paddle::Tensor& seq_lens_this_time,
                                                          const paddle::Tensor& seq_lens_encoder) {
  const int64_t bsz = seq_lens_this_time.shape()[0];
  auto out = paddle::empty({bsz}, paddle::DataType::INT32, seq_lens_this_time.place());
  const int err = specworker_speculate_get_seq_lens_output_launch(
      seq_lens_this_time.data<int32_t>(), seq_lens_encoder.data<int32_t>(),
      static_cast<int>(bsz), out.data<int32_t>(), seq_lens_this_time.stream());
  SPECWORKER_CHECK_LAUNCH("speculate_get_seq_lens_output", err);
  return {out};
}
