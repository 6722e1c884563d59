"""numpy reference for reasoning_phase_token_constraint (docs/spec.md §4.5, docs/spec.md §8.7)."""

import numpy as np

MASKED_LOGIT = np.float32(-1e10)


def ref_reasoning_phase_token_constraint(logits, pre_ids, stop_flags, seq_lens_this_time, seq_lens_encoder,
                                         step_idx, allowed_tokens, reasoning_status, batch_id_per_token_output,
                                         cu_seqlens_q_output, enable_thinking, think_end_id, line_break_id):
    """Returns (logits, reasoning_status) after the op; the inputs are not modified."""
    logits = np.array(logits, dtype=np.float32, copy=True)
    status = np.array(reasoning_status, dtype=np.int32, copy=True).reshape(-1)
    pre_ids = np.asarray(pre_ids)
    stop = np.asarray(stop_flags).reshape(-1)
    encoder = np.asarray(seq_lens_encoder).reshape(-1)
    steps = np.asarray(step_idx).reshape(-1)
    thinking = np.asarray(enable_thinking).reshape(-1)
    bsz = np.asarray(seq_lens_this_time).reshape(-1).shape[0]
    S = pre_ids.shape[1]

    def history(b, pos):  # generated token at position pos of slot b, -1 outside the row
        return int(pre_ids[b, pos]) if 0 <= pos < S else -1

    # 1. Status machine, once per slot.
    for b in range(bsz):
        old = int(status[b])
        if stop[b] or old == 3:
            continue
        step = int(steps[b])
        t0, t1, t2, t3 = (history(b, step - k) for k in range(4))
        saw_think_end = think_end_id in (t0, t1, t2, t3)
        new = old
        if old == 0:
            if not thinking[b] and encoder[b] > 0 and step == 0:
                new = 2  # a request without thinking: its first token is constrained
            elif saw_think_end:
                new = 1
        if new == 1 and step >= 3:
            if (t3, t2, t1, t0) == (line_break_id, think_end_id, line_break_id, line_break_id):
                new = 2
            elif not saw_think_end:
                new = 3
        elif old == 2:
            new = 3
        status[b] = new

    # 2. First row of each slot in status 2: only the allowed ids keep their logits.
    allowed = [int(a) for a in np.asarray(allowed_tokens).reshape(-1)]
    cu = np.asarray(cu_seqlens_q_output).reshape(-1)
    V = logits.shape[1]
    for t, b in enumerate(np.asarray(batch_id_per_token_output).reshape(-1)[: logits.shape[0]]):
        b = int(b)
        if b < 0 or not allowed or int(cu[b]) != t or status[b] != 2:
            continue
        kept = {a: logits[t, a] for a in allowed if 0 <= a < V}
        logits[t, :] = MASKED_LOGIT
        for a, value in kept.items():
            logits[t, a] = value
    return logits, status.reshape(np.asarray(reasoning_status).shape)
