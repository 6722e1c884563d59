// batch_invariant_linear: out = x @ weight (+ bias), with each output's float32 reduction order
// fixed by K alone, so a row's result is bit-identical whatever the other rows of the call are.
//   x       [M, K] float32, M >= 0 (packed token rows)
//   weight  [K, N] float32 (in_features x out_features: paddle.nn.Linear's weight layout, the
//           same argument as paddle.nn.functional.linear; a checkpoint's [N, K] matrix is
//           transposed once at load), or on CPU the same matrix as panels [N / 32, K, 32] in
//           float32 or bfloat16 (ops.pack_linear_weight builds them once at load; panel p, row k
//           holds weight[k, 32p : 32p + 32])
//   bias    [N] float32, optional
//   -> out  [M, N] float32
//
// Why: speculative decoding is lossless only if the target's logits for a token do not depend on
// how many tokens share the forward pass (1 on a plain decode step, k + 1 on a verify step).
// A BLAS picks its blocking, and so its summation order, from M; here that order is a contract:
//
//   acc = +0.0f
//   for k = 0, 1, ..., K - 1:  acc = fl(acc + fl(x[r, k] * weight[k, n]))    (no fused multiply-add)
//   out[r, n] = bias ? fl(acc + bias[n]) : acc
//
// (a bfloat16 weight is widened to float32 exactly first). The CPU kernel is
// kernels/batch_invariant_linear.cc (tiles, layouts, threads, instruction sets: all give the same
// bits); the CUDA kernel follows the same contract (__fmul_rn / __fadd_rn), so GPU and CPU agree
// bit for bit on normal numbers. This file checks the arguments, allocates and dispatches on place.
//
// Errors: dtype, rank, K mismatch, panel shape and bias shape raise on both devices; panels on a
// GPU tensor raise. No input value is used as an index, so there is nothing to bound-check on
// either device (NaN and Inf propagate as IEEE).
#include "op_checks.h"
#include "kernels/batch_invariant_linear.h"

#ifdef SPECWORKER_WITH_CUDA
#include "batch_invariant_linear_cuda.h"
#endif

