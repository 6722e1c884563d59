"""paged_attention on the CPU: time per call at SmolLM2-135M's attention shapes, and a bit-for-bit check of
one build of the op against another.

    python benchmarks/cpu_paged_attention.py [--out benchmarks/results/cpu_paged_attention.json]
    python benchmarks/cpu_paged_attention.py --save-bits old.npz       # with one build of the op
    python benchmarks/cpu_paged_attention.py --compare-bits old.npz    # after rebuilding: every bit the same?

Shapes: 9 query heads over 3 kv heads, head_dim 64, float32, block size 16 (SmolLM2-135M); B slots each feeding
L query rows (1: decode, 4: a verify of 3 drafts) after C cached tokens, and one 200-token prefill. Each time is
the best of 5 rounds of 20 back-to-back calls (ms per call), on the op's threads (the kernels' pool:
SPECWORKER_LINEAR_THREADS, default the CPUs this process may use). "x30" is a forward's 30 layers.

The bits: 60 random steps (1-64 slots; decode, verify, prefill and stopped slots; contexts up to 400 tokens; 4:2,
8:1 and 9:3 heads) in float32, float16 and bfloat16: the output and both caches after the call. A change of the
kernel's loop order or threading must leave all of them as they were.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import paddle

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from specworker.model_executor.ops import paged_attention  # noqa: E402

SHAPES = ((1, 1, 400), (1, 4, 400), (4, 1, 400), (4, 4, 400), (16, 1, 400), (64, 1, 300), (64, 4, 300), (1, 200, 0))
HEADS, HEAD_DIM, BLOCK = (9, 3), 64, 16


def step_args(rng, decs, lens, heads=HEADS, head_dim=HEAD_DIM, block=BLOCK, dtype="float32") -> tuple:
    """The op's arguments for slots with decs[b] cached tokens feeding lens[b] rows (0: a stopped slot), blocks in
    random physical order, random caches, 3 padding rows past T."""
    decs, lens = np.asarray(decs, dtype=np.int32), np.asarray(lens, dtype=np.int32)
    bsz, (nh, nkv) = len(lens), heads
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    token_cap = int(cu[-1]) + 3
    max_blocks = int(np.max(decs + lens)) // block + 1
    num_blocks = bsz * max_blocks + 5
    tables = rng.permutation(num_blocks)[:bsz * max_blocks].reshape(bsz, max_blocks).astype(np.int32)
    batch_ids = np.full(token_cap, -1, dtype=np.int32)
    for b in range(bsz):
        batch_ids[cu[b]:cu[b + 1]] = b

    def floats(*shape):
        return paddle.to_tensor(rng.standard_normal(shape).astype(np.float32)).astype(dtype)

    return (floats(token_cap, nh, head_dim), floats(token_cap, nkv, head_dim), floats(token_cap, nkv, head_dim),
            floats(num_blocks, nkv, block, head_dim), floats(num_blocks, nkv, block, head_dim), paddle.to_tensor(tables),
            paddle.to_tensor(cu), paddle.to_tensor(decs), paddle.to_tensor(lens), paddle.to_tensor(batch_ids), block,
            1.0 / np.sqrt(head_dim))


def time_shape(rng, bsz: int, rows: int, cached: int, rounds: int = 5, calls: int = 20) -> float:
    """Best ms per call over `rounds` rounds of `calls` calls."""
    args = step_args(rng, [cached] * bsz, [rows] * bsz)
    paged_attention(*args)
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            paged_attention(*args)
        best = min(best, (time.perf_counter() - start) / calls)
    return 1e3 * best


def bits() -> dict[str, np.ndarray]:
    """Output and caches after the call, as float32, for 60 random steps (1-64 slots, decode, verify, prefill and
    stopped slots, contexts up to 400 tokens; 4:2, 8:1 and 9:3 heads; head_dim 32-128; block sizes 16 and 64) in
    every dtype."""
    out = {}
    for i in range(60):
        rng = np.random.default_rng(7000 + i)
        bsz = int(rng.choice([1, 3, 4, 17, 64]))
        heads = ((4, 2), (8, 1), (9, 3))[i % 3]
        head_dim, block = (32, 64, 128)[i % 3 if i % 2 else 1], (16, 64)[i % 2]
        decs = rng.integers(0, (48, 200, 400)[i % 3] + 1, bsz)
        lens = np.where(rng.random(bsz) < 0.15, 0, rng.integers(1, 5, bsz))  # stopped, decode and verify slots
        lens = np.where(rng.random(bsz) < 0.1, rng.integers(5, 60, bsz), lens)  # a few (chunked) prefills
        for dtype in ("float32", "float16", "bfloat16"):
            args = step_args(np.random.default_rng(i), decs, lens, heads, head_dim, block, dtype)
            result = paged_attention(*args)
            for name, value in (("o", result), ("k", args[3]), ("v", args[4])):
                out[f"{i}_{dtype}_{name}"] = value.astype("float32").numpy()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="write the timings here (JSON)")
    parser.add_argument("--save-bits", type=Path, help="save the bit cases' results (npz) and exit")
    parser.add_argument("--compare-bits", type=Path, help="compare the bit cases with a saved npz and exit")
    args = parser.parse_args()
    if args.save_bits:
        results = bits()
        np.savez(args.save_bits, **results)
        print(f"saved {len(results)} arrays to {args.save_bits}")
        return
    if args.compare_bits:
        saved, now = np.load(args.compare_bits), bits()
        differ = [k for k in saved.files if k not in now or saved[k].tobytes() != now[k].tobytes()]
        print(f"{len(saved.files)} arrays, {len(differ)} with different bits" + (f": {differ[:8]}" if differ else ""))
        sys.exit(1 if differ or len(saved.files) != len(now) else 0)
    rng = np.random.default_rng(0)
    rows = []
    for bsz, length, cached in SHAPES:
        ms = time_shape(rng, bsz, length, cached)
        rows.append({"slots": bsz, "rows_per_slot": length, "cached": cached, "ms_per_call": ms, "ms_x30": 30 * ms})
        print(f"{bsz:3d} slots x {length:3d} rows after {cached:4d} cached: {ms:8.3f} ms a call, {30 * ms:8.1f} ms x30",
              flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"heads": HEADS, "head_dim": HEAD_DIM, "block_size": BLOCK,
                                        "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}",
                                        "results": rows}, indent=1) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
