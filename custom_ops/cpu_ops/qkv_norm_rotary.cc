// qkv_norm_rotary: the packed qkv projection -> rotated q, rotated k and v in one op (docs/spec.md §4.11).
//   qkv        [T, (nh + 2 nkv) * d] float32: per row, nh q heads, then nkv k heads, then nkv v heads
//   cos_full, sin_signed [T, 1, d] or [T, d] float32 (RotaryEmbedding.factors: [c, c] and [-s, s])
//   q_norm_weight, k_norm_weight [d] float32, optional, both or neither (Qwen3's per-head RMSNorm)
//   attrs: num_heads nh >= 1, num_kv_heads nkv >= 1 (nh % nkv == 0), head_dim d (even), eps
//   -> q [T, nh, d], k [T, nkv, d], v [T, nkv, d] float32, contiguous
// Per row t and q or k head, y = the head's d values:
//   with norms: inv_d = fl(1 / d); acc = +0; acc = fl(acc + fl(fl(y_k * y_k) * inv_d)) for k = 0..d-1;
//               r = sqrt(fl(acc + eps)) (correctly rounded); y_k = fl(fl(y_k / r) * w_k)
//   rotary:     out_j = fl(fl(y_j * cos_full_j) + fl(y_{(j + d/2) mod d} * sin_signed_j))
// v heads are copied. Every operation is one IEEE float32 operation in this order (no FMA, no
// reassociation), so the CUDA kernel (gpu_ops/kernels/qkv_norm_rotary.cu) gives the same bits and a
// row's bits never depend on the other rows. No input value is used as an index: both devices raise
// on exactly the same inputs (shapes, dtypes, attributes).
#include <cmath>
#include <cstring>
#include <vector>

#include "op_checks.h"

#ifdef SPECWORKER_WITH_CUDA
#include "qkv_norm_rotary_cuda.h"
#endif

#if defined(__FAST_MATH__)
#error "qkv_norm_rotary.cc must not be compiled with -ffast-math: it would reassociate the norm's sum"
#endif
// After every include, so only the kernel below is affected.
#pragma GCC optimize("fp-contract=off")
#pragma STDC FP_CONTRACT OFF

