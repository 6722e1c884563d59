"""Lossless speculative decoding on the real default model (SmolLM2-135M-Instruct): greedy output of the
speculative path equals greedy non-speculative output, token for token, for randomized requests (real
English and random-id prompts) with staggered arrivals, aborts, reorders, penalties and stop tokens.
The drafters are the naive proposer (the speculative sampler with no drafts), an oracle (the target's own
continuation: everything accepted), an adversary (always wrong), the lookup proposers, ngram and suffix, and the
trained MTP head (docs/smollm2_mtp.md) at k = 2 and 3, and at k = 2 with a 4,096-id draft vocabulary (>= 100
requests each, prompts that invite copying)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from specworker.config import config_from_dict
from specworker.hf_tokenizer import load_tokenizer
from specworker.sampling_params import SamplingParams
from specworker.worker.worker import Worker
from tests.smollm2 import SMOLLM2_MTP_DIR, require_smollm2
from tests.spec_decode.oracle_proposer import OracleProposer
from tests.spec_decode.test_lossless import _shuffler, _tokens
from tests.worker.worker_harness import Req, drive

TEXTS = ["The capital of France is", "def fibonacci(n):\n    ", "Once upon a time, there was a",
         "The three primary colors are", "In 1969, the first humans", "Water boils at a temperature of",
         "To make a cup of tea, first", "The quick brown fox jumps over", "import numpy as np\nx = np.",
         "My favourite book is", "Photosynthesis is the process by which", "1, 1, 2, 3, 5, 8,"]
SCHEDULER = dict(max_num_seqs=6, max_model_len=128, block_size=16, num_blocks=64, max_num_batched_tokens=48)


def _config(method="none", k=0, **spec_keys):
    spec = {"method": method, **spec_keys}
    if method == "mtp":  # the proposer is passed in; the draft path only has to exist for validation
        spec.update(num_speculative_tokens=k, num_model_steps=k, model=str(require_smollm2()),
                    verify_strategy="greedy")
    if method in ("ngram", "suffix"):
        spec.update(num_speculative_tokens=k, verify_strategy="greedy")
    return config_from_dict({"model": {"path": str(require_smollm2())}, "scheduler": SCHEDULER,
                             "speculative_config": spec, "debug_checks": True}, check_paths=False)


def _requests(n: int, seed: int, *, abort_rate: float = 0.1) -> list[Req]:
    tok = load_tokenizer(str(require_smollm2()))
    rng = np.random.default_rng(seed)
    reqs = []
    for i in range(n):
        if rng.random() < 0.75:
            prompt = tok.encode(f"Example {i}: {TEXTS[int(rng.integers(len(TEXTS)))]}")  # unique (the oracle's key)
        else:
            prompt = [int(t) for t in rng.integers(0, tok.vocab_size, size=int(rng.integers(1, 40)))]
        kw = dict(max_tokens=int(rng.integers(1, 12)), temperature=0.0)
        if rng.random() < 0.3:
            kw.update(repetition_penalty=1.3, frequency_penalty=0.2, presence_penalty=0.1)
        if rng.random() < 0.25:  # a common token as stop token: ends inside accepted runs
            kw.update(stop_token_ids=(int(rng.choice(tok.encode(" the, a."))),))
        arrive = int(rng.integers(0, 12))
        abort_at = arrive + int(rng.integers(1, 5)) if rng.random() < abort_rate else None
        reqs.append(Req(f"s{i}", prompt, SamplingParams(**kw), arrive, abort_at))
    return reqs


@pytest.fixture(scope="module")
def baseline():
    reqs = _requests(36, seed=11)
    ref = drive(Worker(_config()), [dataclasses.replace(r, abort_at=None) for r in reqs])
    return reqs, ref


def _compare(reqs, ref, got):
    survivors = [r.req_id for r in reqs if r.abort_at is None or r.req_id in got]
    assert len(survivors) >= 32, len(survivors)
    for req_id in survivors:
        assert got[req_id] == ref[req_id], req_id


def test_smollm2_naive_speculative_path_equals_non_speculative(baseline):
    reqs, ref = baseline
    config = dataclasses.replace(_config(), speculative_config=dataclasses.replace(
        _config().speculative_config, method="naive"))
    _compare(reqs, ref, drive(Worker(config), reqs, between=_shuffler(3)))


@pytest.mark.parametrize("adversarial", [False, True])
def test_smollm2_oracle_and_adversary_are_lossless(baseline, adversarial):
    reqs, ref = baseline
    k = 3
    drafter = OracleProposer(k, {tuple(r.prompt): ref[r.req_id][0] for r in reqs}, adversarial=adversarial)
    worker = Worker(_config("mtp", k), proposer=drafter)
    _compare(reqs, ref, drive(worker, reqs, between=_shuffler(5 + adversarial)))
    stats = worker.spec_stats
    assert stats.num_drafted > 0
    if adversarial:
        assert stats.num_accepted == 0
    else:
        assert stats.num_accepted == stats.num_drafted and stats.mean_acceptance_length > 2.0


LOOKUP_REQUESTS = 112
COPY_TEXTS = ["the red fox and the blue bird", "one two three four five six", "def add(a, b):\n    return a + b",
              "Paris, London, Rome, Madrid, Berlin", "to be or not to be, that is the question"]


def _lookup_requests(seed: int) -> list[Req]:
    """Short greedy requests whose outputs often repeat their prompts (copy instructions, repeated phrases,
    repeated random ids) mixed with _requests' English and random-id ones; arrivals, aborts, penalties and
    stop tokens as there."""
    tok = load_tokenizer(str(require_smollm2()))
    rng = np.random.default_rng(seed)
    reqs = _requests(LOOKUP_REQUESTS, seed, abort_rate=0.05)
    out = []
    for i, r in enumerate(reqs):
        u = rng.random()
        if u < 0.35:
            text = COPY_TEXTS[int(rng.integers(len(COPY_TEXTS)))]
            r = dataclasses.replace(r, prompt=tok.encode(f"Copy {i}: {text}\n{text}\n{text}\n"))
        elif u < 0.5:
            snippet = [int(t) for t in rng.integers(0, tok.vocab_size, size=int(rng.integers(2, 6)))]
            r = dataclasses.replace(r, prompt=snippet * int(rng.integers(3, 7)) + [i])
        out.append(r)
    return out


@pytest.fixture(scope="module")
def lookup_baseline():
    reqs = _lookup_requests(seed=23)
    ref = drive(Worker(_config()), [dataclasses.replace(r, abort_at=None) for r in reqs])
    return reqs, ref


def _check_lossless_run(reqs, ref, worker, shuffle_seed):
    got = drive(worker, reqs, between=_shuffler(shuffle_seed))
    survivors = [r.req_id for r in reqs if r.abort_at is None or r.req_id in got]
    assert len(survivors) >= 100, len(survivors)
    for req_id in survivors:
        assert got[req_id] == ref[req_id], req_id
    stats = worker.spec_stats
    assert 0 < stats.num_accepted < stats.num_drafted, (stats.num_accepted, stats.num_drafted)
    return stats


@pytest.mark.parametrize("method, keys", [("ngram", {}), ("suffix", {"suffix_max_cached_requests": 8})])
def test_smollm2_lookup_proposers_are_lossless(lookup_baseline, method, keys):
    reqs, ref = lookup_baseline
    _check_lossless_run(reqs, ref, Worker(_config(method, 3, **keys)), 17)


@pytest.mark.parametrize("k", [2, 3])
def test_smollm2_trained_mtp_head_is_lossless(lookup_baseline, k):
    """The committed head through the real MTP proposer (draft KV cache, chained substeps, draft prefill)."""
    if not (SMOLLM2_MTP_DIR / "mtp.safetensors").is_file():
        pytest.fail(f"{SMOLLM2_MTP_DIR}/mtp.safetensors is missing: it is committed (tools/train_smollm2_mtp.py)")
    reqs, ref = lookup_baseline
    config = _config("mtp", k)
    config = dataclasses.replace(config, speculative_config=dataclasses.replace(
        config.speculative_config, model=str(SMOLLM2_MTP_DIR)))
    stats = _check_lossless_run(reqs, ref, Worker(config), 29 + k)
    assert stats.mean_acceptance_length > 1.2, stats.mean_acceptance_length  # the head drafts, not noise


def test_smollm2_trained_mtp_head_with_draft_vocab_is_lossless(lookup_baseline):
    """The committed head drafting from its 4,096 most frequent answer tokens only (speculative_config.draft_vocab_size,
    docs/smollm2_mtp.md): the copy and random-id prompts ask for ids outside them, so drafts miss, and output stays
    the target's."""
    reqs, ref = lookup_baseline
    config = _config("mtp", 2)
    config = dataclasses.replace(config, speculative_config=dataclasses.replace(
        config.speculative_config, model=str(SMOLLM2_MTP_DIR), draft_vocab_size=4096))
    worker = Worker(config)
    assert worker.runner.proposer.vocab.size == 4096
    stats = _check_lossless_run(reqs, ref, worker, 37)
    assert stats.mean_acceptance_length > 1.2, stats.mean_acceptance_length
