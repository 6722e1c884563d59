"""Lossless where numerics decide, on the built-in tiny pair: greedy requests whose decoding passes a near tie
(top-2 logit gap < 1e-4, found by tools/find_near_ties.py over 590k greedy steps of the tiny target;
tests/data/near_ties_tiny.json). Speculative output must equal non-speculative output through the tie. The control
swaps the batch-invariant linear for one whose summation order depends on the row count, as a BLAS's does, and
shows that the same end-to-end comparison then fails: this test sees numerics drift, which random requests alone
did not.
test_lossless_near_ties_smollm2.py does the same on the real default model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import paddle
import pytest

from specworker.model_executor import ops
from specworker.sampling_params import SamplingParams
from specworker.worker.worker import Worker
from tests.spec_decode.test_lossless import _shuffler, _tokens
from tests.worker.worker_harness import Req, alone, drive, make_config

CASES = json.loads((Path(__file__).resolve().parents[1] / "data" / "near_ties_tiny.json").read_text())["cases"]
SCHED = dict(max_num_seqs=8, max_model_len=128, num_blocks=160, max_num_batched_tokens=64)


def _requests() -> list[Req]:
    reqs = []
    for i, case in enumerate(CASES):
        params = SamplingParams(max_tokens=case["tie_step"] + 4, temperature=0.0, ignore_eos=True)
        reqs.append(Req(f"t{i}", case["prompt_token_ids"], params, arrive=i % 5))
    return reqs


def _matmul_linear(x, weight, bias=None):
    """A linear whose bits depend on how many rows share the call, as a BLAS's do: from 8 rows on, the K sum is
    split in two halves added at the end, and each output moves by 4 ulps of its value, up or down by column (a
    BLAS that reorders its sums rounds each output a few ulps apart, the sign varying). oneDNN picks its blocking
    from the row count, but Paddle 3.3's CPU matmul rounded differently below 8 rows than at 8 or more only on
    some machines (not on an AMD EPYC with AVX-512), and on a Xeon of 2026-12-07 the split alone left all 36
    requests equal; the ulps make the dependence on any CPU. Accepts the float32 weight panels [N / 32, K, 32] of
    ops.pack_linear_weight as well as [K, N]."""
    if len(weight.shape) == 3:
        panels, k, width = weight.shape
        weight = weight.transpose([1, 0, 2]).reshape([k, panels * width])
    half = weight.shape[0] // 2
    if x.shape[0] >= 8:
        out = paddle.matmul(x[:, :half], weight[:half]) + paddle.matmul(x[:, half:], weight[half:])
        sign = np.random.default_rng(weight.shape[1]).choice([-1.0, 1.0], weight.shape[1]).astype(np.float32)
        out = out + out.abs() * paddle.to_tensor(sign, place=out.place) * (4 * 2.0 ** -24)
    else:
        out = paddle.matmul(x, weight)
    return out if bias is None else out + bias


def _spec_vs_base(k: int, steps: int):
    """Non-speculative output of each request alone (1-row decode steps) vs all of them batched under
    speculation (verify steps of up to 8 x (k + 1) rows), with reorders."""
    reqs = _requests()
    base = _tokens(alone(make_config(**SCHED), reqs))
    spec = _tokens(drive(Worker(make_config("mtp", k=k, steps=steps, **SCHED)), reqs, between=_shuffler(k)))
    return base, spec


def test_near_tie_cases_are_near_ties():
    assert len(CASES) >= 15 and all(c["gap"] < 1e-4 for c in CASES)


@pytest.mark.parametrize("k,steps", [(2, 2), (3, 1)])
def test_near_ties_greedy_speculative_equals_non_speculative(k, steps):
    base, spec = _spec_vs_base(k, steps)
    assert spec == base


def test_control_non_invariant_matmul_breaks_losslessness(monkeypatch):
    monkeypatch.setattr(ops, "batch_invariant_linear", _matmul_linear)
    base, spec = _spec_vs_base(2, 2)
    differing = [r for r in base if base[r] != spec[r]]
    print(f"control: {len(differing)} of {len(base)} near-tie requests differ with a row-count dependent linear")
    assert differing, "with a row-count dependent linear the end-to-end comparison should see drift at the near ties"
