"""RMSNorm with a batch-invariant inference path (fixed-order sum of squares) and an autograd training path.

Owns the normalisation only; where it sits in a block belongs to the decoder layer.
"""

from __future__ import annotations

import paddle

from specworker.model_executor import ops
from specworker.model_executor.layers.elementwise import LANES


class RMSNorm(paddle.nn.Layer):
    """y = x / sqrt(mean(x^2) + eps) * weight over the last axis.

    The inference path sums the squares with ops.batch_invariant_linear against columns of 1/H, a
    fixed left-to-right float32 order, so a row's bits never depend on how many rows share the call;
    the sqrt runs on LANES equal columns per row, i.e. whole SIMD vectors (Paddle's CPU sqrt rounds
    differently in the SIMD body and the tail, see elementwise.py).
    """

    def __init__(self, hidden_size: int, eps: float):
        super().__init__()
        self.hidden_size = hidden_size
        self.eps = eps
        self.weight = self.create_parameter([hidden_size], default_initializer=paddle.nn.initializer.Constant(1.0))
        # [H, LANES] of 1/H: x^2 @ it is mean(x^2) summed in one fixed order, repeated across LANES columns
        # so the sqrt sees whole SIMD vectors per row (no tail, see elementwise.py) without padding ops.
        # Not persistable: not a weight.
        self.register_buffer("mean_columns", paddle.full([hidden_size, LANES], 1.0 / hidden_size, dtype="float32"),
                             persistable=False)
        # + eps as the linear's bias: fl(mean(x^2) + eps), the same rounding as a separate add, one op less.
        self.register_buffer("eps_columns", paddle.full([LANES], eps, dtype="float32"), persistable=False)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        """Inference. Args: x [R, H] float32. Returns [R, H]."""
        mean_sq_eps = ops.batch_invariant_linear(x * x, self.mean_columns, self.eps_columns)  # [R, LANES], equal
        return x / paddle.sqrt(mean_sq_eps)[:, :1] * self.weight

    def forward_train(self, x: paddle.Tensor) -> paddle.Tensor:
        """Training (autograd). Args: x [..., H] float32. Returns the same shape."""
        mean_sq = paddle.mean(x * x, axis=-1, keepdim=True)
        return x / paddle.sqrt(mean_sq + self.eps) * self.weight
