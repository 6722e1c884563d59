import numpy as np
import paddle
import pytest

from specworker.model_executor.ops import (EagleHiddenStatesOutput, draft_model_preprocess, eagle_get_hidden_states,
                                           get_padding_offset)
from tests.eagle_hidden_cases import (  # noqa: F401  written once, also run on the CUDA kernel
    per_slot, rows, test_eagle_get_hidden_states_bsz_256_structured, test_eagle_get_hidden_states_bsz_one_literal,
    test_eagle_get_hidden_states_matches_reference, test_eagle_get_hidden_states_three_slots_literal,
)
from reference.cases.mtp_round_state import all_round_cases, make_round_state, make_target_hidden
from reference.draft_model_preprocess import INPUT_KEYS, ref_draft_model_preprocess

PER_SLOT = ("seq_lens_this_time", "seq_lens_encoder", "seq_lens_decoder", "stop_flags", "accept_num",
            "target_model_seq_lens_this_time", "target_model_seq_lens_encoder")


def run_op(hidden, st, dtype=None):
    """Runs the op on numpy hidden states (cast to dtype, e.g. 'bfloat16') and a state dict;
    returns (out as float32 numpy, output_token_num numpy, out dtype)."""
    x = paddle.to_tensor(hidden)
    if dtype is not None:
        x = x.astype(dtype)
    res = eagle_get_hidden_states(x, *(paddle.to_tensor(st[k]) for k in PER_SLOT), 1)
    assert isinstance(res, EagleHiddenStatesOutput)
    out, count = res
    assert out.shape == x.shape and count.shape == [1] and count.dtype == paddle.int32
    return out.astype("float32").numpy(), count.numpy(), out.dtype


@pytest.fixture
def run():
    """The backend of the shared tests (tests/eagle_hidden_cases.py): the Paddle op (float32 rows)."""
    return lambda hidden, st: run_op(hidden, st)[:2]


@pytest.fixture(params=[(bsz, kind, seed, H, "float32") for bsz, kind, seed in all_round_cases() for H in (1, 111)],
                ids=lambda p: "-".join(map(str, p[:4])))
def reference_grid(request):
    """(bsz, kind, seed, H, dtype): every batch size x kind, H = 1 and 111, float32."""
    return request.param


def test_eagle_get_hidden_states_decode_keeps_first_accepted_rows():
    """Decode slots keep the first accept_num rows of their target rows, not the last."""
    h = rows(8)
    out, count, _ = run_op(h, per_slot([1, 3], [0, 0], [1, 3], [4, 4]))
    np.testing.assert_array_equal(out[:4], h[[0, 4, 5, 6]])
    np.testing.assert_array_equal(out[4:], 0)
    np.testing.assert_array_equal(count, [4])


def test_eagle_get_hidden_states_just_finished_prefill_keeps_every_prompt_row():
    """The target prefilled 5 prompt tokens (L_t = 5) and verify emitted its first token
    (accept_num 1); after draft_model_preprocess the draft prefill has E = L = 5, so all 5 rows
    go through, row j -> j, not accept_num = 1 of them."""
    h = rows(6)
    out, count, _ = run_op(h, per_slot([5, 1], [5, 0], [1, 1], [5, 1]))
    np.testing.assert_array_equal(out, h)
    np.testing.assert_array_equal(count, [6])


def test_eagle_get_hidden_states_stopped_slots_consume_target_rows():
    h = rows(6)
    out, count, _ = run_op(h, per_slot([0, 2, 0], [0, 0, 0], [2, 2, 1], [2, 3, 1]))
    np.testing.assert_array_equal(out[:2], h[2:4])
    np.testing.assert_array_equal(out[2:], 0)
    np.testing.assert_array_equal(count, [2])


def test_eagle_get_hidden_states_all_stopped():
    out, count, _ = run_op(rows(4), per_slot([0, 0, 0], [0, 3, 0], [1, 1, 0], [2, 2, 0]))
    np.testing.assert_array_equal(out, 0)
    np.testing.assert_array_equal(count, [0])


