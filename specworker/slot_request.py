"""SlotRequest: what InputBatch.insert writes into a slot (prompt, limits, sampling parameters), with
the checks that need no config. Checks against the batch's capacities live in InputBatch.insert.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from specworker.config import MAX_SEED

__all__ = ["SlotRequest"]


def _bad(field: str, value, allowed: str) -> ValueError:
    return ValueError(f"SlotRequest.{field} = {value!r}; allowed: {allowed}")


def _ints(field: str, values) -> tuple[int, ...]:
    """A sequence of Python ints as a tuple; TypeError naming the field otherwise."""
    values = tuple(values)
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"SlotRequest.{field}[{i}] = {v!r} is a {type(v).__name__}; allowed: an int token id")
    return tuple(int(v) for v in values)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SlotRequest:
    """What insert() writes into a slot: the prompt, the length limits and the sampling parameters.

    Checks here need no config; InputBatch.insert checks ids and lengths against the batch.
    """

    req_id: str
    prompt_token_ids: Sequence[int]
    max_tokens: int  # generated tokens at most (max_dec_len)
    min_tokens: int = 0  # eos is masked before this many (min_dec_len)
    temperature: float = 1.0  # 0: greedy
    top_p: float = 1.0
    top_k: int = 0  # 0: off
    min_p: float = 0.0  # 0: off
    repetition_penalty: float = 1.0  # penalty_score
    frequency_penalty: float = 0.0  # frequency_score
    presence_penalty: float = 0.0  # presence_score
    seed: int | None = None  # None: the batch assigns one from config.seed
    bad_words_token_ids: Sequence[int] = ()
    enable_thinking: bool = False
    block_ids: Sequence[int] = ()  # KV blocks already allocated for the slot
    num_speculative_tokens: int | None = None  # drafts per step at most (None: the policy's choice; 0: none)

    def __post_init__(self) -> None:
        for field in ("prompt_token_ids", "bad_words_token_ids", "block_ids"):
            object.__setattr__(self, field, _ints(field, getattr(self, field)))
        if not isinstance(self.req_id, str) or not self.req_id:
            raise _bad("req_id", self.req_id, "a non-empty str")
        for field in ("max_tokens", "min_tokens", "top_k"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"SlotRequest.{field} = {value!r} is a {type(value).__name__}; allowed: an int")
        if self.max_tokens < 1:
            raise _bad("max_tokens", self.max_tokens, "an int >= 1")
        if not 0 <= self.min_tokens <= self.max_tokens:
            raise _bad("min_tokens", self.min_tokens, f"0..max_tokens = {self.max_tokens}")
        if self.top_k < 0:
            raise _bad("top_k", self.top_k, "an int >= 0 (0: off)")
        self._check_floats()
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)
                                      or not 0 <= self.seed <= MAX_SEED):
            raise _bad("seed", self.seed, f"None or an int in 0..{MAX_SEED}")
        if not isinstance(self.enable_thinking, bool):
            raise _bad("enable_thinking", self.enable_thinking, "a bool")
        k = self.num_speculative_tokens
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 0):
            raise _bad("num_speculative_tokens", k, "None or an int >= 0")

    def _check_floats(self) -> None:
        ranges = {
            "temperature": (lambda v: v >= 0, ">= 0 (0: greedy)"),
            "top_p": (lambda v: 0 < v <= 1, "0 < top_p <= 1"),
            "min_p": (lambda v: 0 <= v <= 1, "0 <= min_p <= 1 (0: off)"),
            "repetition_penalty": (lambda v: v > 0, "> 0 (1: off)"),
            "frequency_penalty": (lambda v: True, "a finite float"),
            "presence_penalty": (lambda v: True, "a finite float"),
        }
        for field, (ok, allowed) in ranges.items():
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or not ok(value):
                raise _bad(field, value, allowed)


