"""speculate_update + speculate_set_value_by_flags_and_idx on the GPU: microseconds per launch
from small batches to 5000 slots (beyond FastDeploy's one-block limits of 512 and 1024).

Runs on a GPU machine with nvcc + CuPy (no Paddle): the kernels are built by kernel_harness.
    python3 benchmarks/gpu_state_update.py [--out benchmarks/results/gpu_state_update.json]

Each op is checked once against its numpy reference on the benchmark's own state, then timed
back to back with CUDA events and as a CUDA-graph replay. Both ops update their buffers in
place, so the timed calls run on drifting state; every access stays in bounds whatever the
values (accept_num is clamped, history writes outside [1, S) are skipped).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.bench_cli import device_row, kernel_bench_parser, write_report  # noqa: E402
from benchmarks.timing import stream_ptr, time_events, time_graph  # noqa: E402
from kernel_harness import ptr, raw_launcher, require_gpu_or_exit  # noqa: E402
from reference.speculate_set_value_by_flags_and_idx import ref_speculate_set_value_by_flags_and_idx  # noqa: E402
from reference.speculate_update import ref_speculate_update  # noqa: E402
from reference.cases.post_verify_state import make_post_verify_state  # noqa: E402

UPDATE_ARGS = ("seq_lens_encoder", "seq_lens_decoder", "not_need_stop", "draft_tokens", "actual_draft_token_nums",
               "accept_tokens", "accept_num", "stop_flags", "seq_lens_this_time", "is_block_step", "stop_nums",
               "mask_rollback")
SET_VALUE_ARGS = ("pre_ids", "accept_tokens", "accept_num", "stop_flags", "seq_lens_encoder", "seq_lens_decoder",
                  "step_idx")


def bench(cp, bsz, k, max_model_len, iters):
    update = raw_launcher("specworker_speculate_update_launch")
    set_value = raw_launcher("specworker_speculate_set_value_by_flags_and_idx_launch")
    state = make_post_verify_state(np.random.default_rng(bsz + k), bsz, "mixed", num_draft=k,
                                   max_model_len=max_model_len)
    D, S = k + 1, max_model_len
    d = {name: cp.asarray(v) for name, v in state.items()}

    def run_update():
        update(*(ptr(d[n]) for n in UPDATE_ARGS), bsz, bsz, D, stream_ptr(cp))

    def run_set_value():
        set_value(*(ptr(d[n]) for n in SET_VALUE_ARGS), bsz, S, D, stream_ptr(cp))

    run_update()
    after_update = {n: cp.asnumpy(v) for n, v in d.items()}
    want = ref_speculate_update(state)
    assert all((after_update[n] == want[n]).all() for n in UPDATE_ARGS), "speculate_update check failed"
    run_set_value()
    want = ref_speculate_set_value_by_flags_and_idx(want)
    assert all((cp.asnumpy(d[n]) == want[n]).all() for n in SET_VALUE_ARGS), "set_value check failed"

    def both():
        run_update()
        run_set_value()

    return {"bsz": bsz, "k": k, "max_model_len": S,
            "update_us": time_events(cp, run_update, iters), "set_value_us": time_events(cp, run_set_value, iters),
            "both_us": time_events(cp, both, iters), "both_graph_us": time_graph(cp, both, iters)}


def main():
    parser = kernel_bench_parser(__doc__, "gpu_state_update", iters=2000)
    args = parser.parse_args()
    cp = require_gpu_or_exit()
    rows = [bench(cp, bsz, k, 8192, args.iters) for bsz in (1, 64, 256, 1024, 5000) for k in (1, 3)]
    result = {**device_row(cp), "state_update": rows}
    write_report(args.out, result)
    print(f"{'bsz':>5} {'k':>2} {'update us':>10} {'set_value us':>13} {'both us':>8} {'both graph us':>14}")
    for r in rows:
        print(f"{r['bsz']:>5} {r['k']:>2} {r['update_us']:>10.2f} {r['set_value_us']:>13.2f} {r['both_us']:>8.2f} "
              f"{r['both_graph_us']:>14.2f}")


if __name__ == "__main__":
    main()
