"""The standalone hybrid_mtp_ngram CUDA kernel against the numpy reference: the tests shared with the CPU op
(tests/hybrid_case_tests.py, on the cases of tests/hybrid_cases.py), plus sizes only a GPU run makes
interesting."""


import numpy as np
import pytest

from reference.hybrid_mtp_ngram import ref_hybrid_mtp_ngram
from tests.gpu.harness import launcher, ptr, require_gpu, state_to_device, stream, unguarded
from tests.hybrid_case_tests import (  # noqa: F401  written once, also run on the Paddle op
    WRITES, assert_state_equal, test_hybrid_mtp_ngram_literal, test_hybrid_mtp_ngram_matches_reference,
    test_hybrid_mtp_ngram_matches_reference_other_widths,
)
from tests.hybrid_cases import HYBRID_CASES, KINDS, NGRAM_SIZES, all_cases, literal_state, make_hybrid_state

cp = require_gpu()
launch = launcher("specworker_hybrid_mtp_ngram_launch")

ARGS = ("input_ids", "input_ids_len", "pre_ids", "step_idx", "draft_token_num", "draft_tokens", "seq_lens_this_time",
        "seq_lens_decoder", "max_dec_len", "seq_lens_encoder")


def run_kernel(state: dict, *, max_ngram_size: int, min_ngram_size: int, max_draft_tokens: int,
               num_model_steps: int) -> dict:
    """Runs the kernel on a numpy state (seq_lens_encoder absent = NULL); returns the new state."""
    bsz = np.asarray(state["seq_lens_this_time"]).size
    d = state_to_device(cp, state, ARGS, WRITES, matrices=("input_ids", "pre_ids", "draft_tokens"))
    launch(*(ptr(d[k]) for k in ARGS), bsz, state["input_ids"].shape[1], state["pre_ids"].shape[1],
           state["draft_tokens"].shape[1], max_ngram_size, min_ngram_size, max_draft_tokens, num_model_steps,
           stream())
    out = dict(state)
    for k in WRITES:
        out[k] = unguarded(cp, d[k], k, like=state[k])
    return out


@pytest.fixture
def run():
    """The backend of the shared tests (tests/hybrid_case_tests.py): the kernel, GUARD checked."""
    return run_kernel


@pytest.fixture(params=[(bsz, kind, sizes, seed, with_encoder, False) for bsz, kind, sizes, seed in all_cases()
                        for with_encoder in (True, False)],
                ids=lambda p: f"{p[0]}-{p[1]}-{p[2][0]}-{p[2][1]}-{p[3]}-{'encoder' if p[4] else 'no_encoder'}")
def reference_grid(request):
    """(bsz, kind, sizes, seed, with_encoder, column): the CPU test's random cases (same seeds), the encoder
    input given and omitted (NULL)."""
    return request.param


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("bsz", [0, 255, 257, 1024])
def test_hybrid_mtp_ngram_cuda_batch_sizes(bsz, kind):
    """Grid sizes around the block size and well past it (one block per slot)."""
    for j, (max_n, min_n) in enumerate(NGRAM_SIZES):
        state = make_hybrid_state(np.random.default_rng(bsz * 100 + j), bsz, kind, extra_rows=j)
        attrs = dict(max_ngram_size=max_n, min_ngram_size=min_n, max_draft_tokens=3, num_model_steps=2)
        assert_state_equal(run_kernel(state, **attrs), ref_hybrid_mtp_ngram(state, **attrs))


@pytest.mark.parametrize("history_width, vocab", [(300, 3), (1000, 40), (5000, 2), (9000, 1000)])
def test_hybrid_mtp_ngram_cuda_long_histories(history_width, vocab):
    """Histories longer than the 256 threads of a block, small vocabularies (many ties: the most recent
    must win), n up to 64."""
    for j, (max_n, min_n) in enumerate(((3, 1), (64, 1), (8, 4))):
        state = make_hybrid_state(np.random.default_rng(history_width + j), 33, "repetitive" if j == 1 else "mixed",
                                  num_draft=5, num_model_steps=2, prompt_width=history_width // 2,
                                  history_width=history_width, vocab=vocab)
        attrs = dict(max_ngram_size=max_n, min_ngram_size=min_n, max_draft_tokens=5, num_model_steps=2)
        assert_state_equal(run_kernel(state, **attrs), ref_hybrid_mtp_ngram(state, **attrs))


def test_hybrid_mtp_ngram_cuda_wide_rows():
    """D > 256: threads stride over the draft row after the MTP drafts too."""
    state = make_hybrid_state(np.random.default_rng(5), 17, "repetitive", num_draft=300, num_model_steps=3,
                              history_width=400, prompt_width=400, vocab=2)
    state["draft_token_num"][:] = 300
    state["max_dec_len"] = state["step_idx"] + 301
    attrs = dict(max_ngram_size=3, min_ngram_size=1, max_draft_tokens=300, num_model_steps=3)
    assert_state_equal(run_kernel(state, **attrs), ref_hybrid_mtp_ngram(state, **attrs))


def test_hybrid_mtp_ngram_cuda_clamps_history_indices():
    """CUDA cannot raise: input_ids_len outside [0, S_in] and step_idx outside [0, S - 1] are clamped for
    the history (the CPU op raises); the budget still uses the given step_idx."""
    state = literal_state([[1, 2, 3, 1, 2], [5, 5], [4, 6, 4]], [[3], [], [6]], [[1, 2], [5, 5], [4, 6]],
                          width=5, prompt_width=5, history_width=4)
    state["input_ids_len"][:] = [99, -4, 3]  # slot 0 -> 5 (h = [1 2 3 1 2 | 3 | 1 2]), slot 1 -> 0
    state["step_idx"][:] = [1, -2, 50]  # slot 1 -> 0 (h = [5 5]), slot 2 -> 3 (pre_ids width 4)
    state["max_dec_len"][:] = [100, 100, 100]
    state["pre_ids"][2, 1:] = [6, 4, 6]
    attrs = dict(max_ngram_size=3, min_ngram_size=1, max_draft_tokens=4, num_model_steps=2)
    got = run_kernel(state, **attrs)
    assert_state_equal(got, ref_hybrid_mtp_ngram(state, **attrs, strict=False))
    # slot 0: [3 1 2] at 2 -> [3 1]; slot 1: h = [5 5]: [5] at 0 -> the one token after it; slot 2:
    # h = [4 6 4 6 4 6 | 4 6]: [6 4 6] most recently at 3 -> [4 6]
    np.testing.assert_array_equal(got["draft_tokens"], [[500, 1, 2, 3, 1], [501, 5, 5, 5, -1], [502, 4, 6, 4, 6]])


@pytest.mark.parametrize("change", [
    dict(max_ngram_size=0, min_ngram_size=0), dict(min_ngram_size=4), dict(max_ngram_size=65),
    dict(max_draft_tokens=-1), dict(num_model_steps=-1), dict(num_model_steps=5),
], ids=["zero_ngram", "min_above_max", "max_ngram_above_64", "negative_max_draft_tokens",
        "negative_num_model_steps", "num_model_steps_past_width"])
def test_hybrid_mtp_ngram_cuda_launcher_rejects_bad_sizes(change):
    _, state, attrs, _ = HYBRID_CASES[0]
    with pytest.raises(RuntimeError, match="returned cudaError"):
        run_kernel(state, **{**attrs, **change})