namespace {

constexpr const char* kOp = "qkv_norm_rotary";
constexpr int64_t kMaxHeadDim = 8192;  // the CUDA kernel stages a head in shared memory

using paddle::DataType;
using specworker::ShapeStr;

// One q or k head: src [d] -> dst [d]; w nullptr skips the norm. y is scratch of d floats.
void NormRotateHead(const float* src, const float* cos_full, const float* sin_signed, const float* w,
                    float eps, int64_t d, float* y, float* dst) {
  std::memcpy(y, src, sizeof(float) * d);
  if (w != nullptr) {
    const float inv_d = 1.0f / static_cast<float>(d);
    float acc = 0.0f;
    for (int64_t k = 0; k < d; ++k) acc = acc + (y[k] * y[k]) * inv_d;
    const float r = std::sqrt(acc + eps);
    for (int64_t k = 0; k < d; ++k) y[k] = (y[k] / r) * w[k];
  }
  const int64_t half = d / 2;
  for (int64_t j = 0; j < d; ++j) {
    const int64_t partner = j < half ? j + half : j - half;
    dst[j] = y[j] * cos_full[j] + y[partner] * sin_signed[j];
  }
}

std::vector<paddle::Tensor> QkvNormRotaryCPU(const paddle::Tensor& qkv, const paddle::Tensor& cos_full,
                                             const paddle::Tensor& sin_signed, const float* q_w,
                                             const float* k_w, int64_t nh, int64_t nkv, int64_t d, float eps) {
  const int64_t t_num = qkv.shape()[0];
  auto q = paddle::empty({t_num, nh, d}, DataType::FLOAT32, qkv.place());
  auto k = paddle::empty({t_num, nkv, d}, DataType::FLOAT32, qkv.place());
  auto v = paddle::empty({t_num, nkv, d}, DataType::FLOAT32, qkv.place());
  if (t_num == 0) return {q, k, v};
  const float* src = qkv.data<float>();
  const float* cos = cos_full.data<float>();
  const float* sin = sin_signed.data<float>();
  float* q_out = q.data<float>();
  float* k_out = k.data<float>();
  float* v_out = v.data<float>();
  const int64_t width = (nh + 2 * nkv) * d;
  std::vector<float> scratch(d);
  for (int64_t t = 0; t < t_num; ++t) {
    const float* row = src + t * width;
    const float* c = cos + t * d;
    const float* s = sin + t * d;
    for (int64_t h = 0; h < nh; ++h) {
      NormRotateHead(row + h * d, c, s, q_w, eps, d, scratch.data(), q_out + (t * nh + h) * d);
    }
    for (int64_t h = 0; h < nkv; ++h) {
      NormRotateHead(row + (nh + h) * d, c, s, k_w, eps, d, scratch.data(), k_out + (t * nkv + h) * d);
    }
    std::memcpy(v_out + t * nkv * d, row + (nh + nkv) * d, sizeof(float) * nkv * d);
  }
  return {q, k, v};
}

// cos_full / sin_signed: [T, 1, d] (RotaryEmbedding.factors) or [T, d].
void CheckFactors(const char* name, const paddle::Tensor& x, const paddle::Tensor& qkv, int64_t d) {
  specworker::CheckDtype(kOp, name, x, DataType::FLOAT32);
  const auto& s = x.shape();
  const int64_t t_num = qkv.shape()[0];
  const bool ok = (s.size() == 2 && s[0] == t_num && s[1] == d) ||
                  (s.size() == 3 && s[0] == t_num && s[1] == 1 && s[2] == d);
  PD_CHECK(ok, kOp, ": ", name, " has shape ", ShapeStr(s), ", expected [T, 1, head_dim] = [", t_num,
           ", 1, ", d, "] or [T, head_dim] = [", t_num, ", ", d, "]");
  specworker::CheckSamePlace(kOp, name, x, qkv, "qkv");
}

void CheckNormWeight(const char* name, const paddle::optional<paddle::Tensor>& w, const paddle::Tensor& qkv,
                     int64_t d) {
  specworker::CheckDtype(kOp, name, *w, DataType::FLOAT32);
  PD_CHECK(w->shape() == std::vector<int64_t>{d}, kOp, ": ", name, " has shape ", ShapeStr(w->shape()),
           ", expected [head_dim] = [", d, "]");
  specworker::CheckSamePlace(kOp, name, *w, qkv, "qkv");
}

// Shapes, dtypes, places, pairs and attributes (no tensor values are read).
void CheckInputs(const paddle::Tensor& qkv, const paddle::Tensor& cos_full, const paddle::Tensor& sin_signed,
                 const paddle::optional<paddle::Tensor>& q_norm_weight,
                 const paddle::optional<paddle::Tensor>& k_norm_weight, int num_heads, int num_kv_heads,
                 int head_dim, float eps) {
  PD_CHECK(num_heads >= 1, kOp, ": num_heads = ", num_heads, ", expected >= 1");
  PD_CHECK(num_kv_heads >= 1, kOp, ": num_kv_heads = ", num_kv_heads, ", expected >= 1");
  PD_CHECK(num_heads % num_kv_heads == 0, kOp, ": num_heads = ", num_heads,
           " is not a multiple of num_kv_heads = ", num_kv_heads);
  PD_CHECK(head_dim >= 2 && head_dim % 2 == 0 && head_dim <= kMaxHeadDim, kOp, ": head_dim = ", head_dim,
           ", expected an even number in [2, ", kMaxHeadDim, "]");
  PD_CHECK(std::isfinite(eps) && eps >= 0.0f, kOp, ": eps = ", eps, ", expected a finite number >= 0");
  const int64_t d = head_dim;
  const int64_t width = (static_cast<int64_t>(num_heads) + 2 * static_cast<int64_t>(num_kv_heads)) * d;
  specworker::CheckDtype(kOp, "qkv", qkv, DataType::FLOAT32);
  PD_CHECK(qkv.shape().size() == 2 && qkv.shape()[1] == width, kOp, ": qkv has shape ",
           ShapeStr(qkv.shape()), ", expected [T, (num_heads + 2 * num_kv_heads) * head_dim] = [T, ", width,
           "] (num_heads = ", num_heads, ", num_kv_heads = ", num_kv_heads, ", head_dim = ", head_dim, ")");
  CheckFactors("cos_full", cos_full, qkv, d);
  CheckFactors("sin_signed", sin_signed, qkv, d);
  specworker::CheckPaired(kOp, "q_norm_weight", q_norm_weight, "k_norm_weight", k_norm_weight);
  if (q_norm_weight) {
    CheckNormWeight("q_norm_weight", q_norm_weight, qkv, d);
    CheckNormWeight("k_norm_weight", k_norm_weight, qkv, d);
  }
  // The CUDA launcher takes int sizes; the same limits on CPU keep the two devices alike.
  specworker::CheckFitsInt32(kOp, "T (qkv.shape[0])", qkv.shape()[0]);
  specworker::CheckFitsInt32(kOp, "qkv width", width);
}

}  // namespace

