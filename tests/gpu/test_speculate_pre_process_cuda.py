"""speculate_pre_process CUDA kernel: the reference over the shared grid, bit-identity with the three
unfused kernels (also on bad values, where the kernels stay in bounds), any bsz and capacity."""


import numpy as np
import pytest

from reference.cases.step_batch import make_step_batch
from tests.gpu.harness import launcher, ptr, require_gpu, stream
from tests.pre_process_cases import (  # noqa: F401  written once, also run on the Paddle op
    DRAFTS, ENCODER, INPUT_IDS, LENS, test_speculate_pre_process_matches_reference,
    test_speculate_pre_process_non_speculative_literal, test_speculate_pre_process_three_slots_literal,
    test_speculate_pre_process_zero_slots, test_speculate_pre_process_zero_tokens,
)
from reference.speculate_pre_process import ref_speculate_pre_process

cp = require_gpu()
launch = launcher("specworker_speculate_pre_process_launch")
padding_offset = launcher("specworker_get_padding_offset_launch")
seq_lens_out = launcher("specworker_speculate_get_seq_lens_output_launch")

CANARY = -7  # outputs start as this, so an unwritten row shows
GUARD = 64  # entries past each output's end that the kernel must leave untouched
OUTPUTS = ("ids_remove_padding", "batch_id_per_token", "cu_seqlens_q", "cu_seqlens_k", "cu_seqlens_q_output",
           "batch_id_per_token_output", "real_output_token_num", "seq_lens_output")


def _device(a, dtype):
    return None if a is None else cp.asarray(np.asarray(a, dtype=dtype))


def _outputs(sizes):
    """CANARY-filled device buffers with GUARD extra entries, keyed by output name."""
    return {name: cp.full(n + GUARD, CANARY, dtype=cp.int64 if name == "ids_remove_padding" else cp.int32)
            for name, n in sizes.items()}


def _cut(bufs, sizes):
    """Host copies cut to size, after checking the GUARD entries."""
    out = {}
    for name, buf in bufs.items():
        a = cp.asnumpy(buf)
        assert (a[sizes[name]:] == CANARY).all(), f"{name} written past its end"
        out[name] = a[: sizes[name]]
    return out


def _sizes(bsz, cap, out_cap):
    return dict(ids_remove_padding=cap, batch_id_per_token=cap, cu_seqlens_q=bsz + 1, cu_seqlens_k=bsz + 1,
                cu_seqlens_q_output=bsz + 1, batch_id_per_token_output=out_cap, real_output_token_num=1,
                seq_lens_output=bsz)


def run_fused(input_ids, lens, drafts, encoder, cap):
    d_ids, d_lens = _device(input_ids, np.int64), _device(np.reshape(lens, -1), np.int32)
    d_drafts, d_enc = _device(drafts, np.int64), _device(np.reshape(encoder, -1), np.int32)
    bsz = d_lens.shape[0]
    width = 1 if d_drafts is None else d_drafts.shape[1]
    sizes = _sizes(bsz, cap, bsz * width)
    o = _outputs(sizes)
    launch(ptr(d_ids), d_ids.shape[1], ptr(d_lens), ptr(d_drafts), 0 if d_drafts is None else width, ptr(d_enc),
           bsz, cap, bsz * width, *(ptr(o[n]) for n in OUTPUTS), stream())
    return _cut(o, sizes)


@pytest.fixture
def run():
    """The backend of the shared tests (tests/pre_process_cases.py): the fused kernel, GUARD checked
    (it has no seq_lens_decoder input)."""
    return lambda cap, input_ids, lens, drafts, encoder, decoder=None: run_fused(input_ids, lens, drafts, encoder, cap)


def run_unfused(input_ids, lens, drafts, encoder, cap):
    """The three unfused kernels, as pre_process_unfused calls them."""
    d_ids, d_lens = _device(input_ids, np.int64), _device(np.reshape(lens, -1), np.int32)
    d_drafts, d_enc = _device(drafts, np.int64), _device(np.reshape(encoder, -1), np.int32)
    bsz = d_lens.shape[0]
    width = 1 if d_drafts is None else d_drafts.shape[1]
    sizes = _sizes(bsz, cap, bsz * width)
    o = _outputs(sizes)
    spare = cp.full(bsz + 1 + GUARD, CANARY, dtype=cp.int32)  # the output side's discarded cu_seqlens_k
    padding_offset(ptr(d_ids), d_ids.shape[1], ptr(d_lens), ptr(d_drafts), 0 if d_drafts is None else width,
                   ptr(None if d_drafts is None else d_enc), bsz, cap, ptr(o["ids_remove_padding"]),
                   ptr(o["batch_id_per_token"]), ptr(o["cu_seqlens_q"]), ptr(o["cu_seqlens_k"]), stream())
    seq_lens_out(ptr(d_lens), ptr(d_enc), bsz, ptr(o["seq_lens_output"]), stream())
    padding_offset(None, 0, ptr(o["seq_lens_output"]), None, 0, None, bsz, bsz * width, None,
                   ptr(o["batch_id_per_token_output"]), ptr(o["cu_seqlens_q_output"]), ptr(spare), stream())
    o["real_output_token_num"][0] = o["cu_seqlens_q_output"][bsz]
    return _cut(o, sizes)


