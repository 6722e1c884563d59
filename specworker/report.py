"""Text and image forms of results: the `run` metrics table, the bench table (Markdown; also spliced into
README.md between markers) and bench.png. Returns strings or writes files; printing stays in specworker.cli.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from specworker.batch_run import BatchRun, UserError

__all__ = ["README_BEGIN", "README_END", "bench_table", "format_table", "plot_bench", "plot_policies",
           "policy_table", "run_metrics", "run_metrics_table", "splice_readme"]

# Step phases in the order a step runs them (Worker.phase_seconds keys), with their display names.
PHASE_LABELS = {"pre_process": "pre_process", "target_forward": "target forward",
                "sampling_verify": "sampling/verify", "proposer": "proposer", "update": "update"}
README_BEGIN = "<!-- bench-table:begin (written by `make bench`) -->"
README_END = "<!-- bench-table:end -->"
METHOD_LABELS = {"mtp": "MTP", "ngram": "ngram"}  # speculative_config.method -> how tables and plots name it


def _method_label(bench: dict) -> str:
    """bench.json files written before "method" was recorded are MTP runs."""
    method = bench.get("method", "mtp")
    return METHOD_LABELS.get(method, method)


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str = "") -> str:
    """A Markdown table with padded columns (readable as plain text too). align: one 'l' or 'r' per column
    (default: the first column left, the others right)."""
    align = align or "l" + "r" * (len(header) - 1)
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]

    def line(cells):
        return "| " + " | ".join(str(c).ljust(w) if a == "l" else str(c).rjust(w)
                                  for c, w, a in zip(cells, widths, align)) + " |"

    rule = "|" + "|".join("-" * (w + 1) + (":" if a == "r" else "-") for w, a in zip(widths, align)) + "|"
    return "\n".join([line(header), rule, *(line(row) for row in rows)])


def run_metrics(run: BatchRun) -> dict:
    """The figures of one run as plain data (`run --json`)."""
    out = {"requests": len(run.prompts), "tokens": run.num_tokens, "seconds": run.seconds,
           "tokens_per_s": run.tokens_per_s, "num_steps": run.num_steps, "phase_seconds": dict(run.phase_seconds),
           "other_seconds": run.seconds - sum(run.phase_seconds.values())}
    if run.spec_stats is not None:
        out["spec_decode"] = run.spec_stats.as_dict()
    if run.draft_lens is not None:
        out["policy_drafts_per_batch_size"] = run.draft_lens.as_dict()
    return out


def run_metrics_table(run: BatchRun) -> str:
    """requests, tokens, tokens/s, acceptance, then the step-time split (seconds, share, ms per step)."""
    rows = [("requests", str(len(run.prompts)), ""), ("generated tokens", str(run.num_tokens), ""),
            ("wall time (s)", f"{run.seconds:.2f}", ""), ("tokens/s", f"{run.tokens_per_s:.1f}", ""),
            ("engine steps", str(run.num_steps), f"{run.num_tokens / max(run.num_steps, 1):.2f} tokens/step")]
    stats = run.spec_stats
    if stats is None:
        rows.append(("mean acceptance length", "n/a", "non-speculative config"))
    else:
        rows.append(("mean acceptance length", f"{stats.mean_acceptance_length:.3f}",
                     f"{stats.num_accepted}/{stats.num_drafted} drafts accepted over {stats.num_steps} verify steps"))
        for i, rate in enumerate(stats.acceptance_per_position):
            if stats.drafted_per_position[i] == 0:  # a step drafts num_model_steps tokens, maybe fewer than k
                rows.append((f"acceptance, draft position {i + 1}", "n/a", "never drafted"))
                continue
            rows.append((f"acceptance, draft position {i + 1}", f"{rate:.3f}",
                         f"{stats.accepted_per_position[i]}/{stats.num_steps} verify steps"))
    if run.draft_lens is not None:
        rows.append(("policy drafts per slot-step", f"{run.draft_lens.mean_drafts_per_slot():.2f}",
                     ", ".join(f"B={b}: {d['drafts_per_step']:.1f}/step" for b, d in run.draft_lens.as_dict().items())))
    steps = max(run.num_steps, 1)
    split = [(PHASE_LABELS[p], run.phase_seconds[p]) for p in PHASE_LABELS if p in run.phase_seconds]
    split.append(("other (scheduler, outputs)", run.seconds - sum(run.phase_seconds.values())))
    for label, seconds in split:
        share = 100 * seconds / run.seconds if run.seconds > 0 else 0.0
        rows.append((f"time: {label}", f"{seconds:.3f} s", f"{share:4.1f}%  {1e3 * seconds / steps:.2f} ms/step"))
    return format_table(("metric", "value", "detail"), rows, align="lrl")


def _mid(figure: dict, fmt: str) -> str:
    return format(figure["median"], fmt)


def _range(figure: dict, fmt: str) -> str:
    return f"{format(figure['median'], fmt)} ({format(figure['min'], fmt)}-{format(figure['max'], fmt)})"


def bench_table(bench: dict) -> str:
    """One row per batch size: medians of tokens/s, speedup with its min-max, AL, acceptance per position
    ("-" for a position never drafted: a step drafts num_model_steps tokens, maybe fewer than k)."""
    rows = []
    for r in bench["results"]:
        base, spec = r["baseline"], r["speculative"]
        rows.append((str(r["batch_size"]), _mid(base["tokens_per_s"], ".1f"), _mid(spec["tokens_per_s"], ".1f"),
                     _range(r["speedup"], ".2f"), _mid(spec["mean_acceptance_length"], ".2f"),
                     " / ".join(_mid(p, ".2f") if d["max"] > 0 else "-"
                                for p, d in zip(spec["acceptance_per_position"], spec["drafted_per_position"])),
                     f"{_mid(base['num_steps'], '.0f')} / {_mid(spec['num_steps'], '.0f')}"))
    label = _method_label(bench)
    header = ("batch", "baseline tok/s", f"{label} tok/s", "speedup (min-max)", "AL", "accept per position",
              f"steps base / {label}")
    return format_table(header, rows)


def plot_bench(bench: dict, path: str | Path) -> None:
    """bench.png: speedup (median, min-max bars) and mean acceptance length vs batch size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = bench["results"]
    sizes = [r["batch_size"] for r in results]
    x = list(range(len(sizes)))  # batch sizes on an even categorical axis
    speed = [r["speedup"] for r in results]
    al = [r["speculative"]["mean_acceptance_length"] for r in results]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.6), constrained_layout=True)
    for ax, figs, title, ylabel in ((ax1, speed, "Speedup over non-speculative", "speedup (x)"),
                                    (ax2, al, "Mean acceptance length", "tokens per verify step")):
        mid = [f["median"] for f in figs]
        err = [[m - f["min"] for m, f in zip(mid, figs)], [f["max"] - m for m, f in zip(mid, figs)]]
        ax.errorbar(x, mid, yerr=err, marker="o", capsize=4)
        ax.set_xticks(x, [str(s) for s in sizes])
        ax.set_xlabel("batch size (concurrent requests)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(alpha=0.3)
    ax1.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    k, steps = bench["num_speculative_tokens"], bench["num_model_steps"]
    ngram = bench.get("method") == "ngram"  # drafts up to k per step; MTP drafts num_model_steps
    ax2.set_ylim(1.0, (k if ngram else min(k, steps)) + 1.05)  # the possible range: 1 .. drafts per step + 1
    shape = f"k={k}" if ngram else f"k={k}, num_model_steps={steps}"
    fig.suptitle(f"specworker {_method_label(bench)} ({shape}), greedy, {bench['machine']['device']}: "
                 f"{bench['config']}", fontsize=9)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def policy_table(bench: dict) -> str:
    """One row per batch size: per policy the median speedup over none (min-max) and, for speculative
    policies, the drafts per slot-step they chose; then adaptive / the best other policy: the median (min-max) of the
    ratios within a repetition, and the ratio of the medians of tok/s (bench.adaptive_vs_best)."""
    names = bench["policies"]
    rows = []
    for r in bench["results"]:
        p = r["policies"]
        cells = [str(r["batch_size"]), _mid(p["none"]["tokens_per_s"], ".1f")]
        for n in names:
            if n == "none":
                continue
            k = f" k={_mid(p[n]['policy_drafts_per_slot'], '.2f')}" if n in ("adaptive", "schedule") else ""
            cells.append(_range(p[n]["speedup"], ".2f") + k)
        if "adaptive_vs_best" in r:
            best = r["adaptive_vs_best"]
            paired = f"{_range(best['paired'], '.3f')}, " if "paired" in best else ""  # older bench.json: none
            cells.append(f"{paired}{best['ratio']:.3f} ({best['best']})")
        rows.append(cells)
    header = ["batch", "none tok/s"] + [f"{n} speedup" for n in names if n != "none"]
    if bench["results"] and "adaptive_vs_best" in bench["results"][0]:
        header.append("adaptive / best: paired (min-max), of medians")
    return format_table(header, rows)


def plot_policies(bench: dict, path: str | Path) -> None:
    """Speedup over none vs batch size, one line per policy (median, min-max bars)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = bench["results"]
    x = list(range(len(results)))
    fig, ax = plt.subplots(figsize=(6.4, 3.8), constrained_layout=True)
    for i, name in enumerate(bench["policies"]):
        figs = [r["policies"][name]["speedup"] for r in results]
        mid = [f["median"] for f in figs]
        err = [[m - f["min"] for m, f in zip(mid, figs)], [f["max"] - m for m, f in zip(mid, figs)]]
        style = dict(linewidth=2.5, color="black") if name == "adaptive" else {}
        ax.errorbar([v + 0.03 * (i - 2) for v in x], mid, yerr=err, marker="o", capsize=3, label=name, **style)
    ax.set_xticks(x, [str(r["batch_size"]) for r in results])
    ax.set_xlabel("batch size (concurrent requests)")
    ax.set_ylabel("speedup over no speculation (x)")
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"specworker {_method_label(bench)} policies, greedy, {bench['machine']['device']}: "
                 f"{bench['config']}", fontsize=9)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def splice_readme(readme: str, table: str, note: str) -> str:
    """readme with the text between README_BEGIN and README_END replaced by note and table.
    Raises UserError when the markers are missing."""
    begin, end = readme.find(README_BEGIN), readme.find(README_END)
    if begin < 0 or end < begin:
        raise UserError(f"README has no bench markers; allowed: a README with the lines {README_BEGIN!r} and "
                        f"{README_END!r}")
    return readme[:begin + len(README_BEGIN)] + f"\n{note}\n\n{table}\n" + readme[end:]
