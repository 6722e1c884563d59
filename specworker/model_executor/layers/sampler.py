"""The non-speculative Sampler: penalised logits -> one token per logit row, on the device.

It reads per-slot parameters from a SamplingMetadata (never the InputBatch) and the row layout
from the ForwardMeta. Verification of drafts lives in spec_decode; this file only samples.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import paddle

from specworker.model_executor import ops
from specworker.model_executor.forward_meta import ForwardMeta
from specworker.model_executor.layers.sampling_rng import counter_uniform, inverse_cdf_sample

__all__ = ["GREEDY_TEMPERATURE", "MAX_VOCAB", "SamplingMetadata", "SamplerOutput", "Sampler",
           "first_argmax", "sample_rows", "softmax_weights", "sampling_weights"]

GREEDY_TEMPERATURE = 1e-5  # a slot whose temperature is below this samples greedily
MAX_VOCAB = 2**18  # a row's total weight (< V * 2**34) stays below 2**53, exact in float64

_FLOAT_FIELDS = ("temperature", "top_p", "min_p", "penalty_score", "frequency_score", "presence_score")
_INT_FIELDS = ("top_k", "infer_seed", "step_idx", "bad_tokens_len", "min_dec_len")


@dataclasses.dataclass(slots=True, kw_only=True)
class SamplingMetadata:
    """The per-slot share_inputs buffers the sampler reads (names as in model_executor/slot_buffers.py)."""

    temperature: paddle.Tensor  # [N] float32, < GREEDY_TEMPERATURE: greedy
    top_p: paddle.Tensor  # [N] float32 in (0, 1]
    top_k: paddle.Tensor  # [N] int64, 0: off
    min_p: paddle.Tensor  # [N] float32 in [0, 1], 0: off
    penalty_score: paddle.Tensor  # [N] float32 repetition penalty, 1: off
    frequency_score: paddle.Tensor  # [N] float32
    presence_score: paddle.Tensor  # [N] float32
    infer_seed: paddle.Tensor  # [N] int64 counter-RNG seed (low 32 bits used)
    step_idx: paddle.Tensor  # [N] int64 tokens generated so far
    pre_ids: paddle.Tensor  # [N, S] int64 history, pre_ids[b, 1 .. step_idx[b]]
    bad_tokens: paddle.Tensor  # [N, W] int64 banned ids, -1 unused
    bad_tokens_len: paddle.Tensor  # [N] int64 valid entries of bad_tokens[b]
    min_dec_len: paddle.Tensor  # [N] int64 eos masked before this many generated tokens
    eos_token_id: paddle.Tensor  # [E] int64 end ids, -1 unused
    draft_tokens: paddle.Tensor | None = None  # [N, D] int64: [b, 0] last token, then drafts
    layout_version: int | None = None  # InputBatch.layout_version these rows belong to; None: unchecked

    @classmethod
    def from_share_inputs(cls, share_inputs: Mapping[str, paddle.Tensor],
                          layout_version: int | None = None) -> SamplingMetadata:
        """Views of the share_inputs buffers (no copy); draft_tokens when the table has it."""
        names = [f.name for f in dataclasses.fields(cls) if f.name not in ("draft_tokens", "layout_version")]
        missing = [n for n in names if n not in share_inputs]
        if missing:
            raise ValueError(f"SamplingMetadata.from_share_inputs: share_inputs lacks {missing}")
        return cls(**{n: share_inputs[n] for n in names}, draft_tokens=share_inputs.get("draft_tokens"),
                   layout_version=layout_version)

    @classmethod
    def make_dummy(cls, *, max_num_seqs: int, max_model_len: int, max_bad_words: int, max_stop_tokens: int,
                   num_speculative_tokens: int = 0) -> SamplingMetadata:
        """Buffers at their table fills (greedy off, no penalties), on the current device."""
        n = max_num_seqs

        def full(shape, value, dtype):
            return paddle.full(shape, value, dtype=dtype)

        return cls(
            temperature=full([n], 1.0, "float32"), top_p=full([n], 1.0, "float32"), top_k=full([n], 0, "int64"),
            min_p=full([n], 0.0, "float32"), penalty_score=full([n], 1.0, "float32"),
            frequency_score=full([n], 0.0, "float32"), presence_score=full([n], 0.0, "float32"),
            infer_seed=full([n], 0, "int64"), step_idx=full([n], 0, "int64"),
            pre_ids=full([n, max_model_len], -1, "int64"), bad_tokens=full([n, max_bad_words], -1, "int64"),
            bad_tokens_len=full([n], 0, "int64"), min_dec_len=full([n], 0, "int64"),
            eos_token_id=full([max_stop_tokens], -1, "int64"),
            draft_tokens=full([n, num_speculative_tokens + 1], -1, "int64") if num_speculative_tokens else None,
        )

    def check(self) -> None:
        """Shapes and dtypes (host metadata only, no device read); ValueError naming the field."""
        n = self.temperature.shape[0] if self.temperature.ndim == 1 else -1
        expect = {name: ("float32", 1) for name in _FLOAT_FIELDS}
        expect.update({name: ("int64", 1) for name in _INT_FIELDS})
        expect.update(pre_ids=("int64", 2), bad_tokens=("int64", 2), draft_tokens=("int64", 2))
        for name, (dtype, ndim) in expect.items():
            t = getattr(self, name)
            if t is None:
                continue
            if t.dtype != getattr(paddle, dtype) or t.ndim != ndim or t.shape[0] != n:
                raise ValueError(f"SamplingMetadata.{name} is {list(t.shape)} {t.dtype}, expected "
                                 f"{dtype} with {ndim} dim(s) and N = {n} rows")
        eos = self.eos_token_id
        if eos.dtype != paddle.int64 or eos.ndim != 1:
            raise ValueError(f"SamplingMetadata.eos_token_id is {list(eos.shape)} {eos.dtype}, expected [E] int64")


@dataclasses.dataclass(slots=True, kw_only=True)
class SamplerOutput:
    """One sampled token per logit row and the distribution it was drawn from."""

    sampled_token_ids: paddle.Tensor  # [R] int64, -1 on rows past T_out
    probs: paddle.Tensor  # [R, V] float32 final distribution (one-hot on greedy rows, 0 past T_out)
    logits: paddle.Tensor  # [R, V] float32 after penalties, bad words, min-tokens eos mask, temperature


def first_argmax(logits: paddle.Tensor) -> paddle.Tensor:
    """[R, V] -> [R] int64: the smallest index holding the row maximum (exact on every device)."""
    vocab = logits.shape[-1]
    ids = paddle.arange(vocab, dtype="int64").unsqueeze(0)  # [1, V]
    row_max = paddle.max(logits, axis=-1, keepdim=True)
    hits = paddle.where(logits == row_max, ids, paddle.full_like(ids, vocab))  # [R, V]
    return paddle.clip(paddle.min(hits, axis=-1), max=vocab - 1)


# 2**f = sum_k EXP2_COEFFS[k] * (f - 1/2)**k on [0, 1): sqrt(2) * ln(2)**k / k!, truncation < 1e-8.
EXP2_COEFFS = (1.4142135623730951, 0.9802581434685472, 0.3397315841830749, 0.07849466324122069,
               0.013602088628663626, 0.0018856498765369369, 0.00021783881590746446, 2.157062300896799e-05)
LOG2_E = 1.4426950408889634
WEIGHT_BITS = 32  # a token exp(l - max) below 2**-32 gets weight 0


def softmax_weights(logits: paddle.Tensor) -> paddle.Tensor:
    """Unnormalised softmax as integers: w ~= exp(l - max l) * 2**32 ([R, V] float32 -> int64).

    Built from exactly rounded float32 ops only (sub, mul, add, floor) plus integer shifts, never
    paddle.exp: a vectorised exp and its scalar tail can round differently, which would make a
    token's weight depend on where its row sits in the batch (seen on CPU). In order, in float32:
    y = (l - max) * LOG2_E; q = floor(y); r = (y - q) - 0.5; p = Horner over EXP2_COEFFS in r
    (p = p * r + c, starting from p = r * c7 + c6); then w = (int(p * 2**24) << (q + 32)) >> 24,
    i.e. floor(p * 2**(q + 32)), and w = 0 where y < -32 (or NaN). Relative error vs exp ~1e-6.
    """
    y = (logits - paddle.max(logits, axis=-1, keepdim=True)) * LOG2_E  # [R, V] float32, <= 0
    q = paddle.floor(y)
    r = (y - q) - 0.5  # y - q is exact
    p = r * EXP2_COEFFS[7] + EXP2_COEFFS[6]
    for c in reversed(EXP2_COEFFS[:6]):
        p = p * r + c
    mantissa = (p * 2.0**24).astype("int64")  # exact: p has 24 significant bits
    shift = paddle.clip(q + WEIGHT_BITS, min=0, max=WEIGHT_BITS).astype("int64")
    w = paddle.bitwise_right_shift(paddle.bitwise_left_shift(mantissa, shift), paddle.full_like(shift, 24))
    return paddle.where(y >= -WEIGHT_BITS, w, paddle.zeros_like(w))


def sampling_weights(logits: paddle.Tensor, top_k: paddle.Tensor, top_p: paddle.Tensor,
                     min_p: paddle.Tensor) -> paddle.Tensor:
    """Integer weights of the kept tokens: softmax, top-k, top-p, min-p (renormalising is w / sum w).

    w = softmax_weights(logits). Then, with s = w sorted descending:
      top-k: keep w >= s[k - 1] (ties with the k-th value kept; k <= 0 or k > V: off);
      top-p: over the top-k weights in that order, keep the smallest prefix whose mass reaches
             top_p of their total, i.e. positions whose exclusive prefix sum is < top_p * total
             (float64 compare; the top token always), then every token tied with its last value;
      min-p: drop w < min_p * s[0].
    Every step is elementwise, a sort (values only), or an exact integer sum, so a row's weights
    depend on that row alone.

    Args:
        logits: [R, V] float32. top_k: [R] int64. top_p: [R] float32. min_p: [R] float32.
    Returns:
        [R, V] int64, zero on dropped tokens; each row's total < V * 2**34.
    """
    vocab = logits.shape[-1]
    w = softmax_weights(logits)  # [R, V]
    s = paddle.sort(w, axis=-1, descending=True)
    k = paddle.where((top_k <= 0) | (top_k > vocab), paddle.full_like(top_k, vocab), top_k)
    kth = paddle.take_along_axis(s, (k - 1).unsqueeze(-1), axis=-1)  # [R, 1]
    s_k = paddle.where(s >= kth, s, paddle.zeros_like(s))  # still descending
    cum = paddle.cumsum(s_k, axis=-1)
    reach = top_p.astype("float64").unsqueeze(-1) * cum[:, -1:].astype("float64")  # [R, 1]
    before = (cum - s_k).astype("float64")  # exclusive prefix, exact below 2**53
    n_keep = paddle.clip(paddle.sum((before < reach).astype("int64"), axis=-1, keepdim=True), min=1)
    cut = paddle.maximum(paddle.take_along_axis(s_k, n_keep - 1, axis=-1), kth)  # [R, 1]
    floor_p = min_p.astype("float64").unsqueeze(-1) * s[:, :1].astype("float64")
    keep = (w >= cut) & (w > 0) & (w.astype("float64") >= floor_p)
    return paddle.where(keep, w, paddle.zeros_like(w))


def sample_rows(logits: paddle.Tensor, *, greedy: paddle.Tensor | None = None, top_k: paddle.Tensor | None = None,
                top_p: paddle.Tensor | None = None, min_p: paddle.Tensor | None = None,
                seed: paddle.Tensor | None = None, counter: paddle.Tensor | None = None
                ) -> tuple[paddle.Tensor, paddle.Tensor]:
    """One token per row and the distribution it was drawn from (shared by the Sampler and the MTP drafts).

    Greedy rows (and every row when greedy is None) take first_argmax with a one-hot distribution; the
    others draw by inverse CDF over sampling_weights with counter_uniform(seed, counter).
    Args: logits [R, V] float32 (temperature already applied); greedy [R] bool; top_k [R] int64;
        top_p, min_p [R] float32; seed, counter [R] int64.
    Returns: (tokens [R] int64, probs [R, V] float32).
    """
    best = first_argmax(logits)
    one_hot = (paddle.arange(logits.shape[-1], dtype="int64").unsqueeze(0) == best.unsqueeze(-1)).astype("float32")
    if greedy is None:
        return best, one_hot
    weights = sampling_weights(logits, top_k, top_p, min_p)  # [R, V]
    drawn = inverse_cdf_sample(weights, counter_uniform(seed, counter))
    total = paddle.clip(paddle.sum(weights, axis=-1, keepdim=True), min=1).astype("float64")
    probs = (weights.astype("float64") / total).astype("float32")
    return paddle.where(greedy, best, drawn), paddle.where(greedy.unsqueeze(-1), one_hot, probs)


class Sampler:
    """Turns logit rows into tokens: penalties, then greedy argmax or seeded top-k/top-p/min-p draws.

    Row r belongs to slot b = meta.batch_id_per_token_output[r] (-1: past T_out) and is its j-th
    row, j = r - meta.cu_seqlens_q_output[b]; it predicts generated token number step_idx[b] + j,
    drawn with uniform = counter_uniform(infer_seed[b], step_idx[b] + j). A row's token and
    probs depend only on its logits and its slot's parameters: batch invariant, reproducible, and
    the same for row j of a speculative slot as for a one-row decode at step step_idx[b] + j with
    the drafts in its history. No host sync, no loop over rows.
    """

    def __init__(self, debug_checks: bool = False) -> None:
        self.debug_checks = debug_checks

    def __call__(self, logits: paddle.Tensor, meta: ForwardMeta, sampling: SamplingMetadata, *,
                 all_greedy: bool = False) -> SamplerOutput:
        """Samples one token per row; logits are penalised in place.

        Args:
            logits: [R, V] float32, R <= meta.output_capacity (normally equal), V <= MAX_VOCAB.
            meta: the step's ForwardMeta (output side: batch_id_per_token_output, cu_seqlens_q_output).
            sampling: the slots' sampling buffers.
            all_greedy: the caller knows (from host-side request parameters) that every slot is greedy;
                skips the weights and the draw, which greedy rows ignore (same tokens and probs).
        Returns:
            SamplerOutput; `logits` is the input tensor, updated.
        """
        rows, _ = self._check(logits, meta, sampling)
        slot_ids = meta.batch_id_per_token_output[:rows]
        valid = slot_ids >= 0  # [R]
        slot = paddle.clip(slot_ids, min=0).astype("int64")
        local = paddle.arange(rows, dtype="int64") - paddle.gather(meta.cu_seqlens_q_output, slot).astype("int64")

        greedy_slot = sampling.temperature < GREEDY_TEMPERATURE
        # The op divides by temperature: greedy slots pass 1 so their argmax sees unscaled logits.
        op_temperature = paddle.where(greedy_slot, paddle.ones_like(sampling.temperature), sampling.temperature)
        ops.speculate_get_token_penalty_multi_scores(
            sampling.pre_ids, logits, sampling.penalty_score, sampling.frequency_score, sampling.presence_score,
            op_temperature, sampling.bad_tokens, sampling.bad_tokens_len, sampling.step_idx, sampling.min_dec_len,
            sampling.eos_token_id, meta.seq_lens_this_time, meta.batch_id_per_token_output,
            meta.cu_seqlens_q_output, 0, sampling.draft_tokens,
        )

        if all_greedy:
            tokens, probs = sample_rows(logits)
        else:
            tokens, probs = sample_rows(
                logits, greedy=paddle.gather(greedy_slot, slot), top_k=paddle.gather(sampling.top_k, slot),
                top_p=paddle.gather(sampling.top_p, slot), min_p=paddle.gather(sampling.min_p, slot),
                seed=paddle.gather(sampling.infer_seed, slot), counter=paddle.gather(sampling.step_idx, slot) + local)
        tokens = paddle.where(valid, tokens, paddle.full_like(tokens, -1))
        probs = paddle.where(valid.unsqueeze(-1), probs, paddle.zeros_like(probs))
        return SamplerOutput(sampled_token_ids=tokens, probs=probs, logits=logits)

    def _check(self, logits: paddle.Tensor, meta: ForwardMeta, sampling: SamplingMetadata) -> tuple[int, int]:
        """Host-side shape checks; returns (R, V)."""
        if sampling.layout_version is not None:
            meta.require_current(sampling.layout_version, "Sampler")
        if self.debug_checks:
            meta.check()
            sampling.check()
        if logits.ndim != 2 or logits.dtype != paddle.float32:
            raise ValueError(f"Sampler: logits is {list(logits.shape)} {logits.dtype}, expected [R, V] float32")
        rows, vocab = logits.shape
        capacity = meta.batch_id_per_token_output.shape[0]
        if rows > capacity:
            raise ValueError(f"Sampler: logits has {rows} rows, more than the output capacity {capacity}")
        if not 1 <= vocab <= MAX_VOCAB:
            raise ValueError(f"Sampler: vocab size V = {vocab}, allowed 1..{MAX_VOCAB}")
        return rows, vocab
