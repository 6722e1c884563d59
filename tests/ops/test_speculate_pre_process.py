"""speculate_pre_process (CPU op): literal cases, the reference over the shared randomized grid,
equality with the three unfused ops, and argument errors."""

import numpy as np
import paddle
import pytest

from specworker.model_executor import ops
from specworker.model_executor.ops import SpeculatePreProcessOutput, speculate_pre_process
from reference.cases.step_batch import all_cases, make_step_batch, pack_output_index, seq_lens_output
from tests.pre_process_cases import (  # noqa: F401  written once, also run on the CUDA kernel
    DRAFTS, ENCODER, INPUT_IDS, LENS, test_speculate_pre_process_matches_reference,
    test_speculate_pre_process_non_speculative_literal, test_speculate_pre_process_three_slots_literal,
    test_speculate_pre_process_zero_slots, test_speculate_pre_process_zero_tokens,
)

OUTPUTS = SpeculatePreProcessOutput._fields


def tensor(x, dtype):
    """paddle tensor of x; a numpy array keeps its own dtype (so tests can pass a wrong one)."""
    return None if x is None else paddle.to_tensor(x if isinstance(x, np.ndarray) else np.asarray(x, dtype=dtype))


def run_op(token_num_cpu, input_ids, lens, drafts, encoder, decoder=None):
    """Calls the op on numpy/list inputs; returns a dict of numpy outputs."""
    decoder = np.zeros(len(np.reshape(lens, -1)), np.int32) if decoder is None else decoder
    out = speculate_pre_process(token_num_cpu, tensor(input_ids, np.int64), tensor(lens, np.int32),
                                tensor(drafts, np.int64), tensor(encoder, np.int32), tensor(decoder, np.int32))
    assert isinstance(out, SpeculatePreProcessOutput)
    return {name: getattr(out, name).numpy() for name in OUTPUTS}


@pytest.fixture
def run():
    """The backend of the shared tests (tests/pre_process_cases.py): the Paddle op."""
    return run_op


def test_speculate_pre_process_fastdeploy_exact_token_case_literal():
    """FastDeploy's test_speculate_pre_process exact case: decode slot of 3, prefill chunk of 2."""
    out = run_op(5, [[100, 101, 102, 103, 104], [200, 201, 202, 203, 204]], [3, 2],
              [[10, 11, 12, 13], [20, 21, 22, 23]], [0, 5])
    np.testing.assert_array_equal(out["ids_remove_padding"], [10, 11, 12, 200, 201])
    np.testing.assert_array_equal(out["batch_id_per_token"], [0, 0, 0, 1, 1])
    np.testing.assert_array_equal(out["cu_seqlens_q"], [0, 3, 5])
    np.testing.assert_array_equal(out["real_output_token_num"], [4])
    np.testing.assert_array_equal(out["batch_id_per_token_output"], [0, 0, 0, 1, -1, -1, -1, -1])


@pytest.mark.parametrize("bsz, kind, seed", all_cases())
def test_speculate_pre_process_output_side_is_its_definition(bsz, kind, seed):
    """Output side against docs/spec.md §7 item 7's definition (slot ids repeated O_b times, 1-D prefix sum)."""
    batch = make_step_batch(np.random.default_rng(seed), bsz, kind)
    out = run_op(batch.token_num, batch.input_ids, batch.seq_lens_this_time, batch.draft_tokens,
              batch.seq_lens_encoder)
    rows = seq_lens_output(batch.seq_lens_this_time, batch.seq_lens_encoder)
    batch_ids, cu = pack_output_index(rows, capacity=bsz * batch.draft_tokens.shape[1])
    np.testing.assert_array_equal(out["seq_lens_output"], rows)
    np.testing.assert_array_equal(out["batch_id_per_token_output"], batch_ids)
    np.testing.assert_array_equal(out["cu_seqlens_q_output"], cu)
    np.testing.assert_array_equal(out["real_output_token_num"], [rows.sum()])


