"""llama.cpp GGUF (llama architecture, byte-level BPE vocabulary) -> a Hugging Face Llama directory: config,
float32 safetensors shards, tokenizer files and a specworker-convert.json stamp, written into a temporary
sibling renamed at the end. Loading the result is the HF checkpoint loader's job, not this module's."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from pathlib import Path

import gguf
import numpy as np
from gguf import GGUFReader, TokenType
from safetensors.numpy import save_file
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

logger = logging.getLogger(__name__)

CONVERTER_VERSION = 1  # bump when the output for the same GGUF changes; the set-up then converts again
STAMP_FILE = "specworker-convert.json"
SHARD_MAX_BYTES = 200_000_000
SUPPORTED_DTYPES = ("float32",)
GGUF_MAGIC = b"GGUF"
ARCH = "llama"
TOKENIZER_MODEL = "gpt2"
# tokenizer.ggml.pre -> digits split one by one before the GPT-2 regex. llama.cpp (llama-vocab.cpp) splits
# "smollm" and "starcoder" by "\p{N}" and then the GPT-2 regex, "gpt2" by the GPT-2 regex alone; in
# tokenizers that is Digits(individual_digits=True) + ByteLevel(use_regex=True), as SmolLM's tokenizer.json.
PRE_TOKENIZERS = {"gpt2": False, "smollm": True, "starcoder": True}
_REQUIRED = object()
_LAYER_TENSORS = {  # GGUF blk.N.<key>.weight -> HF model.layers.N.<value>.weight
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
}


def convert_gguf(src: str | Path, dst: str | Path, *, dtype: str = "float32") -> Path:
    """Converts the GGUF file `src` into the HF Llama directory `dst` (replacing an earlier conversion).

    Weights are dequantized tensor by tensor to float32 [out_features, in_features] (GGUF lists dims
    innermost first), q/k rows get llama.cpp's RoPE row permutation undone, and a missing output.weight
    means tied embeddings (no lm_head written). Only float32 storage: safetensors' numpy API has no bfloat16.
    Raises FileNotFoundError (no src) or ValueError naming src and the field at fault (not a GGUF, truncated,
    architecture other than llama, tokenizer other than byte-level BPE, missing metadata, a tensor whose
    shape does not match the metadata, a tensor type gguf cannot dequantize); FileExistsError when dst is
    a non-empty directory not written by this converter.
    """
    src, dst = Path(src), Path(dst)
    if dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"dtype = {dtype!r}; allowed: {', '.join(map(repr, SUPPORTED_DTYPES))} (bfloat16 is not "
                         "offered: safetensors' numpy API cannot store it)")
    _check_replaceable(dst)
    reader = _open_reader(src)
    config = _hf_config(reader, src)
    plan = _tensor_plan(reader, src, config)
    tokenizer, tokenizer_config = _tokenizer(reader, src, config)
    where = dst.absolute()  # a name and a parent even for "."
    tmp = where.parent / f".{where.name}.converting-{os.getpid()}"
    where.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        _write_weights(src, plan, tmp)
        _write_json(tmp / "config.json", config)
        generation = {key: config[key] for key in ("bos_token_id", "eos_token_id", "pad_token_id")
                      if config[key] is not None}
        _write_json(tmp / "generation_config.json", generation)
        tokenizer.save(str(tmp / "tokenizer.json"))
        _write_json(tmp / "tokenizer_config.json", tokenizer_config)
        _write_json(tmp / STAMP_FILE, _stamp(src, dtype, tmp))
        _check_replaceable(dst)
        _replace_dir(tmp, where)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    logger.info("converted %s -> %s (%d tensors)", src, dst, len(plan))
    return dst


def read_stamp(model_dir: str | Path) -> dict | None:
    """model_dir/specworker-convert.json as a dict, or None when absent or unreadable."""
    try:
        data = json.loads((Path(model_dir) / STAMP_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _open_reader(src: Path) -> GGUFReader:
    if not src.is_file():
        raise FileNotFoundError(f"{src}: GGUF file not found")
    with open(src, "rb") as f:
        magic = f.read(4)
    if magic != GGUF_MAGIC:
        raise ValueError(f"{src}: not a GGUF file (magic {magic!r}, expected {GGUF_MAGIC!r})")
    try:
        reader = GGUFReader(src)
    except (ValueError, IndexError, OverflowError, UnicodeDecodeError) as err:
        raise ValueError(f"{src}: truncated or corrupt GGUF ({type(err).__name__}: {err})") from None
    size = src.stat().st_size
    end = max((t.data_offset + t.n_bytes for t in reader.tensors), default=reader.data_offset)
    if end > size:
        raise ValueError(f"{src}: truncated GGUF ({size} bytes, its tensor table needs {end})")
    return reader


def _meta(reader: GGUFReader, src: Path, key: str, kind: type, default=_REQUIRED):
    """The value of metadata `key`, checked to be a `kind` (int, float, str, bool or list)."""
    field = reader.fields.get(key)
    if field is None:
        if default is _REQUIRED:
            raise ValueError(f"{src}: missing metadata key {key!r} (required to convert a {ARCH} GGUF)")
        return default
    try:
        value = field.contents()
    except UnicodeDecodeError as err:
        raise ValueError(f"{src}: metadata {key} is not valid UTF-8 ({err})") from None
    ok = isinstance(value, (int, float)) if kind is float else isinstance(value, kind)
    if not ok or (kind is not bool and isinstance(value, bool)):
        raise ValueError(f"{src}: metadata {key} = {value!r}; allowed: a {kind.__name__}")
    if kind is int and value <= 0 and not key.startswith("tokenizer."):  # sizes > 0; token ids may be 0
        raise ValueError(f"{src}: metadata {key} = {value}; allowed: an integer > 0")
    return float(str(np.float32(value))) if kind is float else value  # float32 in GGUF: 1e-05, not 9.99e-06


def _hf_config(reader: GGUFReader, src: Path) -> dict:
    """config.json of LlamaForCausalLM from the GGUF metadata (llama.cpp's defaults where it has them)."""
    arch = _meta(reader, src, "general.architecture", str)
    if arch != ARCH:
        raise ValueError(f"{src}: general.architecture = {arch!r}; allowed: {ARCH!r}")
    a = ARCH
    hidden = _meta(reader, src, f"{a}.embedding_length", int)
    heads = _meta(reader, src, f"{a}.attention.head_count", int)
    kv_heads = _meta(reader, src, f"{a}.attention.head_count_kv", int, heads)
    head_dim = _meta(reader, src, f"{a}.attention.key_length", int, hidden // heads)
    value_dim = _meta(reader, src, f"{a}.attention.value_length", int, head_dim)
    rope_dim = _meta(reader, src, f"{a}.rope.dimension_count", int, head_dim)
    if heads % kv_heads or head_dim % 2 or value_dim != head_dim or rope_dim != head_dim:
        raise ValueError(f"{src}: attention metadata (head_count {heads}, head_count_kv {kv_heads}, key_length "
                         f"{head_dim}, value_length {value_dim}, rope.dimension_count {rope_dim}); allowed: "
                         "head_count a multiple of head_count_kv, one even head size rotated whole")
    tokens = _meta(reader, src, "tokenizer.ggml.tokens", list)
    ids = {name: _meta(reader, src, f"tokenizer.ggml.{name}_token_id", int, None)
           for name in ("bos", "eos", "padding", "unknown")}
    for name, token_id in ids.items():
        if token_id is not None and not 0 <= token_id < len(tokens):
            raise ValueError(f"{src}: metadata tokenizer.ggml.{name}_token_id = {token_id}; allowed: 0 <= id < "
                             f"{len(tokens)} (the token list's length)")
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": hidden, "intermediate_size": _meta(reader, src, f"{a}.feed_forward_length", int),
        "num_hidden_layers": _meta(reader, src, f"{a}.block_count", int),
        "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": head_dim,
        "rope_theta": _meta(reader, src, f"{a}.rope.freq_base", float, 10000.0),
        "rope_scaling": _rope_scaling(reader, src),
        "rms_norm_eps": _meta(reader, src, f"{a}.attention.layer_norm_rms_epsilon", float),
        "max_position_embeddings": _meta(reader, src, f"{a}.context_length", int),
        "vocab_size": _meta(reader, src, f"{a}.vocab_size", int, len(tokens)),
        "tie_word_embeddings": all(t.name != "output.weight" for t in reader.tensors),
        "bos_token_id": ids["bos"], "eos_token_id": ids["eos"], "pad_token_id": ids["padding"],
        "hidden_act": "silu", "attention_bias": False, "mlp_bias": False, "attention_dropout": 0.0,
        "torch_dtype": "float32", "use_cache": True,
    }


def _rope_scaling(reader: GGUFReader, src: Path) -> dict | None:
    key = f"{ARCH}.rope.scaling.type"
    kind = _meta(reader, src, key, str, None)
    old_factor = _meta(reader, src, f"{ARCH}.rope.scale_linear", float, None)  # GGUFs before scaling.type
    if kind is None and old_factor is not None:
        kind = "linear"
    if kind in (None, "none"):
        return None
    if kind != "linear":
        raise ValueError(f"{src}: metadata {key} = {kind!r}; allowed: 'none', 'linear'")
    factor = old_factor if old_factor is not None else _meta(reader, src, f"{ARCH}.rope.scaling.factor", float)
    return {"rope_type": "linear", "factor": factor}


def _tensor_plan(reader: GGUFReader, src: Path, config: dict) -> list[tuple[str, object, tuple[int, ...], int]]:
    """(HF name, GGUF tensor, HF shape, heads of its RoPE permutation or 0) in HF order, every shape checked."""
    h, inter, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    q, kv, vocab = config["num_attention_heads"], config["num_key_value_heads"], config["vocab_size"]
    d = config["head_dim"]
    layer_shapes = {"attn_q": ((q * d, h), q), "attn_k": ((kv * d, h), kv), "attn_v": ((kv * d, h), 0),
                    "attn_output": ((h, q * d), 0), "ffn_gate": ((inter, h), 0), "ffn_up": ((inter, h), 0),
                    "ffn_down": ((h, inter), 0), "attn_norm": ((h,), 0), "ffn_norm": ((h,), 0)}
    want = {"token_embd.weight": ("model.embed_tokens.weight", (vocab, h), 0)}
    for n in range(layers):
        for key, (shape, perm_heads) in layer_shapes.items():
            want[f"blk.{n}.{key}.weight"] = (f"model.layers.{n}.{_LAYER_TENSORS[key]}.weight", shape, perm_heads)
    want["output_norm.weight"] = ("model.norm.weight", (h,), 0)
    if not config["tie_word_embeddings"]:
        want["output.weight"] = ("lm_head.weight", (vocab, h), 0)
    found = {t.name: t for t in reader.tensors}
    for name, tensor in found.items():
        if name not in want:
            raise ValueError(f"{src}: unexpected tensor {name!r}; allowed: token_embd, output_norm, output and "
                             f"blk.N.{{{','.join(_LAYER_TENSORS)}}} (.weight, N < {layers})")
        shape = tuple(int(x) for x in reversed(tensor.shape.tolist()))
        if shape != want[name][1]:
            raise ValueError(f"{src}: tensor {name} has shape {list(shape)} (HF order), expected "
                             f"{list(want[name][1])} from the metadata (hidden {h}, intermediate {inter}, heads "
                             f"{q}/{kv} x {d}, vocab {vocab})")
    missing = [name for name in want if name not in found]
    if missing:
        raise ValueError(f"{src}: missing tensor {missing[0]!r} ({len(missing)} missing of {len(want)} expected)")
    return [(hf_name, found[name], shape, heads) for name, (hf_name, shape, heads) in want.items()]


def _unpermute_rope(w: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of llama.cpp's permute(w, n_head): row h*d + 2i + p of w -> row h*d + p*d/2 + i (d rows a head).

    llama.cpp interleaves each head's rotary pairs (x[2i], x[2i+1]); HF pairs (x[i], x[i + d/2]).
    Args: w [n_head * d, in] float32 (GGUF row order). Returns [n_head * d, in] in HF row order.
    """
    rows = w.shape[0]
    # [n_head, d/2, 2, in] -> [n_head, 2, d/2, in]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _hf_tensor(src: Path, tensor, shape: tuple[int, ...], perm_heads: int) -> np.ndarray:
    """One tensor dequantized to float32 in HF layout: `shape`, RoPE rows unpermuted when perm_heads > 0."""
    try:
        w = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
    except NotImplementedError:
        raise ValueError(f"{src}: tensor {tensor.name} is stored as {tensor.tensor_type.name}, which gguf "
                         f"{_gguf_version()} cannot dequantize; allowed: F32, F16 and the block types "
                         "gguf.quants implements (BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K, IQ*, TQ*, MXFP4)"
                         ) from None
    w = np.ascontiguousarray(np.asarray(w, dtype=np.float32).reshape(shape))
    if perm_heads:
        w = _unpermute_rope(w, perm_heads)
    if not np.isfinite(w).all():
        raise ValueError(f"{src}: tensor {tensor.name} ({tensor.tensor_type.name}) has non-finite values")
    return w


def _write_weights(src: Path, plan: list, out: Path) -> None:
    """model.safetensors, or model-0000i-of-0000n.safetensors + model.safetensors.index.json past one shard."""
    shards: list[list] = [[]]
    size = 0
    for item in plan:
        nbytes = 4 * int(np.prod(item[2]))
        if shards[-1] and size + nbytes > SHARD_MAX_BYTES:
            shards.append([])
            size = 0
        shards[-1].append(item)
        size += nbytes
    n = len(shards)
    names = ["model.safetensors"] if n == 1 else [f"model-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)]
    weight_map, total = {}, 0
    for file_name, shard in zip(names, shards):
        tensors = {}
        for hf_name, tensor, shape, perm_heads in shard:  # one shard of float32 at a time
            tensors[hf_name] = _hf_tensor(src, tensor, shape, perm_heads)
            weight_map[hf_name] = file_name
            total += tensors[hf_name].nbytes
        save_file(tensors, str(out / file_name), metadata={"format": "pt"})
        os.chmod(out / file_name, _file_mode())  # safetensors writes 0600; the other files get the umask's mode
        del tensors
    if n > 1:
        _write_json(out / "model.safetensors.index.json", {"metadata": {"total_size": total}, "weight_map": weight_map})


def _tokenizer(reader: GGUFReader, src: Path, config: dict) -> tuple[Tokenizer, dict]:
    """tokenizer.json (byte-level BPE from tokens + merges) and tokenizer_config.json of the GGUF vocabulary."""
    model = _meta(reader, src, "tokenizer.ggml.model", str)
    if model != TOKENIZER_MODEL:
        raise ValueError(f"{src}: tokenizer.ggml.model = {model!r}; allowed: {TOKENIZER_MODEL!r} (byte-level BPE; "
                         "SentencePiece vocabularies such as 'llama' are not supported)")
    pre = _meta(reader, src, "tokenizer.ggml.pre", str)
    if pre not in PRE_TOKENIZERS:
        raise ValueError(f"{src}: tokenizer.ggml.pre = {pre!r}; allowed: {', '.join(map(repr, PRE_TOKENIZERS))}")
    tokens = _meta(reader, src, "tokenizer.ggml.tokens", list)
    types = _meta(reader, src, "tokenizer.ggml.token_type", list, [int(TokenType.NORMAL)] * len(tokens))
    if len(types) != len(tokens) or len(tokens) > config["vocab_size"]:
        raise ValueError(f"{src}: {len(tokens)} tokens, {len(types)} token types, vocab_size "
                         f"{config['vocab_size']}; allowed: one type per token, at most vocab_size tokens")
    vocab = {token: i for i, token in enumerate(tokens)}
    if len(vocab) != len(tokens):
        raise ValueError(f"{src}: tokenizer.ggml.tokens has duplicate entries ({len(tokens) - len(vocab)})")
    merges = []
    for i, merge in enumerate(_meta(reader, src, "tokenizer.ggml.merges", list)):
        cut = merge.find(" ", 1)  # as llama.cpp: the first space after the first character
        left, right = merge[:cut], merge[cut + 1:]
        if cut < 0 or left not in vocab or right not in vocab or left + right not in vocab:
            raise ValueError(f"{src}: tokenizer.ggml.merges[{i}] = {merge!r}; allowed: 'A B' with A, B and AB "
                             "in tokenizer.ggml.tokens")
        merges.append((left, right))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.pre_tokenizer = (pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
                         if PRE_TOKENIZERS[pre] else byte_level)
    tok.decoder = decoders.ByteLevel()
    special_types = (TokenType.CONTROL, TokenType.UNKNOWN)
    for token, kind in zip(tokens, types):
        if kind in special_types:
            tok.add_special_tokens([AddedToken(token, special=True, normalized=False)])
        elif kind == TokenType.USER_DEFINED:
            tok.add_tokens([AddedToken(token, special=False, normalized=False)])
    add_bos = _meta(reader, src, "tokenizer.ggml.add_bos_token", bool, False)
    add_eos = _meta(reader, src, "tokenizer.ggml.add_eos_token", bool, False)
    tok.post_processor = _post_processor(src, tokens, config, add_bos, add_eos)
    name = {key: None if config[f"{key}_token_id"] is None else tokens[config[f"{key}_token_id"]]
            for key in ("bos", "eos", "pad")}
    unk_id = _meta(reader, src, "tokenizer.ggml.unknown_token_id", int, None)
    tokenizer_config = {
        "tokenizer_class": "GPT2Tokenizer", "add_bos_token": add_bos, "add_eos_token": add_eos,
        "add_prefix_space": False, "clean_up_tokenization_spaces": False,
        "model_max_length": config["max_position_embeddings"],
        "bos_token": name["bos"], "eos_token": name["eos"], "pad_token": name["pad"],
        "unk_token": None if unk_id is None else tokens[unk_id],
    }
    chat_template = _meta(reader, src, "tokenizer.chat_template", str, None)
    if chat_template is not None:
        tokenizer_config["chat_template"] = chat_template
    return tok, tokenizer_config


def _post_processor(src: Path, tokens: list[str], config: dict, add_bos: bool, add_eos: bool):
    """TemplateProcessing that adds bos / eos as the GGUF asks, else None (as SmolLM2's tokenizer.json)."""
    marks = {}
    for wanted, key in ((add_bos, "bos"), (add_eos, "eos")):
        if wanted and config[f"{key}_token_id"] is None:
            raise ValueError(f"{src}: tokenizer.ggml.add_{key}_token is true but tokenizer.ggml.{key}_token_id "
                             "is missing")
        if wanted:
            marks[key] = (tokens[config[f"{key}_token_id"]], config[f"{key}_token_id"])
    if not marks:
        return None

    def segment(body: str, type_id: int) -> str:  # "<bos>:0 $A:0 <eos>:0", marks that are asked for only
        parts = ([marks["bos"][0]] if "bos" in marks else []) + [body] + ([marks["eos"][0]] if "eos" in marks else [])
        return " ".join(f"{part}:{type_id}" for part in parts)

    return processors.TemplateProcessing(single=segment("$A", 0), pair=f"{segment('$A', 0)} {segment('$B', 1)}",
                                         special_tokens=sorted(set(marks.values()), key=lambda m: m[1]))


def _stamp(src: Path, dtype: str, out: Path) -> dict:
    stat = src.stat()
    return {"converter_version": CONVERTER_VERSION, "source": src.name, "source_sha256": sha256_file(src),
            "source_size": stat.st_size, "source_mtime_ns": stat.st_mtime_ns, "dtype": dtype,
            "files": {p.name: p.stat().st_size for p in sorted(out.iterdir())}}


def _check_replaceable(dst: Path) -> None:
    if dst.exists() and not dst.is_dir():
        raise FileExistsError(f"{dst}: exists and is not a directory; allowed: a new path or an earlier conversion")
    if dst.is_dir() and any(dst.iterdir()) and not (dst / STAMP_FILE).is_file():
        raise FileExistsError(f"{dst}: non-empty directory without {STAMP_FILE}; allowed: a new or empty "
                              "directory, or one an earlier convert-gguf wrote (it is replaced)")


def _replace_dir(tmp: Path, dst: Path) -> None:
    """Renames tmp to dst; an existing dst moves aside first and is removed after, so dst is never half written."""
    old = dst.parent / f".{dst.name}.replaced-{os.getpid()}"
    if dst.exists():
        dst.rename(old)
    tmp.rename(dst)
    shutil.rmtree(old, ignore_errors=True)


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _file_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _gguf_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gguf")
    except PackageNotFoundError:
        return "(unknown version)"
