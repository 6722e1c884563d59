"""The proposer's per-round state ops on the GPU: k draft_model_update substeps + draft_model_postprocess,
FastDeploy-style (not_need_stop round-tripped through the host after every substep, as its [A]/[B]
binding does with a blocking copy) against ours (not_need_stop stays on the device, no sync).

Runs on a GPU machine with nvcc + CuPy (no Paddle): the kernels are built by kernel_harness.
    python3 benchmarks/gpu_draft_model_update.py [--out benchmarks/results/gpu_draft_model_update.json]

Both variants run the same launches on the same state (the state update is idempotent enough for
timing: stopped slots stay stopped, running ones keep proposing). "graph" replays ours captured
in a CUDA graph, which is possible only because nothing in the round syncs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.bench_cli import device_row, kernel_bench_parser, write_report  # noqa: E402
from reference.cases import draft_state as dc  # noqa: E402
from benchmarks.timing import stream_ptr, time_events, time_graph  # noqa: E402
from kernel_harness import ptr, raw_launcher, require_gpu_or_exit  # noqa: E402
from reference.draft_model_update import STATE_KEYS  # noqa: E402



def bench_round(cp, bsz, k, iters):
    upd = raw_launcher("specworker_draft_model_update_launch")
    post = raw_launcher("specworker_draft_model_postprocess_launch")
    state, args = dc.make_update_case(np.random.default_rng(bsz), bsz, "mixed", 0, k=k, S=256)
    d = {key: cp.asarray(state[key]) for key in STATE_KEYS}
    d_tokens, d_cu = cp.asarray(args["inter_next_tokens"]), cp.asarray(args["cu_seqlens_q_output"])
    d_max = cp.asarray(np.full(bsz, 10**9, np.int64))  # nobody reaches the length limit
    t_lens, t_enc = cp.zeros(bsz, cp.int32), cp.zeros(bsz, cp.int32)
    t_stop = cp.zeros(bsz, cp.bool_)
    host_flag = np.zeros(1, bool)
    rows, D, S = len(args["inter_next_tokens"]), k + 1, state["pre_ids"].shape[1]

    def substep(i):
        err = upd(ptr(d_tokens), rows, ptr(d["draft_tokens"]), D, ptr(d["pre_ids"]), S,
                  ptr(d["seq_lens_this_time"]), ptr(d["seq_lens_encoder"]), ptr(d["seq_lens_decoder"]),
                  ptr(d["step_idx"]), ptr(d_cu), ptr(d["stop_flags"]), ptr(d["not_need_stop"]), ptr(d_max),
                  ptr(d["base_model_draft_tokens"]), D, bsz, i, stream_ptr(cp))
        assert err == 0

    def postprocess():
        assert post(ptr(d["base_model_draft_tokens"]), D, ptr(t_lens), ptr(t_enc), ptr(t_stop), ptr(None), bsz,
                    stream_ptr(cp)) == 0

    def fastdeploy_style():
        for i in range(k):
            d["not_need_stop"].set(host_flag)  # host -> device copy of the CPU flag
            substep(i)
            host_flag[:] = d["not_need_stop"].get()  # blocking device -> host copy
        postprocess()

    def ours():
        for i in range(k):
            substep(i)
        postprocess()

    ours()
    cp.cuda.get_current_stream().synchronize()
    assert (t_lens.get() <= D).all(), "postprocess check failed"
    a = time_events(cp, fastdeploy_style, max(1, iters // 4))
    b = time_events(cp, ours, iters)
    g = time_graph(cp, ours, iters)
    return {"bsz": bsz, "k": k, "fastdeploy_style_us": a, "ours_us": b, "ours_graph_us": g,
            "ratio": a / b, "ratio_graph": a / g}


def main():
    parser = kernel_bench_parser(__doc__, "gpu_draft_model_update", iters=2000)
    args = parser.parse_args()
    cp = require_gpu_or_exit()
    rows = [bench_round(cp, bsz, k, args.iters) for bsz in (1, 64, 256, 1024, 5000) for k in (1, 3)]
    result = {**device_row(cp), "draft_round": rows}
    write_report(args.out, result)
    print(f"{'bsz':>5} {'k':>2} {'fastdeploy-style us':>20} {'ours us':>9} {'ours graph us':>14} {'ratio':>6} "
          f"{'ratio graph':>11}")
    for r in rows:
        print(f"{r['bsz']:>5} {r['k']:>2} {r['fastdeploy_style_us']:>20.2f} {r['ours_us']:>9.2f} "
              f"{r['ours_graph_us']:>14.2f} {r['ratio']:>6.2f} {r['ratio_graph']:>11.2f}")


if __name__ == "__main__":
    main()
