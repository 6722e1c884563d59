"""Soak: all-sampled requests through one Worker, RSS every 200 requests (issue 16, the memory leak).

The tiny pair (configs/mtp_tiny.yaml with verify_strategy rejection), random byte prompts,
temperature 0.7-1.0, a seed per request, in waves of max_num_seqs. Prints RSS every --every
requests and the per-request growth: the least-squares slope of RSS over the last half of the run.
A benchmark, not a test. benchmarks/results/soak_sampled.json holds two runs, "before" (the parent
of the fix, run in a temporary git worktree: about 8.5 KB per request) and "after" (about 0.3 KB).

    .venv/bin/python benchmarks/soak_sampled.py [--requests 2000] [--out benchmarks/results/soak_sampled.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from specworker.config import load_config  # noqa: E402
from specworker.sampling_params import SamplingParams  # noqa: E402
from specworker.worker.worker import Worker  # noqa: E402


def rss_bytes() -> int:
    """Resident set size now (/proc/self/statm, field 2, in pages)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys over xs."""
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def run(num_requests: int, every: int, seed: int) -> dict:
    config = load_config(REPO / "configs" / "mtp_tiny.yaml")
    config = dataclasses.replace(config, speculative_config=dataclasses.replace(
        config.speculative_config, verify_strategy="rejection"))
    worker = Worker(config)
    rng = random.Random(seed)
    wave = config.scheduler.max_num_seqs
    points, done, tokens = [], 0, 0
    start = time.perf_counter()
    while done < num_requests:
        for i in range(min(wave, num_requests - done)):
            prompt = [rng.randrange(32, 127) for _ in range(rng.randint(4, 24))]
            params = SamplingParams(max_tokens=rng.randint(8, 24), temperature=rng.uniform(0.7, 1.0),
                                    seed=rng.randrange(2**32))
            worker.add_request(f"r{done + i}", prompt, params)
        while worker.has_unfinished():
            tokens += sum(len(out.new_token_ids) for out in worker.step())
        done += min(wave, num_requests - done)
        if done % every == 0:
            points.append({"requests": done, "rss_bytes": rss_bytes(), "seconds": time.perf_counter() - start})
            print(f"{done:6d} requests  RSS {points[-1]['rss_bytes'] / 2**20:8.2f} MiB  "
                  f"{points[-1]['seconds']:7.1f} s", flush=True)
    tail = [p for p in points if p["requests"] >= num_requests - num_requests // 2]
    growth = slope([p["requests"] for p in tail], [p["rss_bytes"] for p in tail])
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    print(f"per-request RSS growth over the last {num_requests // 2} requests: {growth:.1f} bytes "
          f"(max RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f} MiB)")
    return {"commit": commit, "config": "configs/mtp_tiny.yaml + verify_strategy rejection",
            "requests": num_requests, "tokens": tokens, "seed": seed, "points": points,
            "growth_bytes_per_request_last_half": growth}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--every", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "soak_sampled.json"))
    args = parser.parse_args()
    result = run(args.requests, args.every, args.seed)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
