"""Checkpoints: safetensors round trip, the committed builtin:tiny pair, and every error case."""

import json

import numpy as np
import paddle
import pytest
from safetensors.numpy import load_file, save_file

from specworker.config import BUILTIN_TARGETS, ModelConfig
from specworker.model_executor.models import checkpoint
from specworker.model_executor.models.checkpoint import load_mtp, load_target, save_mtp, save_target
from specworker.model_executor.models.llama import LlamaModel
from specworker.model_executor.models.mtp import MTPDraft
from specworker.tokenizer import ByteTokenizer
from tests.model_executor.test_llama import ARCH


@pytest.fixture()
def saved(tmp_path):
    """A random target + draft saved to tmp_path; returns (dir, target, draft)."""
    paddle.seed(5)
    target = LlamaModel(ARCH)
    draft = MTPDraft(target)
    save_target(target, tmp_path)
    save_mtp(draft, tmp_path)
    return tmp_path, target, draft


def _states_equal(a, b):
    sa, sb = dict(a.named_parameters()), dict(b.named_parameters())
    return sa.keys() == sb.keys() and all(np.array_equal(sa[k].numpy(), sb[k].numpy()) for k in sa)


def _rewrite(path, edit):
    tensors = load_file(str(path))
    edit(tensors)
    save_file(tensors, str(path))


def test_checkpoint_round_trip(saved):
    model_dir, target, draft = saved
    assert sorted(p.name for p in model_dir.iterdir()) == ["config.json", "model.safetensors", "mtp.safetensors"]
    loaded = load_target(ModelConfig(path=str(model_dir)))
    assert loaded.arch == ARCH and _states_equal(loaded, target)
    for source in (str(model_dir), str(model_dir / "mtp.safetensors")):
        loaded_draft = load_mtp(source, loaded)
        assert _states_equal(loaded_draft, draft) and loaded_draft.target is loaded
    assert "embed_tokens" not in load_file(str(model_dir / "mtp.safetensors"))


def test_checkpoint_builtin_tiny_pair_loads():
    """The committed weights match BUILTIN_TARGETS and produce finite logits."""
    target = load_target(ModelConfig())
    assert {k: getattr(target.arch, k) for k in BUILTIN_TARGETS["builtin:tiny"]} == BUILTIN_TARGETS["builtin:tiny"]
    draft = load_mtp("builtin:tiny-mtp", target)
    rows = draft.compute_logits(paddle.zeros([2, target.arch.hidden_size]))
    assert rows.shape == [2, target.arch.vocab_size] and np.isfinite(rows.numpy()).all()
    # Trained, not random: held-out-style text costs far less than log(259) = 5.56 nats per byte.
    ids = paddle.to_tensor([ByteTokenizer().encode("The for statement is used to iterate over the elements of a sequence")])
    logits = target.logits_train(target.forward_train(ids[:, :-1]))
    assert float(paddle.nn.functional.cross_entropy(logits[0], ids[0, 1:, None])) < 2.0


def test_checkpoint_missing_config_json(saved):
    (saved[0] / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"config\.json"):
        load_target(ModelConfig(path=str(saved[0])))


def test_checkpoint_missing_weights_files(saved):
    model_dir = saved[0]
    (model_dir / "mtp.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match=r"mtp\.safetensors: weights file not found"):
        load_mtp(str(model_dir), saved[1])
    (model_dir / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match=r"model\.safetensors: weights file not found"):
        load_target(ModelConfig(path=str(model_dir)))


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.pop("layers.1.mlp.down_proj"), r"model\.safetensors: missing tensor 'layers\.1\.mlp\.down_proj'"),
    (lambda t: t.update(extra=np.zeros(3, np.float32)), r"model\.safetensors: unexpected tensor 'extra'"),
    (lambda t: t.update(lm_head=np.zeros([3, 3], np.float32)),
     r"tensor 'lm_head' is \[3, 3\] float32, expected \[64, 259\] float32"),
    (lambda t: t.update(lm_head=t["lm_head"].astype(np.float64)), r"tensor 'lm_head' is \[64, 259\] float64"),
])
def test_checkpoint_rejects_bad_target_tensor(saved, edit, message):
    _rewrite(saved[0] / "model.safetensors", edit)
    with pytest.raises(ValueError, match=message):
        load_target(ModelConfig(path=str(saved[0])))


def test_checkpoint_rejects_bad_mtp_tensor(saved):
    _rewrite(saved[0] / "mtp.safetensors", lambda t: t.update(embed_tokens=np.zeros([259, 64], np.float32)))
    with pytest.raises(ValueError, match=r"mtp\.safetensors: unexpected tensor 'embed_tokens'"):
        load_mtp(str(saved[0]), saved[1])


def test_checkpoint_rejects_unreadable_safetensors(saved):
    (saved[0] / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ValueError, match=r"model\.safetensors: not a readable safetensors file"):
        load_target(ModelConfig(path=str(saved[0])))


@pytest.mark.parametrize("edit, message", [
    (lambda c: c.pop("num_heads"), r"config\.json: missing key 'num_heads'"),
    (lambda c: c.update(tie_embeddings=True), r"config\.json: unknown key 'tie_embeddings'"),
    (lambda c: c.update(hidden_size=64.5), r"config\.json: hidden_size = 64\.5; allowed: a JSON int"),
    (lambda c: c.update(model_type="gpt2"), r"config\.json: model_type = 'gpt2'"),
])
def test_checkpoint_rejects_bad_config_json(saved, edit, message):
    path = saved[0] / "config.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=message):
        load_target(ModelConfig(path=str(saved[0])))


def test_checkpoint_builtin_config_mismatch():
    """An architecture override of builtin:tiny disagrees with the committed config.json."""
    with pytest.raises(ValueError, match=r"config\.json: hidden_size = 192, but model\.hidden_size = 96"):
        load_target(ModelConfig(hidden_size=96))


def test_checkpoint_rejects_unknown_builtin_draft_and_dtype(saved):
    with pytest.raises(ValueError, match=r"'builtin:nope': unknown built-in; allowed: 'builtin:tiny-mtp'"):
        load_mtp("builtin:nope", saved[1])
    with pytest.raises(ValueError, match=r"model\.dtype = 'float16'; allowed: 'float32'"):
        load_target(ModelConfig(path=str(saved[0]), dtype="float16"))


def test_checkpoint_builtin_paths_are_committed_dir():
    assert checkpoint.BUILTIN_DRAFT_FILES["builtin:tiny-mtp"].parent == checkpoint.BUILTIN_TARGET_DIRS["builtin:tiny"]
