"""paged_attention on the CPU: time per call at SmolLM2-135M's attention shapes, and a bit-for-bit check of
one build of the op against another.

    python benchmarks/cpu_paged_attention.py [--out benchmarks/results/cpu_paged_attention.json]
    python benchmarks/cpu_paged_attention.py --save-bits old.npz       # with one build of the op
    python benchmarks/cpu_paged_attention.py --compare-bits old.npz    # after rebuilding: every bit the same?

Shapes: 9 query heads over 3 kv heads, head_dim 64, float32, block size 16 (SmolLM2-135M); B slots each feeding
L query rows (1: decode, 4: a verify of 3 drafts) after C cached tokens, and one 200-token prefill. Each time is
the best of 5 rounds of 20 back-to-back calls (ms per call), on the op's threads (the kernels' pool:
SPECWORKER_LINEAR_THREADS, default the CPUs this process may use). "x30" is a forward's 30 layers.

The bits: every case of the op's test grid (reference/cases/paged_attention.py, grid_cases) and 40 more with 9:3
heads, contexts up to 400 tokens and up to 64 slots, in float32, float16 and bfloat16: the output and both caches
after the call. A change of the kernel's loop order or threading must leave all of them as they were.
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
from reference.cases.paged_attention import (  # noqa: E402
    AttentionCase, grid_cases, make_attention_case, pack_case, random_slot,
)
from specworker.model_executor.ops import paged_attention  # noqa: E402

SHAPES = ((1, 1, 400), (1, 4, 400), (4, 1, 400), (4, 4, 400), (16, 1, 400), (64, 1, 300), (64, 4, 300), (1, 200, 0))
HEADS, HEAD_DIM, BLOCK = (9, 3), 64, 16


def op_args(case: AttentionCase, dtype: str = "float32") -> tuple:
    """The case's inputs as CPU tensors (float ones in `dtype`), then the op's attributes."""
    floats = [paddle.to_tensor(x).astype(dtype) for x in (case.q, case.k, case.v, case.key_cache, case.value_cache)]
    ints = [paddle.to_tensor(x) for x in (case.block_tables, case.cu_seqlens_q, case.seq_lens_decoder,
                                          case.seq_lens_this_time, case.batch_id_per_token)]
    return (*floats, *ints, case.block_size, case.scale)


def time_shape(rng, bsz: int, rows: int, cached: int, rounds: int = 5, calls: int = 20) -> float:
    """Best ms per call over `rounds` rounds of `calls` calls."""
    args = op_args(pack_case(rng, [random_slot(rng, cached, rows, *HEADS, HEAD_DIM) for _ in range(bsz)], BLOCK,
                             garbage="large"))
    paged_attention(*args)
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            paged_attention(*args)
        best = min(best, (time.perf_counter() - start) / calls)
    return 1e3 * best


def bit_cases():
    """(seed, bsz, kind, make_attention_case's keywords) of the op's test grid and of 40 longer steps."""
    cases = [(c[0], c[1], c[2], dict(block_size=c[3], head_dim=c[4], heads=c[5], garbage=c[6])) for c in grid_cases()]
    for s in range(40):
        cases.append((9000 + s, (1, 4, 17, 64)[s % 4], ("mixed", "decode", "prefill", "mixed")[s % 4],
                      dict(block_size=BLOCK, head_dim=HEAD_DIM, heads=HEADS, max_model_len=(48, 200, 400, 120)[s % 4])))
    return cases


def bits() -> dict[str, np.ndarray]:
    """Output and both caches after the call, as float32, for every bit case in every dtype."""
    out = {}
    for i, (seed, bsz, kind, kw) in enumerate(bit_cases()):
        case = make_attention_case(seed, bsz, kind, **kw)
        for dtype in ("float32", "float16", "bfloat16"):
            args = op_args(case, dtype)
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
