"""Sampler (layers/sampler.py) against tests/reference/sampler.py: literal cases, reference
agreement, kept sets, a chi-square test, batch invariance, reproducibility, masks, no host reads.

Inputs are per-slot sampling buffers as numpy (share_inputs names) and the output index from
tests.cases.pack_output_index, converted to Paddle CPU tensors by run_sampler.
"""

from __future__ import annotations

import numpy as np
import paddle
import pytest

from specworker.model_executor.forward_meta import ForwardMeta, StaleForwardMetaError
from specworker.model_executor.layers.sampler import Sampler, SamplingMetadata, sampling_weights, softmax_weights
from specworker.model_executor.layers.sampling_rng import counter_bits, counter_uniform, inverse_cdf_sample
from specworker.worker.buffers import TARGET_BUFFERS
from tests.cases import pack_output_index
from tests.chi_square import chi2_pvalue
from tests.reference.sampler import ref_counter_uniform, ref_sampler, ref_softmax_weights, ref_weights
from tests.sync_guard import forbid_host_reads

FLOAT_BUFFERS = ("temperature", "top_p", "min_p", "penalty_score", "frequency_score", "presence_score")


def default_params(n: int, max_model_len: int = 16, max_bad_words: int = 4, eos=(2, -1)) -> dict:
    """Table fills of every sampling buffer for n slots: temperature 1, no cut, no penalty."""
    f32 = lambda v: np.full(n, v, np.float32)  # noqa: E731
    i64 = lambda v: np.full(n, v, np.int64)  # noqa: E731
    return dict(temperature=f32(1.0), top_p=f32(1.0), top_k=i64(0), min_p=f32(0.0), penalty_score=f32(1.0),
                frequency_score=f32(0.0), presence_score=f32(0.0), infer_seed=np.arange(n, dtype=np.int64),
                step_idx=i64(0), pre_ids=np.full((n, max_model_len), -1, np.int64),
                bad_tokens=np.full((n, max_bad_words), -1, np.int64), bad_tokens_len=i64(0), min_dec_len=i64(0),
                eos_token_id=np.asarray(eos, np.int64))


def random_params(rng: np.random.Generator, n: int, vocab: int, greedy_share: float = 0.2) -> dict:
    """Random parameters per slot: every cut on its own and combined, penalties, histories, bad words."""
    p = default_params(n)
    p["temperature"] = rng.choice([0.0, 0.5, 1.0, 1.7], n).astype(np.float32)
    p["temperature"][rng.random(n) < greedy_share] = 0.0
    p["top_k"] = rng.choice([0, 0, 1, 3, 10, vocab + 5], n).astype(np.int64)
    p["top_p"] = rng.choice([1.0, 0.9, 0.5, 0.05], n).astype(np.float32)
    p["min_p"] = rng.choice([0.0, 0.0, 0.1, 0.5], n).astype(np.float32)
    p["penalty_score"] = rng.choice([1.0, 1.3], n).astype(np.float32)
    p["frequency_score"] = rng.choice([0.0, 0.4], n).astype(np.float32)
    p["presence_score"] = rng.choice([0.0, 0.7], n).astype(np.float32)
    p["infer_seed"] = rng.integers(0, 2**32, n, dtype=np.int64)
    p["step_idx"] = rng.integers(0, 10, n).astype(np.int64)
    for b in range(n):
        p["pre_ids"][b, 1:1 + p["step_idx"][b]] = rng.integers(0, vocab, p["step_idx"][b])
    p["bad_tokens"][:, 0] = rng.integers(0, vocab, n)
    p["bad_tokens_len"] = rng.integers(0, 2, n).astype(np.int64)
    p["min_dec_len"] = rng.integers(0, 12, n).astype(np.int64)
    return p


def random_logits(rng: np.random.Generator, rows: int, vocab: int, scale: float = 3.0) -> np.ndarray:
    return (rng.standard_normal((rows, vocab)) * scale).astype(np.float32)


def output_index(seq_lens_output, capacity: int):
    """(batch_id_per_token_output [capacity] int32, cu_seqlens_q_output [bsz + 1] int32)."""
    return pack_output_index(np.asarray(seq_lens_output, np.int32), capacity)


def make_meta(seq_lens_output, num_draft_tokens: int = 0) -> ForwardMeta:
    """A ForwardMeta whose output side holds O_b = seq_lens_output (capacity bsz * (k + 1))."""
    lens = np.asarray(seq_lens_output, np.int32)
    meta = ForwardMeta.make_dummy(lens.shape[0], 1, num_draft_tokens)
    batch_ids, cu = output_index(lens, meta.output_capacity)
    meta.seq_lens_this_time = paddle.to_tensor(lens)
    meta.seq_lens_output = paddle.to_tensor(lens)
    meta.batch_id_per_token_output = paddle.to_tensor(batch_ids)
    meta.cu_seqlens_q_output = paddle.to_tensor(cu)
    return meta


def make_sampling(p: dict) -> SamplingMetadata:
    tensors = {k: paddle.to_tensor(v) for k, v in p.items()}
    return SamplingMetadata(**tensors)


def run_sampler(logits: np.ndarray, p: dict, seq_lens_output, num_draft_tokens: int = 0):
    """Runs Sampler on CPU; returns (tokens [R], probs [R, V], penalised logits [R, V]) as numpy."""
    meta = make_meta(seq_lens_output, num_draft_tokens)
    out = Sampler(debug_checks=True)(paddle.to_tensor(logits), meta, make_sampling(p))
    return out.sampled_token_ids.numpy(), out.probs.numpy(), out.logits.numpy()


def reference_index(seq_lens_output, rows: int):
    batch_ids, cu = output_index(seq_lens_output, rows)
    return batch_ids, cu, np.asarray(seq_lens_output, np.int32)


def run_reference(logits: np.ndarray, p: dict, seq_lens_output):
    batch_ids, cu, lens = reference_index(seq_lens_output, logits.shape[0])
    return ref_sampler(logits, p, batch_ids, cu, lens)


def kept_set(probs_row: np.ndarray) -> set[int]:
    return set(np.flatnonzero(probs_row > 0).tolist())


# ---- literal cases -------------------------------------------------------------------------------

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


# ---- batch invariance and reproducibility --------------------------------------------------------

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
