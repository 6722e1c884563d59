"""CUDA top_p_candidates kernel vs the numpy reference (CuPy + ctypes, no Paddle)."""


import numpy as np
import pytest

from reference.cases.step_batch import all_cases, make_step_batch
from tests.gpu.harness import launcher, ptr, require_gpu, stream
from tests.sampling_fixtures import output_index, random_probs, random_top_p
from tests.top_p_cases import (  # noqa: F401  written once, also run on the Paddle op
    QWEN_VOCAB, check_against_reference, test_top_p_candidates_length_is_c_when_top_c_mass_below_top_p,
    test_top_p_candidates_literal_three_slots, test_top_p_candidates_matches_reference,
    test_top_p_candidates_matches_reference_qwen_vocab,
)

cp = require_gpu()
launch = launcher("specworker_top_p_candidates_launch")


def run_kernel(probs, top_p, batch_ids, C, offset=0):
    """Launches on device copies; `offset` floats of padding before probs misalign its rows."""
    probs = np.asarray(probs, np.float32)
    rows, vocab = probs.shape
    flat = cp.zeros(offset + probs.size, dtype=cp.float32)
    flat[offset:] = cp.asarray(probs.reshape(-1))
    d_probs = flat[offset:]
    d_top_p = cp.asarray(np.asarray(top_p, np.float32).reshape(-1))
    d_bid = cp.asarray(np.asarray(batch_ids, np.int32))
    # Garbage in every output entry: the kernel must write all of them.
    d_scores = cp.full((rows, C), 7.0, dtype=cp.float32)
    d_tokens = cp.full((rows, C), 7, dtype=cp.int64)
    d_lens = cp.full(rows, -7, dtype=cp.int32)
    launch(ptr(d_probs), ptr(d_top_p), ptr(d_bid), rows, vocab, d_top_p.shape[0], C, ptr(d_scores), ptr(d_tokens),
           ptr(d_lens), stream())
    return cp.asnumpy(d_scores), cp.asnumpy(d_tokens), cp.asnumpy(d_lens)


def assert_matches_reference(probs, top_p, batch_ids, C, offset=0):
    check_against_reference(run_kernel(probs, top_p, batch_ids, C, offset), probs, top_p, batch_ids, C)


@pytest.fixture
def run():
    """The backend of the shared tests (tests/top_p_cases.py): the kernel, every output entry
    starting as garbage."""
    return run_kernel


@pytest.fixture(params=[(*c, C) for c in all_cases() + [(1000, "mixed", 77), (1000, "all_decode", 78)]
                        for C in (1, 2, 5, 10)], ids=lambda p: "-".join(map(str, p)))
def reference_grid(request):
    """(bsz, kind, seed, C): every batch size (and 1000) x kind, C = 1, 2, 5, 10."""
    return request.param


@pytest.fixture(params=[(C, rows, rows + C, None) for C, rows in [(5, 1024), (1, 128), (2, 128), (10, 128)]],
                ids=lambda p: f"C{p[0]}-rows{p[1]}")
def qwen_grid(request):
    """(C, rows, seed, lens): the benchmark shape (1024 rows, C = 5) and the other C on fewer rows."""
    return request.param


def test_top_p_candidates_cuda_ties_nan_and_small_vocab():
    _, tokens, lens = run_kernel(np.array([[0.2, 0.3, 0.2, 0.3, 0.0]], np.float32), [0.55], [0], 4)
    np.testing.assert_array_equal(tokens, [[1, 3, -1, -1]])
    np.testing.assert_array_equal(lens, [2])
    scores, tokens, lens = run_kernel(np.array([[np.nan, 0.2, np.nan, 0.5]] * 2, np.float32), [0.6, 0.9], [0, 1], 4)
    np.testing.assert_array_equal(tokens, [[3, 1, -1, -1], [3, 1, 0, 2]])
    np.testing.assert_array_equal(scores, np.array([[0.5, 0.2, 0, 0], [0.5, 0.2, -np.inf, -np.inf]], np.float32))
    np.testing.assert_array_equal(lens, [2, 4])
    scores, tokens, lens = run_kernel(np.array([[0.2, 0.5, 0.3]] * 2, np.float32), [0.6, 1.5], [0, 1], 5)
    np.testing.assert_array_equal(tokens, [[1, 2, -1, -1, -1], [1, 2, 0, -1, -1]])
    np.testing.assert_array_equal(scores, np.array([[0.5, 0.3, 0, 0, 0], [0.5, 0.3, 0.2, 0, 0]], np.float32))
    np.testing.assert_array_equal(lens, [2, 3])


