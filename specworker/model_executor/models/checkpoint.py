"""Safetensors checkpoints (never pickle) of the target and the MTP draft.

Two layouts: a Hugging Face directory (config.json with `architectures`; hf_checkpoint.py) or the tiny
models' own. The tiny layout: a model directory holds config.json (architecture), model.safetensors (target) and optionally
mtp.safetensors (the draft's own weights only). `builtin:tiny` is the committed weights/tiny/ directory,
`builtin:tiny-mtp` its mtp.safetensors. A draft's ranked draft vocabulary (docs/spec.md §5.3) is
draft_vocab.safetensors next to its weights. Every error names the file and, where one is at fault, the tensor.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import paddle
from safetensors import SafetensorError
from safetensors.numpy import load_file, save_file

from specworker.config import ARCH_FIELDS, ModelConfig, check_draft_vocab_size, check_tensor_parallel
from specworker.config_checks import check
from specworker.json_file import read_json_object
from specworker.model_executor.layers.decoder_layer import skip_random_init
from specworker.model_executor.models.hf_checkpoint import load_hf_mtp, load_hf_target
from specworker.model_executor.models.hf_config import is_hf_checkpoint, read_hf_config
from specworker.model_executor.models.llama import LlamaArch, LlamaModel
from specworker.model_executor.models.mtp import MTPDraft
from specworker.model_executor.models.safetensors_io import SafetensorsFile
from specworker.model_executor.models.tp_shards import our_layout_shard, read_shard
from specworker.model_executor.parallel import SINGLE_RANK, TensorParallel

CONFIG_FILE, TARGET_FILE, MTP_FILE = "config.json", "model.safetensors", "mtp.safetensors"
DRAFT_VOCAB_FILE, DRAFT_VOCAB_TENSOR = "draft_vocab.safetensors", "draft_vocab"
MODEL_TYPE = "llama"
BUILTIN_TARGET_DIRS = {"builtin:tiny": Path(__file__).parent / "weights" / "tiny"}
BUILTIN_DRAFT_FILES = {"builtin:tiny-mtp": BUILTIN_TARGET_DIRS["builtin:tiny"] / MTP_FILE}


def read_arch(model_dir: str | Path) -> LlamaArch:
    """The architecture in model_dir/config.json. Raises FileNotFoundError / ValueError naming the file."""
    path = Path(model_dir) / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: checkpoint config not found (a model directory holds {CONFIG_FILE} "
                                f"and {TARGET_FILE})")
    data = read_json_object(path)
    allowed = ("model_type",) + ARCH_FIELDS
    for key in data:
        if key not in allowed:
            raise ValueError(f"{path}: unknown key {key!r}; allowed: {', '.join(allowed)}")
    for key in ARCH_FIELDS:
        if key not in data:
            raise ValueError(f"{path}: missing key {key!r}")
    if data.get("model_type", MODEL_TYPE) != MODEL_TYPE:
        raise ValueError(f"{path}: model_type = {data['model_type']!r}; allowed: {MODEL_TYPE!r}")
    try:
        return LlamaArch(**{key: _typed(path, key, data[key]) for key in ARCH_FIELDS})
    except TypeError as err:
        raise ValueError(f"{path}: {err}") from None


def _typed(path: Path, key: str, value):
    want = float if key in ("rope_theta", "rms_norm_eps") else int
    ok = isinstance(value, (int, float)) if want is float else isinstance(value, int)
    if isinstance(value, bool) or not ok:
        raise ValueError(f"{path}: {key} = {value!r}; allowed: a JSON {want.__name__}")
    return want(value)


def read_target_arch(model_config: ModelConfig) -> LlamaArch:
    """The architecture of model_config's target, from its config.json alone (no weights read)."""
    model_dir = target_dir(model_config)
    return read_hf_config(model_dir).arch if is_hf_checkpoint(model_dir) else read_arch(model_dir)


def config_json(model_config: ModelConfig) -> Path:
    """The config.json that defines model_config's architecture."""
    return target_dir(model_config) / CONFIG_FILE


def target_dir(model_config: ModelConfig) -> Path:
    """The directory model.path names (a builtin: name resolves to the committed weights)."""
    return BUILTIN_TARGET_DIRS.get(model_config.path, Path(model_config.path))


