
import numpy as np
import pytest

from tests.gpu.harness import launcher, ptr, require_gpu, stream
from tests.draft_preprocess_cases import (  # noqa: F401  written once, also run on the Paddle op
    assert_states_equal, literal_state, test_draft_model_preprocess_bsz_256_structured,
    test_draft_model_preprocess_bsz_one_decode_literal, test_draft_model_preprocess_matches_reference,
    test_draft_model_preprocess_three_slots_literal,
)
from reference.cases.mtp_round_state import make_round_state
from reference.draft_model_preprocess import UPDATED_KEYS, ref_draft_model_preprocess

cp = require_gpu()
launch = launcher("specworker_draft_model_preprocess_launch")

GUARD = 64  # elements past each buffer that the kernel must leave untouched
ROW_BUFFERS = ("draft_tokens", "input_ids", "pre_ids", "accept_tokens", "target_model_draft_tokens")
READ_ONLY = ("accept_tokens", "accept_num", "target_model_seq_lens_decoder", "target_model_step_idx",
             "target_model_stop_flags", "max_dec_len", "target_model_is_block_step")


CANARY = -77
BOOL_CANARY = 0x5A  # bool buffers get a byte the kernel never stores (it writes 0 or 1)


def _guarded(a):
    """Device copy of a with GUARD canary elements after it; returns (whole buffer, view of a)."""
    a = np.ascontiguousarray(a)
    if a.dtype == bool:
        whole = cp.asarray(np.concatenate([a.view(np.uint8).reshape(-1), np.full(GUARD, BOOL_CANARY, np.uint8)]))
        return whole, whole[: a.size].view(cp.bool_).reshape(a.shape)
    whole = cp.asarray(np.concatenate([a.reshape(-1), np.full(GUARD, CANARY, a.dtype)]))
    return whole, whole[: a.size].reshape(a.shape)


def run_kernel(state, num_model_steps=1, is_splitwise_prefill=False, truncate_first_token=True, bsz=None):
    """Runs the kernel on a numpy state dict; returns the new state (numpy) and checks that no
    buffer was written past its end and that read-only inputs kept their values."""
    bsz = int(np.asarray(state["seq_lens_this_time"]).size) if bsz is None else bsz
    dev = {k: _guarded(v) for k, v in state.items() if v is not None and k != "target_model_seq_lens_this_time"}
    d = {k: v[1] for k, v in dev.items()}
    width = {k: int(np.asarray(state[k]).shape[1]) for k in ROW_BUFFERS}
    launch(ptr(d["draft_tokens"]), width["draft_tokens"], ptr(d["input_ids"]), width["input_ids"],
           ptr(d["stop_flags"]), ptr(d["seq_lens_this_time"]), ptr(d["seq_lens_encoder"]), ptr(d["seq_lens_decoder"]),
           ptr(d["step_idx"]), ptr(d["not_need_stop"]), ptr(d["pre_ids"]), width["pre_ids"],
           ptr(d["accept_tokens"]), width["accept_tokens"], ptr(d["accept_num"]),
           ptr(d["target_model_seq_lens_decoder"]), ptr(d["target_model_step_idx"]),
           ptr(d["target_model_stop_flags"]), ptr(d["max_dec_len"]), ptr(d["target_model_draft_tokens"]),
           width["target_model_draft_tokens"], ptr(d.get("target_model_is_block_step")), bsz, num_model_steps,
           int(is_splitwise_prefill), int(truncate_first_token), stream())
    new = dict(state)
    for k, (whole, view) in dev.items():
        canary = cp.asnumpy(whole)[-GUARD:]
        assert (canary == (BOOL_CANARY if canary.dtype == np.uint8 else CANARY)).all(), f"{k} written past its end"
        new[k] = cp.asnumpy(view)
        if k in READ_ONLY:
            np.testing.assert_array_equal(new[k], state[k], err_msg=f"read-only {k} was written")
    return new


@pytest.fixture
def run():
    """The backend of the shared tests (tests/draft_preprocess_cases.py): the kernel, GUARD and
    read-only inputs checked."""
    return run_kernel


def test_draft_model_preprocess_cuda_just_finished_prefill_and_append_form():
    st = literal_state()
    st["target_model_stop_flags"][2] = True
    got = run_kernel(st)
    np.testing.assert_array_equal(got["input_ids"][0], [11, 12, 13, 21, -1])
    np.testing.assert_array_equal(got["seq_lens_this_time"][0], 4)
    got = run_kernel(st, truncate_first_token=False)
    np.testing.assert_array_equal(got["input_ids"][0], [11, 12, 13, -1, 21])
    np.testing.assert_array_equal(got["seq_lens_this_time"][0], 5)
    np.testing.assert_array_equal(got["step_idx"][0], 0)


def test_draft_model_preprocess_cuda_paused_and_near_max_are_skipped():
    st = literal_state()
    st["target_model_is_block_step"] = np.array([False, True, False])  # slot 1 paused, stop flag unset
    st["max_dec_len"][0] = 2  # slot 0: step_idx_t 1 + 1 >= 2
    got = run_kernel(st)
    np.testing.assert_array_equal(got["stop_flags"], [True, True, True])
    for k in ("seq_lens_this_time", "seq_lens_encoder", "seq_lens_decoder", "step_idx"):
        np.testing.assert_array_equal(got[k], [0, 0, 0], err_msg=k)
    np.testing.assert_array_equal(got["not_need_stop"], [False])
    for k in ("draft_tokens", "input_ids", "pre_ids"):
        np.testing.assert_array_equal(got[k], st[k], err_msg=k)
    got = run_kernel(st, is_splitwise_prefill=True)  # no length limit on a PD prefill node
    np.testing.assert_array_equal(got["stop_flags"], [False, True, True])
    np.testing.assert_array_equal(got["not_need_stop"], [True])


