"""CUDA kernel of speculate_get_token_penalty_multi_scores vs the numpy reference (CuPy + ctypes).

Same cases as tests/ops (literal three slots, the randomized grid, the lossless property, shared
history without drafts) plus what only the kernel has: T_out in the thousands, V = 151936, the
hash-table overflow fallback, misaligned and odd-sized rows, float16/bfloat16, CUDA-graph capture
and the bounds checks that replace the CPU op's errors.
"""

import ctypes

import numpy as np
import pytest

from reference.cases.step_batch import all_cases, pack_output_index
from tests.gpu.harness import launcher, ptr, raw_launcher, require_gpu, stream
from tests.penalty_case_tests import (  # noqa: F401  written once, also run on the Paddle op
    TOL, from_bf16_bits, rounded, to_bf16_bits, test_penalty_row_i_equals_nonspeculative_with_drafts_appended,
    test_speculate_get_token_penalty_multi_scores_half_precision_matches_reference,
    test_speculate_get_token_penalty_multi_scores_matches_reference,
    test_speculate_get_token_penalty_multi_scores_without_drafts_rows_share_one_history,
)
from tests.penalty_case_tests import ref as shared_ref
from tests.penalty_cases import (
    ARG_NAMES,
    EXPECTED_WITH_DRAFTS,
    EXPECTED_WITHOUT_DRAFTS,
    PenaltyCase,
    make_penalty_case,
    three_slot_case,
)
from reference.speculate_get_token_penalty_multi_scores import MASK_VALUE_FP16

cp = require_gpu()

NAME = "specworker_speculate_get_token_penalty_multi_scores_launch"
launch = launcher(NAME)
DTYPE_CODE = {"float32": 0, "float16": 1, "bfloat16": 2}
HASH_MAX_DISTINCT = 3072  # kMaxDistinct in the kernel: more distinct ids in a chunk take the range fallback
QWEN_CHUNK = 30392  # the kernel's vocab chunk for V = 151936 (5 equal chunks of <= 32768, multiple of 8)
GUARD = 64  # elements on either side of the logits that must stay untouched


def _args(case: PenaltyCase, logits_ptr, dtype: str, drafts: bool, st):
    rows, V = case.logits.shape
    dev = {n: cp.asarray(np.ascontiguousarray(getattr(case, n)).reshape(getattr(case, n).shape[0], -1))
           for n in ARG_NAMES if n != "logits"}
    draft = cp.asarray(case.draft_tokens) if drafts and case.draft_tokens is not None else None
    args = [ptr(dev["pre_ids"]), logits_ptr, DTYPE_CODE[dtype]]
    args += [ptr(dev[n]) for n in ARG_NAMES[2:] if n != "seq_lens_this_time"] + [ptr(draft)]
    args += [rows, V, case.bsz, case.pre_ids.shape[1], case.bad_tokens.shape[1],
             case.eos_token_id.reshape(-1).shape[0], 0 if draft is None else draft.shape[1], st]
    return args, (dev, draft)


def run_kernel(case: PenaltyCase, dtype: str = "float32", drafts: bool = True, offset: int = 0) -> np.ndarray:
    """Runs the kernel on a copy of case.logits placed `offset` elements into a guarded buffer;
    returns the rows as float32 and checks nothing outside them was written."""
    rows, V = case.logits.shape
    host = to_bf16_bits(case.logits) if dtype == "bfloat16" else case.logits.astype(dtype)
    fill = host.dtype.type(0x5A5A if dtype == "bfloat16" else 7)
    buf = cp.full(rows * V + offset + 2 * GUARD, fill, dtype=host.dtype)
    start = GUARD + offset
    buf[start:start + rows * V] = cp.asarray(host.reshape(-1))
    args, keep = _args(case, ctypes.c_void_p(buf.data.ptr + start * buf.itemsize), dtype, drafts, stream())
    launch(*args)
    out = cp.asnumpy(buf)
    assert (out[:start] == fill).all() and (out[start + rows * V:] == fill).all(), "write outside the logits"
    out = out[start:start + rows * V].reshape(rows, V)
    return from_bf16_bits(out) if dtype == "bfloat16" else out.astype(np.float32)