def load_target(model_config: ModelConfig, place=None, tp: TensorParallel = SINGLE_RANK) -> LlamaModel:
    """The target of model_config.path, weights from model.safetensors, on `place` (default CPU); with
    tp.size > 1 only this rank's shard of it (read slice by slice, docs/tensor_parallel.md).

    For a builtin: model the config.json must match model_config's architecture fields.
    Raises FileNotFoundError (missing file) or ValueError (config mismatch, missing / unexpected
    tensor, wrong shape or dtype, unsupported model.dtype).
    """
    if model_config.dtype != "float32":
        raise ValueError(f"model.dtype = {model_config.dtype!r}; allowed: 'float32' (the batch-invariant "
                         "linear op is float32 only)")
    model_dir = target_dir(model_config)
    if is_hf_checkpoint(model_dir):
        return load_hf_target(model_dir, place, linear_weight_dtype=model_config.linear_weight_dtype, tp=tp)
    arch = read_arch(model_dir)
    if model_config.is_builtin:
        for key in ARCH_FIELDS:
            have, want = getattr(arch, key), getattr(model_config, key)
            if have != want:
                raise ValueError(f"{model_dir / CONFIG_FILE}: {key} = {have!r}, but model.{key} = {want!r} "
                                 f"for {model_config.path!r} (the committed weights have the file's architecture)")
    check_tp_arch(arch, tp, model_dir / CONFIG_FILE)
    with skip_random_init():
        model = LlamaModel(arch, tp)
    _load_state(model, model_dir / TARGET_FILE, arch, tp)
    model.eval()
    model.to_place(place or paddle.CPUPlace())
    model.pack_weights(model_config.linear_weight_dtype)
    return model


def draft_file(path_or_builtin: str) -> Path:
    """mtp.safetensors of a builtin: draft name, a model directory, or the file itself."""
    if path_or_builtin in BUILTIN_DRAFT_FILES:
        return BUILTIN_DRAFT_FILES[path_or_builtin]
    if path_or_builtin.startswith("builtin:"):
        raise ValueError(f"draft model {path_or_builtin!r}: unknown built-in; allowed: "
                         + ", ".join(map(repr, BUILTIN_DRAFT_FILES)))
    path = Path(path_or_builtin)
    return path / MTP_FILE if path.is_dir() else path


def load_mtp(path_or_builtin: str, target: LlamaModel, place=None, *, linear_weight_dtype: str = "float32",
             draft_vocab_size: int = 0) -> MTPDraft:
    """The MTP draft sharing `target`'s embedding, final norm and lm_head; weights from mtp.safetensors, or
    from the MTP layer of a Hugging Face checkpoint directory (hf_checkpoint.load_hf_mtp). Its linear
    weights are packed for inference in linear_weight_dtype (LlamaModel.pack_weights). draft_vocab_size > 0:
    it drafts from the first draft_vocab_size ids of its draft_vocab.safetensors only (docs/spec.md §5.3);
    ConfigError when that file is missing or the size exceeds the target's vocabulary."""
    if not path_or_builtin.startswith("builtin:") and is_hf_checkpoint(path_or_builtin):
        draft = load_hf_mtp(path_or_builtin, target, place, linear_weight_dtype=linear_weight_dtype)
    else:
        with skip_random_init():
            draft = MTPDraft(target)
        _load_state(draft, draft_file(path_or_builtin), target.arch, target.tp)
        draft.eval()
        draft.to(place or paddle.CPUPlace())
        draft.pack_weights(linear_weight_dtype)
    if draft_vocab_size > 0:
        vocab_size = target.arch.vocab_size
        check_draft_vocab_size(draft_vocab_size, vocab_size=vocab_size, where=str(path_or_builtin))
        path = draft_vocab_file(path_or_builtin)
        check(path.is_file(), "speculative_config.draft_vocab_size", draft_vocab_size,
              f"0 for this draft, or a draft with a ranked vocabulary ({DRAFT_VOCAB_FILE} next to its weights)",
              f"{path} does not exist")
        ranked = read_draft_vocab(path_or_builtin, vocab_size)
        draft.set_draft_vocab(ranked[:draft_vocab_size], linear_weight_dtype=linear_weight_dtype)
    return draft


def draft_vocab_file(path_or_builtin: str | Path) -> Path:
    """draft_vocab.safetensors in the directory of a draft's weights (draft_file's folder, or a Hugging Face
    checkpoint directory itself)."""
    path = Path(path_or_builtin)
    if not str(path_or_builtin).startswith("builtin:") and path.is_dir():
        return path / DRAFT_VOCAB_FILE
    return draft_file(str(path_or_builtin)).parent / DRAFT_VOCAB_FILE


