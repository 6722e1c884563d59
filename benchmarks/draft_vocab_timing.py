"""SmolLM2 MTP draft cost at batch 1 per draft vocabulary size (docs/smollm2_mtp.md, Draft vocabulary).

    nice python benchmarks/draft_vocab_timing.py [--sizes 0 2048 4096 8192 16384 32768] [--rounds 3]

Per V_d (0: the whole vocabulary), configs/smollm2_mtp.yaml with speculative_config.draft_vocab_size = V_d and
scheduler.max_num_seqs = 1 (batch 1 as `specworker bench` sizes it):
  logits_ms   the draft's logit rows and argmax at batch 1 (MTPDraft.draft_logits on one hidden row, the
              proposer's argmax and map back), median of --calls calls per round;
  substep_ms  the worker's proposer phase per decode step divided by its substeps (num_model_steps = 2),
              median over the decode steps of one greedy request of --tokens tokens per round (a real engine
              path: draft forward, logits, argmax, the draft ops).
One worker per size, loaded first; the rounds visit the sizes in turn, so drift on the shared machine spreads
over all of them. CPU wall times on a shared 2-core machine: compare sizes within one run, not across runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import paddle

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from specworker.config import load_config  # noqa: E402
from specworker.hf_tokenizer import load_tokenizer  # noqa: E402
from specworker.sampling_params import SamplingParams  # noqa: E402
from specworker.worker.worker import Worker  # noqa: E402

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "smollm2_mtp.yaml"
PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


def logits_seconds(worker: Worker, calls: int) -> list[float]:
    """Seconds of `calls` calls of draft_logits + argmax (+ map back) on one hidden row (after one warm-up)."""
    proposer = worker.runner.proposer
    row = paddle.to_tensor(np.random.default_rng(0).standard_normal((1, 576)).astype(np.float32))
    times = []
    for _ in range(calls + 1):
        start = time.perf_counter()
        proposer._argmax(proposer.draft.draft_logits(row), None, 0).numpy()
        times.append(time.perf_counter() - start)
    return times[1:]


def substep_seconds(worker: Worker, prompt: list[int], tokens: int, substeps: int) -> list[float]:
    """Seconds per substep of the proposer phase at each decode step of one greedy request."""
    worker.add_request(f"r{worker.num_steps}", prompt, SamplingParams(max_tokens=tokens, temperature=0.0,
                                                                      ignore_eos=True))
    per_step = []
    while worker.has_unfinished():
        before = worker.phase_seconds["proposer"]
        worker.step()
        per_step.append((worker.phase_seconds["proposer"] - before) / substeps)
    return per_step[1:]  # the first step is the prefill


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[0, 2048, 4096, 8192, 16384, 32768])
    p.add_argument("--rounds", type=int, default=3, help="rounds over the sizes (interleaved against drift)")
    p.add_argument("--calls", type=int, default=10, help="logits calls per size and round")
    p.add_argument("--tokens", type=int, default=32, help="tokens of the request per size and round")
    args = p.parse_args(argv)
    config = load_config(CONFIG)
    # batch 1 as `specworker bench` runs it: one slot, so the draft's logit rows are one row, not max_num_seqs
    base = dataclasses.replace(config, scheduler=dataclasses.replace(config.scheduler, max_num_seqs=1))
    substeps = base.speculative_config.num_model_steps
    prompt = load_tokenizer(base.model.path).encode(PROMPT)
    workers = {size: Worker(dataclasses.replace(base, speculative_config=dataclasses.replace(
        base.speculative_config, draft_vocab_size=size))) for size in args.sizes}
    logits, substep = {size: [] for size in args.sizes}, {size: [] for size in args.sizes}
    for _ in range(args.rounds):
        for size, worker in workers.items():
            logits[size] += logits_seconds(worker, args.calls)
            substep[size] += substep_seconds(worker, prompt, args.tokens, substeps)
    for size in args.sizes:
        print(json.dumps({"draft_vocab_size": size, "logits_ms": round(1e3 * statistics.median(logits[size]), 2),
                          "substep_ms": round(1e3 * statistics.median(substep[size]), 2),
                          "samples": [len(logits[size]), len(substep[size])]}), flush=True)


if __name__ == "__main__":
    main()