def assert_same(got, want):
    for name in OUTPUTS:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def assert_matches_reference(input_ids, lens, drafts, encoder, cap):
    want = ref_speculate_pre_process(cap, input_ids, lens, drafts, encoder, np.zeros(len(lens), np.int32))
    assert_same(run_fused(input_ids, lens, drafts, encoder, cap), want)


@pytest.mark.parametrize("bsz", [1, 2, 31, 255, 256, 257, 513, 1024, 4999, 9000])
def test_speculate_pre_process_cuda_any_bsz_equals_unfused(bsz):
    """One ordinary launch for any bsz: past 256 slots every thread scans a run of several slots
    (9000: runs of 36); no block waits for another, so nothing needs co-residency."""
    batch = make_step_batch(np.random.default_rng(bsz), bsz, "mixed", max_model_len=16)
    args = (batch.input_ids, batch.seq_lens_this_time, batch.draft_tokens, batch.seq_lens_encoder,
            batch.token_num + 300)
    assert_same(run_fused(*args), run_unfused(*args))


@pytest.mark.parametrize("bsz", [1, 257, 1024])
def test_speculate_pre_process_cuda_matches_reference_at_tile_edges(bsz):
    batch = make_step_batch(np.random.default_rng(bsz + 1), bsz, "stopped")
    assert_matches_reference(batch.input_ids, batch.seq_lens_this_time, batch.draft_tokens,
                             batch.seq_lens_encoder, batch.token_num + 1)


def test_speculate_pre_process_cuda_long_prefill_spans_blocks():
    """Slots of up to 6000 rows: a slot covers whole 256-row windows (marked at position 0)."""
    batch = make_step_batch(np.random.default_rng(7), 5, "all_prefill", max_model_len=6000)
    assert_matches_reference(batch.input_ids, batch.seq_lens_this_time, batch.draft_tokens,
                             batch.seq_lens_encoder, batch.token_num + 3)


def test_speculate_pre_process_cuda_large_capacity_fills_minus_one():
    """Capacity far above T: the grid comes from the capacity, every extra block only fills -1."""
    out = run_fused(INPUT_IDS, LENS, DRAFTS, ENCODER, 100_000)
    np.testing.assert_array_equal(out["ids_remove_padding"][:8], [7, 8, 9, 30, 31, 32, 33, -1])
    assert (out["ids_remove_padding"][7:] == -1).all() and (out["batch_id_per_token"][7:] == -1).all()


# The CPU op raises for these values; the kernel cannot, and must behave like the unfused kernels.
@pytest.mark.parametrize(
    "lens, encoder, cap",
    [
        ([3, -4, 4], ENCODER, 8),  # negative length counts as 0 and gets no output row
        ([3, 0, 4], ENCODER, 5),  # T = 7 > capacity 5: rows past 5 dropped, cu keeps the full sums
        ([5, 0, 6], [0, 0, 6], 12),  # decode slot reads past D = 3, prefill past S = 4: token -1
        ([3, 0, 3], [0, 0, -2], 6),  # negative E_b: a decode slot for packing, one logit row
    ],
)
def test_speculate_pre_process_cuda_bad_values_equal_unfused(lens, encoder, cap):
    assert_same(run_fused(INPUT_IDS, lens, DRAFTS, encoder, cap), run_unfused(INPUT_IDS, lens, DRAFTS, encoder, cap))


def test_speculate_pre_process_cuda_non_speculative_overflow_equals_unfused():
    """Without drafts a decode slot feeding 3 tokens needs 3 logit rows of a capacity of 3 * 1."""
    args = (INPUT_IDS, [3, 2, 1], None, [0, 0, 0], 6)
    assert_same(run_fused(*args), run_unfused(*args))


@pytest.mark.parametrize("case", ["negative_bsz", "negative_capacity", "negative_output_capacity",
                                  "no_encoder", "no_input_ids", "no_output_index"])
def test_speculate_pre_process_cuda_launcher_rejects_invalid_arguments(case):
    lens, enc = cp.asarray([1, 1], dtype=cp.int32), cp.asarray([0, 0], dtype=cp.int32)
    input_ids, drafts = cp.ones((2, 3), dtype=cp.int64), cp.ones((2, 2), dtype=cp.int64)
    o = _outputs(_sizes(2, 4, 4))
    a = dict(input_ids=input_ids, enc=enc, bsz=2, cap=4, out_cap=4, batch_out=o["batch_id_per_token_output"])
    a.update({"negative_bsz": dict(bsz=-1), "negative_capacity": dict(cap=-1),
              "negative_output_capacity": dict(out_cap=-1), "no_encoder": dict(enc=None),
              "no_input_ids": dict(input_ids=None), "no_output_index": dict(batch_out=None)}[case])
    bufs = [ptr(o[n]) for n in OUTPUTS]
    bufs[OUTPUTS.index("batch_id_per_token_output")] = ptr(a["batch_out"])
    with pytest.raises(RuntimeError, match="returned cudaError 1$"):  # cudaErrorInvalidValue
        launch(ptr(a["input_ids"]), 3, ptr(lens), ptr(drafts), 2, ptr(a["enc"]), a["bsz"], a["cap"], a["out_cap"],
               *bufs, stream())
