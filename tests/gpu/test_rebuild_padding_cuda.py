"""rebuild_padding's standalone CUDA kernel against ref_rebuild_padding (CuPy + ctypes, no Paddle).

Data is random bits viewed as unsigned integers of the element size (bf16 as uint16): the kernel only
copies, so exact equality is the check. Output buffers start as a poison pattern, so a row the
kernel forgets to write shows up. Index values out of range give zero rows here (the CPU op raises).
"""


import numpy as np
import pytest

from reference.cases.step_batch import make_step_batch, pack_output_index, seq_lens_output
from tests.gpu.harness import ptr, raw_launcher, require_gpu, stream
from tests.rebuild_padding_cases import (  # noqa: F401  written once, also run on the Paddle op
    test_rebuild_padding_decode_rows_use_local_index, test_rebuild_padding_fails_with_padding_offsets_as_batch_ids,
    test_rebuild_padding_matches_reference, test_rebuild_padding_rejects_unpaired_output_index,
    test_rebuild_padding_zero_tokens,
)
from reference.rebuild_padding import ref_rebuild_padding

cp = require_gpu()

CUDA_ERROR_INVALID_VALUE = 1
NUM_DRAFT = 3
# dtype name -> (numpy storage of its bits, element bytes); fp16 and bf16 share the 2-byte path.
DTYPES = {"float32": (np.uint32, 4), "float16": (np.uint16, 2), "bfloat16": (np.uint16, 2)}
POISON = 0xA5A5A5A5


def _raw_launcher():
    return raw_launcher("specworker_rebuild_padding_launch")


def _dev_i32(x):
    return None if x is None else cp.asarray(np.asarray(x, dtype=np.int32).reshape(-1))


def launch(tmp_out, cu_q, lens, dec, enc, batch_ids=None, cu_out=None, first=None, enable_logprob=False,
           elem_bytes=None, out_rows=None, tmp_out_dev=None):
    """Runs the launcher on numpy inputs. Returns (rc, out, first_token_out) as numpy arrays."""
    tmp_out = np.asarray(tmp_out)
    bsz, hidden = np.asarray(lens).reshape(-1).shape[0], tmp_out.shape[1]
    elem_bytes = elem_bytes or tmp_out.dtype.itemsize
    if out_rows is None:
        out_rows = bsz if batch_ids is None else np.asarray(batch_ids).shape[0]
    d_tmp = cp.asarray(tmp_out) if tmp_out_dev is None else tmp_out_dev
    d_out = cp.full((out_rows, hidden), POISON & np.iinfo(tmp_out.dtype).max, dtype=tmp_out.dtype)
    d_first = None if first is None else cp.asarray(first)
    ints = [_dev_i32(a) for a in (cu_q, lens, dec, enc, batch_ids, cu_out)]
    rc = _raw_launcher()(ptr(d_tmp), *map(ptr, ints), ptr(d_first), int(enable_logprob), ptr(d_out),
                         tmp_out.shape[0], bsz, out_rows, hidden, elem_bytes, stream())
    cp.cuda.get_current_stream().synchronize()
    return rc, cp.asnumpy(d_out), None if d_first is None else cp.asnumpy(d_first)


def _cu(lens):
    return np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)


def _random_bits(rng, shape, storage):
    return rng.integers(0, np.iinfo(storage).max, size=shape, dtype=storage, endpoint=True)


def _bits(a):
    return None if a is None else np.ascontiguousarray(a, np.float32).view(np.uint32)


def run_kernel(tmp_out, lens, dec, enc, batch_ids=None, cu_out=None, first=None, enable_logprob=False, dtype=None):
    """The shared tests' call: float32 rows go in as their bits (the kernel only copies) and come
    back as float32; rows of storage bits are copied with dtype's element size. A launch the
    launcher refuses raises."""
    as_float = np.asarray(tmp_out).dtype == np.float32
    if as_float:
        tmp_out, first = _bits(tmp_out), _bits(first)
    rc, out, first_after = launch(tmp_out, _cu(np.reshape(lens, -1)), lens, dec, enc, batch_ids, cu_out, first,
                                  enable_logprob, elem_bytes=DTYPES[dtype][1] if dtype else None)
    if rc != 0:
        raise RuntimeError(f"specworker_rebuild_padding_launch returned cudaError {rc}")
    if as_float:
        out, first_after = out.view(np.float32), None if first_after is None else first_after.view(np.float32)
    return out, first_after


