"""draft_model_preprocess and eagle_get_hidden_states on the GPU: launch cost, CUDA-graph replay
(both are capturable because nothing syncs), and the hidden-state gather's bandwidth against a
same-run device copy of the same bytes.

Runs on a GPU machine with nvcc + CuPy (no Paddle): the kernels are built by kernel_harness.
    python3 benchmarks/gpu_draft_model_ops.py [--out benchmarks/results/gpu_draft_model_ops.json]

Rounds come from reference.cases.mtp_round_state.make_round_state (decode-only with k = 1 and 3, and a mix with
prefills of up to 64 tokens), bsz 64 .. 5000, H = 7168 bf16 (moved as uint16: the kernel only copies bytes).
"with host read" adds the blocking read of the row count that FastDeploy [A]/[B] did after its
gather (to size the output); ours sizes the output from the bound T and keeps the count on the device.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.bench_cli import device_row, kernel_bench_parser, write_report  # noqa: E402
from benchmarks.timing import stream_ptr, time_events, time_graph  # noqa: E402
from kernel_harness import ptr, raw_launcher, require_gpu_or_exit  # noqa: E402
from reference.cases.mtp_round_state import make_round_state  # noqa: E402
from reference.draft_model_preprocess import ref_draft_model_preprocess  # noqa: E402
from reference.eagle_get_hidden_states import ref_eagle_get_hidden_states  # noqa: E402

ROW_BUFFERS = ("draft_tokens", "input_ids", "pre_ids", "accept_tokens", "target_model_draft_tokens")


def bench_round(cp, bsz, kind, k, hidden, iters):
    pre = raw_launcher("specworker_draft_model_preprocess_launch")
    gather = raw_launcher("specworker_eagle_get_hidden_states_launch")
    st = make_round_state(np.random.default_rng(bsz * 10 + k), bsz, kind, max_model_len=64, num_draft=k)
    post = ref_draft_model_preprocess(st, 1)
    d = {name: cp.asarray(v) for name, v in st.items() if v is not None}
    w = {name: int(st[name].shape[1]) for name in ROW_BUFFERS}
    lens = {name: cp.asarray(post[name]) for name in ("seq_lens_this_time", "seq_lens_encoder")}
    T = int(st["target_model_seq_lens_this_time"].sum())
    rng = np.random.default_rng(0)
    h_host = rng.integers(0, 1 << 16, size=(T, hidden), dtype=np.uint16)
    h, out = cp.asarray(h_host), cp.empty((T, hidden), cp.uint16)
    scratch, count = cp.empty(2 * bsz + 1, cp.int32), cp.empty(1, cp.int32)

    def preprocess():
        pre(ptr(d["draft_tokens"]), w["draft_tokens"], ptr(d["input_ids"]), w["input_ids"], ptr(d["stop_flags"]),
            ptr(d["seq_lens_this_time"]), ptr(d["seq_lens_encoder"]), ptr(d["seq_lens_decoder"]), ptr(d["step_idx"]),
            ptr(d["not_need_stop"]), ptr(d["pre_ids"]), w["pre_ids"], ptr(d["accept_tokens"]), w["accept_tokens"],
            ptr(d["accept_num"]), ptr(d["target_model_seq_lens_decoder"]), ptr(d["target_model_step_idx"]),
            ptr(d["target_model_stop_flags"]), ptr(d["max_dec_len"]), ptr(d["target_model_draft_tokens"]),
            w["target_model_draft_tokens"], ptr(d["target_model_is_block_step"]), bsz, 1, 0, 1, stream_ptr(cp))

    def hidden_states():
        gather(ptr(h), T, hidden, 2, ptr(lens["seq_lens_this_time"]), ptr(lens["seq_lens_encoder"]),
               ptr(d["accept_num"]), ptr(d["target_model_seq_lens_this_time"]), bsz, ptr(scratch), ptr(out), T,
               ptr(count), stream_ptr(cp))

    def hidden_states_with_host_read():
        hidden_states()
        return int(count.get()[0])  # blocks until the GPU drains, as [A]/[B] did

    hidden_states()
    cp.cuda.get_current_stream().synchronize()
    want_out, want_count = ref_eagle_get_hidden_states(h_host, post)
    assert int(count.get()[0]) == int(want_count[0]) and (out.get() == want_out).all(), "gather check failed"
    kept = int(want_count[0])
    dst = cp.empty_like(h)
    moved = (kept + T) * hidden * 2  # read the kept rows, write every output row

    def copy():
        cp.cuda.runtime.memcpyAsync(dst.data.ptr, h.data.ptr, moved // 2, cp.cuda.runtime.memcpyDeviceToDevice,
                                    cp.cuda.get_current_stream().ptr)

    t_gather, t_copy = [], []
    for _ in range(3):  # interleave to share the machine's noise
        t_gather.append(time_events(cp, hidden_states, iters))
        t_copy.append(time_events(cp, copy, iters))
    tg, tc = float(np.median(t_gather)), float(np.median(t_copy))
    return {"bsz": bsz, "kind": kind, "k": k, "hidden": hidden, "T": T, "kept_rows": kept,
            "preprocess_us": time_events(cp, preprocess, iters), "preprocess_graph_us": time_graph(cp, preprocess, iters),
            "gather_us": tg, "gather_graph_us": time_graph(cp, hidden_states, iters),
            "gather_with_host_read_us": time_events(cp, hidden_states_with_host_read, iters // 4),
            "copy_us": tc, "gather_GBps": moved / tg / 1e3, "copy_GBps": moved / tc / 1e3, "fraction_of_copy": tc / tg}


def main():
    parser = kernel_bench_parser(__doc__, "gpu_draft_model_ops", iters=500)
    parser.add_argument("--hidden", type=int, default=7168)
    args = parser.parse_args()
    cp = require_gpu_or_exit()
    rows = [bench_round(cp, bsz, kind, k, args.hidden, args.iters)
            for bsz in (64, 256, 1024, 5000) for kind, k in (("all_decode", 1), ("all_decode", 3), ("mixed", 3))]
    result = {**device_row(cp), "rows": rows}
    write_report(args.out, result)
    print(f"{'bsz':>5} {'kind':>10} {'k':>2} {'T':>6} {'kept':>6} {'pre us':>7} {'pre graph':>9} {'gather us':>9} "
          f"{'graph':>7} {'+host read':>10} {'GB/s':>6} {'copy GB/s':>9}")
    for r in rows:
        print(f"{r['bsz']:>5} {r['kind']:>10} {r['k']:>2} {r['T']:>6} {r['kept_rows']:>6} {r['preprocess_us']:>7.2f} "
              f"{r['preprocess_graph_us']:>9.2f} {r['gather_us']:>9.2f} {r['gather_graph_us']:>7.2f} "
              f"{r['gather_with_host_read_us']:>10.2f} {r['gather_GBps']:>6.0f} {r['copy_GBps']:>9.0f}")


if __name__ == "__main__":
    main()
