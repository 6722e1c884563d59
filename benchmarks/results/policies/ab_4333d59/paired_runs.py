import os, sys, json
from specworker import bench as B
orig = B.adaptive_vs_best
def avb(timed, out):
    rows = {n: [(r.tokens_per_s, r.num_steps if hasattr(r,'num_steps') else None) for r in runs] for n, runs in timed.items()}
    json.dump(rows, open(os.environ.get("PR_OUT", "/tmp/d21/pr.json"), "a")); open(os.environ.get("PR_OUT", "/tmp/d21/pr.json"), "a").write("\n")
    return orig(timed, out)
B.adaptive_vs_best = avb
from specworker import cli
sys.argv = ["specworker"] + sys.argv[1:]
cli.main()
