"""DraftVocab: a draft head's sub-vocabulary (docs/spec.md §5.3), the V_d most frequent token ids of the target's
own outputs: logits over those ids only, and the map back to token ids. Reads no file (checkpoint.py does).
"""

from __future__ import annotations

import numpy as np
import paddle

from specworker.model_executor import ops


class DraftVocab:
    """Draft logits over `token_ids` only. Sub-vocabulary index i (a column of the sub-logits) is token
    token_ids[i]; every other id gets no logit, so a draft never proposes it (and, sampled, has q = 0)."""

    def __init__(self, lm_head: paddle.Tensor, token_ids: np.ndarray, *, linear_weight_dtype: str = "float32"):
        """Gathers the lm_head columns of token_ids once (the step path reads only the packed copy).

        Args:
            lm_head: [H, V] float32, the target's lm_head (in_features x out_features).
            token_ids: [V_d] integer, 1 <= V_d <= V, distinct ids in 0..V-1 (the ranked list's first V_d).
            linear_weight_dtype: storage of the gathered columns (ops.pack_linear_weight).
        """
        vocab_size = lm_head.shape[1]
        ids = np.asarray(token_ids, dtype=np.int64)
        if ids.ndim != 1 or not 1 <= len(ids) <= vocab_size or len(np.unique(ids)) != len(ids) \
                or ids.min() < 0 or ids.max() >= vocab_size:
            raise ValueError(f"DraftVocab: token_ids of shape {list(ids.shape)} must be 1..{vocab_size} distinct ids "
                             f"in 0..{vocab_size - 1}")
        self.vocab_size = vocab_size
        self.token_ids = paddle.to_tensor(ids, place=lm_head.place)  # [V_d] int64
        sub = paddle.gather(lm_head, self.token_ids, axis=1)  # [H, V_d]
        self.weight = ops.pack_linear_weight(sub, linear_weight_dtype)

    @property
    def size(self) -> int:
        """V_d."""
        return self.token_ids.shape[0]

    def logits(self, normed: paddle.Tensor) -> paddle.Tensor:
        """lm_head(normed) at the sub-vocabulary's columns: the same bits as the full lm_head's columns
        token_ids (one fixed summation order per output). normed [R, H] float32 -> [R, V_d] float32."""
        return ops.batch_invariant_linear(normed, self.weight)

    def to_token_ids(self, sub_ids: paddle.Tensor) -> paddle.Tensor:
        """Sub-vocabulary indices [R] int64 -> token ids [R] int64 (an on-device gather, no host sync)."""
        return paddle.gather(self.token_ids, sub_ids)

    def to_full_probs(self, probs: paddle.Tensor) -> paddle.Tensor:
        """A distribution over the sub-vocabulary [R, V_d] -> the same over the whole vocabulary [R, V], zero at
        every id outside it (a valid proposal q for rejection sampling)."""
        rows = probs.shape[0]
        full = paddle.zeros([rows, self.vocab_size], dtype=probs.dtype)
        return paddle.put_along_axis(full, self.token_ids.unsqueeze(0).expand([rows, self.size]), probs, axis=1)
