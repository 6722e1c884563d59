"""Lossless where numerics decide, on the real default model (SmolLM2-135M-Instruct): greedy requests whose
decoding passes a near tie (top-2 logit gap < 1e-4, found by tools/find_near_ties.py;
tests/data/near_ties_smollm2.json). SmolLM2 has no MTP head, so the speculative side drafts with the oracle
(every draft accepted: verify steps of k + 1 rows per request, several requests per step). The control swaps
every call of the batch-invariant linear for test_lossless_near_ties' row-count dependent one (paddle.matmul, its K
sum split in two from 8 rows on) and shows the same comparison then fails. The comparison covers each token's logprob
and top-2 logprobs too: at SmolLM2's gaps (none under 1e-5 in 65k steps) a BLAS's drift of the top-2 gap between a
1-row and an 8-row call (paddle.matmul's own, where it had one: 5e-6 to 3e-5) flips no token, but it changes the
logprobs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specworker.config import ModelConfig, config_from_dict
from specworker.model_executor import ops
from specworker.model_executor.models.checkpoint import load_target
from specworker.sampling_params import SamplingParams
from specworker.worker.worker import Worker
from tests.smollm2 import require_smollm2
from tests.spec_decode.oracle_proposer import OracleProposer
from tests.spec_decode.test_lossless import _shuffler
from tests.spec_decode.test_lossless_near_ties import _matmul_linear
from tests.worker.worker_harness import Req, drive

DATA = json.loads((Path(__file__).resolve().parents[1] / "data" / "near_ties_smollm2.json").read_text())
CASES = DATA["cases"]
SCHEDULER = dict(max_num_seqs=8, max_model_len=128, block_size=16, num_blocks=64, max_num_batched_tokens=64)
MIN_BATCHED_ROWS = 8  # the control's linear rounds a row one way in calls of < 8 rows, another in calls of >= 8:
# k + 1 <= 4 rows, so a verify step reaches 8 only with several requests in it


def _config(method="none", k=0):
    spec = {"method": method}
    if method == "mtp":  # the oracle is passed in; the draft path only has to exist for validation
        spec.update(num_speculative_tokens=k, num_model_steps=k, model=str(require_smollm2()),
                    verify_strategy="greedy")
    return config_from_dict({"model": {"path": str(require_smollm2())}, "scheduler": SCHEDULER,
                             "speculative_config": spec, "debug_checks": True}, check_paths=False)


@pytest.fixture(scope="module")
def model():
    return load_target(ModelConfig(path=str(require_smollm2())))  # shared by every Worker: loaded once


def _requests() -> list[Req]:
    reqs = []
    for i, case in enumerate(CASES):
        params = SamplingParams(max_tokens=case["tie_step"] + 3, temperature=0.0, ignore_eos=True, logprobs=2)
        reqs.append(Req(f"n{i}", case["prompt_token_ids"], params, arrive=i % 3))
    return reqs


class _LogitRowCounter:
    """Wraps the linear op and records the most rows of any lm_head call (output width V): a verify step's
    logits rows, k + 1 per decoding request, one per prefilling one."""

    def __init__(self, linear, vocab_size: int):
        self.linear, self.vocab_size, self.max_rows = linear, vocab_size, 0

    def __call__(self, x, weight, bias=None):
        width = weight.shape[0] * weight.shape[2] if len(weight.shape) == 3 else weight.shape[1]  # panels or [K, N]
        if width == self.vocab_size:
            self.max_rows = max(self.max_rows, x.shape[0])
        return self.linear(x, weight, bias)


class _UnpackingMatmulLinear:
    """_matmul_linear with each weight unpacked from its panels once (SmolLM2's are ~540 MB per step)."""

    def __init__(self):
        self.weights = {}  # id(panels) -> (panels, [K, N]); the panels are kept so the id stays theirs

    def __call__(self, x, weight, bias=None):
        if len(weight.shape) == 3:
            if id(weight) not in self.weights:
                panels, k, width = weight.shape
                self.weights[id(weight)] = (weight, weight.transpose([1, 0, 2]).reshape([k, panels * width]))
            weight = self.weights[id(weight)][1]
        return _matmul_linear(x, weight, bias)


class _LogprobRecorder:
    """A Worker for drive() that keeps each finished request's [(token, logprob, top-2 logprobs)] per token."""

    def __init__(self, worker: Worker):
        self.worker, self.outputs = worker, {}

    def __getattr__(self, name):
        return getattr(self.worker, name)

    def step(self):
        outs = self.worker.step()
        for out in outs:
            if out.finished:
                self.outputs[out.request_id] = [(t.token_id, t.logprob, t.top_logprobs) for t in out.logprobs]
        return outs


def _alone(model) -> dict[str, list]:
    """Non-speculative output of each request alone (1-row decode steps), with logprobs."""
    worker = _LogprobRecorder(Worker(_config(), model=model))
    for r in _requests():
        drive(worker, [r])
    return worker.outputs


def _batched_oracle(model, base: dict[str, list], k: int, seed: int):
    """All requests batched under oracle speculation (drafts: base's tokens; verify steps of k + 1 rows per
    request), with reorders. Returns (outputs with logprobs by request, the worker's SpecDecodeStats)."""
    reqs = _requests()
    drafter = OracleProposer(k, {tuple(r.prompt): [t for t, _, _ in base[r.req_id]] for r in reqs})
    worker = _LogprobRecorder(Worker(_config("mtp", k), model=model, proposer=drafter))
    drive(worker, reqs, between=_shuffler(seed))
    return worker.outputs, worker.spec_stats


@pytest.fixture(scope="module")
def baseline(model):
    return _alone(model)


def test_smollm2_near_tie_cases_are_near_ties():
    assert DATA["model"] == "smollm2-135m"
    assert len(CASES) >= 7 and all(c["gap"] < 1e-4 for c in CASES), [c["gap"] for c in CASES]
    assert len({tuple(c["prompt_token_ids"]) for c in CASES}) == len(CASES), "prompts key the oracle"


@pytest.mark.parametrize("k", [2, 3])
def test_smollm2_near_ties_oracle_speculative_equals_non_speculative(model, baseline, k, monkeypatch):
    rows = _LogitRowCounter(ops.batch_invariant_linear, model.arch.vocab_size)
    monkeypatch.setattr(ops, "batch_invariant_linear", rows)
    spec, stats = _batched_oracle(model, baseline, k, seed=31 + k)
    assert spec == baseline
    assert stats.num_drafted > 0 and stats.num_accepted == stats.num_drafted
    assert rows.max_rows >= MIN_BATCHED_ROWS, rows.max_rows


def test_smollm2_control_non_invariant_matmul_breaks_losslessness(model, monkeypatch):
    monkeypatch.setattr(ops, "batch_invariant_linear", _UnpackingMatmulLinear())
    base = _alone(model)
    spec, _ = _batched_oracle(model, base, 3, seed=34)
    tokens_differ = [r for r in base if [t[0] for t in base[r]] != [t[0] for t in spec[r]]]
    differing = [r for r in base if base[r] != spec[r]]
    print(f"control: {len(differing)} of {len(base)} SmolLM2 near-tie requests differ with a row-count dependent "
          f"linear ({len(tokens_differ)} in their tokens, the rest in logprobs only)")
    assert differing, "with a row-count dependent linear the end-to-end comparison should see drift at the near ties"
