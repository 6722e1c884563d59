"""Sampler (layers/sampler.py) against reference/sampler.py: literal cases, reference
agreement, kept sets, a chi-square test (batch invariance, reproducibility, masks and the no-host-read
contract are in test_sampler_invariance.py).

Inputs are per-slot sampling buffers as numpy (share_inputs names) and the output index from
reference.cases.step_batch.pack_output_index, converted to Paddle CPU tensors by run_sampler.
"""

from __future__ import annotations

import numpy as np
import paddle
import pytest

from specworker.model_executor.layers.sampler import sampling_weights
from specworker.model_executor.layers.sampling_rng import counter_bits, counter_uniform, inverse_cdf_sample
from tests.chi_square import chi2_pvalue
from reference.sampler import ref_counter_uniform, ref_weights
from tests.sampler_cases import default_params, kept_set, random_logits, random_params, run_reference, run_sampler


def test_sampler_literal_greedy_masks_ties_and_padding():
    """Slot 0: tie -> first max. Slot 1: bad word 1 masked, tie 2/3 -> 2. Slot 2: eos 2 masked before
    min_tokens. Slot 3 idle: its capacity row gives -1 and zero probs."""
    p = default_params(4, eos=(2, -1))
    p["temperature"][:] = 0.0
    p["bad_tokens"][1, 0], p["bad_tokens_len"][1] = 1, 1
    p["min_dec_len"][2] = 1
    logits = np.array([[1, 5, 5, 0, 2], [0, 9, 3, 3, 1], [0, 0, 9, 1, 0], [9, 0, 0, 0, 0]], np.float32)
    tokens, probs, pen = run_sampler(logits, p, [1, 1, 1, 0])
    np.testing.assert_array_equal(tokens, [1, 2, 3, -1])
    np.testing.assert_array_equal(probs, np.eye(5, dtype=np.float32)[[1, 2, 3]].tolist() + [[0] * 5])
    assert pen[1, 1] == np.float32(-1e10) and pen[2, 2] == np.float32(-1e10)


@pytest.mark.parametrize("cut, expected", [
    (dict(top_k=1), {2: 1.0}),
    (dict(top_p=0.45), {2: 1.0}),
    (dict(top_p=0.6), {1: 1 / 3, 2: 2 / 3}),
    (dict(min_p=0.3), {1: 1 / 3, 2: 2 / 3}),
    (dict(min_p=0.2), {0: 1 / 8, 1: 2 / 8, 2: 4 / 8, 3: 1 / 8}),
    (dict(top_k=3), {0: 1 / 8, 1: 2 / 8, 2: 4 / 8, 3: 1 / 8}),  # the 3rd value is tied: both kept
    (dict(top_k=2, top_p=0.9), {1: 1 / 3, 2: 2 / 3}),  # top-p over the top-k mass
])
def test_sampler_literal_cuts_keep_the_expected_tokens(cut, expected):
    """Probabilities [1, 2, 4, 1] / 8 under each cut, renormalised over the kept tokens."""
    p = default_params(1)
    for name, value in cut.items():
        p[name][0] = value
    logits = np.log(np.array([[1, 2, 4, 1]], np.float32))
    tokens, probs, _ = run_sampler(logits, p, [1])
    assert kept_set(probs[0]) == set(expected)
    np.testing.assert_allclose(probs[0], [expected.get(i, 0.0) for i in range(4)], atol=1e-6)
    assert int(tokens[0]) in expected


def test_sampling_weights_top_p_boundary_reached_exactly():
    """Logits whose weights are exactly [4, 2, 1, 1] * 1073741760 (y = 0, -1, -2, -2): a prefix whose
    mass equals top_p * total already reaches it, so the next token is not kept."""
    logits = paddle.to_tensor(np.array([[0.0, -0.6931472, -1.3862944, -1.3862944]] * 2, np.float32))
    w = sampling_weights(logits, paddle.to_tensor([0, 0], "int64"), paddle.to_tensor([0.5, 0.75], "float32"),
                         paddle.to_tensor([0.0, 0.0], "float32")).numpy()
    np.testing.assert_array_equal(w, [[4 * 1073741760, 0, 0, 0], [4 * 1073741760, 2 * 1073741760, 0, 0]])


def test_inverse_cdf_sample_literal_thresholds():
    """weights [0, 3, 0, 5] (cdf [0, 3, 3, 8]): t = floor(u * 8); the index is the first cdf > t, so
    t = 0 skips the zero-weight id 0 and t = 3 skips the zero-weight id 2."""
    weights = paddle.to_tensor(np.array([[0, 3, 0, 5]] * 4, np.int64))
    u = paddle.to_tensor(np.array([1e-9, 2.9 / 8, 3.5 / 8, 0.999], np.float64))
    np.testing.assert_array_equal(inverse_cdf_sample(weights, u).numpy(), [1, 1, 3, 3])


def test_counter_bits_literals_and_reference():
    seeds = np.array([0, 1, 0, 2**32 - 1, 12345], np.int64)
    counters = np.array([0, 0, 1, 2**32 - 1, 7], np.int64)
    bits = counter_bits(paddle.to_tensor(seeds), paddle.to_tensor(counters)).numpy()
    np.testing.assert_array_equal(bits, [1999214781, 3791156096, 2681911407, 3370335035, 1370428842])
    rng = np.random.default_rng(0)
    seeds = np.concatenate([rng.integers(0, 2**32, 500), [-1, -2**40, 2**62]]).astype(np.int64)
    counters = rng.integers(0, 2**33, seeds.shape[0]).astype(np.int64)
    u = counter_uniform(paddle.to_tensor(seeds), paddle.to_tensor(counters)).numpy()
    np.testing.assert_array_equal(u, [ref_counter_uniform(int(s), int(c)) for s, c in zip(seeds, counters)])
    assert ((u > 0) & (u < 1)).all()


