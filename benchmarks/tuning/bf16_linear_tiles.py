"""Tuning sweep for batch_invariant_linear_bf16's tile choice: every tile shape of the kernel (ids 0 .. 8,
custom_ops/gpu_ops/kernels/batch_invariant_linear_bf16.cu) at the benchmark's shapes and batch sizes, so
PickTile can be set from one GPU run. All tiles give the same bits (checked here on the way).
    python3 benchmarks/tuning/bf16_linear_tiles.py [--out bf16_linear_tiles.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.gpu_bf16_linear import BATCH, OUT_BFLOAT16, SHAPES, random_bf16  # noqa: E402
from benchmarks.timing import stream_ptr, time_median_us  # noqa: E402
from kernel_harness import ptr, raw_launcher, require_gpu_or_exit  # noqa: E402

NUM_TILES = 9


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bf16_linear_tiles.json")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    cp = require_gpu_or_exit()
    launch = raw_launcher("specworker_batch_invariant_linear_bf16_tile_launch")
    results = []
    for name, (K, N) in SHAPES.items():
        for M in BATCH:
            x, w = random_bf16(cp, (M, K), M + K, 1.0), random_bf16(cp, (K, N), K + N, K ** -0.5)
            outs, times = [], []
            for tile in range(NUM_TILES):
                out = cp.empty((M, N), dtype=cp.uint16)

                def run(tile=tile, out=out):
                    err = launch(ptr(x), ptr(w), None, ptr(out), M, K, N, OUT_BFLOAT16, tile, stream_ptr(cp))
                    if err != 0:
                        raise RuntimeError(f"tile {tile}: cudaError {err}")

                calls = max(1, min(100, int(1e10 / (2 * M * K * N))))
                times.append(time_median_us(cp, run, args.reps, calls))
                outs.append(out)
            same = all(bool((o == outs[0]).all()) for o in outs)
            best = min(range(NUM_TILES), key=times.__getitem__)
            row = {"shape": name, "M": M, "K": K, "N": N, "tile_us": times, "best": best, "same_bits": same}
            results.append(row)
            print(f"{name:32s} M={M:5d} best={best} {times[best]:9.2f}us  " +
                  " ".join(f"{t:8.1f}" for t in times) + ("" if same else "  BITS DIFFER"), flush=True)
            del outs
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
