"""Sampler batch invariance, reproducibility and contract (no host reads, stale layout, metadata checks);
the literal and reference-agreement cases are in test_sampler.py."""

from __future__ import annotations

import numpy as np
import paddle
import pytest

from specworker.model_executor.forward_meta import ForwardMeta, StaleForwardMetaError
from specworker.model_executor.layers.sampler import Sampler, SamplingMetadata, softmax_weights
from specworker.model_executor.slot_buffers import TARGET_BUFFERS
from reference.sampler import ref_softmax_weights
from tests.sampler_cases import default_params, make_meta, make_sampling, random_logits, random_params, run_sampler
from tests.sync_guard import forbid_host_reads


def _slot_params(p: dict, b: int) -> dict:
    return {k: (v if k == "eos_token_id" else v[b:b + 1].copy()) for k, v in p.items()}


def _place_slot(p: dict, b: int, one: dict) -> None:
    for k, v in one.items():
        if k != "eos_token_id":
            p[k][b] = v[0]


@pytest.mark.parametrize("vocab", [111, 259])
def test_sampler_row_alone_equals_row_among_17_bit_exact(vocab):
    """Three flat rows (many candidates, so a row-dependent draw would show) sampled alone, then
    placed at other positions among 17 slots with other parameters and idle slots."""
    rng = np.random.default_rng(4)
    n, lens = 17, (rng.random(17) < 0.7).astype(int)
    p = random_params(rng, n, vocab)
    logits = random_logits(rng, n, vocab)
    for slot in (4, 11, 16):
        target = random_params(rng, 1, vocab, greedy_share=0.0)
        target["top_k"][0], target["top_p"][0], target["min_p"][0], target["temperature"][0] = 0, 0.95, 0.0, 1.0
        row = random_logits(rng, 1, vocab, scale=0.3)
        alone = run_sampler(row.copy(), target, [1])
        _place_slot(p, slot, target)
        lens[slot] = 1
        logits[int(lens[:slot].sum())] = row[0]
        among = run_sampler(logits.copy(), p, lens)
        r = int(lens[:slot].sum())
        assert r != 0
        for a, b in zip(alone, among):
            assert a[0].tobytes() == b[r].tobytes(), f"slot {slot}"


@pytest.mark.parametrize("vocab", [111, 259])
def test_sampler_row_j_of_speculative_slot_equals_one_row_decode(vocab):
    """Row j of a 4-row slot (step s, drafts d1..d3) == a one-row slot at step s + j whose history ends
    with d1..dj: same penalties (drafts counted), same eos mask (min_tokens = s + 2), same draw."""
    rng = np.random.default_rng(5)
    k, n, slot, s = 3, 5, 2, 6
    p = random_params(rng, n, vocab, greedy_share=0.0)
    p["temperature"][slot], p["top_k"][slot], p["top_p"][slot], p["min_p"][slot] = 0.9, 0, 1.0, 0.0
    p["bad_tokens_len"][slot] = 0
    p["step_idx"][slot], p["min_dec_len"][slot] = s, s + 2
    p["frequency_score"][slot], p["presence_score"][slot] = 0.5, 0.3
    p["draft_tokens"] = rng.integers(0, vocab, (n, k + 1)).astype(np.int64)
    lens = np.array([2, 0, k + 1, 1, 3])
    logits = random_logits(rng, n * (k + 1), vocab)
    start = int(lens[:slot].sum())
    logits[start:start + k + 1, 2] += 4.0  # eos (id 2) competitive once allowed
    spec = run_sampler(logits.copy(), p, lens, num_draft_tokens=k)
    for j in range(k + 1):
        one = _slot_params(p, slot)
        del one["draft_tokens"]
        one["step_idx"][0] = s + j
        one["pre_ids"][0, s + 1:s + 1 + j] = p["draft_tokens"][slot, 1:1 + j]
        single = run_sampler(logits[start + j:start + j + 1].copy(), one, [1])
        for a, b in zip(single, spec):
            assert a[0].tobytes() == b[start + j].tobytes(), f"row j = {j}"
    assert spec[1][start, 2] == 0 and spec[1][start + 1, 2] == 0 and spec[1][start + 2, 2] > 0


def test_sampler_is_reproducible_and_seed_and_step_dependent():
    rng = np.random.default_rng(6)
    n, vocab = 64, 111
    p = default_params(n, max_model_len=n + 1)
    p["infer_seed"][:] = 99
    logits = np.repeat(random_logits(rng, 1, vocab, scale=0.5), n, axis=0)
    first = run_sampler(logits.copy(), p, [1] * n)[0]
    np.testing.assert_array_equal(first, run_sampler(logits.copy(), p, [1] * n)[0])
    assert len(set(first.tolist())) == 1, "same seed, same step, same row -> same token"
    other_seed = dict(p, infer_seed=np.arange(n, dtype=np.int64))
    other_step = dict(p, step_idx=np.arange(n, dtype=np.int64))
    assert len(set(run_sampler(logits.copy(), other_seed, [1] * n)[0].tolist())) > 10
    assert len(set(run_sampler(logits.copy(), other_step, [1] * n)[0].tolist())) > 10


