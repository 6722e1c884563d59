// Paddle CUDA binding for eagle_get_hidden_states: allocate, launch, report. Checks run in
// cpu_ops/eagle_get_hidden_states.cc before dispatch. The output is sized from the bound T (the
// input's rows), so the count stays on the device; the offsets scratch comes from Paddle's
// allocator (the launcher allocates nothing).
#include "op_checks.h"
#include "eagle_get_hidden_states_cuda.h"
#include "kernels/eagle_get_hidden_states.h"

std::vector<paddle::Tensor> EagleGetHiddenStatesCUDA(
    const paddle::Tensor& input, const paddle::Tensor& seq_lens_this_time,
    const paddle::Tensor& seq_lens_encoder, const paddle::Tensor& accept_num,
    const paddle::Tensor& target_model_seq_lens_this_time) {
  const int64_t T = input.shape()[0];
  const int64_t H = input.shape()[1];
  const int64_t bsz = seq_lens_this_time.shape()[0];
  const auto place = input.place();
  auto out = paddle::empty({T, H}, input.dtype(), place);
  auto count = paddle::empty({1}, paddle::DataType::INT32, place);
  auto scratch = paddle::empty({2 * bsz + 1}, paddle::DataType::INT32, place);
  const int elem_size = input.dtype() == paddle::DataType::FLOAT32 ? 4 : 2;
  const int err = specworker_eagle_get_hidden_states_launch(
      input.data(), static_cast<int>(T), static_cast<int>(H), elem_size,
      seq_lens_this_time.data<int32_t>(), seq_lens_encoder.data<int32_t>(),
      accept_num.data<int32_t>(), target_model_seq_lens_this_time.data<int32_t>(),
      static_cast<int>(bsz), scratch.data<int32_t>(), out.data(), static_cast<int>(T),
      count.data<int32_t>(), input.stream());
  SPECWORKER_CHECK_LAUNCH("eagle_get_hidden_states", err);
  return {out, count};
}
