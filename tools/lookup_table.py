"""Markdown table of the lookup-speculation bench (benchmarks/lookup_bench.sh): one row per method, prompt set and
batch size from benchmarks/results/lookup/*.json, speculative against non-speculative of the same run.

    .venv/bin/python tools/lookup_table.py [benchmarks/results/lookup]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SETS = ("rewrite", "code_fix", "passage_qa", "open_ended")


def rows(folder: Path):
    for path in sorted(folder.glob("*.json")):
        method, _, rest = path.stem.partition("_")
        prompt_set, _, batch = rest.rpartition("_b")
        data = json.loads(path.read_text())
        for r in data["results"]:
            spec, base, speed = r["speculative"], r["baseline"], r["speedup"]
            accept = " / ".join(f"{p['median']:.2f}" for p in spec["acceptance_per_position"])
            yield (method, SETS.index(prompt_set) if prompt_set in SETS else 99, r["batch_size"], prompt_set,
                   f"{spec['mean_acceptance_length']['median']:.2f}", accept,
                   f"{base['tokens_per_s']['median']:.1f}", f"{spec['tokens_per_s']['median']:.1f}",
                   f"{speed['min']:.2f} / {speed['median']:.2f} / {speed['max']:.2f}",
                   "yes" if r["outputs_equal"] else "NO", data["settings"]["repeats"], data["settings"]["max_tokens"])


def main() -> None:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results/lookup")
    print("| method | prompt set | batch | AL | acceptance per position | tok/s none | tok/s spec "
          "| speedup min / med / max | equal | runs | tokens |")
    print("|---|---|---:|---:|---|---:|---:|---|---|---:|---:|")
    for row in sorted(rows(folder), key=lambda r: (r[0], r[2], r[1])):
        method, _, batch, prompt_set, *rest = row
        print("| " + " | ".join(str(x) for x in (method, prompt_set, batch, *rest)) + " |")


if __name__ == "__main__":
    main()
