"""Post-verify slot states for the state-update ops (speculate_update,
speculate_set_value_by_flags_and_idx), shared by tests/ops, tests/gpu and benchmarks/gpu_state_update.py.

Plain numpy only (the GPU machine has no Paddle). A state is a dict keyed by the ops' argument
names, except the target history, which is the buffer name "pre_ids" (the ops' pre_ids_all).
It describes the batch right after speculate_verify: accept_tokens[b, :accept_num[b]] are the
tokens emitted this step, step_idx already counts them, stop_flags is set on slots that stopped
in this step. Also here: a multi-round driver that runs verify-like emission, the two state
ops and a proposer-like draft refill, with the ops supplied by the caller (CPU op, CUDA kernel
or reference).
"""

from __future__ import annotations

import numpy as np

BATCH_SIZES = (1, 3, 17, 256)
KINDS = ("mixed", "all_prefill", "all_decode", "stopped", "paused", "all_stopped", "len_one", "near_limits")
PER_SLOT = ("seq_lens_encoder", "seq_lens_decoder", "actual_draft_token_nums", "accept_num", "stop_flags",
            "is_block_step", "step_idx", "mask_rollback")
EOS = 2

# Slot categories and how often each kind draws them: prefill done this step, running decode,
# stopped by this step's verify, stopped earlier, paused (preempted).
_CATEGORIES = ("prefill", "decode", "just_stopped", "stopped", "paused")
_MIX = {
    "mixed": (0.25, 0.4, 0.12, 0.12, 0.11),
    "all_prefill": (1, 0, 0, 0, 0),
    "all_decode": (0, 1, 0, 0, 0),
    "stopped": (0.1, 0.4, 0.25, 0.25, 0),
    "paused": (0.1, 0.5, 0, 0.1, 0.3),
    "all_stopped": (0, 0, 0.5, 0.3, 0.2),
    "len_one": (0, 1, 0, 0, 0),
    "near_limits": (0.2, 0.6, 0.2, 0, 0),
}


def all_cases():
    """(bsz, kind, seed) for every batch size x kind."""
    return [(bsz, kind, 1000 * i + j) for i, bsz in enumerate(BATCH_SIZES) for j, kind in enumerate(KINDS)]


def make_post_verify_state(rng: np.random.Generator, bsz: int, kind: str = "mixed", num_draft: int = 3,
                           max_model_len: int = 32, extra_rows: int = 0) -> dict:
    """A random post-verify state of bsz live slots plus extra_rows padding rows (N = bsz +
    extra_rows) filled with junk that the ops must not touch. Token buffers hold junk past each
    slot's accepted tokens, so a read of the wrong index shows."""
    D, S, N = num_draft + 1, max_model_len, bsz + extra_rows
    p = np.asarray(_MIX[kind], dtype=float)
    cats = rng.choice(len(_CATEGORIES), size=N, p=p / p.sum())
    state = {
        "seq_lens_encoder": rng.integers(0, S, size=N).astype(np.int32),
        "seq_lens_decoder": rng.integers(0, 4 * S, size=N).astype(np.int32),
        "seq_lens_this_time": np.zeros(bsz, np.int32),
        "actual_draft_token_nums": rng.integers(1, max(D - 1, 1) + 1, size=N).astype(np.int32),
        "accept_tokens": rng.integers(1000, 2000, size=(N, D)).astype(np.int64),
        "accept_num": rng.integers(0, D + 1, size=N).astype(np.int32),
        "draft_tokens": rng.integers(2000, 3000, size=(N, D)).astype(np.int64),
        "pre_ids": rng.integers(3000, 4000, size=(N, S)).astype(np.int64),
        "stop_flags": rng.random(N) < 0.5,
        "is_block_step": rng.random(N) < 0.2,
        "step_idx": rng.integers(0, S + D, size=N).astype(np.int64),
        "mask_rollback": rng.integers(-50, -40, size=N).astype(np.int32),
        "not_need_stop": np.array([rng.random() < 0.5]),
        "stop_nums": np.array([N], np.int64),
    }
    for b in range(bsz):
        _fill_slot(rng, state, b, _CATEGORIES[cats[b]], kind, D, S)
    if rng.random() < 0.3:  # sometimes a stop threshold other than "all slots"
        state["stop_nums"][0] = rng.integers(0, N + 2)
    return state