def test_eagle_get_hidden_states_padding_rows_are_zero():
    """T past sum(target L) (CUDA-graph padding): those rows are never read."""
    h = rows(10)
    out, count, _ = run_op(h, per_slot([2], [0], [2], [3]))
    np.testing.assert_array_equal(out[:2], h[:2])
    np.testing.assert_array_equal(out[2:], 0)
    np.testing.assert_array_equal(count, [2])


def test_eagle_get_hidden_states_zero_rows_and_slots():
    out, count, _ = run_op(np.zeros((0, 4), np.float32), per_slot([0, 0], [0, 0], [0, 0], [0, 0]))
    assert out.shape == (0, 4)
    np.testing.assert_array_equal(count, [0])
    out, count, _ = run_op(rows(2), per_slot([], [], [], []))
    np.testing.assert_array_equal(out, 0)
    np.testing.assert_array_equal(count, [0])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_eagle_get_hidden_states_half_dtypes_copy_exactly(dtype):
    h = np.random.default_rng(3).standard_normal((7, 111)).astype(np.float32)
    st = per_slot([3, 2, 0], [3, 0, 0], [1, 2, 1], [3, 2, 2])
    out, count, out_dtype = run_op(h, st, dtype)
    assert out_dtype == getattr(paddle, dtype)
    want = paddle.to_tensor(h).astype(dtype).astype("float32").numpy()
    np.testing.assert_array_equal(out[:5], want[:5])
    np.testing.assert_array_equal(out[5:], 0)
    np.testing.assert_array_equal(count, [5])


def test_eagle_get_hidden_states_accepts_fastdeploy_column_shape():
    st = {k: v.reshape(-1, 1) for k, v in per_slot([3, 2, 0], [3, 0, 0], [1, 2, 1], [3, 2, 2]).items()}
    out, count, _ = run_op(rows(7), st)
    np.testing.assert_array_equal(out[:5], rows(5))
    np.testing.assert_array_equal(count, [5])


def preprocessed(seed, bsz, kind, H, pad_rows=3, dtype=np.float32):
    """A random round after draft_model_preprocess (the reference) and the target's hidden rows."""
    rng = np.random.default_rng(seed)
    st = ref_draft_model_preprocess(make_round_state(rng, bsz, kind), 1)
    return st, make_target_hidden(rng, st, H, dtype, pad_rows)


@pytest.mark.parametrize("bsz, kind, seed", all_round_cases()[::2])
def test_eagle_get_hidden_states_aligned_with_draft_ids(bsz, kind, seed):
    """After the real draft_model_preprocess, output row t is the target hidden state paired with
    the draft's packed token t (get_padding_offset over the draft's lengths): for draft slot b at
    local index i, target row cu_t[b] + i. The count equals the draft's token count."""
    rng = np.random.default_rng(seed)
    st = make_round_state(rng, bsz, kind)
    tensors = {k: None if st.get(k) is None else paddle.to_tensor(st[k]) for k in INPUT_KEYS}
    draft_model_preprocess(*(tensors[k] for k in INPUT_KEYS[:-1]), 1,
                           target_model_is_block_step=tensors["target_model_is_block_step"])
    draft = {k: tensors[k].numpy() for k in ("seq_lens_this_time", "seq_lens_encoder", "input_ids", "draft_tokens")}
    st.update(draft)
    h = make_target_hidden(rng, st, 5, pad_rows=2)
    out, count, _ = run_op(h, st)
    T_draft = int(draft["seq_lens_this_time"].sum())
    np.testing.assert_array_equal(count, [T_draft])
    ids, batch_id, cu_q, _ = get_padding_offset(tensors["input_ids"], tensors["seq_lens_this_time"],
                                                tensors["draft_tokens"], tensors["seq_lens_encoder"], T_draft)
    batch_id, cu_q = batch_id.numpy(), cu_q.numpy()
    cu_t = np.concatenate([[0], np.cumsum(st["target_model_seq_lens_this_time"])])
    for t in range(T_draft):
        b = batch_id[t]
        np.testing.assert_array_equal(out[t], h[cu_t[b] + t - cu_q[b]], err_msg=f"draft token {t} (slot {b})")


def _bad(name, hidden, change, match):
    return pytest.param(hidden, change, match, id=name)


