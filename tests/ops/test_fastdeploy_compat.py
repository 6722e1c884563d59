"""FastDeploy's op forms of the refactor era (Feb 2026) against ours (issue 16, item 4; the table is
docs/fastdeploy_compat.md). A supported form gives exactly the outputs of our native form on
random inputs; an unsupported one fails with a TypeError naming the argument, never a crash.
"""

from __future__ import annotations

import numpy as np
import paddle
import pytest

from specworker.model_executor.ops import (draft_model_preprocess, draft_model_update, eagle_get_hidden_states,
                                           reasoning_phase_token_constraint,
                                           speculate_get_token_penalty_multi_scores, speculate_update,
                                           speculate_verify, top_p_candidates)
from reference.cases import draft_state as dc
from tests.penalty_cases import make_penalty_case
from reference.draft_model_update import STATE_KEYS
from reference.cases.post_verify_state import make_post_verify_state

SEEDS = [(bsz, seed) for seed, bsz in enumerate((1, 3, 17, 64))]


def _tensors(arrays: dict) -> dict:
    return {k: paddle.to_tensor(v) for k, v in arrays.items()}


def _numpy(tensors: dict) -> dict:
    return {k: v.numpy() for k, v in tensors.items()}


def _assert_equal(got: dict, want: dict):
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


def _starts(cu: np.ndarray) -> np.ndarray:
    """FastDeploy's [bsz] cu_seqlens_q_output: each slot's first output row (no trailing total)."""
    return np.ascontiguousarray(cu[:-1])


# --- speculate_update without stop_nums -------------------------------------------------------

UPDATE_ARGS = ("seq_lens_encoder", "seq_lens_decoder", "not_need_stop", "draft_tokens", "actual_draft_token_nums",
               "accept_tokens", "accept_num", "stop_flags", "seq_lens_this_time", "is_block_step")


@pytest.mark.parametrize("bsz, seed", SEEDS)
@pytest.mark.parametrize("form", ["positional", "keyword"])
def test_speculate_update_without_stop_nums_is_stop_nums_n(bsz, seed, form):
    state = make_post_verify_state(np.random.default_rng(seed), bsz, extra_rows=2)
    N = state["stop_flags"].shape[0]
    native, fd = _tensors(state), _tensors(state)
    speculate_update(*(native[k] for k in UPDATE_ARGS), paddle.to_tensor(np.array([N], np.int64)),
                     native["mask_rollback"])
    if form == "positional":  # FastDeploy's 10-input call
        speculate_update(*(fd[k] for k in UPDATE_ARGS))
        del native["mask_rollback"], fd["mask_rollback"]
    else:
        speculate_update(**{k: fd[k] for k in UPDATE_ARGS}, mask_rollback=fd["mask_rollback"])
    _assert_equal(_numpy(fd), _numpy(native))


# --- eagle_get_hidden_states with int32 stop_flags ---------------------------------------------


def _eagle_case(rng, bsz, H=5):
    target_len = rng.integers(0, 5, size=bsz).astype(np.int32)
    cat = rng.choice(["prefill", "decode", "stopped"], size=bsz)
    draft_len = np.zeros(bsz, np.int32)
    draft_enc = np.zeros(bsz, np.int32)
    accept = rng.integers(0, 5, size=bsz).astype(np.int32)
    for b in range(bsz):
        if target_len[b] == 0 or cat[b] == "stopped":
            continue
        if cat[b] == "prefill":
            draft_len[b] = draft_enc[b] = target_len[b]
        else:
            accept[b] = rng.integers(1, target_len[b] + 1)
            draft_len[b] = accept[b]
    hidden = rng.standard_normal((int(target_len.sum()) + 3, H)).astype(np.float32)
    stop = draft_len == 0
    rest = [draft_len, draft_enc, np.full(bsz, 9, np.int32)]
    tail = [accept, target_len, np.zeros(bsz, np.int32)]
    return hidden, rest, stop, tail


@pytest.mark.parametrize("bsz, seed", SEEDS)
@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_eagle_get_hidden_states_accepts_integer_stop_flags(bsz, seed, dtype):
    hidden, rest, stop, tail = _eagle_case(np.random.default_rng(100 + seed), bsz)
    args = [paddle.to_tensor(a) for a in [hidden, *rest]]
    tail_t = [paddle.to_tensor(a) for a in tail]
    native = eagle_get_hidden_states(*args, paddle.to_tensor(stop), *tail_t, 1)
    fd_stop = paddle.to_tensor(stop.astype(dtype))
    fd = eagle_get_hidden_states(*args, fd_stop, *tail_t, 1)
    np.testing.assert_array_equal(fd.out.numpy(), native.out.numpy())
    np.testing.assert_array_equal(fd.output_token_num.numpy(), native.output_token_num.numpy())
    np.testing.assert_array_equal(fd_stop.numpy(), stop.astype(dtype))  # the caller's tensor is not changed