def test_sampler_never_samples_bad_words_or_eos_before_min_tokens():
    rng = np.random.default_rng(7)
    n, vocab, eos, bad = 300, 111, 2, 7
    p = default_params(n, eos=(eos, -1))
    p["bad_tokens"][:, 0], p["bad_tokens_len"][:] = bad, 1
    p["min_dec_len"][:], p["step_idx"] = 5, np.arange(n, dtype=np.int64) % 5
    p["temperature"][::3] = 0.0
    logits = random_logits(rng, n, vocab, scale=1.0)
    logits[:, [eos, bad]] = 30.0
    tokens, probs, _ = run_sampler(logits.copy(), p, [1] * n)
    assert not np.isin(tokens, [eos, bad]).any() and (probs[:, [eos, bad]] == 0).all()
    p["step_idx"][:] = 5  # min_tokens reached: eos is allowed again and dominates
    tokens, _, _ = run_sampler(logits.copy(), p, [1] * n)
    assert (tokens == eos).all()


# ---- contract: no host reads, stale layout, metadata ---------------------------------------------

def test_sampler_makes_no_host_reads():
    rng = np.random.default_rng(8)
    n, k, vocab = 5, 2, 111
    p = random_params(rng, n, vocab)
    p["draft_tokens"] = rng.integers(0, vocab, (n, k + 1)).astype(np.int64)
    meta, sampling = make_meta([3, 0, 1, 2, 1], k), make_sampling(p)
    logits = paddle.to_tensor(random_logits(rng, n * (k + 1), vocab))
    with forbid_host_reads():
        out = Sampler()(logits, meta, sampling)
    assert out.sampled_token_ids.shape == [n * (k + 1)] and out.probs.shape == [n * (k + 1), vocab]


def test_sampler_rejects_stale_layout_and_bad_logits():
    p = default_params(2)
    meta = make_meta([1, 1])
    sampling = make_sampling(p)
    sampling.layout_version = 3
    with pytest.raises(StaleForwardMetaError):
        Sampler()(paddle.zeros([2, 5]), meta, sampling)
    sampling.layout_version = 0
    for bad, field in ((paddle.zeros([2, 5], "float16"), "float32"), (paddle.zeros([3, 5]), "capacity"),
                       (paddle.zeros([5]), "float32")):
        with pytest.raises(ValueError, match=field):
            Sampler()(bad, meta, sampling)


def test_sampling_metadata_from_share_inputs_takes_the_table_buffers():
    dims = {"max_num_seqs": 3, "max_model_len": 8, "max_bad_words": 4, "max_stop_tokens": 2}
    share_inputs = {spec.name: paddle.zeros([dims.get(d, 2) if isinstance(d, str) else d for d in spec.dims],
                                            spec.dtype) for spec in TARGET_BUFFERS}
    sampling = SamplingMetadata.from_share_inputs(share_inputs, layout_version=4)
    sampling.check()
    for name in ("temperature", "top_k", "min_p", "infer_seed", "pre_ids", "eos_token_id", "draft_tokens"):
        assert getattr(sampling, name) is share_inputs[name]
    assert sampling.layout_version == 4
    del share_inputs["min_p"]
    with pytest.raises(ValueError, match="min_p"):
        SamplingMetadata.from_share_inputs(share_inputs)


def test_sampling_metadata_check_names_the_bad_field():
    sampling = SamplingMetadata.make_dummy(max_num_seqs=3, max_model_len=8, max_bad_words=4, max_stop_tokens=2)
    sampling.check()
    sampling.top_k = paddle.zeros([3], "int32")
    with pytest.raises(ValueError, match="top_k"):
        sampling.check()
    sampling.top_k = paddle.zeros([4], "int64")
    with pytest.raises(ValueError, match="top_k"):
        sampling.check()


@pytest.mark.parametrize("vocab", [111, 259])
def test_softmax_weights_match_reference_bit_exact(vocab):
    """The float32 polynomial and the shifts agree with the scalar reference, also on the far tail
    (y near -32) and on rows of very different scales."""
    rng = np.random.default_rng(9)
    logits = random_logits(rng, 6, vocab, scale=8.0)
    logits[1] *= 0.01
    logits[2, :3] = [0.0, -22.18, -22.19]  # around exp(-22.18) = 2**-32
    got = softmax_weights(paddle.to_tensor(logits)).numpy()
    np.testing.assert_array_equal(got, [ref_softmax_weights(row) for row in logits])
    rel = got / (np.exp(logits.astype(np.float64) - logits.max(axis=1, keepdims=True)) * 2.0**32)
    assert np.abs(rel[got > 2**20] - 1).max() < 2e-6


def test_softmax_weights_do_not_depend_on_row_position():
    """Regression: weights built on paddle.exp changed with the row's place in the batch on CPU (the
    vectorised exp and its scalar tail round differently), so a row's probs differed alone vs as
    row j of a speculative slot. V = 111 puts row ends in the tail at every offset."""
    rng = np.random.default_rng(10)
    rows = random_logits(rng, 40, 111, scale=4.0)
    together = softmax_weights(paddle.to_tensor(rows)).numpy()
    for r in range(rows.shape[0]):
        np.testing.assert_array_equal(softmax_weights(paddle.to_tensor(rows[r:r + 1])).numpy()[0], together[r])