GOOD = per_slot([3, 2, 0], [3, 0, 0], [1, 2, 1], [3, 2, 2])
BAD_INPUTS = [
    _bad("input_int32", np.zeros((7, 3), np.int32), {}, r"input has dtype int32, expected float32, float16 or bfloat16"),
    _bad("input_float64", np.zeros((7, 3), np.float64), {}, r"input has dtype float64, expected float32"),
    _bad("input_1d", np.zeros(7, np.float32), {}, r"input has shape \[7\], expected a 2-D tensor"),
    _bad("lens_int64", rows(7), {"seq_lens_this_time": np.array([3, 2, 0], np.int64)},
         r"seq_lens_this_time has dtype int64, expected int32"),
    _bad("lens_not_per_slot", rows(7), {"seq_lens_this_time": np.zeros((1, 3), np.int32)},
         r"seq_lens_this_time has shape \[1, 3\], expected a per-slot tensor"),
    _bad("encoder_wrong_slots", rows(7), {"seq_lens_encoder": np.zeros(2, np.int32)},
         r"seq_lens_encoder has 2 slots \(shape \[2\]\), expected bsz = 3"),
    _bad("decoder_int64", rows(7), {"seq_lens_decoder": np.zeros(3, np.int64)},
         r"seq_lens_decoder has dtype int64, expected int32"),
    _bad("stop_flags_float32", rows(7), {"stop_flags": np.zeros(3, np.float32)}, r"stop_flags has dtype float32, expected bool"),
    _bad("accept_num_wrong_slots", rows(7), {"accept_num": np.zeros(4, np.int32)},
         r"accept_num has 4 slots \(shape \[4\]\), expected bsz = 3"),
    _bad("target_lens_int64", rows(7), {"target_model_seq_lens_this_time": np.zeros(3, np.int64)},
         r"target_model_seq_lens_this_time has dtype int64, expected int32"),
    _bad("target_encoder_wrong_slots", rows(7), {"target_model_seq_lens_encoder": np.zeros(1, np.int32)},
         r"target_model_seq_lens_encoder has 1 slots \(shape \[1\]\), expected bsz = 3"),
    _bad("negative_draft_len", rows(7), {"seq_lens_this_time": np.array([3, -2, 0], np.int32)},
         r"seq_lens_this_time\[1\] = -2, expected >= 0"),
    _bad("negative_target_len", rows(7), {"target_model_seq_lens_this_time": np.array([3, 2, -2], np.int32)},
         r"target_model_seq_lens_this_time\[2\] = -2, expected >= 0"),
    _bad("keeps_more_than_target_ran", rows(7), {"accept_num": np.array([1, 3, 1], np.int32),
                                                 "seq_lens_this_time": np.array([3, 3, 0], np.int32)},
         r"slot 1 keeps 3 target rows \(seq_lens_encoder = 0, accept_num = 3\) but the target ran "
         r"target_model_seq_lens_this_time = 2"),
    _bad("prefill_longer_than_target_rows", rows(7), {"seq_lens_encoder": np.array([4, 0, 0], np.int32),
                                                      "seq_lens_this_time": np.array([4, 2, 0], np.int32)},
         r"slot 0 keeps 4 target rows \(seq_lens_encoder = 4, accept_num = 1\) but the target ran"),
    _bad("not_aligned_with_draft_tokens", rows(7), {"seq_lens_this_time": np.array([4, 2, 0], np.int32)},
         r"slot 0 keeps 3 target rows but the draft feeds seq_lens_this_time = 4 tokens"),
    _bad("target_rows_exceed_input", rows(6), {},
         r"sum\(target_model_seq_lens_this_time\) = 7 exceeds the rows of input T = 6"),
]


@pytest.mark.parametrize("hidden, change, match", BAD_INPUTS)
def test_eagle_get_hidden_states_rejects_bad_input(hidden, change, match):
    with pytest.raises(ValueError, match=match):
        run_op(hidden, dict(GOOD, **change))


def test_eagle_get_hidden_states_rejects_non_int_attribute():
    with pytest.raises(TypeError, match="actual_draft_token_num must be a host int, got float"):
        eagle_get_hidden_states(paddle.to_tensor(rows(7)), *(paddle.to_tensor(GOOD[k]) for k in PER_SLOT), 1.0)
