"""rebuild_padding on CPU: literal three-slot cases, the randomized grid against ref_rebuild_padding,
docs/spec.md §7 regression tests (defects 5, 7, 8, 9) and the argument/index checks. Exact equality
throughout: the op only copies rows.
"""

import numpy as np
import paddle
import pytest

from specworker.model_executor.ops import rebuild_padding
from reference.cases.step_batch import make_step_batch, pack_output_index, seq_lens_output
from tests.rebuild_padding_cases import (  # noqa: F401  written once, also run on the CUDA kernel
    DTYPES, NUM_DRAFT, TMP_OUT, cu_seqlens, test_rebuild_padding_decode_rows_use_local_index,
    test_rebuild_padding_fails_with_padding_offsets_as_batch_ids, test_rebuild_padding_matches_reference,
    test_rebuild_padding_rejects_unpaired_output_index, test_rebuild_padding_zero_tokens,
)
from reference.rebuild_padding import ref_rebuild_padding


def _i32(x) -> paddle.Tensor:
    return paddle.to_tensor(np.asarray(x, dtype=np.int32))


def _hidden(x: np.ndarray, dtype: str) -> paddle.Tensor:
    return paddle.to_tensor(np.asarray(x, dtype=np.float32)).astype(dtype)


def _np(t: paddle.Tensor) -> np.ndarray:
    return t.astype("float32").numpy()


def _run(tmp_out, lens, dec, enc, batch_ids=None, cu_out=None, first=None, enable_logprob=False,
         dtype="float32", cu_q=None):
    """Calls the op on numpy inputs; returns (out, first_token_out after the call) as float32 numpy."""
    first_t = None if first is None else _hidden(first, dtype)
    out = rebuild_padding(
        _hidden(tmp_out, dtype), _i32(cu_seqlens(lens) if cu_q is None else cu_q), _i32(lens), _i32(dec), _i32(enc),
        None if batch_ids is None else _i32(batch_ids), None if cu_out is None else _i32(cu_out),
        first_t, enable_logprob)
    return _np(out), None if first_t is None else _np(first_t)


def _random_hidden(rng, rows: int, hidden: int) -> np.ndarray:
    # Quarter-integers in [-32, 32): exact in float16 and bfloat16, so every dtype compares exactly.
    return (rng.integers(-128, 128, size=(rows, hidden)) / 4).astype(np.float32)


