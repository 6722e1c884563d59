// Paddle CUDA binding for speculate_set_value_by_flags_and_idx: launch on the inputs' stream,
// report. In place; checks run in cpu_ops/speculate_set_value_by_flags_and_idx.cc first.
#include "op_checks.h"
#include "speculate_set_value_by_flags_and_idx_cuda.h"
#include "kernels/speculate_set_value_by_flags_and_idx.h"

void SpeculateSetValueByFlagsAndIdxCUDA(paddle::Tensor& pre_ids_all,
                                        const paddle::Tensor& accept_tokens,
                                        paddle::Tensor& accept_num,
                                        const paddle::Tensor& stop_flags,
                                        const paddle::Tensor& seq_lens_this_time,
                                        const paddle::Tensor& seq_lens_encoder,
                                        paddle::Tensor& seq_lens_decoder,
                                        const paddle::Tensor& step_idx) {
  const int err = specworker_speculate_set_value_by_flags_and_idx_launch(
      pre_ids_all.data<int64_t>(), accept_tokens.data<int64_t>(), accept_num.data<int32_t>(),
      stop_flags.data<bool>(), seq_lens_encoder.data<int32_t>(), seq_lens_decoder.data<int32_t>(),
      step_idx.data<int64_t>(), static_cast<int>(seq_lens_this_time.shape()[0]),
      static_cast<int>(pre_ids_all.shape()[1]), static_cast<int>(accept_tokens.shape()[1]),
      seq_lens_this_time.stream());
  SPECWORKER_CHECK_LAUNCH("speculate_set_value_by_flags_and_idx", err);
}
