// Paddle CUDA binding for batch_invariant_linear: allocate, launch, report. The argument checks
// run in cpu_ops/batch_invariant_linear.cc before dispatch.
#include "op_checks.h"
#include "batch_invariant_linear_cuda.h"
#include "kernels/batch_invariant_linear.h"

std::vector<paddle::Tensor> BatchInvariantLinearCUDA(const paddle::Tensor& x,
                                                     const paddle::Tensor& weight,
                                                     const paddle::optional<paddle::Tensor>& bias) {
  const int64_t M = x.shape()[0];
  const int64_t K = x.shape()[1];
  const int64_t N = weight.shape()[1];
  auto out = paddle::empty({M, N}, paddle::DataType::FLOAT32, x.place());
  if (M == 0 || N == 0) return {out};
  // With K == 0, x and weight may hold no memory; the kernel then reads neither.
  const float* x_ptr = K > 0 ? x.data<float>() : nullptr;
  const float* w_ptr = K > 0 ? weight.data<float>() : nullptr;
  const int err = specworker_batch_invariant_linear_launch(
      x_ptr, w_ptr, bias ? bias->data<float>() : nullptr, out.data<float>(),
      static_cast<int>(M), static_cast<int>(K), static_cast<int>(N), x.stream());
  SPECWORKER_CHECK_LAUNCH("batch_invariant_linear", err);
  return {out};
}
