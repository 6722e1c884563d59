"""Composed multi-round test of the target step and the MTP proposer (tests/mtp_round.py): the real
CPU ops chained as the runner chains them, over random batches where requests arrive, finish
(EOS or max_dec_len), get aborted and get preempted. After every round: the invariants of
docs/spec.md §2.2 (1-10) and the lossless property (each request's tokens are the greedy
sequence of the target alone, whatever the drafts were). Inside the round every op is also
compared with its numpy reference, composed the same way (Engine._both), so a divergence is
reported at the op and round where it happens.
"""

from __future__ import annotations

import numpy as np
import pytest

from reference.cases.step_batch import pack_output_index, seq_lens_output
from tests.mtp_fake_models import POS, SLOT, STATE, greedy_next
from tests.mtp_round import Engine, RoundConfig, RoundRecord

# (k, num_model_steps). Substep s proposes draft s + 1, so num_model_steps = 1 < k = 3 leaves
# columns 2..3 at -1 and L = 2 (tests/mtp_round.py).
SPEC_SHAPES = ((1, 1), (3, 1), (3, 3))
BATCH_SIZES = (1, 3, 17, 64)


def _at(rec: RoundRecord, b: int | None = None) -> str:
    return f"round {rec.round}" + ("" if b is None else f", slot {b}")


def _ran(rec: RoundRecord, b: int) -> bool:
    """Slot b held a request that the target ran this round (not preempted, not idle)."""
    return b in rec.requests and not rec.before["stop_flags"][b] and not rec.before["is_block_step"][b]


def _near_max(cfg: RoundConfig, state: dict, b: int) -> bool:
    return state["step_idx"][b] + cfg.num_model_steps >= state["max_dec_len"][b]


def check_packing(rec: RoundRecord, meta: dict, lens, enc, token_num: int, what: str) -> None:
    """Invariant 1: cu_q / cu_q_out are exclusive prefix sums ending at T / T_out, the per-token
    slot ids repeat slot b L_b (O_b) times and are -1 past the total, and O_b is docs/spec.md §4.2's."""
    out_lens = seq_lens_output(lens, enc)
    batch_ids, cu = pack_output_index(lens, token_num)
    out_ids, cu_out = pack_output_index(out_lens, meta["batch_id_per_token_output"].shape[0])
    for name, want in (("cu_seqlens_q", cu), ("cu_seqlens_k", cu), ("batch_id_per_token", batch_ids),
                       ("seq_lens_output", out_lens), ("cu_seqlens_q_output", cu_out),
                       ("batch_id_per_token_output", out_ids)):
        np.testing.assert_array_equal(meta[name], want, err_msg=f"{_at(rec)}: {what} {name} (invariant 1)")
    assert (meta["ids_remove_padding"][cu[-1]:] == -1).all(), f"{_at(rec)}: {what} ids past T"


def check_target_inputs(rec: RoundRecord) -> None:
    """Invariants 1, 2, 10 on the target's pre_process: decode slots feed draft_tokens[b, :L] with
    draft_tokens[b, 0] the last emitted token, prefill slots their prompt, others nothing."""
    s, m, D = rec.before, rec.meta, rec.before["draft_tokens"].shape[1]
    check_packing(rec, m, s["seq_lens_this_time"], s["seq_lens_encoder"], rec.token_num, "target")
    cu = m["cu_seqlens_q"]
    for b in range(s["stop_flags"].shape[0]):
        L, fed = int(s["seq_lens_this_time"][b]), m["ids_remove_padding"][cu[b]:cu[b + 1]]
        if not _ran(rec, b):
            assert L == 0, f"{_at(rec, b)}: L = {L} on a stopped, preempted or idle slot (invariant 10)"
            continue
        req, n_before = rec.requests[b], rec.emitted_before[b]
        if s["seq_lens_encoder"][b] > 0:
            assert n_before == 0 and L == len(req.prompt), f"{_at(rec, b)}: prefill of {L} tokens"
            np.testing.assert_array_equal(fed, req.prompt, err_msg=f"{_at(rec, b)}: prefill tokens (invariant 2)")
        else:
            assert 1 <= L <= D, f"{_at(rec, b)}: decode L = {L} outside 1..D (invariant 2)"
            assert fed[0] == req.emitted[n_before - 1], \
                f"{_at(rec, b)}: first query token {fed[0]} is not the last emitted token (invariant 2)"
            np.testing.assert_array_equal(fed, s["draft_tokens"][b, :L], err_msg=f"{_at(rec, b)}: invariant 2")


