"""Tensor parallelism in one process (docs/tensor_parallel.md): the split arithmetic, slice reads of safetensors
files, per-rank loading (each rank's parameters are exactly its slices of the single-rank model), and the errors
a wrong tensor_parallel_size gets before any rank starts. The collectives are tested with real ranks in
test_tensor_parallel.py.
"""

from __future__ import annotations

import numpy as np
import paddle
import pytest
import yaml
from safetensors.numpy import save_file

from specworker.cli import main
from specworker.config import ConfigError, ModelConfig, ParallelConfig, config_from_dict
from specworker.model_executor.models.checkpoint import load_mtp, load_target
from specworker.model_executor.models.hf_checkpoint import load_hf_mtp, load_hf_target
from specworker.model_executor.models.safetensors_io import SafetensorsFile
from specworker.model_executor.models.tp_shards import Shard, our_layout_shard, read_shard
from specworker.model_executor.parallel import SINGLE_RANK, TensorParallel
from specworker.tp_launch import launch_argv
from specworker.worker.worker import Worker
from tests.model_executor.test_hf_golden import DATA
from tests.model_executor.test_hf_mtp import _write_mtp
from tests.smollm2 import SMOLLM2_DIR, require_smollm2
from tests.worker.worker_harness import make_config

HF_MODELS = ["llama", "llama_bf16", "llama_sharded", "qwen2", "qwen3", "ernie4_5"]


def test_tensor_parallel_split_arithmetic():
    assert [TensorParallel(r, 2).part(6) for r in range(2)] == [(0, 3), (3, 6)]
    assert [TensorParallel(r, 3).part(1536) for r in range(3)] == [(0, 512), (512, 1024), (1024, 1536)]
    # the tiny vocabulary (259) does not split in two: 130 rows each, the last one of rank 1 is padding
    assert TensorParallel(0, 2).vocab_share(259) == 130
    assert [TensorParallel(r, 2).vocab_part(259) for r in range(2)] == [(0, 130), (130, 259)]
    assert TensorParallel(2, 3).vocab_part(7) == (6, 7)
    x = paddle.ones([2, 3])
    assert SINGLE_RANK.reduce_sum(x) is x and SINGLE_RANK.gather_vocab(x, 3) is x  # no collective, no copy


@pytest.mark.parametrize("rank,size", [(0, 0), (2, 2), (-1, 2), (0, True)])
def test_tensor_parallel_rejects_bad_rank_or_size(rank, size):
    with pytest.raises(ValueError, match=r"TensorParallel: (rank|size) = .*; allowed"):
        TensorParallel(rank, size)


def test_read_shard_reads_exactly_the_slices(tmp_path):
    """float32 here; bfloat16 files go through the same reads in test_hf_rank_loads_its_slices (llama_bf16)."""
    full = np.random.default_rng(0).standard_normal([7, 10]).astype(np.float32)
    path = tmp_path / "t.safetensors"
    save_file({"w": full}, str(path))
    f = SafetensorsFile(path)
    for shard in (Shard(0, 7, ((2, 5),)), Shard(1, 10, ((0, 2), (6, 9))), Shard(0, 7, ((4, 7),), padded=4),
                  Shard(1, 10, ((8, 10),), padded=5)):
        np.testing.assert_array_equal(read_shard(f, "w", shard), shard.apply(full))
    with pytest.raises(ValueError, match=r"no slice 3:11 along axis 1"):
        f.float32_slice("w", 1, 3, 11)


def _expect_shards(sharded: paddle.nn.Layer, whole: paddle.nn.Layer, arch, tp: TensorParallel) -> int:
    """Every parameter of `sharded` is its Shard of `whole`'s (or equal when replicated); returns how many are
    sharded."""
    whole_params, count = dict(whole.named_parameters()), 0
    for name, param in sharded.named_parameters():
        shard = our_layout_shard(name, arch, tp)
        want = whole_params[name].numpy()
        np.testing.assert_array_equal(param.numpy(), want if shard is None else shard.apply(want), err_msg=name)
        count += shard is not None
    return count


@pytest.mark.parametrize("name", HF_MODELS)
def test_hf_rank_loads_its_slices_of_the_single_rank_model(name):
    """Rows of a head move together, so the loader's per-rank slices (read before the transposes, fusions and
    ERNIE's interleaved-to-half permutation) equal the single-rank model's parameters sliced afterwards."""
    whole = load_hf_target(DATA / name)
    for rank in range(2):
        tp = TensorParallel(rank, 2)
        assert _expect_shards(load_hf_target(DATA / name, tp=tp), whole, whole.arch, tp) > 0


