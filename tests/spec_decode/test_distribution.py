"""Sampled speculative decoding keeps the target's distribution (CPU, built-in tiny pair, seeded): the token
at the first speculated position of a fixed prompt, over many seeds, against the exact marginal computed
from the model; target_match must also reproduce non-speculative sampling draw for draw."""

import numpy as np
import paddle
import pytest

from specworker.sampling_params import SamplingParams
from specworker.worker.worker import Worker
from tests.chi_square import chi2_pvalue
from tests.worker.worker_harness import Req, drive, make_config

PROMPT = [256] + list(b"def ")
TEMPERATURE = 0.5
NUM_SEEDS = 1500


def _sample_runs(config):
    reqs = [Req(f"s{i}", PROMPT, SamplingParams(temperature=TEMPERATURE, seed=1000 + i, max_tokens=3,
                                                  ignore_eos=True)) for i in range(NUM_SEEDS)]
    worker = Worker(config)
    out = drive(worker, reqs)
    return np.array([out[r.req_id][0] for r in reqs]), worker


def _marginal_second_token(model):
    """p(x2 | prompt) = sum over x1 of p(x1 | prompt) p(x2 | prompt, x1), at TEMPERATURE, in float64."""
    vocab = model.arch.vocab_size
    with paddle.no_grad():
        ids = paddle.to_tensor(np.array([PROMPT + [x1] for x1 in range(vocab)], dtype=np.int64))
        logits = model.logits_train(model.forward_train(ids)).numpy().astype(np.float64)  # [V, P + 1, V]

    def softmax(x):
        z = np.exp((x - x.max(-1, keepdims=True)) / TEMPERATURE)
        return z / z.sum(-1, keepdims=True)

    p1 = softmax(logits[0, len(PROMPT) - 1])  # [V]
    p2 = softmax(logits[:, len(PROMPT)])  # [V (x1), V]
    return p1 @ p2


def _pooled_pvalue(counts, probs):
    """Chi-square with every bin of expected count < 5 pooled into one."""
    expected = probs * counts.sum()
    small = expected < 5
    c = np.append(counts[~small], counts[small].sum())
    p = np.append(probs[~small], probs[small].sum())
    return chi2_pvalue(c[p > 0], p[p > 0])


@pytest.fixture(scope="module")
def non_speculative():
    return _sample_runs(make_config(max_num_seqs=64, num_blocks=256, max_num_batched_tokens=512))


@pytest.mark.parametrize("strategy", ["target_match", "rejection"])
def test_sampled_speculation_keeps_the_target_distribution(strategy, non_speculative):
    base_tokens, base_worker = non_speculative
    config = make_config("mtp", k=2, steps=2, strategy=strategy, max_num_seqs=64, num_blocks=256,
                         max_num_batched_tokens=512)
    tokens, worker = _sample_runs(config)
    probs = _marginal_second_token(base_worker.runner.model)
    vocab = probs.shape[0]
    counts = np.bincount(tokens[:, 1], minlength=vocab)
    assert worker.spec_stats.num_accepted > 0.05 * NUM_SEEDS, worker.spec_stats.as_dict()  # drafts were accepted
    assert _pooled_pvalue(counts, probs) > 1e-3
    base_counts = np.bincount(base_tokens[:, 1], minlength=vocab)
    assert _pooled_pvalue(base_counts, probs) > 1e-3  # the reference itself is right
    if strategy == "target_match":  # lossless draw for draw: same seeds, same tokens
        np.testing.assert_array_equal(tokens, base_tokens)


def _marginal_third_token(model, prompt, *, cutoff=1e-7):
    """p(x3 | prompt) = sum over (x1, x2) of p(x1) p(x2 | x1) p(x3 | x1, x2), at TEMPERATURE, in float64; pairs of
    mass < cutoff are left out (returned: the marginal and the mass it covers)."""
    vocab = model.arch.vocab_size

    def softmax(x):
        z = np.exp((x - x.max(-1, keepdims=True)) / TEMPERATURE)
        return z / z.sum(-1, keepdims=True)

    def last_probs(seqs):
        with paddle.no_grad():
            ids = paddle.to_tensor(np.array(seqs, dtype=np.int64))
            return softmax(model.logits_train(model.forward_train(ids)).numpy().astype(np.float64)[:, -1])

    p1 = last_probs([prompt])[0]
    p2 = last_probs([prompt + [x1] for x1 in range(vocab)])  # [V (x1), V]
    pairs = np.argwhere(p1[:, None] * p2 >= cutoff)
    mass = p1[pairs[:, 0]] * p2[pairs[:, 0], pairs[:, 1]]
    p3 = last_probs([prompt + [int(a), int(b)] for a, b in pairs])  # [pairs, V]
    return mass @ p3, mass.sum()


def test_rejection_with_ngram_drafts_keeps_the_target_distribution():
    """mtp_strategy with_ngram, k = 2 after num_model_steps = 1: the third token is verified against an n-gram
    draft (one-hot draft distribution) whenever the lookup finds one, which a repetitive prompt makes common; its
    distribution over 1500 seeds must be the target's marginal. The whitespace prompt is one where the tiny pair
    continues the pattern, so both branches (accepted and rejected n-gram drafts) are common."""
    prompt = [256] + list(b"    \n    \n    \n    \n   ")
    reqs = [Req(f"s{i}", prompt, SamplingParams(temperature=TEMPERATURE, seed=2000 + i, max_tokens=3,
                                                  ignore_eos=True)) for i in range(NUM_SEEDS)]
    config = make_config("mtp", k=2, steps=1, strategy="rejection", mtp_strategy="with_ngram", ngram_sizes=(3, 1),
                         max_num_seqs=64, num_blocks=256, max_num_batched_tokens=512)
    worker = Worker(config)
    out = drive(worker, reqs)
    tokens = np.array([out[r.req_id][0] for r in reqs])
    stats = worker.spec_stats
    assert stats.drafted_per_position[1] > 0.5 * NUM_SEEDS, stats.as_dict()  # n-gram drafts were verified,
    accepted = stats.accepted_per_position[1]
    assert 0.2 * NUM_SEEDS < accepted < stats.drafted_per_position[1] - 0.2 * NUM_SEEDS, stats.as_dict()  # both ways
    probs, covered = _marginal_third_token(worker.runner.model, prompt)
    assert covered > 0.999
    counts = np.bincount(tokens[:, 2], minlength=probs.shape[0])
    assert _pooled_pvalue(counts, probs / covered) > 1e-3


def test_distribution_check_can_fail(non_speculative):
    """The same check rejects a wrong distribution: the marginal at a different temperature."""
    base_tokens, base_worker = non_speculative
    global TEMPERATURE
    saved, TEMPERATURE = TEMPERATURE, 1.5
    try:
        wrong = _marginal_second_token(base_worker.runner.model)
    finally:
        TEMPERATURE = saved
    counts = np.bincount(base_tokens[:, 1], minlength=wrong.shape[0])
    assert _pooled_pvalue(counts, wrong) < 1e-3