def check_logit_rows(rec: RoundRecord) -> None:
    """Invariant 3: output row t of slot b is the hidden row of its last prompt token (prefill)
    or of query token t - cu_q_out[b] (decode), at position Dec_b + local index; rows past T_out 0."""
    s, m = rec.before, rec.meta
    cu, cu_out = m["cu_seqlens_q"], m["cu_seqlens_q_output"]
    for b in range(s["stop_flags"].shape[0]):
        E, dec = int(s["seq_lens_encoder"][b]), int(s["seq_lens_decoder"][b])
        for i in range(cu_out[b + 1] - cu_out[b]):
            local = E - 1 if E > 0 else i
            row = rec.rows[cu_out[b] + i]
            np.testing.assert_array_equal(row, rec.hidden[cu[b] + local], err_msg=f"{_at(rec, b)}: invariant 3")
            assert (row[SLOT], row[POS]) == (b, dec + local), f"{_at(rec, b)}: logit row {i} (invariant 3)"
    assert not rec.rows[cu_out[-1]:].any(), f"{_at(rec)}: rows past T_out are not zero"


def expected_emission(cfg: RoundConfig, rec: RoundRecord, b: int) -> tuple[list[int], bool]:
    """Invariants 4, 5, from the target's own hidden rows (not from verify's inputs): draft i + 1 is
    compared with the greedy token after query token i (packed row cu_q[b] + i), the walk stops at
    the first rejection, whose row gives the correction (the bonus when all pass); prefill rows
    accept nothing. An end token or step_idx >= max_dec_len stops the slot."""
    s, cu = rec.before, rec.meta["cu_seqlens_q"]
    L, ends = int(s["seq_lens_this_time"][b]), [int(e) for e in s["end_tokens"]]
    greedy = [greedy_next(int(rec.hidden[cu[b] + i, STATE]), cfg.vocab) for i in range(L)]
    walk = [] if s["seq_lens_encoder"][b] > 0 else [int(d) for d in s["draft_tokens"][b, 1:L]]
    i = 0
    while i < len(walk) and walk[i] == greedy[i]:
        i += 1
    step, out = int(s["step_idx"][b]), []
    for tok in walk[:i] + [greedy[i if walk else L - 1]]:
        step += 1
        if tok in ends or step >= s["max_dec_len"][b]:
            out.append(tok if tok in ends else ends[0])
            return out, True
        out.append(tok)
    return out, False


def check_verify(cfg: RoundConfig, rec: RoundRecord, stats: dict) -> None:
    """Invariants 4, 5 and the host copy: accept_tokens / accept_num / step_idx / stop_flags."""
    s, v = rec.before, rec.after_verify
    for b in range(s["stop_flags"].shape[0]):
        n = int(v["accept_num"][b])
        if not _ran(rec, b):
            assert n == 0 and v["step_idx"][b] == s["step_idx"][b], f"{_at(rec, b)}: emitted while not running"
            continue
        if s["seq_lens_encoder"][b] > 0:
            assert n == 1, f"{_at(rec, b)}: a prefill slot emitted {n} tokens: it accepted a draft (invariant 5)"
        want, stop = expected_emission(cfg, rec, b)
        assert v["accept_tokens"][b, :n].tolist() == want and bool(v["stop_flags"][b]) == stop, \
            f"{_at(rec, b)}: emitted {v['accept_tokens'][b, :n].tolist()} (stop {v['stop_flags'][b]}), " \
            f"expected {want} (stop {stop}) (invariant 4)"
        assert (v["accept_tokens"][b, n:] == -1).all()
        assert v["step_idx"][b] == s["step_idx"][b] + n, f"{_at(rec, b)}: step_idx += n"
        if s["seq_lens_encoder"][b] == 0:
            drafts = int(s["seq_lens_this_time"][b]) - 1
            stats["accepted"] += n - 1
            stats["rejected"] += drafts - (n - 1) if not stop else 0
        stats["eos" if stop and s["max_dec_len"][b] > v["step_idx"][b] else "length"] += stop