@pytest.mark.parametrize("src_case,naming", [("ernie4_5", "ernie"), ("llama_linear", "deepseek")])
def test_hf_mtp_rank_loads_its_slices(tmp_path, src_case, naming):
    """An MTP layer in a Hugging Face checkpoint (ERNIE or DeepSeek-V3 naming) is sharded like the target's
    layers; eh_proj and the norms are replicated."""
    _write_mtp(src_case, tmp_path / "ckpt", naming)
    whole = load_hf_target(tmp_path / "ckpt")
    whole_draft = load_hf_mtp(tmp_path / "ckpt", whole)
    for rank in range(2):
        tp = TensorParallel(rank, 2)
        draft = load_hf_mtp(tmp_path / "ckpt", load_hf_target(tmp_path / "ckpt", tp=tp))
        assert _expect_shards(draft, whole_draft, whole.arch, tp) == 4  # qkv_proj, o_proj, gate_up, down


def test_tiny_rank_loads_its_slices_and_the_spans_cover_each_tensor_once():
    whole = load_target(ModelConfig())
    whole_draft = load_mtp("builtin:tiny-mtp", whole)
    covered: dict[str, list] = {}
    for rank in range(2):
        tp = TensorParallel(rank, 2)
        target = load_target(ModelConfig(), None, tp)
        assert _expect_shards(target, whole, whole.arch, tp) == 2 + 4 * whole.arch.num_layers
        assert _expect_shards(load_mtp("builtin:tiny-mtp", target), whole_draft, whole.arch, tp) == 4
        for pname, _ in target.named_parameters():
            if (shard := our_layout_shard(pname, whole.arch, tp)) is not None:
                covered.setdefault(pname, []).extend(shard.spans)
    for pname, spans in covered.items():
        full = our_layout_shard(pname, whole.arch, SINGLE_RANK).full
        assert sorted(i for a, b in spans for i in range(a, b)) == list(range(full)), pname
    assert target.embed_tokens.shape == [130, 192] and target.lm_head.shape == [192, 130]
    assert target.new_kv_cache(4, 16).shape == [4, 1, 16, 32]  # one of the two KV heads per rank


def test_worker_with_tp_outside_a_launch_names_the_ranks():
    config = config_from_dict({"parallel_config": {"tensor_parallel_size": 2}})
    with pytest.raises(ConfigError, match=r"parallel_config.tensor_parallel_size = 2, but this process is one of 1 "
                                          r"ranks; allowed: 1 here, or start 2 ranks"):
        Worker(config)


def test_sharded_model_injected_into_a_single_rank_config_is_rejected():
    shard = load_target(ModelConfig(), None, TensorParallel(0, 2))
    with pytest.raises(ValueError, match=r"tensor_parallel_size = 1, but the injected model is sharded over 2 ranks"):
        Worker(make_config(), model=shard)


def test_cli_run_rejects_a_size_that_does_not_divide_smollm2_before_starting_ranks(tmp_path, capsys):
    """SmolLM2 has 9 heads and 3 KV heads: tensor_parallel_size 2 is refused naming the field, nothing launched."""
    require_smollm2()
    config = {"model": {"path": str(SMOLLM2_DIR)}, "parallel_config": {"tensor_parallel_size": 2}}
    path = tmp_path / "tp2.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["run", "--config", str(path), "--tp-log-dir", str(tmp_path / "logs")]) == 2
    err = capsys.readouterr().err
    assert "parallel_config.tensor_parallel_size = 2: does not divide" in err and "num_heads = 9" in err, err
    assert not (tmp_path / "logs").exists()


def test_check_config_rejects_a_size_that_does_not_divide_smollm2(tmp_path, capsys):
    require_smollm2()
    path = tmp_path / "tp.yaml"
    for size, status in ((2, 2), (3, 0)):
        path.write_text(yaml.safe_dump({"model": {"path": str(SMOLLM2_DIR)},
                                        "parallel_config": {"tensor_parallel_size": size}}))
        assert main(["check-config", str(path)]) == status
    assert "tensor_parallel_size = 2: does not divide" in capsys.readouterr().err


def test_checkpoint_size_check_names_the_config_json():
    with pytest.raises(ConfigError, match=r"config.json's num_heads = 4"):
        load_hf_target(DATA / "llama", tp=TensorParallel(0, 3))


def test_launch_argv_is_the_documented_command():
    argv = launch_argv(3, ["python", "-m", "specworker", "run"], "logs")
    assert argv[1:] == ["-m", "paddle.distributed.launch", "--nproc_per_node", "3", "--log_dir", "logs", "python",
                        "-m", "specworker", "run"]
    with pytest.raises(ValueError, match=r"nproc = 0; allowed"):
        launch_argv(0, ["x"], "logs")


def test_parallel_config_defaults_to_one_rank():
    assert ParallelConfig().tensor_parallel_size == 1
    assert make_config().parallel_config.tensor_parallel_size == 1
