"""`specworker run` on every shipped tensor-parallel config: it starts its ranks itself (paddle.distributed.launch)
and its completions equal those of the same config on one rank (16 packaged prompts x 16 greedy tokens).

Equal here, not in general: TP = N rounds the row-parallel sums differently from TP = 1 (docs/tensor_parallel.md),
so a near-tie could flip; on these prompts the tiny pair (TP 2) and SmolLM2 (TP 3, 64 tokens too) agree exactly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from specworker.config import load_config
from tests.smollm2 import require_smollm2
from tests.test_shipped_configs import TP_CONFIGS

pytestmark = pytest.mark.multiprocess

REPO = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 300


def _run(args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "specworker", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=RUN_TIMEOUT_S)


def test_there_is_a_shipped_tp_config():
    assert [p.name for p in TP_CONFIGS] == ["mtp_tiny_tp2.yaml", "smollm2_tp3.yaml"]


@pytest.mark.parametrize("path", TP_CONFIGS, ids=lambda p: p.name)
def test_cli_run_starts_its_ranks_and_matches_one_rank(path, tmp_path):
    if "models/smollm2-135m" in path.read_text():
        require_smollm2()
    config = load_config(path)
    data = yaml.safe_load(path.read_text())
    data["model"]["path"] = config.model.path  # resolved: the copy lives elsewhere
    data["parallel_config"]["tensor_parallel_size"] = 1
    single = tmp_path / "tp1.yaml"
    single.write_text(yaml.safe_dump(data))
    assert load_config(single).parallel_config.tensor_parallel_size == 1
    outs = {}
    for name, cfg in (("tp", path), ("tp1", single)):
        done = _run(["run", "--config", str(cfg), "--max-tokens", "16", "--json", str(tmp_path / f"{name}.json"),
                     "--tp-log-dir", str(tmp_path / "logs")])
        assert done.returncode == 0, done.stderr[-3000:]
        outs[name] = json.loads((tmp_path / f"{name}.json").read_text())["completions"]
    assert sorted(p.name for p in (tmp_path / "logs").glob("workerlog.*")) == [
        f"workerlog.{r}" for r in range(config.parallel_config.tensor_parallel_size)]
    assert [c["token_ids"] for c in outs["tp"]] == [c["token_ids"] for c in outs["tp1"]]
    assert len(outs["tp"]) == 16