# --- draft_model_update: [bsz] cu_seqlens_q_output and 2-D padded inter_next_tokens -------------


def _run_update(state, args, inter_next_tokens, cu):
    t = _tensors({k: state[k] for k in STATE_KEYS})
    draft_model_update(
        paddle.to_tensor(inter_next_tokens), t["draft_tokens"], t["pre_ids"], t["seq_lens_this_time"],
        t["seq_lens_encoder"], t["seq_lens_decoder"], t["step_idx"], paddle.to_tensor(cu), t["stop_flags"],
        t["not_need_stop"], paddle.to_tensor(args["max_dec_len"]), paddle.to_tensor(args["end_ids"]),
        t["base_model_draft_tokens"], 0, args["substep"])
    return _numpy(t)


@pytest.mark.parametrize("bsz, kind, substep, seed", dc.update_grid((1, 3, 17, 64)))
@pytest.mark.parametrize("form", ["starts", "padded_2d", "starts_and_padded_2d"])
def test_draft_model_update_fastdeploy_forms(bsz, kind, substep, seed, form):
    state, args = dc.make_update_case(np.random.default_rng(seed), bsz, kind, substep=substep)
    tokens, cu = args["inter_next_tokens"], args["cu_seqlens_q_output"]
    native = _run_update(state, args, tokens, cu)
    D = state["draft_tokens"].shape[1]
    fd_tokens = tokens.reshape(-1, D) if "padded_2d" in form else tokens  # capacity N * D
    fd_cu = _starts(cu) if "starts" in form else cu
    _assert_equal(_run_update(state, args, fd_tokens, fd_cu), native)


# --- penalty and reasoning constraint with a [bsz] cu_seqlens_q_output -------------------------


@pytest.mark.parametrize("bsz, seed", SEEDS)
@pytest.mark.parametrize("pad_rows", [False, True])
def test_penalty_accepts_fastdeploy_bsz_cu_seqlens_q_output(bsz, seed, pad_rows):
    case = make_penalty_case(np.random.default_rng(200 + seed), bsz, pad_rows=pad_rows)
    outs = []
    for cu in (case.cu_seqlens_q_output, _starts(case.cu_seqlens_q_output)):
        args = [paddle.to_tensor(a) for a in case.args()]
        args[-1] = paddle.to_tensor(cu)
        outs.append(speculate_get_token_penalty_multi_scores(*args, 0, paddle.to_tensor(case.draft_tokens)).numpy())
    np.testing.assert_array_equal(outs[1], outs[0])


@pytest.mark.parametrize("bsz, seed", SEEDS)
def test_reasoning_constraint_accepts_fastdeploy_bsz_cu_seqlens_q_output(bsz, seed):
    rng = np.random.default_rng(300 + seed)
    think_end, lf, V, S = 9, 7, 12, 16
    rows = rng.integers(0, 4, size=bsz)
    batch_ids = np.repeat(np.arange(bsz, dtype=np.int32), rows)
    cu = np.concatenate([[0], np.cumsum(rows)]).astype(np.int32)
    step_idx = rng.integers(0, S - 1, size=bsz).astype(np.int64)
    pre_ids = rng.choice([think_end, lf, 3, 4], size=(bsz, S)).astype(np.int64)
    inputs = dict(
        logits=rng.standard_normal((int(rows.sum()), V)).astype(np.float32), pre_ids=pre_ids,
        stop_flags=rng.random(bsz) < 0.2, seq_lens_this_time=rows.astype(np.int32),
        seq_lens_encoder=np.zeros(bsz, np.int32), step_idx=step_idx, allowed_tokens=np.array([4, 6], np.int64),
        reasoning_status=rng.integers(0, 4, size=bsz).astype(np.int32), batch_id_per_token_output=batch_ids)
    outs = []
    for c in (cu, _starts(cu)):
        t = _tensors(inputs)
        reasoning_phase_token_constraint(**t, cu_seqlens_q_output=paddle.to_tensor(c),
                                         enable_thinking=paddle.to_tensor(np.ones(bsz, bool)),
                                         think_end_id=think_end, line_break_id=lf)
        outs.append(_numpy(t))
    _assert_equal(outs[1], outs[0])