def _dirty_allocator(nbytes: int) -> None:
    """Frees a block of large non-zero floats, so an output row the op forgets to zero shows up."""
    junk = paddle.full([nbytes // 4], 3.0e38, dtype="float32")
    del junk


def run_op(tmp_out, lens, dec, enc, batch_ids=None, cu_out=None, first=None, enable_logprob=False, dtype="float32"):
    """The shared tests' call: _run after freeing a dirty block of the output's size."""
    out_rows = np.asarray(lens).reshape(-1).shape[0] if batch_ids is None else len(batch_ids)
    _dirty_allocator(max(out_rows * np.asarray(tmp_out).shape[1] * 4, 4))
    return _run(tmp_out, lens, dec, enc, batch_ids, cu_out, first, enable_logprob, dtype)


def _refuses(call, match, zero_rows=None, unlike=None):
    """The op refuses an invalid output index by raising before any write."""
    with pytest.raises(ValueError, match=match):
        call()


@pytest.fixture
def run():
    """The backend of the shared tests (tests/rebuild_padding_cases.py): the Paddle op."""
    return run_op


@pytest.fixture
def hidden_rows():
    return lambda rng, shape, dtype: _random_hidden(rng, *shape)


@pytest.fixture
def refuses():
    return _refuses


# --- literal three-slot cases -------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_rebuild_padding_literal_without_output_index(dtype):
    # slot 0 prefill L = E = 3 (tmp_out rows 0..2), slot 1 idle, slot 2 decode L = 2 (tmp_out rows 3..4).
    out, _ = _run(TMP_OUT, lens=[3, 0, 2], dec=[0, 0, 9], enc=[3, 0, 0], dtype=dtype)
    np.testing.assert_array_equal(out, [[20, 21], [0, 0], [30, 31]])


@pytest.mark.parametrize("dtype", DTYPES)
def test_rebuild_padding_literal_with_output_index(dtype):
    # slot 0 decode L = 3 (tmp_out rows 0..2, O = 3), slot 1 prefill L = E = 2 (tmp_out rows 3..4, O = 1),
    # slot 2 idle; capacity 6 > T_out = 4.
    out, _ = _run(TMP_OUT, lens=[3, 2, 0], dec=[6, 0, 0], enc=[0, 2, 0],
                  batch_ids=[0, 0, 0, 1, -1, -1], cu_out=[0, 3, 4, 4], dtype=dtype)
    np.testing.assert_array_equal(out, [[0, 1], [10, 11], [20, 21], [40, 41], [0, 0], [0, 0]])


@pytest.mark.parametrize("with_index", [False, True])
def test_rebuild_padding_first_token_out_with_enable_logprob(with_index):
    # slot 0 prefill E = 3: first_token_out[0] <- row 1 (before the last prompt row 2);
    # slot 1 prefill E = 1: no earlier prompt row this step -> zeros; slot 2 decode: unchanged.
    lens, dec, enc = [3, 1, 1], [0, 5, 8], [3, 1, 0]
    index = dict(batch_ids=[0, 1, 2, -1], cu_out=[0, 1, 2, 3]) if with_index else {}
    first = np.full((3, 2), -7, dtype=np.float32)
    out, first_after = _run(TMP_OUT, lens, dec, enc, first=first, enable_logprob=True, **index)
    np.testing.assert_array_equal(first_after, [[10, 11], [0, 0], [-7, -7]])
    np.testing.assert_array_equal(out[:3], [[20, 21], [30, 31], [40, 41]])
    _, untouched = _run(TMP_OUT, lens, dec, enc, first=first, enable_logprob=False, **index)
    np.testing.assert_array_equal(untouched, first)


def test_rebuild_padding_first_token_out_is_updated_in_place():
    first = paddle.full([1, 2], -7.0, dtype="float32")
    rebuild_padding(paddle.to_tensor(TMP_OUT[:3]), _i32([0, 3]), _i32([3]), _i32([0]), _i32([3]),
                    first_token_out=first, enable_logprob=True)
    np.testing.assert_array_equal(first.numpy(), [[10, 11]])


def test_rebuild_padding_accepts_fastdeploy_column_shape():
    col = lambda x: paddle.to_tensor(np.asarray(x, dtype=np.int32).reshape(-1, 1))  # noqa: E731
    out = rebuild_padding(paddle.to_tensor(TMP_OUT), _i32([0, 3, 3, 5]), col([3, 0, 2]), col([0, 0, 9]),
                          col([3, 0, 0]))
    np.testing.assert_array_equal(out.numpy(), [[20, 21], [0, 0], [30, 31]])


@pytest.mark.parametrize("with_index", [False, True])
def test_rebuild_padding_skips_slot_without_prompt_or_cache(with_index):
    """FastDeploy skips a slot with L_b > 0 but E_b == 0 and seq_lens_decoder == 0: zero row."""
    index = dict(batch_ids=[0, 1], cu_out=[0, 1, 2]) if with_index else {}
    out, _ = _run(TMP_OUT[:2], lens=[1, 1], dec=[0, 4], enc=[0, 0], **index)
    np.testing.assert_array_equal(out, [[0, 0], [10, 11]])


@pytest.mark.parametrize("with_index", [False, True])
def test_rebuild_padding_prefill_row_follows_seq_lens_encoder(with_index):
    """The prefill row is cu_seqlens_q[b] + E_b - 1 (docs/spec.md §4.4), not the slot's last token: with
    E_0 = 2 < L_0 = 3 it is row 1. (The random grid always has E_b == L_b on prefill slots.)"""
    index = dict(batch_ids=[0, 1], cu_out=[0, 1, 2]) if with_index else {}
    first = np.full((2, 2), -7, dtype=np.float32)
    out, first_after = _run(TMP_OUT[:4], lens=[3, 1], dec=[0, 5], enc=[2, 0], first=first, enable_logprob=True,
                            **index)
    np.testing.assert_array_equal(out, [[10, 11], [30, 31]])
    np.testing.assert_array_equal(first_after, [[0, 1], [-7, -7]])


# --- randomized grid ------------------------------------------------------------------------------

def _grid_inputs(bsz, kind, seed, hidden, with_index):
    rng = np.random.default_rng(seed)
    batch = make_step_batch(rng, bsz, kind, num_draft=NUM_DRAFT)
    tmp_out = _random_hidden(rng, batch.token_num, hidden)
    index = {}
    if with_index:
        capacity = bsz * (NUM_DRAFT + 1)  # docs/spec.md §4.3: N * D rows, >= T_out
        batch_ids, cu_out = pack_output_index(seq_lens_output(batch.seq_lens_this_time, batch.seq_lens_encoder),
                                              capacity)
        index = dict(batch_ids=batch_ids, cu_out=cu_out)
    return batch, tmp_out, index


def _check_against_reference(batch, tmp_out, index, dtype, first=None, enable_logprob=False):
    args = (batch.seq_lens_this_time, batch.seq_lens_decoder, batch.seq_lens_encoder)
    out, first_after = _run(tmp_out, *args, first=first, enable_logprob=enable_logprob, dtype=dtype, **index)
    want, want_first = ref_rebuild_padding(tmp_out, cu_seqlens(batch.seq_lens_this_time), *args,
                                           index.get("batch_ids"), index.get("cu_out"), first, enable_logprob)
    np.testing.assert_array_equal(out, want)
    if first is not None:
        np.testing.assert_array_equal(first_after, want_first)


@pytest.mark.parametrize("hidden", [111, 7168])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_index", [False, True], ids=["per_slot", "output_index"])
def test_rebuild_padding_matches_reference_wide_rows(hidden, dtype, with_index):
    batch, tmp_out, index = _grid_inputs(17, "mixed", 7, hidden, with_index)
    _check_against_reference(batch, tmp_out, index, dtype)


def test_rebuild_padding_rows_past_output_tokens_are_zero():
    """capacity > T_out: the [capacity, H] output has exact zeros after row T_out."""
    batch, tmp_out, index = _grid_inputs(17, "all_decode", 3, 64, with_index=True)
    t_out = int(index["cu_out"][-1])
    assert index["batch_ids"].shape[0] > t_out + 8
    _dirty_allocator(index["batch_ids"].shape[0] * 64 * 4)
    out, _ = _run(tmp_out, batch.seq_lens_this_time, batch.seq_lens_decoder, batch.seq_lens_encoder, **index)
    assert out.shape == (index["batch_ids"].shape[0], 64)
    np.testing.assert_array_equal(out[t_out:], 0)
    assert np.all(np.abs(out[:t_out]).sum(axis=1) > 0), "rows before T_out hold data"


# --- docs/spec.md §7 regression tests --------------------------------------------------------------------

def test_output_index_fixture_is_prefix_sum_and_slot_ids():
    """docs/spec.md §7 defect 7: the seed's fixtures built cu_seqlens_q_output from a cumsum of an [N, 1]
    tensor (a nested list [[2], [4], ...]) and batch_id_per_token_output as arange(N) * 2, so the
    kernel was tested against an index that meant nothing. pack_output_index must give the 1-D
    [bsz + 1] exclusive prefix sum and per-row slot ids; checked against literals, then used."""
    batch_ids, cu_out = pack_output_index(np.array([3, 1, 0], dtype=np.int32), capacity=6)
    assert batch_ids.dtype == np.int32 and batch_ids.shape == (6,)
    assert cu_out.dtype == np.int32 and cu_out.shape == (4,)
    np.testing.assert_array_equal(batch_ids, [0, 0, 0, 1, -1, -1])
    np.testing.assert_array_equal(cu_out, [0, 3, 4, 4])
    out, _ = _run(TMP_OUT, lens=[3, 2, 0], dec=[6, 0, 0], enc=[0, 2, 0], batch_ids=batch_ids, cu_out=cu_out)
    np.testing.assert_array_equal(out, [[0, 1], [10, 11], [20, 21], [40, 41], [0, 0], [0, 0]])


def test_cu_seqlens_q_output_not_from_blank_lengths():
    """docs/spec.md §7 defect 9: the seed's fixture built cu_seqlens_q_output as concat([0],
    cumsum(S - L)[:-1]): old output_cum_offsets, [bsz] entries of padding instead of row starts.
    That exact form is rejected by shape; with a bsz + 1-th entry added, row starts of slots 1
    and 2 point past their rows (here [0, 6, 13, 18] for S = 8) and the op rejects the rows."""
    lens, dec, enc = [2, 1, 3], [4, 4, 4], [0, 0, 0]
    tmp_out = np.arange(6 * 2, dtype=np.float32).reshape(6, 2)
    batch_ids, cu_out = pack_output_index(seq_lens_output(lens, enc))
    blank = 8 - np.asarray(lens)
    seed_cu = np.concatenate([[0], np.cumsum(blank[:-1])]).astype(np.int32)
    with pytest.raises(ValueError, match=r"cu_seqlens_q_output has shape \[3\], expected \[bsz \+ 1\] = \[4\]"):
        _run(tmp_out, lens, dec, enc, batch_ids=batch_ids, cu_out=seed_cu)
    blank_cu = np.concatenate([[0], np.cumsum(blank)]).astype(np.int32)
    np.testing.assert_array_equal(blank_cu, [0, 6, 13, 18])
    with pytest.raises(ValueError, match=r"output row 2 has batch id 1 but slot 1's rows are .* = \[6, 13\)"):
        _run(tmp_out, lens, dec, enc, batch_ids=batch_ids, cu_out=blank_cu)
    out, _ = _run(tmp_out, lens, dec, enc, batch_ids=batch_ids, cu_out=cu_out)  # positive control
    np.testing.assert_array_equal(out, tmp_out)


def test_rebuild_padding_rejects_column_cu_seqlens_q_output():
    """docs/spec.md §7 defect 6: the seed allocated cu_seqlens_q_output as [N + 1, 1]; ours is 1-D [bsz + 1]."""
    with pytest.raises(ValueError, match=r"cu_seqlens_q_output has shape \[4, 1\], expected \[bsz \+ 1\]"):
        rebuild_padding(paddle.to_tensor(TMP_OUT), _i32([0, 3, 5, 5]), _i32([3, 2, 0]), _i32([6, 0, 0]),
                        _i32([0, 2, 0]), _i32([0, 0, 0, 1]), _i32([[0], [3], [4], [4]]))


# --- argument and index checks ------------------------------------------------------------------

# Three slots over TMP_OUT: decode L = 3, prefill L = E = 2, idle; valid output index below.
_LENS, _DEC, _ENC = [3, 2, 0], [6, 0, 0], [0, 2, 0]
_IDS, _CU_OUT = [0, 0, 0, 1, -1, -1], [0, 3, 4, 4]


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(batch_ids=[0, 0, 3, 1, -1, -1]),
         r"batch_id_per_token_output\[2\] = 3, expected -1 or a slot in \[0, bsz = 3\)"),
        (dict(batch_ids=[0, 0, 0, -2, -1, -1]), r"batch_id_per_token_output\[3\] = -2, expected -1 or a slot"),
        (dict(lens=[3, 2, -1], batch_ids=None, cu_out=None), r"seq_len_this_time\[2\] = -1, expected >= 0"),
        (dict(enc=[-1, 2, 0]), r"seq_lens_encoder\[0\] = -1, expected >= 0"),
        (dict(enc=[0, 3, 0]), r"seq_lens_encoder\[1\] = 3 exceeds seq_len_this_time\[1\] = 2"),
        (dict(cu_q=[0, 4, 5, 5]), r"slot 1 owns tmp_out rows .* = \[4, 6\), outside tmp_out's \[0, 5\)"),
        (dict(cu_q=[-1, 3, 5, 5]), r"slot 0 owns tmp_out rows .* = \[-1, 2\)"),
        (dict(batch_ids=[0, 0, 0, 0, 1, -1], cu_out=[0, 4, 5, 5]),
         r"output row 3 is local index 3 of decode slot 0, expected < seq_len_this_time\[0\] = 3"),
        (dict(cu_out=[0, 2, 4, 4]), r"output row 2 has batch id 0 but slot 0's rows are .* = \[0, 2\)"),
    ],
)
def test_rebuild_padding_rejects_out_of_range_index(change, match):
    args = dict(tmp_out=TMP_OUT, lens=_LENS, dec=_DEC, enc=_ENC, batch_ids=_IDS, cu_out=_CU_OUT)
    args.update(change)
    with pytest.raises(ValueError, match=match):
        _run(**args)