@pytest.mark.parametrize("vocab", [111, QWEN_VOCAB])
@pytest.mark.parametrize("C", [1, 2, 5, 10])
def test_top_p_candidates_cuda_all_equal_rows(vocab, C):
    """Every thread holds tied entries: the block merge must still pick ids 0..C-1 in order."""
    probs = np.full((3, vocab), np.float32(1.0 / vocab), np.float32)
    _, tokens, lens = run_kernel(probs, [0.0, 1.0], [0, 1, -1], C)
    np.testing.assert_array_equal(tokens, [[0] + [-1] * (C - 1), list(range(C)), [-1] * C])
    np.testing.assert_array_equal(lens, [1, C, 0])


@pytest.mark.parametrize("C", [11, 13, 16, 17, 20, 30, 32, 33, 37, 50, 64, 65, 90, 100])
@pytest.mark.parametrize("vocab", [57, 111, 4099])
def test_top_p_candidates_cuda_matches_reference_every_list_size(C, vocab):
    """C above 10 runs the 16/32/64/100-entry list kernels; vocab 57 < C pads."""
    rng = np.random.default_rng(C * 10000 + vocab)
    batch = make_step_batch(rng, 17, "mixed")
    _, batch_ids, _ = output_index(batch)
    assert_matches_reference(random_probs(rng, batch_ids.shape[0], vocab), random_top_p(rng, 17), batch_ids, C)


@pytest.mark.parametrize("offset", [1, 2, 3])
@pytest.mark.parametrize("vocab", [1024, 111, QWEN_VOCAB])
def test_top_p_candidates_cuda_misaligned_rows(offset, vocab):
    """Rows that do not start on a 16-byte boundary take the scalar head before the float4 body."""
    rng = np.random.default_rng(offset * vocab)
    probs = random_probs(rng, 12, vocab)
    assert_matches_reference(probs, random_top_p(rng, 12), np.arange(12, dtype=np.int32), 5, offset=offset)


def test_top_p_candidates_cuda_out_of_range_batch_id_is_skipped():
    """GPU divergence (documented): the CPU op raises on a batch id outside [-1, N); the kernel
    cannot raise without a host sync, so it treats the row as having no slot."""
    scores, tokens, lens = run_kernel(np.full((3, 4), 0.25, np.float32), [0.5], [0, 1, -5], 2)
    np.testing.assert_array_equal(tokens, [[0, 1], [-1, -1], [-1, -1]])
    np.testing.assert_array_equal(scores, [[0.25, 0.25], [0, 0], [0, 0]])
    np.testing.assert_array_equal(lens, [2, 0, 0])


def test_top_p_candidates_cuda_deterministic():
    rng = np.random.default_rng(5)
    probs, top_p = random_probs(rng, 64, QWEN_VOCAB), random_top_p(rng, 64)
    first = run_kernel(probs, top_p, np.arange(64, dtype=np.int32), 5)
    for _ in range(3):
        again = run_kernel(probs, top_p, np.arange(64, dtype=np.int32), 5)
        for a, b in zip(again, first):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("rows, vocab, C", [(1, 10, 0), (1, 10, 101), (1, 0, 5), (-1, 10, 5)])
def test_top_p_candidates_cuda_launcher_rejects_bad_sizes(rows, vocab, C):
    d = cp.zeros(16, dtype=cp.float32)
    with pytest.raises(RuntimeError, match="returned cudaError 1"):
        launch(ptr(d), ptr(d), ptr(d), rows, vocab, 1, C, ptr(d), ptr(d), ptr(d), stream())


def test_top_p_candidates_cuda_zero_rows_launches_nothing():
    d = cp.zeros(16, dtype=cp.float32)
    launch(ptr(d), ptr(d), ptr(d), 0, 10, 1, 5, ptr(d), ptr(d), ptr(d), stream())
