"""Tuning sweep for batch_invariant_linear_bf16's tile and split-mode choice: the chosen tile shapes of the kernel
(ids 0 .. 9 mma.sync, 10 .. 16 wgmma of which 14, 15 and 16 warp-specialised;
custom_ops/gpu_ops/kernels/batch_invariant_linear_bf16*) at the benchmark's shapes and batch sizes, each split shape
in both split modes (one block / cluster), so PickMmaTile, PickWgTile, PickWsTile and the split-mode rule can be set
from one GPU run. Bits are compared on the way: within an instruction
family they must agree (the tests assert it); across families the sweep only reports it.
    python3 benchmarks/tuning/bf16_linear_tiles.py [--out bf16_linear_tiles.json] [--small-tiles 2,9,10,11]
        [--large-tiles 4,10,11,12,13] [--small-batch 1,8,64] [--large-batch 512,4096] [--shapes SUBSTRING,...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.gpu_bf16_linear import OUT_BFLOAT16, SHAPES, random_bf16  # noqa: E402
from benchmarks.timing import stream_ptr, time_median_us  # noqa: E402
from kernel_harness import ptr, raw_launcher, require_gpu_or_exit  # noqa: E402
from reference.batch_invariant_linear_bf16 import ref_batch_invariant_linear_bf16_chunks  # noqa: E402

MMA_TILES = set(range(10))
CUDA_ERROR_NOT_SUPPORTED = 801


def ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bf16_linear_tiles.json")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--small-tiles", default="2,9,10,11")
    parser.add_argument("--large-tiles", default="4,10,11,12,13")
    parser.add_argument("--small-batch", default="1,8,64")
    parser.add_argument("--large-batch", default="512,4096")
    parser.add_argument("--shapes", default="", help="comma-separated substrings of shape names (default: all)")
    args = parser.parse_args()
    cp = require_gpu_or_exit()
    launch = raw_launcher("specworker_batch_invariant_linear_bf16_tile_launch")
    wanted = [s for s in args.shapes.split(",") if s]
    shapes = {k: v for k, v in SHAPES.items() if not wanted or any(s in k for s in wanted)}
    plan = [(M, ints(args.small_tiles)) for M in ints(args.small_batch)] + \
        [(M, ints(args.large_tiles)) for M in ints(args.large_batch)]
    results = []
    for name, (K, N) in shapes.items():
        split = len(ref_batch_invariant_linear_bf16_chunks(K, N)) > 1
        modes = (0, 1) if split else (-1,)
        w = random_bf16(cp, (K, N), K + N, K ** -0.5)
        for M, tiles in plan:
            x = random_bf16(cp, (M, K), M + K, 1.0)
            times, outs = {}, {}
            for tile in tiles:
                for mode in modes:
                    out = cp.empty((M, N), dtype=cp.uint16)

                    def run(tile=tile, mode=mode, out=out):
                        return launch(ptr(x), ptr(w), None, ptr(out), M, K, N, OUT_BFLOAT16, tile, mode, stream_ptr(cp))

                    rc = run()
                    if rc != 0:  # e.g. wgmma tiles on a build without sm_90a, or no one-block mode for the tile
                        times[f"{tile}/{mode}"] = f"cudaError {rc}"
                        continue
                    calls = max(1, min(100, int(3e9 / (2 * M * K * N))))
                    times[f"{tile}/{mode}"] = time_median_us(cp, run, args.reps, calls)
                    outs[(tile, mode)] = out
            keys = list(outs)
            fam = {f: [k for k in keys if (k[0] in MMA_TILES) == f] for f in (True, False)}
            same_in_family = all(bool((outs[k] == outs[ks[0]]).all()) for ks in fam.values() if ks for k in ks)
            across = None
            if fam[True] and fam[False]:
                across = bool((outs[fam[True][0]] == outs[fam[False][0]]).all())
            timed = {k: v for k, v in times.items() if isinstance(v, float)}
            best = min(timed, key=timed.get) if timed else None
            row = {"shape": name, "M": M, "K": K, "N": N, "split": split, "times_us": times, "best": best,
                   "same_bits_in_family": same_in_family, "mma_equals_wgmma": across}
            results.append(row)
            print(f"{name:32s} M={M:5d} best={best} {timed.get(best, 0):9.2f}us  " +
                  " ".join(f"{k}:{v:.1f}" if isinstance(v, float) else f"{k}:{v}" for k, v in times.items()) +
                  ("" if same_in_family else "  BITS DIFFER IN FAMILY") +
                  ("" if across is None else f"  mma==wgmma:{across}"), flush=True)
            del outs
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