std::vector<paddle::Tensor> QkvNormRotary(const paddle::Tensor& qkv, const paddle::Tensor& cos_full,
                                          const paddle::Tensor& sin_signed,
                                          const paddle::optional<paddle::Tensor>& q_norm_weight,
                                          const paddle::optional<paddle::Tensor>& k_norm_weight, int num_heads,
                                          int num_kv_heads, int head_dim, float eps) {
  specworker::CheckGiven(kOp, {{"qkv", &qkv}, {"cos_full", &cos_full}, {"sin_signed", &sin_signed}});
  CheckInputs(qkv, cos_full, sin_signed, q_norm_weight, k_norm_weight, num_heads, num_kv_heads, head_dim, eps);
  if (qkv.is_gpu()) {
#ifdef SPECWORKER_WITH_CUDA
    return QkvNormRotaryCUDA(qkv, cos_full, sin_signed, q_norm_weight, k_norm_weight, num_heads, num_kv_heads,
                             head_dim, eps);
#else
    PD_THROW(kOp, ": got a GPU tensor but the extension was built without CUDA");
#endif
  }
  return QkvNormRotaryCPU(qkv, cos_full, sin_signed, q_norm_weight ? q_norm_weight->data<float>() : nullptr,
                          k_norm_weight ? k_norm_weight->data<float>() : nullptr, num_heads, num_kv_heads,
                          head_dim, eps);
}

std::vector<std::vector<int64_t>> QkvNormRotaryInferShape(
    const std::vector<int64_t>& qkv, const std::vector<int64_t>&, const std::vector<int64_t>&,
    const paddle::optional<std::vector<int64_t>>&, const paddle::optional<std::vector<int64_t>>&,
    int num_heads, int num_kv_heads, int head_dim, float) {
  return {{qkv[0], num_heads, head_dim}, {qkv[0], num_kv_heads, head_dim}, {qkv[0], num_kv_heads, head_dim}};
}

std::vector<paddle::DataType> QkvNormRotaryInferDtype(const paddle::DataType&, const paddle::DataType&,
                                                      const paddle::DataType&,
                                                      const paddle::optional<paddle::DataType>&,
                                                      const paddle::optional<paddle::DataType>&) {
  return {DataType::FLOAT32, DataType::FLOAT32, DataType::FLOAT32};
}

PD_BUILD_OP(qkv_norm_rotary)
    .Inputs({"qkv", "cos_full", "sin_signed", paddle::Optional("q_norm_weight"),
             paddle::Optional("k_norm_weight")})
    .Outputs({"q", "k", "v"})
    .Attrs({"num_heads: int", "num_kv_heads: int", "head_dim: int", "eps: float"})
    .SetKernelFn(PD_KERNEL(QkvNormRotary))
    .SetInferShapeFn(PD_INFER_SHAPE(QkvNormRotaryInferShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(QkvNormRotaryInferDtype));