def _fill_slot(rng, s, b, cat, kind, D, S):
    s["is_block_step"][b] = cat == "paused"
    s["stop_flags"][b] = cat in ("just_stopped", "stopped", "paused")
    if cat == "paused" or cat == "stopped":
        # Preemption / an earlier stop zeroed these; a paused slot's stale accept_num stays.
        s["seq_lens_this_time"][b] = s["seq_lens_encoder"][b] = s["seq_lens_decoder"][b] = 0
        if cat == "stopped":
            s["accept_num"][b] = 0
        return
    prefill = cat == "prefill" or (cat == "just_stopped" and rng.random() < 0.3)
    if prefill:  # a prompt (chunk) of E tokens ran; its last position emitted one token
        e = int(rng.integers(1, S))
        s["seq_lens_encoder"][b] = s["seq_lens_this_time"][b] = e
        s["seq_lens_decoder"][b] = 0 if rng.random() < 0.7 else rng.integers(1, S)  # earlier chunks
        s["accept_num"][b] = 1
        s["step_idx"][b] = 1
        return
    length = 1 if kind == "len_one" else int(rng.integers(1, D + 1))
    all_accepted = rng.random() < 0.4
    n = length if all_accepted else int(rng.integers(1, length + 1))
    s["seq_lens_encoder"][b] = 0
    s["seq_lens_decoder"][b] = rng.integers(1, 4 * S)
    s["seq_lens_this_time"][b] = length
    s["accept_num"][b] = n
    if length > 1 and rng.random() < 0.7:  # the proposer drafted what the adaptive length allowed
        s["actual_draft_token_nums"][b] = length - 1
    if kind == "near_limits":  # the history end crosses S
        s["step_idx"][b] = rng.integers(max(S - D, 1), S + D)
    else:
        s["step_idx"][b] = rng.integers(n, S + D)


def to_column(state: dict) -> dict:
    """FastDeploy's [N, 1] layout for every per-slot buffer and seq_lens_this_time."""
    out = dict(state)
    for k in PER_SLOT + ("seq_lens_this_time",):
        if out.get(k) is not None:
            out[k] = out[k].reshape(-1, 1)
    return out


# ---- multi-round driver ------------------------------------------------------------------------


