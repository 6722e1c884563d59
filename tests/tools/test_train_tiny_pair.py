"""tools/train_tiny_pair.py runs end to end (3 steps per phase, a tiny model) and its output loads."""

import importlib.util
from pathlib import Path

import numpy as np

from specworker.config import ModelConfig
from specworker.model_executor.models.checkpoint import load_mtp, load_target

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "train_tiny_pair.py"


def _script():
    spec = importlib.util.spec_from_file_location("train_tiny_pair", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TINY = ["--steps", "3", "--mtp-steps", "3", "--seq-len", "16", "--batch-size", "2", "--hidden-size", "32",
        "--num-layers", "1", "--num-heads", "2", "--num-kv-heads", "1", "--intermediate-size", "32",
        "--log-every", "1", "--eval-windows", "4", "--eval-limit", "8"]


def test_train_tiny_pair_writes_loadable_pair(tmp_path, capsys):
    _script().main(["--out", str(tmp_path), "--mtp-unroll", "2"] + TINY)
    log = capsys.readouterr().out
    assert "[target] step 3/3" in log and "[mtp] step 3/3" in log and "draft top-1 == target top-1" in log
    assert "2 substeps" in log and "chained greedy acceptance" in log
    assert " substeps " in log.split("[mtp] step 3/3")[1].splitlines()[0]  # per-substep training losses
    target = load_target(ModelConfig(path=str(tmp_path)))
    assert target.arch.hidden_size == 32 and target.arch.num_layers == 1
    draft = load_mtp(str(tmp_path), target)
    assert np.isfinite(draft.eh_proj.numpy()).all()


def test_train_tiny_pair_init_target_trains_only_the_draft(tmp_path, capsys):
    """--init-target copies the given target byte for byte and writes a new draft; no target step runs."""
    first, second = tmp_path / "first", tmp_path / "second"
    _script().main(["--out", str(first), "--mtp-unroll", "1"] + TINY)
    capsys.readouterr()
    _script().main(["--out", str(second), "--init-target", str(first), "--mtp-unroll", "3", "--seed", "1"] + TINY)
    log = capsys.readouterr().out
    assert "[target] step" not in log and "[mtp] step 3/3" in log and "3 substeps" in log
    for name in ("config.json", "model.safetensors"):
        assert (second / name).read_bytes() == (first / name).read_bytes()
    assert (second / "mtp.safetensors").read_bytes() != (first / "mtp.safetensors").read_bytes()


def test_train_tiny_pair_holds_out_every_tenth_topic():
    """The held-out topics are the sorted topics with index % 10 == 5, and none is in the training text."""
    from pydoc_data.topics import topics

    train_ids, eval_ids, held = _script().load_corpus()
    names = sorted(topics)
    assert held == names[5::10]
    assert len(train_ids) + len(eval_ids) == sum(len(topics[n].encode()) + 1 for n in names)
    sample = topics[held[0]].encode()[:200]
    assert bytes(np.asarray(train_ids)[np.asarray(train_ids) < 256].astype(np.uint8)).find(sample) == -1