def ref(case: PenaltyCase, drafts: bool = True, **kw) -> np.ndarray:
    """The reference as the kernel behaves: a non-positive temperature that is read divides by 1."""
    kw.setdefault("nonpositive_temperature", "one")
    return shared_ref(case, drafts, **kw)


@pytest.fixture
def run():
    """The backend of the shared tests (tests/penalty_case_tests.py): the kernel, writes outside the
    logits checked."""
    return run_kernel


@pytest.fixture(params=[(bsz, kind, seed, V, drafts)
                        for bsz, kind, seed in all_cases() + [(1024, "mixed", 77), (1024, "all_decode", 78)]
                        for V in (111, 1000) for drafts in (True, False)], ids=lambda p: "-".join(map(str, p)))
def reference_grid(request):
    """(bsz, kind, seed, V, drafts): every batch size (and 1024) x kind, V = 111 and 1000, with and
    without drafts."""
    return request.param


@pytest.fixture(params=[(dtype, *c) for c in all_cases() if c[0] in (3, 17, 256) for dtype in ("float16", "bfloat16")],
                ids=lambda p: "-".join(map(str, p)))
def half_grid(request):
    """(dtype, bsz, kind, seed): 3, 17 and 256 slots x kind, float16 and bfloat16."""
    return request.param


def test_speculate_get_token_penalty_multi_scores_cuda_literal_three_slots():
    np.testing.assert_array_equal(run_kernel(three_slot_case()), EXPECTED_WITH_DRAFTS)
    np.testing.assert_array_equal(run_kernel(three_slot_case(), drafts=False), EXPECTED_WITHOUT_DRAFTS)


@pytest.mark.parametrize("bsz", [800, 1000])
def test_speculate_get_token_penalty_multi_scores_cuda_thousands_of_rows(bsz):
    """FastDeploy's min-length kernel is one block of roundup32(T_out) threads and fails above
    1024 rows; here every slot decodes 3-4 rows (T_out ~2800-4000) with min length active."""
    rng = np.random.default_rng(bsz)
    case = make_penalty_case(rng, bsz, "all_decode", vocab_size=1000, pad_rows=False)
    case = _with_out_lens(case, rng.integers(3, 5, size=bsz))
    case.min_len[:] = 10 ** 6
    assert case.logits.shape[0] >= 2000
    np.testing.assert_array_equal(run_kernel(case), ref(case))


def _with_out_lens(case: PenaltyCase, out_lens) -> PenaltyCase:
    """The case with other row counts per slot (logits redrawn, exactly T_out rows)."""
    out_lens = np.asarray(out_lens, np.int32)
    case.seq_lens_this_time = out_lens.copy()
    case.batch_id_per_token_output, case.cu_seqlens_q_output = pack_output_index(out_lens)
    rng = np.random.default_rng(int(out_lens.sum()))
    case.logits = (rng.standard_normal((int(out_lens.sum()), case.logits.shape[1])) * 4).astype(np.float32)
    return case


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_speculate_get_token_penalty_multi_scores_cuda_qwen_vocab(dtype):
    """V = 151936 (Qwen): a few slots with ~256-token histories, 1-4 rows each."""
    rng = np.random.default_rng(151936)
    case = make_penalty_case(rng, 5, "all_decode", vocab_size=151936, max_model_len=300, pad_rows=False)
    case = _with_out_lens(case, [4, 1, 3, 0, 2])
    case.logits = rounded(case.logits, dtype)
    kw = {"mask_value": MASK_VALUE_FP16} if dtype == "float16" else {}
    np.testing.assert_allclose(run_kernel(case, dtype), ref(case, **kw), **TOL[dtype])


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("V, offset", [(1001, 1), (1001, 3), (1024, 1), (8, 1), (3, 0), (32769, 1), (65537, 0),
                                       (151936, 5)])
def test_speculate_get_token_penalty_multi_scores_cuda_any_alignment_and_vocab(dtype, V, offset):
    """Rows that start off a 16-byte boundary, vocab sizes that are no multiple of the vector
    width, and vocabularies just past one or two 32768-id chunks: the scalar head/tail of each
    chunk must cover exactly the row (the guards around it stay intact)."""
    rng = np.random.default_rng(V + offset)
    case = make_penalty_case(rng, 3, "all_decode", vocab_size=V, pad_rows=False)
    case.logits = rounded(case.logits, dtype)
    case.temperatures[:] = 0.7  # every row takes the dense pass
    kw = {"mask_value": MASK_VALUE_FP16} if dtype == "float16" else {}
    np.testing.assert_allclose(run_kernel(case, dtype, offset=offset), ref(case, **kw), **TOL[dtype])


