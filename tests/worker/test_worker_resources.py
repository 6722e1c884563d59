"""Device and memory problems: Worker(config) raises a ValueError naming the config field before allocating,
and the CLI prints the same as one line with exit 2 (issue 16)."""

import dataclasses

import paddle
import pytest

from specworker.config import load_config
from specworker.worker import model_loading
from specworker.worker.worker import Worker
from tests.test_cli import REPO, assert_one_line_error, specworker

HUGE_NUM_BLOCKS = 100_000_000  # * block_size 16 = 1.6e9 slots, within the int32 limit; terabytes of KV cache


def tiny_config(**scheduler):
    config = load_config(REPO / "configs" / "mtp_tiny.yaml")
    return dataclasses.replace(config, scheduler=dataclasses.replace(config.scheduler, **scheduler))


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_device_gpu_on_cpu_paddle_names_device():
    if paddle.is_compiled_with_cuda():
        pytest.skip("this Paddle is a CUDA build: device gpu is allowed")
    config = dataclasses.replace(tiny_config(), device="gpu")
    with pytest.raises(ValueError, match=r"device = 'gpu', but this Paddle .* is a CPU-only build; allowed: device: cpu"):
        Worker(config)


def test_kv_cache_larger_than_available_memory_names_num_blocks():
    before = rss_bytes()
    with pytest.raises(ValueError, match=rf"scheduler.num_blocks = {HUGE_NUM_BLOCKS}: the KV caches need \d+ bytes "
                                         r"\(\d+ per block\), but only \d+ bytes are available on cpu; allowed: "
                                         r"num_blocks <= \d+"):
        Worker(tiny_config(num_blocks=HUGE_NUM_BLOCKS))
    assert rss_bytes() - before < 256 * 2**20  # raised before allocating the caches


def test_kv_cache_check_uses_the_available_memory_reader(monkeypatch):
    config = tiny_config()
    monkeypatch.setattr(model_loading, "available_memory", lambda place: 1000)
    with pytest.raises(ValueError, match=r"scheduler.num_blocks = 64: .* only 1000 bytes are available on cpu; "
                                         r"allowed: num_blocks <= 0"):
        Worker(config)
    monkeypatch.setattr(model_loading, "available_memory", lambda place: None)  # unknown: no check
    Worker(config)


def test_kv_cache_bytes_counts_target_and_draft():
    config = tiny_config()
    worker = Worker(config)
    caches = [worker.runner.kv_cache, worker.runner.proposer.kv_cache]
    allocated = sum(k.numel().item() * 4 + v.numel().item() * 4 for cache in caches for k, v in cache.layers)
    assert model_loading.kv_cache_bytes(config, worker.runner.model.arch) == allocated


def test_cli_kv_cache_too_large_is_one_line_exit_2(tmp_path):
    path = tmp_path / "huge.yaml"
    path.write_text((REPO / "configs" / "mtp_tiny.yaml").read_text()
                    .replace("num_blocks: 64", f"num_blocks: {HUGE_NUM_BLOCKS}"))
    assert_one_line_error(specworker("run", "--config", str(path)), str(path),
                          f"scheduler.num_blocks = {HUGE_NUM_BLOCKS}: the KV caches need", "bytes are available on cpu")