def test_rebuild_padding_error_leaves_first_token_out_unchanged():
    """Every row is checked before any write: a bad row after a prefill row changes nothing."""
    first = np.full((3, 2), -7, dtype=np.float32)
    first_t = paddle.to_tensor(first)
    with pytest.raises(ValueError, match=r"batch_id_per_token_output\[2\] = 9"):
        rebuild_padding(paddle.to_tensor(TMP_OUT), _i32([0, 2, 5, 5]), _i32([2, 3, 0]), _i32([0, 0, 0]),
                        _i32([2, 3, 0]), _i32([0, 1, 9]), _i32([0, 1, 2, 2]), first_t, True)
    np.testing.assert_array_equal(first_t.numpy(), first)


def _call_with(**override):
    args = dict(tmp_out=paddle.to_tensor(TMP_OUT), cu_seqlens_q=_i32([0, 3, 5, 5]), seq_len_this_time=_i32(_LENS),
                seq_lens_decoder=_i32(_DEC), seq_lens_encoder=_i32(_ENC))
    args.update(override)
    return rebuild_padding(**args)


@pytest.mark.parametrize(
    "override, match",
    [
        (dict(tmp_out=paddle.to_tensor(TMP_OUT.astype(np.int32))),
         r"tmp_out has dtype int32, expected float32, float16 or bfloat16"),
        (dict(tmp_out=paddle.to_tensor(TMP_OUT.reshape(5, 2, 1))),
         r"tmp_out has shape \[5, 2, 1\], expected a 2-D tensor"),
        (dict(cu_seqlens_q=_i32([0, 3, 5])), r"cu_seqlens_q has shape \[3\], expected \[bsz \+ 1\] = \[4\]"),
        (dict(cu_seqlens_q=paddle.to_tensor([0, 3, 5, 5], dtype="int64")),
         r"cu_seqlens_q has dtype int64, expected int32"),
        (dict(seq_lens_encoder=_i32([0, 2])), r"seq_lens_encoder has 2 slots \(shape \[2\]\), expected bsz = 3"),
        (dict(seq_lens_decoder=paddle.to_tensor([6, 0, 0], dtype="int64")), r"seq_lens_decoder has dtype int64"),
        (dict(batch_id_per_token_output=_i32([[0, 0, 0, 1]]), cu_seqlens_q_output=_i32(_CU_OUT)),
         r"batch_id_per_token_output has shape \[1, 4\], expected a 1-D tensor"),
        (dict(enable_logprob=True), r"enable_logprob=True needs first_token_out"),
        (dict(first_token_out=paddle.zeros([3, 2], dtype="float16")),
         r"first_token_out has dtype float16, expected tmp_out's float32"),
        (dict(first_token_out=paddle.zeros([3, 3])),
         r"first_token_out has shape \[3, 3\], expected \[bsz, H\] = \[3, 2\]"),
    ],
)
def test_rebuild_padding_rejects_bad_arguments(override, match):
    with pytest.raises(ValueError, match=match):
        _call_with(**override)
