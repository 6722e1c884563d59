"""Row-invariant evaluation of elementwise transcendental ops (sqrt, silu, ...) on CPU.

Paddle's CPU kernels evaluate such ops with SIMD code for whole vectors and scalar code for the tail,
and the two differ in the last bit, so an element's bits depend on where it sits in the flat array,
i.e. on how many rows share the call. Padding every row to a multiple of LANES puts each row's
elements in the same vector lanes whatever the row count, with no tail. (IEEE add, mul and divide
are exact and need no padding; GPU kernels compute each element the same way and are unaffected.)
"""

from __future__ import annotations

from collections.abc import Callable

import paddle

LANES = 16  # floats per AVX-512 vector (a multiple of AVX2's 8)


def rowwise(fn: Callable[[paddle.Tensor], paddle.Tensor], x: paddle.Tensor) -> paddle.Tensor:
    """fn(x) for an elementwise fn, with row r's bits independent of the number of rows.

    Args:
        x: [R, W]; rows are padded to a multiple of LANES with copies of column 0 (a valid input of fn).
    Returns:
        [R, W], fn applied elementwise.
    """
    width = x.shape[-1]
    pad = -width % LANES
    if pad == 0:
        return fn(x)
    filler = paddle.expand(x[:, :1], [x.shape[0], pad])
    return fn(paddle.concat([x, filler], axis=-1))[:, :width]