def _refuses(call, match, zero_rows=None, unlike=None):
    """The kernel cannot raise: an unpaired output index is refused by the launcher
    (cudaErrorInvalidValue, before launching); rows with an out-of-range index come back zero."""
    if zero_rows is None:
        with pytest.raises(RuntimeError, match=f"returned cudaError {CUDA_ERROR_INVALID_VALUE}$"):
            call()
        return
    out, _ = call()
    np.testing.assert_array_equal(out[zero_rows], 0)  # out-of-range rows are zeros on the GPU
    if unlike is not None:
        assert not np.array_equal(out, unlike)


@pytest.fixture
def run():
    """The backend of the shared tests (tests/rebuild_padding_cases.py): the kernel, output poisoned."""
    return run_kernel


@pytest.fixture
def hidden_rows():
    return lambda rng, shape, dtype: _random_bits(rng, shape, DTYPES[dtype][0])


@pytest.fixture
def refuses():
    return _refuses


def _grid_inputs(bsz, kind, seed, hidden, storage, with_index, num_draft=NUM_DRAFT):
    rng = np.random.default_rng(seed)
    batch = make_step_batch(rng, bsz, kind, num_draft=num_draft)
    tmp_out = _random_bits(rng, (batch.token_num, hidden), storage)
    args = [tmp_out, _cu(batch.seq_lens_this_time), batch.seq_lens_this_time,
            batch.seq_lens_decoder, batch.seq_lens_encoder]
    if with_index:
        out_lens = seq_lens_output(batch.seq_lens_this_time, batch.seq_lens_encoder)
        args += list(pack_output_index(out_lens, bsz * (num_draft + 1)))
    else:
        args += [None, None]
    return rng, args


def _check(args, storage, elem_bytes, enable_logprob=True, tmp_out_dev=None):
    rng = np.random.default_rng(0)
    bsz, hidden = args[2].shape[0], args[0].shape[1]
    first = _random_bits(rng, (bsz, hidden), storage) if enable_logprob else None
    rc, out, first_after = launch(*args, first=first, enable_logprob=enable_logprob, elem_bytes=elem_bytes,
                                  tmp_out_dev=tmp_out_dev)
    assert rc == 0
    want, want_first = ref_rebuild_padding(*args, first, enable_logprob)
    np.testing.assert_array_equal(out, want)
    if enable_logprob:
        np.testing.assert_array_equal(first_after, want_first)


# Row sizes picking each pack width: 16 B (8 x fp16, 7168 x bf16), 8 B (12 x fp16 = 24 B),
# 4 B (6 x fp16 = 12 B), one element (111: odd, H = 1).
@pytest.mark.parametrize("hidden", [1, 6, 8, 12, 111, 7168])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("with_index", [False, True], ids=["per_slot", "output_index"])
def test_rebuild_padding_cuda_row_widths(hidden, dtype, with_index):
    storage, elem_bytes = DTYPES[dtype]
    _, args = _grid_inputs(17, "mixed", 11, hidden, storage, with_index)
    _check(args, storage, elem_bytes)


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_rebuild_padding_cuda_misaligned_tmp_out_falls_back(dtype):
    """A tmp_out that starts one element past a 16-byte boundary must not take the 16-byte path."""
    storage, elem_bytes = DTYPES[dtype]
    _, args = _grid_inputs(17, "mixed", 12, 64, storage, with_index=True)
    flat = cp.zeros(args[0].size + 1, dtype=storage)
    flat[1:] = cp.asarray(args[0].reshape(-1))
    _check(args, storage, elem_bytes, tmp_out_dev=flat[1:].reshape(args[0].shape))


