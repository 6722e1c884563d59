"""RMSNorm with a batch-invariant inference path (fixed-order sum of squares) and an autograd training path.

Owns the normalisation only; where it sits in a block belongs to the decoder layer.
"""

from __future__ import annotations

import paddle

from specworker.model_executor import ops
from specworker.model_executor.layers.elementwise import rowwise


class RMSNorm(paddle.nn.Layer):
    """y = x / sqrt(mean(x^2) + eps) * weight over the last axis.

    The inference path sums the squares with ops.batch_invariant_linear against a ones column, a
    fixed left-to-right float32 order, so a row's bits never depend on how many rows share the call;
    the sqrt runs through elementwise.rowwise (Paddle's CPU sqrt differs between SIMD body and tail).
    """

    def __init__(self, hidden_size: int, eps: float):
        super().__init__()
        self.hidden_size = hidden_size
        self.eps = eps
        self.weight = self.create_parameter([hidden_size], default_initializer=paddle.nn.initializer.Constant(1.0))
        # [H, 1] of 1/H: x^2 @ it is mean(x^2) summed in one fixed order. Not persistable: not a weight.
        self.register_buffer("mean_column", paddle.full([hidden_size, 1], 1.0 / hidden_size, dtype="float32"),
                             persistable=False)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        """Inference. Args: x [R, H] float32. Returns [R, H]."""
        mean_sq = ops.batch_invariant_linear(x * x, self.mean_column)  # [R, 1]
        return x / rowwise(paddle.sqrt, mean_sq + self.eps) * self.weight

    def forward_train(self, x: paddle.Tensor) -> paddle.Tensor:
        """Training (autograd). Args: x [..., H] float32. Returns the same shape."""
        mean_sq = paddle.mean(x * x, axis=-1, keepdim=True)
        return x / paddle.sqrt(mean_sq + self.eps) * self.weight
