"""RMSNorm with a batch-invariant inference path (ops.fused_rms_norm: fixed-order sum of squares, the
residual add fused in) and an autograd training path.

Owns the normalisation only; where it sits in a block belongs to the decoder layer.
"""

from __future__ import annotations

import paddle

from specworker.model_executor import ops


class RMSNorm(paddle.nn.Layer):
    """y = x / sqrt(mean(x^2) + eps) * weight over the last axis.

    The inference paths are one ops.fused_rms_norm call each (docs/spec.md §4.10): a fixed left-to-right
    float32 sum and a correctly rounded sqrt, so a row's bits never depend on how many rows share the call.
    """

    def __init__(self, hidden_size: int, eps: float):
        super().__init__()
        self.hidden_size = hidden_size
        self.eps = eps
        self.weight = self.create_parameter([hidden_size], default_initializer=paddle.nn.initializer.Constant(1.0))

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        """Inference. Args: x [R, H] float32. Returns [R, H]."""
        return ops.fused_rms_norm(x, self.weight, None, self.eps).out

    def forward_residual(self, x: paddle.Tensor, residual: paddle.Tensor | None) -> ops.FusedRmsNormOutput:
        """Inference with the residual add fused in (vLLM's pre-norm residual stream): h = x + residual
        (x when residual is None, e.g. the first layer), out = norm(h).
        Args: x, residual [R, H] float32. Returns FusedRmsNormOutput(out [R, H], residual_out = h [R, H])."""
        return ops.fused_rms_norm(x, self.weight, residual, self.eps)

    def forward_train(self, x: paddle.Tensor) -> paddle.Tensor:
        """Training (autograd). Args: x [..., H] float32. Returns the same shape."""
        mean_sq = paddle.mean(x * x, axis=-1, keepdim=True)
        return x / paddle.sqrt(mean_sq + self.eps) * self.weight