def check_state_update(rec: RoundRecord) -> None:
    """Invariant 6 after speculate_update + speculate_set_value_by_flags_and_idx: Dec += n (decode)
    or += E with E = 0 (prefill), history = every emitted token, draft_tokens[b, 0] = the last one,
    the target's L untouched; stopped slots cleared; not_need_stop = some slot still runs."""
    s, v, u, a = rec.before, rec.after_verify, rec.after_update, rec.after_set_value
    np.testing.assert_array_equal(a["seq_lens_this_time"], s["seq_lens_this_time"],
                                  err_msg=f"{_at(rec)}: the target's L changed before the proposer (invariant 6)")
    for b in range(s["stop_flags"].shape[0]):
        if b not in rec.requests or rec.requests[b].status == "preempted":
            continue
        req, n = rec.requests[b], int(v["accept_num"][b])
        if _ran(rec, b):
            assert u["seq_lens_encoder"][b] == 0
            # a slot that stopped in this verify keeps Dec (set_value zeroes it), unless it was a prefill
            grown = s["seq_lens_encoder"][b] or (0 if v["stop_flags"][b] else n)
            assert u["seq_lens_decoder"][b] == s["seq_lens_decoder"][b] + grown, \
                f"{_at(rec, b)}: Dec after update (invariant 6)"
            assert a["draft_tokens"][b, 0] == req.emitted[-1], f"{_at(rec, b)}: draft_tokens[b, 0] (invariant 6)"
        step = int(a["step_idx"][b])
        assert step == len(req.emitted)
        np.testing.assert_array_equal(a["pre_ids"][b, 1:step + 1], req.emitted,
                                      err_msg=f"{_at(rec, b)}: history != emitted tokens (invariant 6)")
        assert (a["pre_ids"][b, step + 1:] == -1).all(), f"{_at(rec, b)}: history past step_idx"
        if a["stop_flags"][b]:
            assert a["accept_num"][b] == 0 and a["seq_lens_decoder"][b] == 0, f"{_at(rec, b)}: stopped not cleared"
        else:
            assert a["seq_lens_decoder"][b] == len(req.prompt) + step - 1, f"{_at(rec, b)}: Dec != prompt + step - 1"
    live = ~u["stop_flags"] & ~u["is_block_step"]
    assert bool(u["not_need_stop"][0]) == bool(live.any()), f"{_at(rec)}: not_need_stop (invariant 10)"


def check_draft_inputs(cfg: RoundConfig, rec: RoundRecord) -> None:
    """Invariant 7: the draft re-derives Dec = Dec_t - n and step_idx = step_idx_t - n, feeds the n
    accepted tokens (prefill: the prompt shifted by one, completed by the first token), each paired
    with the target hidden row of the position before it: the first n target rows of the slot."""
    a, p, N = rec.after_set_value, rec.after_preprocess, rec.before["stop_flags"].shape[0]
    assert (p["draft_tokens"][:, 1:] == -1).all(), f"{_at(rec)}: target drafts not cleared"
    cu_t = rec.meta["cu_seqlens_q"]
    sub0 = rec.substeps[0]
    d_cu = sub0.meta["cu_seqlens_q"]
    for b in range(N):
        runs = _ran(rec, b) and not a["stop_flags"][b] and not _near_max(cfg, a, b)
        if not runs:
            assert p["d_stop_flags"][b] and p["d_seq_lens_this_time"][b] == 0 and p["d_seq_lens_decoder"][b] == 0 \
                and p["d_step_idx"][b] == 0, f"{_at(rec, b)}: draft slot not stopped"
            continue
        req, n = rec.requests[b], int(rec.after_verify["accept_num"][b])
        seq, L = req.prompt + req.emitted, int(p["d_seq_lens_this_time"][b])
        if rec.before["seq_lens_encoder"][b] > 0:
            P = len(req.prompt)
            assert L == P == p["d_seq_lens_encoder"][b] and p["d_step_idx"][b] == a["step_idx"][b] - 1
            np.testing.assert_array_equal(p["d_input_ids"][b, :P], seq[1:P + 1],
                                          err_msg=f"{_at(rec, b)}: draft prompt != target prompt shifted by one")
        else:
            assert L == n and p["d_seq_lens_decoder"][b] == a["seq_lens_decoder"][b] - n and \
                p["d_step_idx"][b] == a["step_idx"][b] - n, f"{_at(rec, b)}: draft Dec / step_idx / L (invariant 7)"
        step_t = int(a["step_idx"][b])
        np.testing.assert_array_equal(p["d_pre_ids"][b, :step_t], req.emitted,
                                      err_msg=f"{_at(rec, b)}: draft history (0-based) != emitted tokens")
        dec = int(p["d_seq_lens_decoder"][b])
        for i in range(L):
            t = d_cu[b] + i
            np.testing.assert_array_equal(rec.eagle_out[t], rec.hidden[cu_t[b] + i],
                                          err_msg=f"{_at(rec, b)}: draft hidden row {i} (invariant 7)")
            hid = sub0.prev_hidden[t]
            assert (hid[SLOT], hid[POS]) == (b, dec + i), f"{_at(rec, b)}: token {i} paired with hidden " \
                f"(slot {hid[SLOT]}, position {hid[POS]}), expected ({b}, {dec + i}) (invariant 7)"
            assert sub0.meta["ids_remove_padding"][t] == seq[dec + i + 1], f"{_at(rec, b)}: draft token {i}"
    assert rec.eagle_count[0] == p["d_seq_lens_this_time"].sum()
    assert not rec.eagle_out[rec.eagle_count[0]:].any(), f"{_at(rec)}: eagle rows past the count"


