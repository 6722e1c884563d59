"""Inference copies of a layer's linear weights in the layout ops.batch_invariant_linear streams fastest.

A loader calls pack_weights() once after the weights are final; the inference path reads
linear_weight(name), which is the parameter itself until then. Packing never changes an output bit
(ops.pack_linear_weight); the training path keeps using the parameters.
"""

from __future__ import annotations

import paddle

from specworker.model_executor import ops


class PackedWeights:
    """Mixin for a paddle.nn.Layer whose PACKED attributes are [K, N] float32 linear weights."""

    PACKED: tuple[str, ...] = ()

    def pack_weights(self, dtype: str = "float32") -> None:
        """Snapshots the PACKED weights as ops.pack_linear_weight(weight, dtype); call it again after changing
        a weight (the copies do not follow the parameters). Not parameters, not in the state_dict."""
        object.__setattr__(self, "_packed", {name: ops.pack_linear_weight(getattr(self, name), dtype)
                                             for name in self.PACKED if getattr(self, name) is not None})

    def linear_weight(self, name: str) -> paddle.Tensor:
        """The weight the inference path passes to ops.batch_invariant_linear for attribute `name`."""
        packed = self.__dict__.get("_packed")
        return getattr(self, name) if packed is None else packed[name]
