"""End-to-end before / after: `specworker run` from two source trees (each with its own build), alternated.

    python benchmarks/compare_trees.py --before /tmp/base --after . --config configs/smollm2.yaml \
        --prompts p1.txt,p16.txt --max-tokens 32 --repeats 3 [--out results.json]

Each tree runs with its own .venv/bin/python and build/ops (e.g. `git archive <rev> | tar -x -C /tmp/base`,
then a copy of that revision's build/ops and links to .venv and models/). Runs alternate before, after,
before, ... so both see the same machine load; per prompts file the table gives the median tokens/s, the
after / before ratio of the medians (min-max over the pairs of back-to-back runs) and ms per step (the
first step, the prefill, included).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
from pathlib import Path


def run_once(tree: Path, config: str, prompts: str, max_tokens: int, env: dict[str, str] | None = None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        cmd = [str(tree / ".venv" / "bin" / "python"), "-m", "specworker", "run", "--config", config,
               "--prompts", str(Path(prompts).resolve()), "--max-tokens", str(max_tokens), "--ignore-eos",
               "--json", str(out)]
        proc = subprocess.run(cmd, cwd=tree, capture_output=True, text=True,
                              env=None if not env else {**os.environ, **env})
        if proc.returncode != 0:
            raise SystemExit(f"{tree}: {' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
        metrics = json.loads(out.read_text())["metrics"]
    steps = metrics["num_steps"]
    return {"tokens_per_s": metrics["tokens_per_s"], "steps": steps,
            "target_forward_ms_per_step": 1e3 * metrics["phase_seconds"]["target_forward"] / steps,
            "step_ms": 1e3 * metrics["seconds"] / steps}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, type=Path)
    parser.add_argument("--after", required=True, type=Path)
    parser.add_argument("--config", required=True, help="path relative to each tree")
    parser.add_argument("--after-config", default=None, help="the after tree's config (default: --config)")
    parser.add_argument("--prompts", required=True, help="comma-separated prompt files")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None)
    parser.add_argument("--before-env", action="append", default=[], metavar="KEY=VALUE",
                        help="environment of the before runs (e.g. --before . --after . --before-env "
                             "SPECWORKER_CPU_LINEAR_DIRECT=0: one tree, a switch off vs on)")
    args = parser.parse_args()
    bad = [e for e in args.before_env if "=" not in e or not e.split("=", 1)[0]]
    if bad:
        parser.error(f"--before-env {bad[0]!r}: expected KEY=VALUE")
    before_env = dict(e.split("=", 1) for e in args.before_env)
    result = {"config": args.config, "after_config": args.after_config or args.config, "max_tokens": args.max_tokens,
              "before": str(args.before), "after": str(args.after), "before_env": before_env, "runs": {}}
    print("| prompts | before tok/s | after tok/s | after / before (min-max) | before ms/step | after ms/step |")
    print("|---|--:|--:|--:|--:|--:|")
    for prompts in args.prompts.split(","):
        runs = {"before": [], "after": []}
        for _ in range(args.repeats):
            for name in ("before", "after"):
                config = args.after_config if name == "after" and args.after_config else args.config
                runs[name].append(run_once(getattr(args, name), config, prompts, args.max_tokens,
                                           before_env if name == "before" else None))
        med = {name: {key: statistics.median(r[key] for r in rs) for key in rs[0]} for name, rs in runs.items()}
        result["runs"][prompts] = {"all": runs, "median": med}
        b, a = med["before"], med["after"]
        ratios = [ra["tokens_per_s"] / rb["tokens_per_s"] for rb, ra in zip(runs["before"], runs["after"])]
        result["runs"][prompts]["ratios"] = ratios
        print(f"| {Path(prompts).name} | {b['tokens_per_s']:.1f} | {a['tokens_per_s']:.1f} | "
              f"{a['tokens_per_s'] / b['tokens_per_s']:.2f} ({min(ratios):.2f}-{max(ratios):.2f}) | {b['step_ms']:.1f} | "
              f"{a['step_ms']:.1f} |", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