def long_history_case(rng, V: int, distinct: list[int], hist_len: int, edge_ids=(), id_range=None) -> PenaltyCase:
    """One decode slot per entry of `distinct` (4 rows, 3 drafts): hist_len history ids over
    exactly that many distinct ids (edge_ids among them, the others from id_range, each id at
    least once); the drafts repeat history ids, so every row of slot b has distinct[b] ids."""
    bsz, D = len(distinct), 4
    S = hist_len + D + 2
    edges = np.unique(np.asarray(edge_ids, np.int64))
    others = np.setdiff1d(np.arange(*(id_range or (0, V))), edges)
    pre_ids = np.full((bsz, S), -1, np.int64)
    drafts = np.zeros((bsz, D), np.int64)
    for b, n in enumerate(distinct):
        ids = np.concatenate([edges, rng.choice(others, size=n - edges.size, replace=False)])
        assert np.unique(ids).size == n
        hist = np.concatenate([ids, rng.choice(ids, size=hist_len - n)])
        rng.shuffle(hist)
        pre_ids[b, 1:hist_len + 1] = hist
        drafts[b] = rng.choice(ids, size=D)
    cur_len = np.full(bsz, hist_len, np.int64)
    batch_ids, cu = pack_output_index(np.full(bsz, D))
    f = lambda v: np.full(bsz, v, np.float32)  # noqa: E731
    return PenaltyCase(
        pre_ids=pre_ids, logits=(rng.standard_normal((bsz * D, V)) * 4).astype(np.float32),
        penalty_scores=f(1.3), frequency_scores=f(0.1), presence_scores=f(0.4), temperatures=f(0.8),
        bad_tokens=rng.integers(0, V, size=(bsz, 4)).astype(np.int64), bad_tokens_len=np.full(bsz, 4, np.int64),
        cur_len=cur_len, min_len=cur_len + 2, eos_token_id=np.array([V - 1, 0], np.int64),
        seq_lens_this_time=np.full(bsz, D, np.int32), batch_id_per_token_output=batch_ids,
        cu_seqlens_q_output=cu, draft_tokens=drafts, max_seq_len=S)


@pytest.mark.parametrize("V", [151936, 10007])
def test_speculate_get_token_penalty_multi_scores_cuda_hash_overflow_takes_exact_fallback(V):
    """Histories around the hash table's capacity per vocab chunk: 3000 distinct ids (hash),
    3072 (the most it admits), 3073 and 5000 (range fallback), 60 distinct in 6000 ids (long but
    hashed). V = 10007 is one chunk; for V = 151936 the ids are packed into [18992, 48992), across
    the chunk edge at 30392, so one chunk overflows and its neighbour does not. Ids at the
    fallback's range edges (8191, 8192) and the chunk edges are included."""
    rng = np.random.default_rng(V)
    if V == 151936:
        edges, id_range = [0, 8191, 8192, QWEN_CHUNK - 1, QWEN_CHUNK, 2 * QWEN_CHUNK, V - 1], (18992, 48992)
    else:
        edges, id_range = [0, 8191, 8192, V - 1], None
    case = long_history_case(rng, V, [3000, HASH_MAX_DISTINCT, HASH_MAX_DISTINCT + 1, 5000, 60], 6000, edges,
                             id_range)
    np.testing.assert_array_equal(run_kernel(case), ref(case))
    np.testing.assert_array_equal(run_kernel(case, drafts=False), ref(case, drafts=False))


def test_speculate_get_token_penalty_multi_scores_cuda_identity_penalty_and_unit_temperature():
    """alpha 1, beta 0, gamma 0 and temperature 1 skip the history and the dense pass: only the
    masks change the row, and nothing else moves by a bit."""
    rng = np.random.default_rng(9)
    case = make_penalty_case(rng, 17, "mixed", vocab_size=1000)
    case.penalty_scores[:] = 1
    case.frequency_scores[:] = 0
    case.presence_scores[:] = 0
    case.temperatures[:] = 1
    out = run_kernel(case)
    np.testing.assert_array_equal(out, ref(case))
    changed = out != case.logits
    assert (out[changed] == np.float32(-1e10)).all()


