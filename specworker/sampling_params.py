"""SamplingParams: what a caller asks of one request (vLLM-like names and defaults), validated on
construction, and its mapping onto the worker's SlotRequest. Checks against the vocab and the
batch's capacities (stop ids in range, prompt length) belong to the worker.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from specworker.config import MAX_BAD_WORDS, MAX_SEED
from specworker.slot_request import SlotRequest

__all__ = ["MAX_LOGPROBS", "SamplingParams"]

MAX_LOGPROBS = 20  # SamplingParams.logprobs at most (vLLM's default max_logprobs)

_FLOAT_RANGES = {  # field: (predicate, what is allowed)
    "temperature": (lambda v: v >= 0, "a finite float >= 0 (0: greedy)"),
    "top_p": (lambda v: 0 < v <= 1, "a float with 0 < top_p <= 1"),
    "min_p": (lambda v: 0 <= v <= 1, "a float in [0, 1] (0: off)"),
    "repetition_penalty": (lambda v: v > 0, "a finite float > 0 (1: off)"),
    "frequency_penalty": (lambda v: -2 <= v <= 2, "a float in [-2, 2]"),
    "presence_penalty": (lambda v: -2 <= v <= 2, "a float in [-2, 2]"),
}


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _bad(field: str, value, allowed: str) -> ValueError:
    return ValueError(f"SamplingParams.{field} = {value!r}; allowed: {allowed}")


def _token_ids(field: str, values) -> tuple[int, ...]:
    """A sequence of ints >= 0 as a tuple; TypeError / ValueError naming the field and entry."""
    if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, np.ndarray)):
        raise TypeError(f"SamplingParams.{field} = {values!r} is a {type(values).__name__}; "
                        "allowed: a sequence of int token ids")
    for i, v in enumerate(values):
        if not _is_int(v):
            raise TypeError(f"SamplingParams.{field}[{i}] = {v!r} is a {type(v).__name__}; allowed: an int >= 0")
        if v < 0:
            raise ValueError(f"SamplingParams.{field}[{i}] = {v!r}; allowed: an int >= 0")
    return tuple(int(v) for v in values)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SamplingParams:
    """How one request is sampled and when it stops.

    ValueError / TypeError on construction name the field, the value and what is allowed
    (bool is not an int, NaN and inf are rejected). Token-id tuples are normalised to tuples of int.

    logprobs = N returns, for every generated token (accepted drafts and bonus tokens alike), its logprob
    and the N most likely (id, logprob) pairs of the distribution it was drawn from
    (RequestOutput.logprobs): the log-softmax of the target's logit row after penalties, bad words, the
    min_tokens eos mask and temperature, before top-k / top-p / min-p truncation; a greedy request's row is
    the one after penalties at temperature 1. 0 gives the token's own logprob only. Prompt logprobs are
    not offered.
    """

    temperature: float = 1.0  # 0: greedy
    top_p: float = 1.0  # nucleus mass, 0 < top_p <= 1
    top_k: int = -1  # -1 or 0: off
    min_p: float = 0.0  # drop tokens below min_p * p_max; 0: off
    repetition_penalty: float = 1.0  # > 0; 1: off
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    seed: int | None = None  # None: the worker assigns one
    max_tokens: int = 16  # generated tokens at most
    min_tokens: int = 0  # eos is masked before this many (min_dec_len)
    stop_token_ids: Sequence[int] = ()  # in addition to the model's eos (the worker checks the vocab)
    bad_words_token_ids: Sequence[int] = ()  # single-token bad words, at most MAX_BAD_WORDS
    ignore_eos: bool = False
    enable_thinking: bool = False  # the request reasons first (the worker's ReasoningConstraint applies)
    logprobs: int | None = None  # None: off; N in 0..MAX_LOGPROBS: each token's logprob and the top-N
    # Drafts per step for this request at most (None: the worker's policy decides alone; 0: no speculation
    # for this request while the others in the batch still speculate). Capped at the config's k_max.
    num_speculative_tokens: int | None = None

    def __post_init__(self) -> None:
        for field, (ok, allowed) in _FLOAT_RANGES.items():
            value = getattr(self, field)
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
                raise TypeError(f"SamplingParams.{field} = {value!r} is a {type(value).__name__}; allowed: {allowed}")
            if not math.isfinite(value) or not ok(value):
                raise _bad(field, value, allowed)
            object.__setattr__(self, field, float(value))
        for field in ("top_k", "max_tokens", "min_tokens"):
            value = getattr(self, field)
            if not _is_int(value):
                raise TypeError(f"SamplingParams.{field} = {value!r} is a {type(value).__name__}; allowed: an int")
            object.__setattr__(self, field, int(value))
        if self.top_k < -1:
            raise _bad("top_k", self.top_k, "-1 or 0 (off), or an int >= 1")
        if self.max_tokens < 1:
            raise _bad("max_tokens", self.max_tokens, "an int >= 1")
        if not 0 <= self.min_tokens <= self.max_tokens:
            raise _bad("min_tokens", self.min_tokens, f"an int in 0..max_tokens = {self.max_tokens}")
        if self.seed is not None and (not _is_int(self.seed) or not 0 <= self.seed <= MAX_SEED):
            raise _bad("seed", self.seed, f"None or an int in 0..{MAX_SEED}")
        if self.logprobs is not None and (not _is_int(self.logprobs) or not 0 <= self.logprobs <= MAX_LOGPROBS):
            raise _bad("logprobs", self.logprobs, f"None (off) or an int in 0..MAX_LOGPROBS = {MAX_LOGPROBS}")
        if self.logprobs is not None:
            object.__setattr__(self, "logprobs", int(self.logprobs))
        k = self.num_speculative_tokens
        if k is not None and (not _is_int(k) or k < 0):
            raise _bad("num_speculative_tokens", k, "None (the worker's policy decides) or an int >= 0 (0: no drafts)")
        if k is not None:
            object.__setattr__(self, "num_speculative_tokens", int(k))
        for field in ("stop_token_ids", "bad_words_token_ids"):
            object.__setattr__(self, field, _token_ids(field, getattr(self, field)))
        if len(self.bad_words_token_ids) > MAX_BAD_WORDS:
            raise _bad("bad_words_token_ids", f"<{len(self.bad_words_token_ids)} ids>",
                       f"at most MAX_BAD_WORDS = {MAX_BAD_WORDS} ids")
        for flag in ("ignore_eos", "enable_thinking"):
            if not isinstance(getattr(self, flag), bool):
                raise TypeError(f"SamplingParams.{flag} = {getattr(self, flag)!r}; allowed: a bool")

    def to_slot_request(self, req_id: str, prompt_token_ids: Sequence[int],
                        block_ids: Sequence[int] = ()) -> SlotRequest:
        """The worker's SlotRequest for this request (top_k -1 becomes 0, the buffers' "off").

        ignore_eos masks eos for the whole request through the eos mask of min_tokens (min_dec_len =
        max_tokens); stop_token_ids are not a slot buffer: the worker applies them to each step's tokens.
        """
        return SlotRequest(
            req_id=req_id, prompt_token_ids=prompt_token_ids, max_tokens=self.max_tokens,
            min_tokens=self.max_tokens if self.ignore_eos else self.min_tokens, temperature=self.temperature, top_p=self.top_p,
            top_k=max(self.top_k, 0), min_p=self.min_p, repetition_penalty=self.repetition_penalty,
            frequency_penalty=self.frequency_penalty, presence_penalty=self.presence_penalty, seed=self.seed,
            bad_words_token_ids=self.bad_words_token_ids, block_ids=block_ids,
            enable_thinking=self.enable_thinking, num_speculative_tokens=self.num_speculative_tokens,
        )