namespace {

constexpr const char* kOp = "batch_invariant_linear";
constexpr int64_t kPanel = SPECWORKER_LINEAR_PANEL;

bool IsPanels(const paddle::Tensor& weight) { return weight.shape().size() == 3; }

// N of a plain [K, N] or panel [N / 32, K, 32] weight.
int64_t OutFeatures(const std::vector<int64_t>& w) { return w.size() == 3 ? w[0] * w[2] : w[1]; }

void CheckWeight(const paddle::Tensor& weight, const paddle::Tensor& x) {
  using paddle::DataType;
  const auto& s = weight.shape();
  PD_CHECK(s.size() == 2 || s.size() == 3, kOp, ": weight has shape ", specworker::ShapeStr(s),
           ", expected a 2-D tensor [K, N] (or 3-D panels [N / 32, K, 32] on CPU)");
  const int64_t K = x.shape()[1];
  if (s.size() == 2) {
    specworker::CheckDtype(kOp, "weight", weight, DataType::FLOAT32);
    PD_CHECK(s[0] == K, kOp, ": weight has shape ", specworker::ShapeStr(s),
             ", expected [K, N] with K = x.shape[1] = ", K, " (x has shape ",
             specworker::ShapeStr(x.shape()), "; weight is [in_features, out_features])");
    return;
  }
  PD_CHECK(weight.dtype() == DataType::FLOAT32 || weight.dtype() == DataType::BFLOAT16, kOp,
           ": weight panels have dtype ", specworker::DtypeStr(weight.dtype()),
           ", expected float32 or bfloat16");
  PD_CHECK(s[1] == K && s[2] == kPanel, kOp, ": weight panels have shape ", specworker::ShapeStr(s),
           ", expected [N / 32, K, 32] with K = x.shape[1] = ", K, " (x has shape ",
           specworker::ShapeStr(x.shape()), ")");
}

void CheckArgs(const paddle::Tensor& x, const paddle::Tensor& weight,
               const paddle::optional<paddle::Tensor>& bias) {
  using paddle::DataType;
  specworker::CheckDtype(kOp, "x", x, DataType::FLOAT32);
  specworker::CheckRank(kOp, "x", x, 2);
  CheckWeight(weight, x);
  const int64_t K = x.shape()[1];
  const int64_t N = OutFeatures(weight.shape());
  specworker::CheckSamePlace(kOp, "weight", weight, x, "x");
  if (bias) {
    specworker::CheckDtype(kOp, "bias", *bias, DataType::FLOAT32);
    PD_CHECK(bias->shape().size() == 1 && bias->shape()[0] == N, kOp, ": bias has shape ",
             specworker::ShapeStr(bias->shape()), ", expected [N] = [", N, "]");
    specworker::CheckSamePlace(kOp, "bias", *bias, x, "x");
  }
  // The CUDA launcher takes int sizes; the same limits on CPU keep the two devices alike.
  specworker::CheckFitsInt32(kOp, "M (x.shape[0])", x.shape()[0]);
  specworker::CheckFitsInt32(kOp, "K (x.shape[1])", K);
  specworker::CheckFitsInt32(kOp, "N (weight.shape[1])", N);
}

std::vector<paddle::Tensor> BatchInvariantLinearCPU(const paddle::Tensor& x,
                                                    const paddle::Tensor& weight,
                                                    const paddle::optional<paddle::Tensor>& bias) {
  const int64_t M = x.shape()[0];
  const int64_t K = x.shape()[1];
  const int64_t N = OutFeatures(weight.shape());
  const int layout = !IsPanels(weight) ? SPECWORKER_LINEAR_PLAIN_F32
                     : weight.dtype() == paddle::DataType::BFLOAT16 ? SPECWORKER_LINEAR_PANELS_BF16
                                                                     : SPECWORKER_LINEAR_PANELS_F32;
  auto out = paddle::empty({M, N}, paddle::DataType::FLOAT32, x.place());
  // With M, N or K == 0, x and weight may hold no memory; the kernel then reads neither.
  const bool reads = M > 0 && N > 0 && K > 0;
  const int rc = specworker_batch_invariant_linear_cpu(
      reads ? x.data<float>() : nullptr, reads ? weight.data() : nullptr, layout,
      bias && M > 0 && N > 0 ? bias->data<float>() : nullptr, M > 0 && N > 0 ? out.data<float>() : nullptr,
      M, K, N, /*max_threads=*/0);
  PD_CHECK(rc == 0, kOp, ": ", specworker_linear_cpu_error());
  return {out};
}

}  // namespace

std::vector<paddle::Tensor> BatchInvariantLinear(const paddle::Tensor& x,
                                                 const paddle::Tensor& weight,
                                                 const paddle::optional<paddle::Tensor>& bias) {
  specworker::CheckGiven(kOp, {{"x", &x}, {"weight", &weight}});
  CheckArgs(x, weight, bias);
  if (x.is_gpu()) {
    PD_CHECK(!IsPanels(weight), kOp, ": weight panels [N / 32, K, 32] are a CPU layout; on GPU pass the "
             "[K, N] weight (ops.pack_linear_weight returns it unchanged there)");
#ifdef SPECWORKER_WITH_CUDA
    return BatchInvariantLinearCUDA(x, weight, bias);
#else
    PD_THROW(kOp, ": got a GPU tensor but the extension was built without CUDA");
#endif
  }
  return BatchInvariantLinearCPU(x, weight, bias);
}

std::vector<std::vector<int64_t>> BatchInvariantLinearInferShape(
    const std::vector<int64_t>& x, const std::vector<int64_t>& weight,
    const paddle::optional<std::vector<int64_t>>& /*bias*/) {
  return {{x[0], OutFeatures(weight)}};
}

std::vector<paddle::DataType> BatchInvariantLinearInferDtype(
    const paddle::DataType&, const paddle::DataType&, const paddle::optional<paddle::DataType>&) {
  return {paddle::DataType::FLOAT32};
}

PD_BUILD_OP(batch_invariant_linear)
    .Inputs({"x", "weight", paddle::Optional("bias")})
    .Outputs({"out"})
    .SetKernelFn(PD_KERNEL(BatchInvariantLinear))
    .SetInferShapeFn(PD_INFER_SHAPE(BatchInvariantLinearInferShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(BatchInvariantLinearInferDtype));
