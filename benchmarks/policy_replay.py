"""The adaptive policy replayed offline against a lookup proposer on synthetic compute-bound step costs (pure
Python, seeded, no model): adaptive tokens/s over the best fixed K's, per batch size, in an open batch (slots never
finish: the policy's objective, tokens per second now) and in a closed batch (B requests start together and each
needs --max-tokens tokens, no new request takes a freed slot: what `specworker bench` measures).

The proposer drafts for a slot with probability --found a step (a lookup that finds nothing drafts none), half the
slots accept at the given rates and half at half of them; a step costs --fixed-ms plus --token-ms per fed token,
drafts included (SmolLM2-135M on this CPU: ~60 ms + ~17 ms). docs/adaptive.md discusses the results.

    python benchmarks/policy_replay.py [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specworker.spec_decode.policy import AdaptivePolicy, PolicyStep  # noqa: E402
from specworker.spec_decode.step_cost_model import StepCost  # noqa: E402

K_MAX = 3
CASES = ((0.55, (0.7, 0.65, 0.6)), (0.55, (0.9, 0.85, 0.8)), (0.3, (0.7, 0.6, 0.5)))


def run(choose, batch: int, accept: np.ndarray, args, seed: int, closed: bool, policy=None) -> tuple[float, float]:
    """(emitted tokens per second, mean k_b of the live slots). accept: [batch, K_MAX] conditional acceptance.
    policy: the AdaptivePolicy behind `choose`, whose slots are cleared when a closed batch ends (its requests
    finished, as a worker clears them)."""
    rng = np.random.default_rng(seed)
    left = np.full(batch, args.max_tokens if closed else 10**9)
    drafted = emitted = np.zeros(batch, dtype=np.int64)
    previous, tokens, seconds, ks = None, 0, 0.0, []
    for _ in range(args.steps):
        live = left > 0
        if not live.any():
            break
        remaining = np.where(live, left, 0) if closed and args.drain else None
        k_b = np.broadcast_to(np.asarray(choose(PolicyStep(live=live, drafted=drafted, emitted=emitted,
                                                           cost=previous, remaining=remaining))), (batch,))
        k_b = np.where(live, k_b, 0)
        fed = np.where(rng.random(batch) < args.found, k_b, 0)  # the lookup finds a draft or nothing
        accepted = np.cumprod(rng.random((batch, K_MAX)) < accept, axis=1).sum(axis=1)
        emitted = np.where(live, np.minimum(np.minimum(accepted, fed) + 1, left), 0)
        left = left - emitted
        drafted = np.where(live, fed, 0)
        t = (args.fixed_ms + args.token_ms * (int(live.sum()) + int(fed.sum()))) * 1e-3 * np.exp(rng.normal(0, 0.08))
        previous = (StepCost(num_slots=int(live.sum()), num_drafts=int(fed.sum()), num_substeps=0, seconds=t,
                             verify_seconds=0.95 * t) if (left > 0).any() else None)
        tokens, seconds = tokens + int(emitted.sum()), seconds + t
        ks.append(float(k_b[live].mean()))
    if closed and policy is not None:
        for slot in range(batch):
            policy.on_clear(slot)
    return tokens / seconds, float(np.mean(ks))


def compare(batch: int, found: float, rates: tuple, args, closed: bool) -> dict:
    rng = np.random.default_rng(7)
    half = rng.random(batch) < 0.5
    accept = np.where(half[:, None], np.array(rates)[None], 0.5 * np.array(rates)[None])
    args.found = found
    seeds = range(1, args.seeds + 1)
    fixed = {k: float(np.mean([run(lambda step, k=k: k, batch, accept, args, s, closed)[0] for s in seeds]))
             for k in range(K_MAX + 1)}
    policy = AdaptivePolicy(batch, K_MAX)
    for s in (101, 102):  # warm-up runs, like the bench's
        run(policy.choose, batch, accept, args, s, closed, policy)
    adaptive = [run(policy.choose, batch, accept, args, s, closed, policy) for s in seeds]
    best = max(fixed, key=fixed.get)
    return {"mode": "closed" if closed else "open", "batch": batch, "found": found, "accept": list(rates),
            "fixed_vs_none": {k: v / fixed[0] for k, v in fixed.items()}, "best": best,
            "adaptive_vs_best": float(np.mean([a[0] for a in adaptive]) / fixed[best]),
            "adaptive_mean_k": float(np.mean([a[1] for a in adaptive]))}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch-sizes", default="1,4,16,64")
    p.add_argument("--fixed-ms", type=float, default=60.0)
    p.add_argument("--token-ms", type=float, default=17.0)
    p.add_argument("--max-tokens", type=int, default=64, help="closed batch: tokens per request")
    p.add_argument("--steps", type=int, default=400, help="steps per run at most (an open batch runs them all)")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--no-drain", dest="drain", action="store_false",
                   help="closed batch: do not tell the policy the tokens each slot has left (the open objective)")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    rows = []
    for closed in (False, True):
        for batch in (int(b) for b in args.batch_sizes.split(",")):
            for found, rates in CASES:
                row = compare(batch, found, rates, args, closed)
                rows.append(row)
                fixed = " ".join(f"{k}:{v:.3f}" for k, v in row["fixed_vs_none"].items())
                print(f"{row['mode']:6} B={batch:3d} found={found} accept={rates}: fixed/none {fixed} | adaptive / best "
                      f"{row['adaptive_vs_best']:.3f} (best K={row['best']}), mean k_b {row['adaptive_mean_k']:.2f}",
                      flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"settings": vars(args), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
