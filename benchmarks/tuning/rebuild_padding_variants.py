"""Tuning experiment: rebuild_padding kernel shapes (rebuild_padding_variants.cu) against a same-run
device copy, on gpu_pre_process.py's workload (1024 rows of H = 7168 bf16, 256 decode slots x 4).

    python3 benchmarks/tuning/rebuild_padding_variants.py [--out rp_variants.json]

Needs nvcc + CuPy and a GPU. Every variant's output is checked equal to the gathered rows first.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from benchmarks.gpu_pre_process import decode_gather_workload  # noqa: E402
from benchmarks.timing import stream_ptr, time_events, time_graph  # noqa: E402
from kernel_harness import ptr, require_gpu_or_exit  # noqa: E402

P, I = ctypes.c_void_p, ctypes.c_int
VARIANTS = {0: "before tuning: chained plan, 128 x 8", 1: "flat plan, 128 x 8", 2: "flat plan, 256 x 4",
            3: "flat plan, 64 x 16", 4: "flat plan, 128 x 8, .cg loads + .cs stores", 5: "flat plan, 2 rows / block",
            6: "flat plan, 4 rows / block", 7: "flat plan, 256 x 4, .cg loads + .cs stores",
            8: "no plan (row r <- row r): copy-structure ceiling", 9: "no plan, .cg loads + .cs stores"}


def build(cp) -> ctypes.CDLL:
    major, minor = cp.cuda.Device().compute_capability
    lib = Path(tempfile.mkdtemp()) / "rp_variants.so"
    subprocess.run(["nvcc", "-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", f"-arch=sm_{major}{minor}",
                    "-o", str(lib), str(Path(__file__).with_suffix(".cu"))], check=True)
    dll = ctypes.CDLL(str(lib))
    dll.rp_variant_launch.argtypes = [I, P, P, P, P, P, P, P, P, I, I, I, I, P]
    dll.rp_variant_launch.restype = I
    return dll


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="rp_variants.json")
    parser.add_argument("--iters", type=int, default=200)
    args = parser.parse_args()
    cp = require_gpu_or_exit()
    fn = build(cp).rp_variant_launch
    rows, hidden = 1024, 7168
    w = decode_gather_workload(cp, rows, hidden)
    bsz, tmp, d_cu = w["bsz"], w["hidden_states"], w["cu_seqlens_q"]
    out, dst = cp.empty_like(tmp), cp.empty_like(tmp)

    def gather(v):
        return lambda: fn(v, ptr(tmp), ptr(d_cu), ptr(w["seq_lens_this_time"]), ptr(w["seq_lens_decoder"]),
                          ptr(w["seq_lens_encoder"]), ptr(w["batch_id_per_token"]), ptr(d_cu), ptr(out), rows, bsz,
                          rows, hidden * 2, stream_ptr(cp))

    def copy():
        cp.cuda.runtime.memcpyAsync(dst.data.ptr, tmp.data.ptr, tmp.nbytes, cp.cuda.runtime.memcpyDeviceToDevice,
                                    cp.cuda.get_current_stream().ptr)

    for v in VARIANTS:
        out.fill(0)
        assert gather(v)() == 0
        assert (out == tmp).all(), f"variant {v} gathered wrong rows"
    # Eager loops of a ~7 us kernel launched from Python through ctypes partly time the host, so
    # each variant is timed both ways; graph replays give the device time.
    eager = {v: [] for v in [*VARIANTS, "copy"]}
    graph = {v: [] for v in [*VARIANTS, "copy"]}
    for _ in range(3):  # interleave so every variant sees the same machine noise
        for v in [*VARIANTS, "copy"]:
            fn_v = copy if v == "copy" else gather(v)
            eager[v].append(time_events(cp, fn_v, args.iters))
            graph[v].append(time_graph(cp, fn_v, args.iters))
    med = {k: float(np.median(t)) for k, t in eager.items()}
    med_g = {k: float(np.median(t)) for k, t in graph.items()}
    print(f"copy {med_g['copy']:.2f} us graph, {med['copy']:.2f} us eager")
    for v, name in VARIANTS.items():
        print(f"variant {v} ({name}): graph {med_g[v]:.2f} us = {100 * med_g['copy'] / med_g[v]:.1f}% of copy; "
              f"eager {med[v]:.2f} us = {100 * med['copy'] / med[v]:.1f}%")
    Path(args.out).write_text(json.dumps({"rows": rows, "hidden": hidden, "graph_median_us": {str(k): t for k, t in med_g.items()},
                                          "eager_median_us": {str(k): t for k, t in med.items()},
                                          "variants": VARIANTS}, indent=1) + "\n")


if __name__ == "__main__":
    main()
