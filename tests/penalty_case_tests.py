"""speculate_get_token_penalty_multi_scores tests written once for both backends (the cases live in
tests/penalty_cases.py): tests/ops (the Paddle op) and tests/gpu (the CUDA kernel) import the test_*
functions below and define the fixtures they take:

- run(case, dtype="float32", drafts=True) -> the updated logits as float32 numpy (case.logits run in
  `dtype`; drafts False passes no draft_tokens);
- reference_grid: (bsz, kind, seed, V, drafts) of the randomized comparison, and half_grid: (dtype,
  bsz, kind, seed) of the 16-bit one, each parametrized by its backend (the GPU runs more slots).
"""

from __future__ import annotations

import numpy as np
import pytest

from reference.cases.step_batch import all_cases
from tests.penalty_cases import PenaltyCase, make_penalty_case, nonspeculative_case_for_draft_position
from reference.speculate_get_token_penalty_multi_scores import (
    MASK_VALUE_FP16,
    ref_speculate_get_token_penalty_multi_scores,
)

# float32 is computed with the same IEEE operations in the same order as the reference: exact.
# float16/bfloat16 logits are rounded (once on output on the CPU, after each phase on the GPU: eos
# mask, penalty, temperature); tolerances are a few units of the format's last place.
TOL = {"float32": dict(rtol=0, atol=0), "float16": dict(rtol=2e-3, atol=2e-3),
       "bfloat16": dict(rtol=1.6e-2, atol=1.6e-2)}


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (round to nearest even); numpy and CuPy have no bfloat16 dtype."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def from_bf16_bits(h: np.ndarray) -> np.ndarray:
    return (h.astype(np.uint32) << 16).view(np.float32)


def rounded(x: np.ndarray, dtype: str) -> np.ndarray:
    """x rounded to `dtype` (exactly representable there), back in float32."""
    if dtype == "bfloat16":
        return from_bf16_bits(to_bf16_bits(x))
    return x.astype(dtype).astype(np.float32)


def ref(case: PenaltyCase, drafts: bool = True, **kw) -> np.ndarray:
    return ref_speculate_get_token_penalty_multi_scores(
        *case.args(), case.max_seq_len, case.draft_tokens if drafts else None, **kw)


def test_speculate_get_token_penalty_multi_scores_matches_reference(run, reference_grid):
    bsz, kind, seed, V, drafts = reference_grid
    rng = np.random.default_rng(seed + V)
    case = make_penalty_case(rng, bsz, kind, vocab_size=V, with_drafts=drafts, extra_slots=seed % 3)
    np.testing.assert_array_equal(run(case, drafts=drafts), ref(case, drafts))


@pytest.mark.parametrize("bsz, kind, seed", [c for c in all_cases() if c[1] in ("mixed", "all_decode")])
@pytest.mark.parametrize("V", [111, 1000])
def test_penalty_row_i_equals_nonspeculative_with_drafts_appended(run, bsz, kind, seed, V):
    """The lossless property (docs/spec.md §4.5 [ours]): row i of a slot, run speculatively with
    draft_tokens, equals the single row non-speculative decoding computes after accepting
    draft_tokens[b, 1..i] (history extended by them, cur_len + i, O_b = 1, no draft_tokens)."""
    rng = np.random.default_rng(seed + 7 * V)
    case = make_penalty_case(rng, bsz, kind, vocab_size=V, extra_slots=1)
    spec = run(case)
    checked = [0] * case.draft_tokens.shape[1]
    for i in range(case.draft_tokens.shape[1]):
        ns, spec_rows = nonspeculative_case_for_draft_position(case, i)
        if spec_rows.size == 0:
            continue
        np.testing.assert_array_equal(spec[spec_rows], run(ns), err_msg=f"draft position {i}")
        checked[i] = spec_rows.size
    assert checked[0] > 0 and (bsz < 17 or min(checked[1:]) > 0), f"rows checked per draft position: {checked}"


@pytest.mark.parametrize("bsz, kind, seed", [c for c in all_cases() if c[1] in ("mixed", "all_decode")])
def test_speculate_get_token_penalty_multi_scores_without_drafts_rows_share_one_history(run, bsz, kind, seed):
    """Without draft_tokens (FastDeploy): with min length off and equal input rows, every row of a
    slot comes out the same, whatever its draft position."""
    rng = np.random.default_rng(seed + 3)
    case = make_penalty_case(rng, bsz, kind, vocab_size=111, with_drafts=False)
    case.min_len[:] = 0
    rows = case.batch_id_per_token_output[: case.logits.shape[0]]
    first = case.cu_seqlens_q_output[np.maximum(rows, 0)]
    case.logits = case.logits[np.where(rows >= 0, first, np.arange(rows.size))]
    out = run(case, drafts=False)
    for b in range(case.bsz):
        lo, hi = case.cu_seqlens_q_output[b], case.cu_seqlens_q_output[b + 1]
        for t in range(lo + 1, hi):
            np.testing.assert_array_equal(out[t], out[lo], err_msg=f"slot {b} row {t}")
    np.testing.assert_array_equal(out, ref(case, drafts=False))


def test_speculate_get_token_penalty_multi_scores_half_precision_matches_reference(run, half_grid):
    dtype, bsz, kind, seed = half_grid
    rng = np.random.default_rng(seed + 11)
    case = make_penalty_case(rng, bsz, kind, vocab_size=111)
    case.logits = rounded(case.logits, dtype)  # the reference starts from the rounded input
    kw = {"mask_value": MASK_VALUE_FP16} if dtype == "float16" else {}
    np.testing.assert_allclose(run(case, dtype), ref(case, **kw), **TOL[dtype])