@pytest.mark.parametrize("speculative", [True, False], ids=["spec", "nonspec"])
def test_speculate_pre_process_equals_unfused_ops(speculative):
    """Bit-identical to get_padding_offset + speculate_get_seq_lens_output + index-only get_padding_offset."""
    batch = make_step_batch(np.random.default_rng(21), 17, "mixed" if speculative else "len_one")
    ids, lens, enc, dec = (tensor(getattr(batch, n), None) for n in
                           ("input_ids", "seq_lens_this_time", "seq_lens_encoder", "seq_lens_decoder"))
    drafts = tensor(batch.draft_tokens, None) if speculative else None
    cap = batch.token_num + 5
    fused = speculate_pre_process(cap, ids, lens, drafts, enc, dec)
    packed = ops.get_padding_offset(ids, lens, drafts, enc if speculative else None, cap)
    rows = ops.speculate_get_seq_lens_output(lens, enc, dec)
    out_side = ops.get_padding_offset(None, rows, None, None, 17 * (batch.draft_tokens.shape[1] if speculative else 1))
    pairs = {"ids_remove_padding": packed.ids_remove_padding, "batch_id_per_token": packed.batch_id_per_token,
             "cu_seqlens_q": packed.cu_seqlens_q, "cu_seqlens_k": packed.cu_seqlens_k, "seq_lens_output": rows,
             "batch_id_per_token_output": out_side.batch_id_per_token,
             "cu_seqlens_q_output": out_side.cu_seqlens_q}
    for name, want in pairs.items():
        got = getattr(fused, name)
        assert got.dtype == want.dtype and got.shape == want.shape, name
        np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=name)
    np.testing.assert_array_equal(fused.real_output_token_num.numpy(), out_side.cu_seqlens_q.numpy()[-1:])


def test_speculate_pre_process_accepts_fastdeploy_column_shapes():
    col = [np.array(x, np.int32).reshape(3, 1) for x in (LENS, ENCODER, [5, 0, 0])]
    out = run_op(7, INPUT_IDS, col[0], DRAFTS, col[1], col[2])
    np.testing.assert_array_equal(out["cu_seqlens_q"], [0, 3, 3, 7])
    np.testing.assert_array_equal(out["seq_lens_output"], [3, 0, 1])


@pytest.mark.parametrize(
    "args, match",
    [
        (dict(lens=np.array([3, 0, 4], np.int64)), r"seq_lens_this_time has dtype int64, expected int32"),
        (dict(input_ids=np.array(INPUT_IDS, np.int32)), r"input_ids has dtype int32, expected int64"),
        (dict(drafts=[[7, 8, 9]]), r"draft_tokens has shape \[1, 3\], expected at least bsz = 3 rows"),
        (dict(encoder=[0, 0]), r"seq_lens_encoder has 2 slots \(shape \[2\]\), expected bsz = 3"),
        (dict(decoder=np.zeros(4, np.int32)), r"seq_lens_decoder has 4 slots"),
        (dict(lens=[3, -1, 4]), r"seq_lens_this_time\[1\] = -1, expected >= 0"),
        (dict(lens=[4, 0, 4]), r"seq_lens_this_time\[0\] = 4 exceeds the draft_tokens width D = 3 on decode slot 0"),
        (dict(lens=[3, 0, 5], encoder=[0, 0, 5]), r"seq_lens_this_time\[2\] = 5 exceeds the input_ids width S = 4"),
        (dict(cap=6), r"sum\(seq_lens_this_time\) = 7 exceeds token_num_cpu = 6"),
        (dict(drafts=None), r"the step needs 4 logit rows, more than the output capacity bsz \* D = 3"),
        (dict(cap=-1), r"token_num_cpu = -1, expected 0 <= token_num_cpu"),
    ],
)
def test_speculate_pre_process_rejects_bad_input(args, match):
    a = dict(cap=7, input_ids=INPUT_IDS, lens=LENS, drafts=DRAFTS, encoder=ENCODER, decoder=None)
    a.update(args)
    with pytest.raises(ValueError, match=match):
        run_op(a["cap"], a["input_ids"], a["lens"], a["drafts"], a["encoder"], a["decoder"])


def test_speculate_pre_process_rejects_host_float_capacity():
    with pytest.raises(TypeError, match="token_num_cpu must be a host int, got float"):
        run_op(7.0, INPUT_IDS, LENS, DRAFTS, ENCODER)


def test_speculate_pre_process_rejects_empty_draft_width():
    with pytest.raises(ValueError, match=r"draft_tokens has shape \[3, 0\], expected \[N, k \+ 1\]"):
        run_op(7, INPUT_IDS, [0, 0, 4], np.zeros((3, 0), np.int64), ENCODER)