def start_batch(rng: np.random.Generator, num_slots: int, num_draft: int, max_model_len: int,
                max_dec_len: int) -> tuple[dict, dict]:
    """Slots with fresh prompts (about a fifth idle). Returns (state, meta): the state is what
    pre_process would see before the first prefill; meta holds test-side bookkeeping."""
    D, S, N = num_draft + 1, max_model_len, num_slots
    idle = rng.random(N) < 0.2
    prompt = np.where(idle, 0, rng.integers(1, S // 2, size=N)).astype(np.int32)
    state = {
        "seq_lens_encoder": prompt.copy(),
        "seq_lens_decoder": np.zeros(N, np.int32),
        "seq_lens_this_time": prompt.copy(),
        "actual_draft_token_nums": np.full(N, max(num_draft, 1), np.int32),
        "accept_tokens": np.zeros((N, D), np.int64),
        "accept_num": np.zeros(N, np.int32),
        "draft_tokens": np.full((N, D), -1, np.int64),
        "pre_ids": np.full((N, S), -1, np.int64),
        "stop_flags": idle.copy(),
        "is_block_step": np.zeros(N, bool),
        "step_idx": np.zeros(N, np.int64),
        "mask_rollback": np.zeros(N, np.int32),
        "not_need_stop": np.array([True]),
        "stop_nums": np.array([N], np.int64),
    }
    meta = {"prompt_lens": prompt, "max_dec_len": np.full(N, max_dec_len, np.int64),
            "emitted": [[] for _ in range(N)], "num_draft": num_draft}
    return state, meta


def fake_verify(rng: np.random.Generator, state: dict, meta: dict) -> dict:
    """Verify-like emission (not the real op): a prefill slot emits one token, a decode slot
    accepts a random prefix of its drafts plus a bonus token; EOS or max_dec_len stops the slot
    (a length stop replaces the token by EOS). Returns the host copy the engine gets."""
    s = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in state.items()}
    D = s["draft_tokens"].shape[1]
    for b in range(s["stop_flags"].shape[0]):
        if s["stop_flags"][b] or s["is_block_step"][b]:
            continue
        length = int(s["seq_lens_this_time"][b])
        n_max = 1 if s["seq_lens_encoder"][b] > 0 else length
        n_target = int(rng.integers(1, n_max + 1))
        n = 0
        for i in range(n_target):
            token = int(s["draft_tokens"][b, i + 1]) if i < n_target - 1 else int(rng.integers(10, 1000))
            if rng.random() < 0.04:
                token = EOS
            s["step_idx"][b] += 1
            n += 1
            if token == EOS or s["step_idx"][b] >= meta["max_dec_len"][b]:
                s["accept_tokens"][b, i] = EOS
                s["stop_flags"][b] = True
                break
            s["accept_tokens"][b, i] = token
        s["accept_num"][b] = n
        assert n <= D, "fake verify emitted more than D tokens"
    host = {"accept_tokens": s["accept_tokens"].copy(), "accept_num": s["accept_num"].copy(),
            "stop_flags": s["stop_flags"].copy()}
    for b in range(s["stop_flags"].shape[0]):
        meta["emitted"][b] += [int(t) for t in host["accept_tokens"][b, : host["accept_num"][b]]]
    return s, host


def fake_propose(rng: np.random.Generator, state: dict, meta: dict) -> dict:
    """Proposer-like refill (not the real ops): running slots get 0..k fresh drafts after
    draft_tokens[b, 0] and L = 1 + #drafts; stopped slots get L = 0."""
    s = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in state.items()}
    k = meta["num_draft"]
    for b in range(s["stop_flags"].shape[0]):
        if s["stop_flags"][b]:
            s["seq_lens_this_time"][b] = 0
            continue
        m = int(rng.integers(0, k + 1))
        s["draft_tokens"][b, 1:] = -1
        s["draft_tokens"][b, 1 : 1 + m] = rng.integers(10, 1000, size=m)
        s["seq_lens_this_time"][b] = 1 + m
    return s


def check_round_invariants(state: dict, meta: dict) -> None:
    """What one committed round must leave behind, stated from SPEC (not from the ops)."""
    S = state["pre_ids"].shape[1]
    running = ~state["stop_flags"]
    for b in range(state["stop_flags"].shape[0]):
        emitted = meta["emitted"][b]
        step = int(state["step_idx"][b])
        assert step == len(emitted), f"slot {b}: step_idx {step} != {len(emitted)} emitted tokens"
        upto = min(step, S - 1)
        np.testing.assert_array_equal(state["pre_ids"][b, 1 : upto + 1], emitted[:upto],
                                      err_msg=f"slot {b}: history != emitted tokens")
        assert (state["pre_ids"][b, upto + 1 :] == -1).all(), f"slot {b}: history written past step_idx"
        if emitted:
            assert state["draft_tokens"][b, 0] == emitted[-1], f"slot {b}: draft_tokens[b, 0] != last token"
        if running[b]:
            assert state["seq_lens_encoder"][b] == 0
            want = meta["prompt_lens"][b] + step - 1
            assert state["seq_lens_decoder"][b] == want, f"slot {b}: Dec {state['seq_lens_decoder'][b]} != {want}"
        else:
            assert state["accept_num"][b] == 0 and state["seq_lens_decoder"][b] == 0, f"slot {b} not cleared"
    assert bool(state["not_need_stop"][0]) == bool(running.any()), "not_need_stop != any running slot"


def run_rounds(rng: np.random.Generator, update, set_value, state: dict, meta: dict, rounds: int):
    """Drives `rounds` engine steps: fake verify, host copy, update, set_value, invariants,
    fake propose. update / set_value map a state dict to a new one (op under test or reference).
    Yields (state after set_value, host copy) per round."""
    for _ in range(rounds):
        state, host = fake_verify(rng, state, meta)
        state = set_value(update(state))
        check_round_invariants(state, meta)
        yield state, host
        state = fake_propose(rng, state, meta)
