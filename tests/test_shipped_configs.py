"""Every shipped config loads and runs: CPU configs generate a few tokens end to end; GPU configs run where
Paddle has CUDA and otherwise stop with one error naming `device` (never a traceback from deep inside)."""

from pathlib import Path

import paddle
import pytest

from specworker.batch_run import UserError, load_worker
from specworker.config import load_config
from specworker.sampling_params import SamplingParams
from tests.smollm2 import require_smollm2
from tests.worker.worker_harness import drive, Req

ALL_CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))
# Tensor-parallel configs need their ranks: tests/parallel/test_tp_cli.py runs each through `specworker run`.
TP_CONFIGS = [p for p in ALL_CONFIGS if "tensor_parallel_size" in p.read_text()]
CONFIGS = [p for p in ALL_CONFIGS if p not in TP_CONFIGS]


def test_every_config_is_covered():
    assert len(CONFIGS) >= 8 and {"smollm2.yaml", "baseline.yaml", "mtp.yaml"} <= {p.name for p in CONFIGS}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_config_loads_and_runs(path):
    text = path.read_text()
    if "models/smollm2-135m" in text:
        require_smollm2()
    config = load_config(path)
    if config.device == "gpu" and not paddle.is_compiled_with_cuda():
        with pytest.raises(UserError, match=r"device = 'gpu', but this Paddle .* is a CPU-only build; allowed: "
                                             r"device: cpu"):
            load_worker(config, source=str(path))
        return
    worker = load_worker(config, source=str(path))
    out = drive(worker, [Req("a", [1, 2, 3], SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True))])
    assert len(out["a"][0]) == 3
