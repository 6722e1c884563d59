import json, os, sys, numpy as np
tag, best = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None
for v in ("old", "new"):
    try: lines = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), f"ab_{tag}_{v}.jsonl")).read().split("\n")
    except FileNotFoundError: continue
    allr = []
    for line in lines:
        if not line.strip(): continue
        rows = json.loads(line)
        b = best or max((n for n in rows if n != "adaptive"), key=lambda n: np.median([x[0] for x in rows[n]]))
        r = [a[0] / c[0] for a, c in zip(rows["adaptive"], rows[b])]
        allr += r
        print(v, b, "median %.3f" % np.median(r), "n", len(r))
    print(v, "ALL median %.3f mean %.3f n %d" % (np.median(allr), np.mean(allr), len(allr)))