def test_counter_uniform_is_uniform_over_counters_and_seeds():
    n, bins = 20000, 50
    for seeds, counters in ((np.full(n, 7), np.arange(n)), (np.arange(n), np.full(n, 3))):
        u = counter_uniform(paddle.to_tensor(seeds.astype(np.int64)), paddle.to_tensor(counters.astype(np.int64)))
        counts = np.bincount((u.numpy() * bins).astype(int), minlength=bins)
        assert chi2_pvalue(counts, np.full(bins, 1.0 / bins)) > 1e-3


# ---- agreement with the reference ----------------------------------------------------------------

@pytest.mark.parametrize("vocab", [111, 259])
@pytest.mark.parametrize("num_draft", [0, 3])
def test_sampler_matches_reference(vocab, num_draft):
    """17 slots, mixed greedy / cuts / penalties; speculative slots hold 1..k+1 rows, some idle."""
    rng = np.random.default_rng(vocab + num_draft)
    n = 17
    p = random_params(rng, n, vocab)
    lens = rng.integers(0, num_draft + 2, n) if num_draft else (rng.random(n) < 0.85).astype(int)
    if num_draft:
        p["draft_tokens"] = rng.integers(0, vocab, (n, num_draft + 1)).astype(np.int64)
    logits = random_logits(rng, n * (num_draft + 1), vocab)
    tokens, probs, pen = run_sampler(logits.copy(), p, lens, num_draft)
    ref_tokens, ref_probs, ref_pen = run_reference(logits, p, lens)
    np.testing.assert_array_equal(pen[:int(lens.sum())], ref_pen[:int(lens.sum())])
    np.testing.assert_array_equal(tokens, ref_tokens)
    np.testing.assert_array_equal(probs > 0, ref_probs > 0)
    np.testing.assert_allclose(probs, ref_probs, rtol=1e-6, atol=1e-7)
    greedy = p["temperature"][np.repeat(np.arange(n), lens)] == 0
    assert greedy.any() and (~greedy).any(), "the case should mix greedy and sampled rows"
    assert (tokens[int(lens.sum()):] == -1).all() and (probs[int(lens.sum()):] == 0).all()


@pytest.mark.parametrize("vocab", [111, 259])
def test_sampler_greedy_is_argmax_of_reference_penalised_logits(vocab):
    rng = np.random.default_rng(1)
    n = 9
    p = random_params(rng, n, vocab, greedy_share=1.0)
    logits = random_logits(rng, n, vocab)
    logits[:, 5] = logits[:, 9] = logits.max(axis=1)  # exact ties at the top (first one wins)
    tokens, probs, _ = run_sampler(logits.copy(), p, [1] * n)
    _, _, ref_pen = run_reference(logits, p, [1] * n)
    np.testing.assert_array_equal(tokens, np.argmax(ref_pen, axis=1))
    np.testing.assert_array_equal(probs, np.eye(vocab, dtype=np.float32)[tokens])


@pytest.mark.parametrize("cut", [dict(top_k=5), dict(top_p=0.3), dict(min_p=0.5), dict(top_k=8, top_p=0.5, min_p=0.1)])
def test_sampler_samples_exactly_the_reference_kept_set(cut):
    """600 seeds on one row: every sampled token is kept by the reference, and every kept one is hit."""
    n, vocab = 600, 111
    rng = np.random.default_rng(2)
    row = random_logits(rng, 1, vocab, scale=1.0)
    p = default_params(n)
    p["infer_seed"] = np.arange(n, dtype=np.int64) * 7919
    for name, value in cut.items():
        p[name][:] = value
    tokens, probs, _ = run_sampler(np.repeat(row, n, axis=0), p, [1] * n)
    ref = ref_weights(row[0], int(p["top_k"][0]), float(p["top_p"][0]), float(p["min_p"][0]))
    expected = {i for i, w in enumerate(ref) if w > 0}
    assert 1 < len(expected) <= 12, "the cut should leave a small set"
    assert set(tokens.tolist()) == expected
    assert kept_set(probs[0]) == expected


@pytest.mark.parametrize("vary", ["seed", "step"])
def test_sampler_chi_square_against_reference_distribution(vary):
    n, vocab = (4000, 111) if vary == "seed" else (1500, 111)
    rng = np.random.default_rng(3)
    row = random_logits(rng, 1, vocab, scale=1.5)
    p = default_params(n, max_model_len=n + 1)
    p["temperature"][:], p["top_k"][:], p["top_p"][:] = 0.8, 40, 0.95
    if vary == "seed":
        p["infer_seed"] = np.arange(n, dtype=np.int64) + 1000
    else:
        p["infer_seed"][:], p["step_idx"] = 42, np.arange(n, dtype=np.int64)
    tokens, _, _ = run_sampler(np.repeat(row, n, axis=0), p, [1] * n)
    _, ref_probs, _ = run_reference(row, {k: v[:1] if v.ndim and k != "eos_token_id" else v for k, v in p.items()},
                                    [1])
    counts = np.bincount(tokens, minlength=vocab)
    assert chi2_pvalue(counts, ref_probs[0]) > 1e-3
