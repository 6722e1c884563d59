import os, sys, json
from specworker.spec_decode import policy as P
oi = P.AdaptivePolicy.__init__
def init(self, *a, **k):
    oi(self, *a, **k)
    if os.environ.get("NOEXP"): self.explore_every = self.explore_interval = 10**9
P.AdaptivePolicy.__init__ = init
exec(open("benchmarks/results/policies/ab_4333d59/paired_runs.py").read())
