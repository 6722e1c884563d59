"""`specworker bench` with a trace: per repetition, every policy's tok/s and steps, and per policy three strings over
its steps: the K it chose (max k_b of the live slots), the drafts the step verified, the tokens it emitted; after each
repetition it prints the adaptive policy's acceptance state (prior, prior_by_k, anchored reaches, E(K), T(1, K)).
Usage (from the repo root): PR_OUT=trace.jsonl python benchmarks/results/policies/smollm2_mtp_b1_k_shift/trace_bench.py
bench --config ... (the bench's own arguments). Wraps the bench's functions at run time; changes nothing else."""
import json, os, sys
import specworker.bench as bench
from specworker.spec_decode import policy as pol
out = open(os.environ.get("PR_OUT", "trace.jsonl"), "a")
traces = {}
def wrap(cls):
    orig_choose = cls.choose
    def choose(self, step):
        r = orig_choose(self, step)
        live = step.live
        traces.setdefault(id(self), []).append((int(r[live].max()) if live.any() else -1, int(step.drafted.max()), int(step.emitted.max())))
        return r
    cls.choose = choose
wrap(pol.AdaptivePolicy); wrap(pol.FixedPolicy)
orig = bench.run_lockstep
rep = [0]
def lock(workers, prompts, params, chat=False):
    traces.clear()
    runs = orig(workers, prompts, params, chat=chat)
    names = [w.config.speculative_config.policy + str(w.config.speculative_config.num_speculative_tokens) if w.config.speculative_config else 'none' for w in workers]
    rec = {"B": len(prompts), "rep": rep[0], "tps": {n: r.tokens_per_s for n, r in zip(names, runs)},
           "steps": {n: r.num_steps for n, r in zip(names, runs)}, "traces": {n: [''.join(str(x[i]) for x in traces.get(id(getattr(w.runner, "policy", None)), [])) for i in range(3)] for n, w in zip(names, workers)}}
    rep[0] += 1
    import numpy as np
    np.set_printoptions(precision=3, suppress=True)
    for w in workers:
        p = w.runner.policy
        if hasattr(p, 'prior_by_k'):
            live = np.zeros(p.cap.shape, bool); live[:len(prompts)] = True
            acc = p.acceptance()
            gain, _ = p.expected_by_k(acc)
            sec, ver = p.predicted_costs(live)
            print('REP', rep[0]-1, 'prior', p.prior(), '\nprior_by_k\n', p.prior_by_k(), '\nk_reaches\n', p.k_totals[0], '\nfirst', p.first_totals,
                  '\ngain', gain[live].sum(0), '\nsec', sec, '\nrate', gain[live].sum(0)/sec, '\nfill', getattr(p.costs, 'fill', None), flush=True)
    out.write(json.dumps(rec) + "\n"); out.flush()
    return runs
bench.run_lockstep = lock
from specworker.cli import main
sys.exit(main(sys.argv[1:]))