def read_draft_vocab(path_or_builtin: str | Path, vocab_size: int | None = None) -> np.ndarray:
    """The ranked draft vocabulary of a draft (docs/spec.md §5.3): [V] int32, every token id once, most
    frequent first. Raises FileNotFoundError (no file) or ValueError naming the file (not a permutation of
    0..V-1, with V = vocab_size when given)."""
    path = draft_vocab_file(path_or_builtin)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: draft vocabulary not found (tools/train_smollm2_mtp.py vocab writes it)")
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as err:
        raise ValueError(f"{path}: not a readable safetensors file ({err})") from None
    if set(tensors) != {DRAFT_VOCAB_TENSOR}:
        raise ValueError(f"{path}: tensors {sorted(tensors)}; allowed: exactly {DRAFT_VOCAB_TENSOR!r}")
    ranked = tensors[DRAFT_VOCAB_TENSOR]
    size = len(ranked) if vocab_size is None else vocab_size
    if ranked.dtype != np.int32 or ranked.shape != (size,) or not np.array_equal(np.sort(ranked), np.arange(size)):
        raise ValueError(f"{path}: {DRAFT_VOCAB_TENSOR!r} is {list(ranked.shape)} {ranked.dtype}, expected a "
                         f"permutation of 0..{size - 1} as [{size}] int32")
    return ranked


def save_draft_vocab(ranked: np.ndarray, model_dir: str | Path) -> None:
    """Writes model_dir/draft_vocab.safetensors: ranked [V] int32, every token id once, most frequent first."""
    path = Path(model_dir) / DRAFT_VOCAB_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({DRAFT_VOCAB_TENSOR: np.ascontiguousarray(ranked, dtype=np.int32)}, str(path))


def save_target(model: LlamaModel, model_dir: str | Path) -> None:
    """Writes model_dir/config.json and model_dir/model.safetensors (creates the directory)."""
    model_dir = Path(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    arch = {key: getattr(model.arch, key) for key in ARCH_FIELDS}
    (model_dir / CONFIG_FILE).write_text(json.dumps({"model_type": MODEL_TYPE, **arch}, indent=2) + "\n")
    save_file(_numpy_state(model), str(model_dir / TARGET_FILE))


def save_mtp(draft: MTPDraft, model_dir: str | Path) -> None:
    """Writes model_dir/mtp.safetensors (the draft's own weights only)."""
    Path(model_dir).mkdir(parents=True, exist_ok=True)
    save_file(_numpy_state(draft), str(Path(model_dir) / MTP_FILE))


def _numpy_state(layer: paddle.nn.Layer) -> dict[str, np.ndarray]:
    return {name: np.ascontiguousarray(p.numpy()) for name, p in layer.named_parameters()}


def check_tp_arch(arch: LlamaArch, tp: TensorParallel, source: Path) -> None:
    """ConfigError when tp.size does not divide the heads, KV heads or intermediate size of `arch` (source:
    the config.json it came from)."""
    check_tensor_parallel(tp.size, num_heads=arch.num_heads, num_kv_heads=arch.num_kv_heads,
                          intermediate_size=arch.intermediate_size, where=str(source))


def _load_state(layer: paddle.nn.Layer, path: Path, arch: LlamaArch, tp: TensorParallel) -> None:
    """Copies every tensor of the safetensors file at `path` into layer's parameters, checked by name; with
    tp.size > 1 only this rank's slices (_load_state_sharded)."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: weights file not found")
    if tp.size > 1:
        _load_state_sharded(layer, path, arch, tp)
        return
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as err:
        raise ValueError(f"{path}: not a readable safetensors file ({err})") from None
    params = dict(layer.named_parameters())
    for name in params:
        if name not in tensors:
            raise ValueError(f"{path}: missing tensor {name!r}")
    for name, array in tensors.items():
        if name not in params:
            raise ValueError(f"{path}: unexpected tensor {name!r}; allowed: {', '.join(params)}")
        want = list(params[name].shape)
        if list(array.shape) != want or array.dtype != np.float32:
            raise ValueError(f"{path}: tensor {name!r} is {list(array.shape)} {array.dtype}, expected {want} float32")
    for name, param in params.items():
        param.set_value(tensors[name])


def _load_state_sharded(layer: paddle.nn.Layer, path: Path, arch: LlamaArch, tp: TensorParallel) -> None:
    """_load_state for one tensor-parallel rank: each sharded tensor's full shape is checked against the
    architecture, then only this rank's slices are read (tp_shards.our_layout_shard)."""
    f = SafetensorsFile(path)
    params = dict(layer.named_parameters())
    for name in params:
        if name not in f.names:
            raise ValueError(f"{path}: missing tensor {name!r}")
    for name in f.names:
        if name not in params:
            raise ValueError(f"{path}: unexpected tensor {name!r}; allowed: {', '.join(params)}")
    for name, param in params.items():
        shard = our_layout_shard(name, arch, tp)
        want = list(param.shape) if shard is None else shard.shape(list(param.shape))
        if f.shape(name) != want or f.dtype(name) != "F32":
            raise ValueError(f"{path}: tensor {name!r} is {f.shape(name)} {f.dtype(name)}, expected {want} F32")
        param.set_value(read_shard(f, name, shard))
