// batch_invariant_linear_bf16: out [M, N] float32 = x @ weight (+ bias) on bfloat16 inputs, with each
// output's arithmetic fixed by K alone (docs/spec.md §4.8), so a row's bits do not depend on M.
//   x       [M, K] bfloat16, M >= 0
//   weight  [K, N] bfloat16 (in_features x out_features, paddle.nn.Linear's layout)
//   bias    [N] bfloat16, optional
//   -> out  [M, N] float32
// GPU: tensor-core MMAs in one fixed k order (gpu_ops/kernels/batch_invariant_linear_bf16.cu). CPU: the
// inputs widened to float32 exactly, then batch_invariant_linear's float32 order (its CPU kernel):
// batch invariant on both devices, but the two devices do not agree bit for bit (the MMA rounds
// inside each 16-wide k step); each is within the bound of docs/spec.md §4.8 of the exact value.
// A CPU model converts bf16 weights to float32 once at load and calls batch_invariant_linear; this
// CPU path exists so the op runs (and is tested) on every device.
#include <cstring>
#include <vector>

#include "op_checks.h"
#include "kernels/batch_invariant_linear.h"

#ifdef SPECWORKER_WITH_CUDA
#include "batch_invariant_linear_bf16_cuda.h"
#endif

namespace {

constexpr const char* kOp = "batch_invariant_linear_bf16";

void CheckArgs(const paddle::Tensor& x, const paddle::Tensor& weight,
               const paddle::optional<paddle::Tensor>& bias) {
  using paddle::DataType;
  specworker::CheckDtype(kOp, "x", x, DataType::BFLOAT16);
  specworker::CheckRank(kOp, "x", x, 2);
  specworker::CheckDtype(kOp, "weight", weight, DataType::BFLOAT16);
  specworker::CheckRank(kOp, "weight", weight, 2);
  const int64_t K = x.shape()[1];
  const int64_t N = weight.shape()[1];
  PD_CHECK(weight.shape()[0] == K, kOp, ": weight has shape ", specworker::ShapeStr(weight.shape()),
           ", expected [K, N] with K = x.shape[1] = ", K, " (x has shape ", specworker::ShapeStr(x.shape()),
           "; weight is [in_features, out_features])");
  specworker::CheckSamePlace(kOp, "weight", weight, x, "x");
  if (bias) {
    specworker::CheckDtype(kOp, "bias", *bias, DataType::BFLOAT16);
    PD_CHECK(bias->shape().size() == 1 && bias->shape()[0] == N, kOp, ": bias has shape ",
             specworker::ShapeStr(bias->shape()), ", expected [N] = [", N, "]");
    specworker::CheckSamePlace(kOp, "bias", *bias, x, "x");
  }
  // The CUDA launcher takes int sizes; the same limits on CPU keep the two devices alike.
  specworker::CheckFitsInt32(kOp, "M (x.shape[0])", x.shape()[0]);
  specworker::CheckFitsInt32(kOp, "K (x.shape[1])", K);
  specworker::CheckFitsInt32(kOp, "N (weight.shape[1])", N);
}

// bfloat16 bits -> float32, exact.
std::vector<float> Widen(const paddle::Tensor& t) {
  const auto* bits = static_cast<const uint16_t*>(t.data());
  std::vector<float> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    const uint32_t w = static_cast<uint32_t>(bits[i]) << 16;
    std::memcpy(&out[i], &w, sizeof(float));
  }
  return out;
}

std::vector<paddle::Tensor> BatchInvariantLinearBf16CPU(const paddle::Tensor& x, const paddle::Tensor& weight,
                                                        const paddle::optional<paddle::Tensor>& bias) {
  const int64_t M = x.shape()[0];
  const int64_t K = x.shape()[1];
  const int64_t N = weight.shape()[1];
  auto out = paddle::empty({M, N}, paddle::DataType::FLOAT32, x.place());
  if (M == 0 || N == 0) return {out};
  // With K == 0, x and weight may hold no memory; the kernel then reads neither.
  const std::vector<float> xf = K > 0 ? Widen(x) : std::vector<float>();
  const std::vector<float> wf = K > 0 ? Widen(weight) : std::vector<float>();
  const std::vector<float> bf = bias ? Widen(*bias) : std::vector<float>();
  const int rc = specworker_batch_invariant_linear_cpu(
      K > 0 ? xf.data() : nullptr, K > 0 ? wf.data() : nullptr, SPECWORKER_LINEAR_PLAIN_F32,
      bias ? bf.data() : nullptr, out.data<float>(), M, K, N, /*max_threads=*/0);
  PD_CHECK(rc == 0, kOp, ": ", specworker_linear_cpu_error());
  return {out};
}

}  // namespace

std::vector<paddle::Tensor> BatchInvariantLinearBf16(const paddle::Tensor& x, const paddle::Tensor& weight,
                                                     const paddle::optional<paddle::Tensor>& bias) {
  specworker::CheckGiven(kOp, {{"x", &x}, {"weight", &weight}});
  CheckArgs(x, weight, bias);
  if (x.is_gpu()) {
#ifdef SPECWORKER_WITH_CUDA
    return BatchInvariantLinearBf16CUDA(x, weight, bias);
#else
    PD_THROW(kOp, ": got a GPU tensor but the extension was built without CUDA");
#endif
  }
  return BatchInvariantLinearBf16CPU(x, weight, bias);
}

std::vector<std::vector<int64_t>> BatchInvariantLinearBf16InferShape(
    const std::vector<int64_t>& x, const std::vector<int64_t>& weight,
    const paddle::optional<std::vector<int64_t>>& /*bias*/) {
  return {{x[0], weight[1]}};
}

std::vector<paddle::DataType> BatchInvariantLinearBf16InferDtype(
    const paddle::DataType&, const paddle::DataType&, const paddle::optional<paddle::DataType>&) {
  return {paddle::DataType::FLOAT32};
}

PD_BUILD_OP(batch_invariant_linear_bf16)
    .Inputs({"x", "weight", paddle::Optional("bias")})
    .Outputs({"out"})
    .SetKernelFn(PD_KERNEL(BatchInvariantLinearBf16))
    .SetInferShapeFn(PD_INFER_SHAPE(BatchInvariantLinearBf16InferShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(BatchInvariantLinearBf16InferDtype));
