"""Starts the ranks of a tensor-parallel run with paddle.distributed.launch (docs/tensor_parallel.md).

The launcher runs the same command once per rank with PADDLE_TRAINER_ID / PADDLE_TRAINERS_NUM set, keeps
each rank's output in <log_dir>/workerlog.<rank> and echoes rank 0's. Nothing here communicates.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["launch_argv", "run_ranks"]


def launch_argv(nproc: int, command: Sequence[str], log_dir: str | Path) -> list[str]:
    """The one launch command: `python -m paddle.distributed.launch --nproc_per_node N --log_dir D <command>`.
    `command` starts with an executable (e.g. sys.executable, "-m", "specworker", "run", ...): the launcher
    runs a non-.py first word as a program with the rest as its arguments."""
    if isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 1:
        raise ValueError(f"launch_argv: nproc = {nproc!r}; allowed: an int >= 1")
    if not command:
        raise ValueError("launch_argv: command is empty; allowed: an executable and its arguments")
    return [sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", str(nproc),
            "--log_dir", str(log_dir), *command]


def run_ranks(nproc: int, command: Sequence[str], log_dir: str | Path, *, env: dict | None = None,
              timeout: float | None = None) -> int:
    """Runs `command` as `nproc` ranks on this machine and waits; returns the launcher's exit status (nonzero
    when any rank failed; its log is <log_dir>/workerlog.<rank>). Raises subprocess.TimeoutExpired."""
    Path(log_dir).mkdir(parents=True, exist_ok=True)
    return subprocess.run(launch_argv(nproc, command, log_dir), env=env, timeout=timeout, check=False).returncode
