// fused_rms_norm: residual add + RMSNorm in one call (docs/spec.md §4.10).
//   x [R, H] float32, weight [H] float32, optional residual [R, H] float32, attr eps >= 0.
//   -> out [R, H], residual_out [R, H] (h; a [0, H] tensor when residual is None: the wrapper
//      returns x itself then, so nothing is copied).
// Per row: h_k = residual ? fl(x_k + residual_k) : x_k; acc = +0; for k = 0 .. H - 1 in order
// acc = fl(acc + fl(fl(h_k * h_k) * fl(1 / H))); rs = sqrt(fl(acc + eps)) (correctly rounded);
// out_k = fl(fl(h_k / rs) * weight_k). No FMA, no reassociation: the CUDA kernel
// (gpu_ops/kernels/fused_rms_norm.cu) does the same IEEE operations, so the devices agree bit for
// bit and a row's bits never depend on R. Plain loops on the caller's thread: the sum over k stays
// scalar (the compiler cannot reassociate it without -ffast-math); the elementwise loops may vectorise.
#include <cmath>

#include "op_checks.h"

#ifdef SPECWORKER_WITH_CUDA
#include "fused_rms_norm_cuda.h"
#endif

#if defined(__FAST_MATH__)
#error "fused_rms_norm.cc must not be compiled with -ffast-math: it would reassociate the row sums"
#endif
// After every include, so only the kernel below is affected.
#pragma GCC optimize("fp-contract=off")
#pragma STDC FP_CONTRACT OFF

namespace {

constexpr const char* kOp = "fused_rms_norm";

// One row; h is x_row (no residual) or residual_out_row after the add.
void NormRow(const float* h, const float* weight, float* out, int64_t hidden, float inv_h, float eps) {
  float acc = 0.0f;
  for (int64_t k = 0; k < hidden; ++k) {
    const float sq = h[k] * h[k];  // separate statements: one rounding each
    const float term = sq * inv_h;
    acc = acc + term;
  }
  const float rs = std::sqrt(acc + eps);
  for (int64_t k = 0; k < hidden; ++k) {
    const float q = h[k] / rs;
    out[k] = q * weight[k];
  }
}

// rows > 0; out and residual_out allocated by FusedRmsNorm.
void FusedRmsNormCPU(const paddle::Tensor& x, const paddle::Tensor& weight,
                     const paddle::optional<paddle::Tensor>& residual, float eps,
                     paddle::Tensor& out, paddle::Tensor& residual_out) {
  const int64_t rows = x.shape()[0];
  const int64_t hidden = x.shape()[1];
  const float inv_h = 1.0f / static_cast<float>(hidden);
  const float* xp = x.data<float>();
  const float* wp = weight.data<float>();
  const float* rp = residual ? residual->data<float>() : nullptr;
  float* hp = residual ? residual_out.data<float>() : nullptr;
  float* op = out.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = r * hidden;
    const float* h = xp + base;
    if (rp != nullptr) {
      for (int64_t k = 0; k < hidden; ++k) hp[base + k] = xp[base + k] + rp[base + k];
      h = hp + base;
    }
    NormRow(h, wp, op + base, hidden, inv_h, eps);
  }
}

void CheckArgs(const paddle::Tensor& x, const paddle::Tensor& weight,
               const paddle::optional<paddle::Tensor>& residual, float eps) {
  using paddle::DataType;
  specworker::CheckDtype(kOp, "x", x, DataType::FLOAT32);
  specworker::CheckRank(kOp, "x", x, 2);  // [R, H]
  const int64_t hidden = x.shape()[1];
  PD_CHECK(hidden >= 1, kOp, ": x has shape ", specworker::ShapeStr(x.shape()),
           ", expected [R, H] with H >= 1");
  specworker::CheckDtype(kOp, "weight", weight, DataType::FLOAT32);
  PD_CHECK(weight.shape().size() == 1 && weight.shape()[0] == hidden, kOp, ": weight has shape ",
           specworker::ShapeStr(weight.shape()), ", expected [H] = [", hidden, "]");
  specworker::CheckSamePlace(kOp, "weight", weight, x, "x");
  // Paddle hands a zero-size optional input over as None, so at R = 0 a given residual is absent
  // here; that changes nothing (residual_out is [0, H] either way).
  if (residual) {
    specworker::CheckDtype(kOp, "residual", *residual, DataType::FLOAT32);
    PD_CHECK(residual->shape() == x.shape(), kOp, ": residual has shape ",
             specworker::ShapeStr(residual->shape()), ", expected x's shape ",
             specworker::ShapeStr(x.shape()));
    specworker::CheckSamePlace(kOp, "residual", *residual, x, "x");
  }
  PD_CHECK(std::isfinite(eps) && eps >= 0.0f, kOp, ": eps = ", eps,
           ", expected a finite value >= 0");
  specworker::CheckFitsInt32(kOp, "R (x.shape[0])", x.shape()[0]);
  specworker::CheckFitsInt32(kOp, "H (x.shape[1])", hidden);
}

}  // namespace

std::vector<paddle::Tensor> FusedRmsNorm(const paddle::Tensor& x, const paddle::Tensor& weight,
                                         const paddle::optional<paddle::Tensor>& residual,
                                         float eps) {
  specworker::CheckGiven(kOp, {{"x", &x}, {"weight", &weight}});
  CheckArgs(x, weight, residual, eps);
  const int64_t rows = x.shape()[0];
  const int64_t hidden = x.shape()[1];
  auto out = paddle::empty({rows, hidden}, paddle::DataType::FLOAT32, x.place());
  // [0, H] without residual: the wrapper returns x itself as residual_out.
  auto residual_out =
      paddle::empty({residual ? rows : 0, hidden}, paddle::DataType::FLOAT32, x.place());
  if (rows == 0) return {out, residual_out};
  if (x.is_gpu()) {
#ifdef SPECWORKER_WITH_CUDA
    FusedRmsNormCUDA(x, weight, residual, eps, out, residual_out);
#else
    PD_THROW(kOp, ": got a GPU tensor but the extension was built without CUDA");
#endif
  } else {
    FusedRmsNormCPU(x, weight, residual, eps, out, residual_out);
  }
  return {out, residual_out};
}

std::vector<std::vector<int64_t>> FusedRmsNormInferShape(
    const std::vector<int64_t>& x, const std::vector<int64_t>& /*weight*/,
    const paddle::optional<std::vector<int64_t>>& residual) {
  return {x, {residual ? x[0] : 0, x[1]}};
}

std::vector<paddle::DataType> FusedRmsNormInferDtype(const paddle::DataType&,
                                                     const paddle::DataType&,
                                                     const paddle::optional<paddle::DataType>&) {
  return {paddle::DataType::FLOAT32, paddle::DataType::FLOAT32};
}

PD_BUILD_OP(fused_rms_norm)
    .Inputs({"x", "weight", paddle::Optional("residual")})
    .Outputs({"out", "residual_out"})
    .Attrs({"eps: float"})
    .SetKernelFn(PD_KERNEL(FusedRmsNorm))
    .SetInferShapeFn(PD_INFER_SHAPE(FusedRmsNormInferShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(FusedRmsNormInferDtype));