@pytest.mark.parametrize("with_index", [False, True], ids=["per_slot", "output_index"])
def test_rebuild_padding_cuda_thousands_of_rows(with_index):
    # 1024 decode slots of up to 4 query tokens: up to 4096 output rows of H = 7168 bf16.
    _, args = _grid_inputs(1024, "all_decode", 5, 7168, np.uint16, with_index)
    _check(args, np.uint16, 2, enable_logprob=False)


# Rows of TMP_OUT name their source: row t is [10 t, 10 t + 1].
TMP_OUT = np.array([[0, 1], [10, 11], [20, 21], [30, 31], [40, 41], [50, 51]], dtype=np.uint32)


def test_rebuild_padding_cuda_rejects_bad_launch_arguments():
    base = (TMP_OUT[:5], [0, 2, 3, 3], [2, 1, 0], [4, 4, 0], [0, 0, 0])
    assert launch(*base, enable_logprob=True)[0] == CUDA_ERROR_INVALID_VALUE  # no first_token_out
    assert launch(*base, out_rows=4)[0] == CUDA_ERROR_INVALID_VALUE  # per-slot branch needs out_rows == bsz
    assert launch(*base, elem_bytes=3)[0] == CUDA_ERROR_INVALID_VALUE


def test_rebuild_padding_cuda_cu_seqlens_q_output_not_from_blank_lengths():
    """docs/spec.md §7 defect 9: cu_seqlens_q_output from cumulative S - L_b ([0, 6, 13, 18] for S = 8)
    puts slot 1's and 2's rows out of their range: those rows come back zero, not as expected."""
    lens, dec, enc = [2, 1, 3], [4, 4, 4], [0, 0, 0]
    batch_ids, _ = pack_output_index(seq_lens_output(lens, enc))
    rc, out, _ = launch(TMP_OUT, _cu(lens), lens, dec, enc, batch_ids, np.array([0, 6, 13, 18], np.int32))
    assert rc == 0
    assert not np.array_equal(out, TMP_OUT)
    np.testing.assert_array_equal(out[2:], 0)


# Three slots over TMP_OUT[:5]: decode L = 3, prefill L = E = 2, idle; valid rows come from [0, 1, 2, 4, -, -].
_VALID = dict(cu_q=[0, 3, 5, 5], lens=[3, 2, 0], dec=[6, 0, 0], enc=[0, 2, 0],
              batch_ids=[0, 0, 0, 1, -1, -1], cu_out=[0, 3, 4, 4])


@pytest.mark.parametrize(
    "change, sources",  # sources: the tmp_out row of each output row, None for a zero row
    [
        (dict(batch_ids=[0, 0, 3, 1, -1, -1]), [0, 1, None, 4, None, None]),  # batch id past bsz
        (dict(batch_ids=[0, 0, 0, -2, -1, -1]), [0, 1, 2, None, None, None]),  # batch id below -1
        (dict(enc=[0, 3, 0]), [0, 1, 2, None, None, None]),  # E_1 > L_1
        (dict(cu_q=[0, 4, 5, 5]), [0, 1, 2, None, None, None]),  # slot 1's rows [4, 6) run past T = 5
        (dict(cu_q=[-1, 3, 5, 5]), [None, None, None, 4, None, None]),  # slot 0 starts before row 0
        (dict(batch_ids=[0, 0, 0, 0, 1, -1], cu_out=[0, 4, 5, 5]), [0, 1, 2, None, 4, None]),  # local 3 >= L_0
        (dict(cu_out=[0, 2, 4, 4]), [0, 1, None, 4, None, None]),  # row 2 outside slot 0's rows [0, 2)
    ],
)
def test_rebuild_padding_cuda_out_of_range_rows_are_zero(change, sources):
    """Where the CPU op raises, the kernel writes zeros for the offending rows and the rest as usual."""
    a = dict(_VALID, **change)
    rc, out, _ = launch(TMP_OUT[:5], a["cu_q"], a["lens"], a["dec"], a["enc"], a["batch_ids"], a["cu_out"])
    assert rc == 0
    want = np.stack([np.zeros(2, np.uint32) if src is None else TMP_OUT[src] for src in sources])
    np.testing.assert_array_equal(out, want)
