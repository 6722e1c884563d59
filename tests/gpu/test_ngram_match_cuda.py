
import numpy as np
import pytest

from tests.gpu.harness import launcher, ptr, require_gpu, state_to_device, stream, unguarded
from tests.ngram_case_tests import (  # noqa: F401  written once, also run on the Paddle op
    WRITES, assert_state_equal, test_ngram_match_literal, test_ngram_match_matches_reference,
)
from tests.ngram_cases import KINDS, NGRAM_CASES, NGRAM_SIZES, literal_state, make_ngram_state
from reference.ngram_match import ref_ngram_match

cp = require_gpu()
launch = launcher("specworker_ngram_match_launch")

ARGS = ("input_ids", "input_ids_len", "pre_ids", "step_idx", "draft_token_num", "draft_tokens", "seq_lens_this_time",
        "seq_lens_encoder", "seq_lens_decoder", "max_dec_len", "is_block_step")


def run_kernel(state: dict, *, max_ngram_size: int, max_draft_tokens: int, min_ngram_size: int = 1,
               bsz: int | None = None) -> dict:
    """Runs the kernel on a numpy state (is_block_step absent = NULL); returns the new state."""
    bsz = len(state["seq_lens_this_time"]) if bsz is None else bsz
    d = state_to_device(cp, state, ARGS, WRITES, matrices=("input_ids", "pre_ids", "draft_tokens"))
    launch(*(ptr(d[k]) for k in ARGS), bsz, state["input_ids"].shape[1], state["pre_ids"].shape[1],
           state["draft_tokens"].shape[1], max_ngram_size, max_draft_tokens, min_ngram_size, stream())
    out = dict(state)
    for k in WRITES:
        out[k] = unguarded(cp, d[k], k)
    return out


@pytest.fixture
def run():
    """The backend of the shared tests (tests/ngram_case_tests.py): the kernel, GUARD checked."""
    return run_kernel


@pytest.fixture(params=[(bsz, kind, bsz * 100 + KINDS.index(kind) * 10 + j, sizes, j, j % 2 == 0, False)
                        for bsz in (0, 1, 3, 17, 255, 256, 257, 1024) for kind in KINDS
                        for j, sizes in enumerate(NGRAM_SIZES)],
                ids=lambda p: f"{p[0]}-{p[1]}-{p[3][0]}-{p[3][1]}")
def reference_grid(request):
    """(bsz, kind, seed, sizes, extra_rows, with_paused, column): batch sizes around the block edges x kind
    x n-gram sizes, with 0-3 rows past bsz and paused slots in every other one."""
    return request.param


@pytest.mark.parametrize("history_width, vocab", [(300, 3), (1000, 40), (5000, 2), (9000, 1000)])
def test_ngram_match_cuda_long_histories(history_width, vocab):
    """Histories longer than the 256 threads of a block (several positions per thread), small vocabularies
    (many ties between positions: the most recent must win) and n up to 64."""
    for j, (max_n, min_n) in enumerate(((3, 1), (64, 1), (8, 4))):
        state = make_ngram_state(np.random.default_rng(history_width + j), 33, "repetitive" if j == 1 else "mixed",
                                 num_draft=5, prompt_width=history_width // 2, history_width=history_width,
                                 vocab=vocab)
        attrs = dict(max_ngram_size=max_n, min_ngram_size=min_n, max_draft_tokens=5)
        assert_state_equal(run_kernel(state, **attrs), ref_ngram_match(state, **attrs))


@pytest.mark.parametrize("num_draft, max_draft_tokens", [(0, 0), (1, 1), (5, 5), (5, 2), (300, 300)])
def test_ngram_match_cuda_draft_widths(num_draft, max_draft_tokens):
    """D = 1, and D > 256 (threads stride over the draft row too)."""
    for seed, kind in enumerate(("mixed", "repetitive", "near_max_dec_len")):
        state = make_ngram_state(np.random.default_rng(seed), 17, kind, num_draft=num_draft, extra_rows=2,
                                 history_width=400, prompt_width=400, vocab=2)
        state["draft_token_num"][:] = np.maximum(state["draft_token_num"], num_draft // 2)
        state["max_dec_len"] = state["step_idx"] + 1 + num_draft
        attrs = dict(max_ngram_size=3, max_draft_tokens=max_draft_tokens)
        assert_state_equal(run_kernel(state, **attrs), ref_ngram_match(state, **attrs))


def test_ngram_match_cuda_clamps_history_indices():
    """CUDA cannot raise: input_ids_len outside [0, S_in] and step_idx outside [0, S - 1] are clamped for
    the history (the CPU op raises); the budget still uses the given step_idx."""
    state = literal_state([[1, 2, 3, 1, 2], [5, 5], [4, 6, 4]], [[3], [], [6]], prompt_width=5, history_width=4)
    state["input_ids_len"][:] = [99, -4, 3]  # slot 0 -> 5 (h = [1 2 3 1 2 | 3]), slot 1 -> 0
    state["step_idx"][:] = [1, -2, 50]  # slot 1 -> 0 (h = []), slot 2 -> 3 (pre_ids width 4)
    state["max_dec_len"][:] = [100, 100, 100]
    state["pre_ids"][2, 1:] = [6, 4, 6]
    got = run_kernel(state, max_ngram_size=3, max_draft_tokens=3)
    want = ref_ngram_match(state, max_ngram_size=3, max_draft_tokens=3, strict=False)
    assert_state_equal(got, want)
    np.testing.assert_array_equal(got["draft_tokens"][:2], [[500, 1, 2, 3], [501, -1, -1, -1]])
    # slot 2: h = [4 6 4 6 4 6], n = 3 [6 4 6] at 1 -> [4 6]
    np.testing.assert_array_equal(got["draft_tokens"][2], [502, 4, 6, -1])


@pytest.mark.parametrize("change", [
    dict(bsz=-1), dict(max_ngram_size=0, min_ngram_size=0), dict(min_ngram_size=4), dict(max_ngram_size=65),
    dict(max_draft_tokens=-1),
], ids=["negative_bsz", "zero_ngram", "min_above_max", "max_ngram_above_64", "negative_max_draft_tokens"])
def test_ngram_match_cuda_launcher_rejects_bad_sizes(change):
    _, state, attrs, _ = NGRAM_CASES[0]
    with pytest.raises(RuntimeError, match="returned cudaError"):
        run_kernel(state, **{**attrs, **change})