def test_speculate_get_token_penalty_multi_scores_cuda_bounds_checks_replace_cpu_errors():
    """Where the CPU op raises, the kernel bounds-checks: temperature <= 0 or NaN is 1, a batch
    id >= bsz leaves its row alone, cur_len past pre_ids' width clamps the history, and a row
    needing drafts past draft_tokens' width counts only the columns that exist."""
    case = three_slot_case()
    case.temperatures[[0, 2]] = [0.0, np.nan]
    np.testing.assert_array_equal(run_kernel(case), ref(case, nonpositive_temperature="one"))

    case = three_slot_case()
    case.batch_id_per_token_output[3] = 3  # == bsz
    expected = EXPECTED_WITH_DRAFTS.copy()
    expected[3] = case.logits[3]
    np.testing.assert_array_equal(run_kernel(case), expected)

    case = three_slot_case()
    case.min_len[:] = 0
    clamped = case.copy()
    case.cur_len[0] = 100
    clamped.cur_len[0] = case.pre_ids.shape[1] - 1
    np.testing.assert_array_equal(run_kernel(case), ref(clamped))

    case = three_slot_case()
    padded = case.copy()
    case.draft_tokens = case.draft_tokens[:, :2]  # row 2 needs draft_tokens[0, 1..2]
    padded.draft_tokens[:, 2] = -1
    np.testing.assert_array_equal(run_kernel(case), ref(padded))


def test_speculate_get_token_penalty_multi_scores_cuda_output_index_past_the_logits_rows():
    """GPU divergence (documented, issue 16): the CPU op raises when cu_seqlens_q_output[bsz] =
    T_out exceeds the logits rows; the kernel cannot read cu on the host, and with one block per
    logits row it never touches a row past the tensor (run_kernel's guards check no write lands
    outside): the rows that exist are penalised as usual, slot 2's row 3 simply is not there."""
    case = three_slot_case()
    case.logits = case.logits[:3]
    np.testing.assert_array_equal(run_kernel(case), EXPECTED_WITH_DRAFTS[:3])
    case = three_slot_case()
    case.logits = case.logits[:4]  # exactly T_out rows: the allowed edge
    np.testing.assert_array_equal(run_kernel(case), EXPECTED_WITH_DRAFTS[:4])


def test_speculate_get_token_penalty_multi_scores_cuda_launcher_rejects_invalid_arguments():
    case = three_slot_case()
    d = cp.asarray(case.logits)
    args, keep = _args(case, ptr(d), "float32", True, stream())
    bad_dtype = list(args)
    bad_dtype[2] = 7
    with pytest.raises(RuntimeError, match="cudaError 1"):
        launch(*bad_dtype)
    bad_vocab = list(args)
    bad_vocab[16] = 0
    with pytest.raises(RuntimeError, match="cudaError 1"):
        launch(*bad_vocab)
    np.testing.assert_array_equal(cp.asnumpy(d), case.logits)
    empty = list(args)
    empty[15] = 0  # no rows: no launch, success
    launch(*empty)


def test_speculate_get_token_penalty_multi_scores_cuda_captures_in_cuda_graph():
    """No allocation and no host sync inside the launcher: it records into a CUDA graph, and the
    replayed graph gives the literal result."""
    case = three_slot_case()
    fn = raw_launcher(NAME)
    d = cp.asarray(case.logits)
    s = cp.cuda.Stream(non_blocking=True)
    if not hasattr(s, "begin_capture"):
        pytest.skip("this CuPy has no stream capture (cupy.cuda.Stream.begin_capture)")
    args, keep = _args(case, ptr(d), "float32", True, ctypes.c_void_p(s.ptr))
    cp.cuda.get_current_stream().synchronize()
    with s:
        s.begin_capture()
        err = fn(*args)
        graph = s.end_capture()
    assert err == 0
    np.testing.assert_array_equal(cp.asnumpy(d), case.logits)  # captured, not run
    graph.launch(s)
    s.synchronize()
    np.testing.assert_array_equal(cp.asnumpy(d), EXPECTED_WITH_DRAFTS)