def check_substeps(cfg: RoundConfig, rec: RoundRecord) -> None:
    """The draft's own substeps: each packs its slots correctly (invariant 1), substep s > 0 feeds
    the previous proposal paired with the draft's own last hidden row of that position, and after
    substep s a running slot sits at Dec_t + s, step_idx_t + s with its proposal in its history."""
    a = rec.after_set_value
    for s, sub in enumerate(rec.substeps):
        st = sub.before
        token_num = rec.token_num if s == 0 else st["stop_flags"].shape[0]
        check_packing(rec, sub.meta, st["d_seq_lens_this_time"], st["d_seq_lens_encoder"], token_num, f"draft {s}")
        cu, cu_out = sub.meta["cu_seqlens_q"], sub.meta["cu_seqlens_q_output"]
        for b in np.flatnonzero(st["d_seq_lens_this_time"] > 0):
            if s > 0:
                t, dec = cu[b], int(st["d_seq_lens_decoder"][b])
                assert st["d_seq_lens_this_time"][b] == 1 and sub.meta["ids_remove_padding"][t] == \
                    rec.substeps[s - 1].after["draft_tokens"][b, s], f"{_at(rec, b)}: substep {s} input"
                assert (sub.prev_hidden[t, SLOT], sub.prev_hidden[t, POS]) == (b, dec), f"{_at(rec, b)}: substep {s}"
            proposal = sub.tokens[cu_out[b + 1] - 1]
            assert sub.after["d_seq_lens_decoder"][b] == a["seq_lens_decoder"][b] + s
            assert sub.after["d_step_idx"][b] == a["step_idx"][b] + s
            assert sub.after["d_pre_ids"][b, a["step_idx"][b] + s] == proposal
            assert sub.after["draft_tokens"][b, s + 1] == proposal, f"{_at(rec, b)}: substep {s} proposal"


def check_proposals(cfg: RoundConfig, rec: RoundRecord) -> None:
    """Invariants 8, 10 after draft_model_postprocess: a running slot's drafts are contiguous from
    column 1 (num_model_steps of them, or none near max_dec_len), L = 1 + #drafts; every other
    slot has L = 0 on both sides; the draft's not_need_stop = some draft slot still runs."""
    a, f, k = rec.after_set_value, rec.after, cfg.k
    for b in range(f["stop_flags"].shape[0]):
        L, dL = int(f["seq_lens_this_time"][b]), int(f["d_seq_lens_this_time"][b])
        if not _ran(rec, b) or a["stop_flags"][b]:
            assert L == 0 and dL == 0, f"{_at(rec, b)}: stopped/preempted/idle slot has L = {L}, draft L = {dL} " \
                "(invariant 10)"
            continue
        m = 0 if _near_max(cfg, a, b) else cfg.num_model_steps
        row = f["draft_tokens"][b]
        assert (row[1:1 + m] >= 0).all() and (row[1 + m:] == -1).all() and L == 1 + m, \
            f"{_at(rec, b)}: drafts {row.tolist()}, L = {L}, expected {m} contiguous drafts (invariant 8)"
        assert row[0] == rec.requests[b].emitted[-1] and m <= k
    running = ~rec.substeps[-1].after["d_stop_flags"]
    assert bool(f["d_not_need_stop"][0]) == bool(running.any()), f"{_at(rec)}: draft not_need_stop"