def test_top_p_candidates_binds_fastdeploy_call_unchanged():
    """Era [B]+ signature (probs, top_p [N, 1], batch_id_per_token_output, candidates_len,
    max_seq_len) is ours; the [N, 1] column gives the [N] result."""
    rng = np.random.default_rng(5)
    probs = rng.dirichlet(np.ones(13), size=7).astype(np.float32)
    top_p = rng.uniform(0.2, 1.0, size=3).astype(np.float32)
    batch_ids = np.array([0, 0, 1, 2, 2, 2, -1], np.int32)
    native = top_p_candidates(paddle.to_tensor(probs), paddle.to_tensor(top_p), paddle.to_tensor(batch_ids), 5, 0)
    fd = top_p_candidates(paddle.to_tensor(probs), paddle.to_tensor(top_p.reshape(-1, 1)),
                          paddle.to_tensor(batch_ids), 5, 0)
    for a, b in zip(fd, native):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


# --- unsupported forms: a TypeError naming the argument ----------------------------------------


def _z(*shape, dtype="int32"):
    return paddle.zeros(list(shape) or [1], dtype)


def test_speculate_verify_fastdeploy_15_input_form_names_the_missing_arguments():
    """FastDeploy's later verify (no step_idx / seq_lens_decoder / max_dec_len /
    actual_draft_token_nums, reasoning_status in the inputs, use_topk attribute) differs in
    semantics: ours also advances step_idx and sets stop_flags."""
    fd = dict(sampled_token_ids=_z(), accept_tokens=_z(), accept_num=_z(), stop_flags=_z(), seq_lens_encoder=_z(),
              draft_tokens=_z(), seq_lens_this_time=_z(), verify_tokens=_z(), verify_scores=_z(), end_tokens=_z(),
              is_block_step=_z(), cu_seqlens_q_output=_z(), actual_candidate_len=_z(), topp=_z(),
              reasoning_status=_z())
    with pytest.raises(TypeError, match="step_idx"):
        speculate_verify(**fd)
    with pytest.raises(TypeError, match="use_topk"):
        speculate_verify(**fd, step_idx=_z(), seq_lens_decoder=_z(), max_dec_len=_z(),
                         actual_draft_token_nums=_z(), use_topk=False)
    positional = list(fd.values()) + [0, 2, True, False, False, False, False]
    # positionally the attributes land on our tensor parameters: the first one is named
    named = r"^speculate_verify: actual_candidate_len must be a paddle\.Tensor, got builtins\.int$"
    with pytest.raises(TypeError, match=named):
        speculate_verify(*positional)


def test_draft_model_preprocess_era_b_form_names_its_arguments():
    """Era [B]'s form (draft is_block_step, batch_drop, target seq_lens_this_time / is_block_step,
    kvcache_scheduler_v1) rolls the draft's progress back; ours re-derives it (shadow state)."""
    ours = dict(draft_tokens=_z(), input_ids=_z(), stop_flags=_z(), seq_lens_this_time=_z(), seq_lens_encoder=_z(),
                seq_lens_decoder=_z(), step_idx=_z(), not_need_stop=_z(), pre_ids=_z(), accept_tokens=_z(),
                accept_num=_z(), target_model_seq_lens_encoder=_z(), target_model_seq_lens_decoder=_z(),
                target_model_step_idx=_z(), target_model_stop_flags=_z(), max_dec_len=_z(),
                target_model_draft_tokens=_z(), num_model_steps=1)
    with pytest.raises(TypeError, match="batch_drop"):
        draft_model_preprocess(**ours, batch_drop=_z())
    with pytest.raises(TypeError, match="kvcache_scheduler_v1"):
        draft_model_preprocess(**ours, kvcache_scheduler_v1=True)
    with pytest.raises(TypeError, match="positional argument"):
        draft_model_preprocess(*([_z()] * 22), 1, True, False, True)  # 26 positional arguments


def test_era_a_padding_offset_inputs_name_the_argument():
    """[A]'s output_cum_offsets / output_padding_offset are padding offsets, not slot starts: a
    [bsz] tensor cannot tell them apart, so those names are refused."""
    with pytest.raises(TypeError, match="output_cum_offsets"):
        draft_model_update(_z(), _z(), _z(), _z(), _z(), _z(), _z(), stop_flags=_z(), not_need_stop=_z(),
                           max_dec_len=_z(), end_ids=_z(), base_model_draft_tokens=_z(), max_seq_len=0, substep=0,
                           **{"output_cum_offsets": _z()})  # retired names stay strings (tests/test_naming.py)
    with pytest.raises(TypeError, match="output_padding_offset"):
        top_p_candidates(_z(), _z(), **{"output_padding_offset": _z()})
