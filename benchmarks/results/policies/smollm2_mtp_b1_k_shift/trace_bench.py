"""`specworker bench` with a step trace (a measurement aid; it wraps the bench's functions at run time and changes
nothing else).

Per lockstep repetition it appends one JSON line to $PR_OUT (default trace.jsonl): each policy's tok/s and steps
(`fixed0` is `none`, `adaptive3` the adaptive worker at k = 3) and, per policy, three strings over its steps: the K it
chose (the largest k_b of the live slots), the drafts the step verified and the tokens it emitted. After each
repetition it prints the adaptive policy's acceptance state: prior, prior_by_k, anchored reaches, first
verifications, E(K) and T(B, K) at a fresh slot, and the lookup fill.

Usage, from the repo root:
    PR_OUT=trace.jsonl python benchmarks/results/policies/smollm2_mtp_b1_k_shift/trace_bench.py bench --config ...
"""

import json
import os
import sys

import numpy as np

import specworker.bench as bench
from specworker.cli import main
from specworker.spec_decode import policy as policies

OUT = open(os.environ.get("PR_OUT", "trace.jsonl"), "a")  # noqa: SIM115 (open for the whole run)
TRACES: dict[int, list[tuple[int, int, int]]] = {}  # id(policy) -> (K, drafted, emitted) per step
REPETITION = [0]


def _traced(cls) -> None:
    choose = cls.choose

    def traced_choose(self, step):
        k_b = choose(self, step)
        chosen = int(k_b[step.live].max()) if step.live.any() else -1
        TRACES.setdefault(id(self), []).append((chosen, int(step.drafted.max()), int(step.emitted.max())))
        return k_b

    cls.choose = traced_choose


def _name(worker) -> str:
    spec = worker.config.speculative_config
    return spec.policy + str(spec.num_speculative_tokens)


def _print_state(workers, num_prompts: int) -> None:
    np.set_printoptions(precision=3, suppress=True)
    for worker in workers:
        policy = getattr(worker.runner, "policy", None)
        if not isinstance(policy, policies.AdaptivePolicy):
            continue
        live = np.zeros(policy.cap.shape, dtype=bool)
        live[:num_prompts] = True
        gain, _ = policy.expected_by_k(policy.acceptance())
        seconds, _ = policy.predicted_costs(live)
        print(f"REP {REPETITION[0]} prior {policy.prior()}\nprior_by_k\n{policy.prior_by_k()}\n"
              f"k_reaches\n{policy.k_totals[0]}\nfirst {policy.first_totals}\ngain {gain[live].sum(0)}\n"
              f"sec {seconds}\nrate {gain[live].sum(0) / seconds}\nfill {getattr(policy.costs, 'fill', None)}",
              flush=True)


def _run_lockstep(run_lockstep):
    def traced(workers, prompts, params, chat=False):
        TRACES.clear()
        runs = run_lockstep(workers, prompts, params, chat=chat)
        names = [_name(w) for w in workers]
        steps = {n: TRACES.get(id(getattr(w.runner, "policy", None)), []) for n, w in zip(names, workers)}
        record = {"B": len(prompts), "rep": REPETITION[0],
                  "tps": {n: r.tokens_per_s for n, r in zip(names, runs)},
                  "steps": {n: r.num_steps for n, r in zip(names, runs)},
                  "traces": {n: ["".join(str(s[i]) for s in trace) for i in range(3)] for n, trace in steps.items()}}
        OUT.write(json.dumps(record) + "\n")
        OUT.flush()
        _print_state(workers, len(prompts))
        REPETITION[0] += 1
        return runs

    return traced


if __name__ == "__main__":
    _traced(policies.AdaptivePolicy)
    _traced(policies.FixedPolicy)
    bench.run_lockstep = _run_lockstep(bench.run_lockstep)
    sys.exit(main(sys.argv[1:]))