def check_lossless(engine: Engine, rec: RoundRecord) -> None:
    """Every request's tokens are a prefix of (finished: equal to) what the target alone emits."""
    for req in list(engine.slots.values()) + engine.done:
        n = len(req.emitted)
        assert req.emitted == req.greedy[:n], f"{_at(rec)}: request {req.req_id} emitted {req.emitted}, " \
            f"the target alone emits {req.greedy} (lossless)"
        if req.status == "finished":
            assert n == len(req.greedy), f"request {req.req_id} stopped after {n} of {len(req.greedy)} tokens"


def buffer_identity(engine: Engine) -> dict:
    return {k: (t, t.data_ptr(), tuple(t.shape), t.dtype) for k, t in engine.ops.t.items()}


def check_buffers_in_place(engine: Engine, identity: dict, rec: RoundRecord) -> None:
    """Invariant 9: the persistent buffers are the same tensors, allocations, shapes and dtypes."""
    assert set(engine.ops.t) == set(identity)
    for k, (t, ptr, shape, dtype) in identity.items():
        now = engine.ops.t[k]
        assert now is t and now.data_ptr() == ptr and tuple(now.shape) == shape and now.dtype == dtype, \
            f"{_at(rec)}: buffer {k} was replaced or reshaped (invariant 9)"


def run_rounds(cfg: RoundConfig, preempt_stops: bool = True) -> dict:
    engine = Engine(cfg, preempt_stops)
    identity = buffer_identity(engine)
    stats = dict.fromkeys(("accepted", "rejected", "eos", "length", "prefill", "preempted", "near_max"), 0)
    for _ in range(cfg.rounds):
        rec = engine.target_step()  # the committed step is checked before the proposer consumes it
        check_target_inputs(rec)
        check_logit_rows(rec)
        check_verify(cfg, rec, stats)
        check_state_update(rec)
        check_lossless(engine, rec)
        engine.propose(rec)
        check_draft_inputs(cfg, rec)
        check_substeps(cfg, rec)
        check_proposals(cfg, rec)
        check_buffers_in_place(engine, identity, rec)
        stats["prefill"] += int((rec.before["seq_lens_encoder"] > 0).sum())
        stats["preempted"] += sum(r.status == "preempted" for r in rec.requests.values())
        stats["near_max"] += sum(_ran(rec, b) and not rec.after_set_value["stop_flags"][b]
                                 and _near_max(cfg, rec.after_set_value, b) for b in rec.requests)
    stats["aborted"] = sum(r.status == "aborted" for r in engine.done)
    stats["finished"] = sum(r.status == "finished" for r in engine.done)
    return stats


@pytest.mark.parametrize("k, num_model_steps", SPEC_SHAPES)
@pytest.mark.parametrize("num_slots", BATCH_SIZES)
def test_mtp_rounds_keep_invariants_and_are_lossless(num_slots, k, num_model_steps):
    """~20 rounds of insert / finish / abort / preempt over the real ops; every round checks the
    invariants and the lossless property, and every op against its reference."""
    rounds = 40 if num_slots == 1 else 20
    cfg = RoundConfig(num_slots=num_slots, k=k, num_model_steps=num_model_steps, rounds=rounds,
                      seed=1000 * num_slots + 10 * k + num_model_steps)
    stats = run_rounds(cfg)
    # The run must have exercised what it claims to check.
    assert stats["accepted"] > 0 and stats["rejected"] > 0 and stats["finished"] > 0, stats
    if num_slots >= 17:
        assert min(stats.values()) > 0, stats


@pytest.mark.parametrize("num_slots", (17, 64))
def test_mtp_rounds_pause_without_stop_flag(num_slots):
    """Preemption as a pause only: is_block_step set, L = 0, stop flag clear (verify, speculate_update
    and draft_model_preprocess all accept that state). Invariant 10 found draft_model_postprocess
    handing such a slot L = 1 again after every round, so it was fed to the next forward;
    postprocess now takes is_block_step too."""
    cfg = RoundConfig(num_slots=num_slots, k=3, num_model_steps=3, preempt_rate=0.1, seed=77 + num_slots)
    stats = run_rounds(cfg, preempt_stops=False)
    assert stats["preempted"] > 0 and stats["accepted"] > 0 and stats["finished"] > 0, stats