def test_draft_model_preprocess_cuda_all_stopped_and_zero_slots():
    st = literal_state()
    st["target_model_stop_flags"][:] = True
    st["not_need_stop"][:] = True
    got = run_kernel(st)
    np.testing.assert_array_equal(got["not_need_stop"], [False])
    np.testing.assert_array_equal(got["target_model_draft_tokens"][:, 1:], -1)
    st["not_need_stop"][:] = True
    got = run_kernel(st, bsz=0)  # bsz = 0: nothing touched, not_need_stop cleared
    np.testing.assert_array_equal(got["not_need_stop"], [False])
    assert_states_equal(got, st, keys=[k for k in UPDATED_KEYS if k != "not_need_stop"])


@pytest.mark.parametrize("with_block_step", [True, False])
@pytest.mark.parametrize("bsz", [1, 2, 255, 256, 257, 1023, 1024, 1025, 4999, 5000])
def test_draft_model_preprocess_cuda_any_bsz(bsz, with_block_step):
    """One launch for any bsz (a thread per slot over many blocks), around the block edges; the
    per-block not_need_stop reduction is checked with a single running slot at the end."""
    st = make_round_state(np.random.default_rng(bsz), bsz, "mixed", with_block_step=with_block_step)
    assert_states_equal(run_kernel(st), ref_draft_model_preprocess(st, 1))
    st = make_round_state(np.random.default_rng(bsz + 1), bsz, "all_stopped", with_block_step=with_block_step)
    st["target_model_stop_flags"][-1] = False
    st["seq_lens_encoder"][-1] = 0
    st["target_model_step_idx"][-1] = st["accept_num"][-1] = 1
    st["max_dec_len"][-1] = 100
    got = run_kernel(st)
    np.testing.assert_array_equal(got["not_need_stop"], [True])
    assert_states_equal(got, ref_draft_model_preprocess(st, 1))


# The CPU op raises for these values; the kernel cannot, so it must stay in bounds.
def test_draft_model_preprocess_cuda_clamps_accept_num():
    st = literal_state()
    st["accept_num"][1] = 9  # past Da = Dd = 3: clamped to 3
    got = run_kernel(st)
    np.testing.assert_array_equal(got["seq_lens_this_time"][1], 3)
    np.testing.assert_array_equal(got["draft_tokens"][1], [31, 32, -1])
    np.testing.assert_array_equal(got["seq_lens_decoder"][1], 7)
    np.testing.assert_array_equal(got["pre_ids"][1], [-1, -1, 31, 32, -1, -1, -1, -1])
    st["accept_num"][1] = -4  # negative: n = 0
    got = run_kernel(st)
    np.testing.assert_array_equal(got["seq_lens_this_time"][1], 0)
    np.testing.assert_array_equal(got["draft_tokens"][1], [30, 7, 8])
    np.testing.assert_array_equal(got["step_idx"][1], 5)


def test_draft_model_preprocess_cuda_skips_out_of_range_writes():
    st = literal_state()
    st["target_model_step_idx"][1] = 1  # pre_ids positions -1, 0: only 0 is written
    st["seq_lens_encoder"][0] = 6  # first token position 5 >= S = 5: not written
    got = run_kernel(st)
    np.testing.assert_array_equal(got["pre_ids"][1], [32] + [-1] * 7)
    np.testing.assert_array_equal(got["input_ids"][0], st["input_ids"][0])
    np.testing.assert_array_equal(got["seq_lens_this_time"][0], 6)
    np.testing.assert_array_equal(got["pre_ids"][0, 0], 21)


@pytest.mark.parametrize("case", ["negative_bsz", "zero_model_steps", "null_not_need_stop", "null_lens",
                                  "null_pre_ids_with_width", "negative_width"])
def test_draft_model_preprocess_cuda_launcher_rejects_invalid_arguments(case):
    st = literal_state()
    d = {k: cp.asarray(v) for k, v in st.items() if v is not None}
    args = dict(bsz=3, steps=1, nns=d["not_need_stop"], lens=d["seq_lens_this_time"], pre_ids=d["pre_ids"], S=5)
    args.update({
        "negative_bsz": dict(bsz=-1),
        "zero_model_steps": dict(steps=0),
        "null_not_need_stop": dict(nns=None),
        "null_lens": dict(lens=None),
        "null_pre_ids_with_width": dict(pre_ids=None),
        "negative_width": dict(S=-1),
    }[case])
    with pytest.raises(RuntimeError, match="returned cudaError 1$"):  # cudaErrorInvalidValue
        launch(ptr(d["draft_tokens"]), 3, ptr(d["input_ids"]), args["S"], ptr(d["stop_flags"]), ptr(args["lens"]),
               ptr(d["seq_lens_encoder"]), ptr(d["seq_lens_decoder"]), ptr(d["step_idx"]), ptr(args["nns"]),
               ptr(args["pre_ids"]), 8, ptr(d["accept_tokens"]), 3, ptr(d["accept_num"]),
               ptr(d["target_model_seq_lens_decoder"]), ptr(d["target_model_step_idx"]),
               ptr(d["target_model_stop_flags"]), ptr(d["max_dec_len"]), ptr(d["target_model_draft_tokens"]), 3,
               None, args["bsz"], args["steps"], 0, 1, stream())
