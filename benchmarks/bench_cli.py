"""Command-line and report plumbing shared by the kernel benchmark scripts: the --out / --iters parser they
start from, what a PyTorch-baseline benchmark needs before it runs, the device row and the JSON report.
Timing lives in benchmarks/timing.py; building and launching the kernels in kernel_harness."""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def kernel_bench_parser(doc: str, name: str, iters: int, iters_help: str | None = None) -> argparse.ArgumentParser:
    """A parser described by the first line of `doc` with --out (a Path, default benchmarks/results/<name>.json)
    and --iters (default `iters`); the caller adds its own options."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / f"{name}.json")
    parser.add_argument("--iters", type=int, default=iters, help=iters_help)
    return parser


def add_repeat_options(parser: argparse.ArgumentParser) -> None:
    """--warmup (launches before each timed run), --runs (timed runs; reports take their median) and --seed."""
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)


def check_comma_list(parser: argparse.ArgumentParser, option: str, value: str, allowed) -> None:
    """Exits through the parser, naming the option, if an item of the comma list `value` is not in `allowed`."""
    for item in value.split(","):
        if item not in allowed:
            parser.error(f"{option}: unknown {item!r}; choose from {', '.join(allowed)}")


def _torch_baseline_unavailable_reason() -> str | None:
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed (pip install torch)"
    if not torch.cuda.is_available():
        return "no CUDA GPU visible to PyTorch"
    from kernel_harness import gpu_unavailable_reason

    reason = gpu_unavailable_reason()
    return None if reason is None else f"cannot build the kernels: {reason}"


def import_torch_baseline(benchmark: str):
    """The torch module for a benchmark timed against PyTorch, or None after saying on stderr why `benchmark`
    cannot run here (no PyTorch, no GPU it sees, or the kernels cannot be built)."""
    reason = _torch_baseline_unavailable_reason()
    if reason is not None:
        print(f"{benchmark}: {reason}", file=sys.stderr)
        return None
    import torch

    return torch


def device_row(cp) -> dict:
    """The report's device (CUDA device 0, as CuPy names it) and host."""
    return {"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "host": platform.node()}


def print_table(header: str, lines: list[str]) -> None:
    """A blank line, the header, a rule as wide as the header, then the lines."""
    print()
    print(header)
    print("-" * len(header))
    for line in lines:
        print(line)


def write_report(out, report: dict, **dumps_kwargs) -> None:
    """Writes `report` as indented JSON to `out` (its folder created) and says where."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, **dumps_kwargs) + "\n")
    print(f"wrote {out}")
