// Paddle CUDA binding for batch_invariant_linear_bf16: allocate, launch, report. The argument checks
// run in cpu_ops/batch_invariant_linear_bf16.cc before dispatch.
#include "op_checks.h"
#include "batch_invariant_linear_bf16_cuda.h"
#include "kernels/batch_invariant_linear_bf16.h"

std::vector<paddle::Tensor> BatchInvariantLinearBf16CUDA(const paddle::Tensor& x, const paddle::Tensor& weight,
                                                         const paddle::optional<paddle::Tensor>& bias) {
  const int64_t M = x.shape()[0];
  const int64_t K = x.shape()[1];
  const int64_t N = weight.shape()[1];
  auto out = paddle::empty({M, N}, paddle::DataType::FLOAT32, x.place());
  if (M == 0 || N == 0) return {out};
  // With K == 0, x and weight may hold no memory; the kernel then reads neither.
  const auto* x_ptr = K > 0 ? static_cast<const __nv_bfloat16*>(x.data()) : nullptr;
  const auto* w_ptr = K > 0 ? static_cast<const __nv_bfloat16*>(weight.data()) : nullptr;
  const auto* b_ptr = bias ? static_cast<const __nv_bfloat16*>(bias->data()) : nullptr;
  const int err = specworker_batch_invariant_linear_bf16_launch(
      x_ptr, w_ptr, b_ptr, out.data<float>(), static_cast<int>(M), static_cast<int>(K), static_cast<int>(N),
      SPECWORKER_LINEAR_OUT_FLOAT32, x.stream());
  SPECWORKER_CHECK_LAUNCH("batch_invariant_linear_bf16", err);
  return {out};
}
