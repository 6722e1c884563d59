"""convert_gguf on tiny GGUF files written here with gguf.GGUFWriter (llama.cpp's q/k row permutation
applied as its convert_hf_to_gguf.py does), its errors, the CLI subcommand, and the real default model
directory the set-up converts (models/smollm2-135m)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from safetensors.numpy import load_file
from tokenizers import Tokenizer, pre_tokenizers

from specworker.model_executor.models import gguf_convert
from specworker.model_executor.models.gguf_convert import CONVERTER_VERSION, STAMP_FILE, convert_gguf

REPO = Path(__file__).resolve().parents[2]
DEFAULT_MODEL_DIR = REPO / "models" / "smollm2-135m"
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTER, LAYERS = 64, 4, 2, 16, 128, 2
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2 (control)
BYTES = sorted(pre_tokenizers.ByteLevel.alphabet())  # ids 3..258
MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("l", "l"), ("he", "ll"), ("hell", "o"), ("1", "2")]
TOKENS = SPECIALS + BYTES + ["".join(m) for m in MERGES] + ["<think>"]  # <think>: user-defined
VOCAB = len(TOKENS)  # 267
TOKEN_TYPES = [3] * len(SPECIALS) + [1] * (VOCAB - len(SPECIALS) - 1) + [4]
CHAT_TEMPLATE = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"


def llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf.py LlamaModel.permute (q: n_head, k: n_head_kv): HF rows -> llama.cpp rows."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def hf_weights(tied: bool, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    shapes = {"model.embed_tokens.weight": (VOCAB, HIDDEN), "model.norm.weight": (HIDDEN,)}
    for n in range(LAYERS):
        p = f"model.layers.{n}."
        shapes |= {p + "self_attn.q_proj.weight": (HEADS * HEAD_DIM, HIDDEN),
                   p + "self_attn.k_proj.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
                   p + "self_attn.v_proj.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
                   p + "self_attn.o_proj.weight": (HIDDEN, HEADS * HEAD_DIM),
                   p + "mlp.gate_proj.weight": (INTER, HIDDEN), p + "mlp.up_proj.weight": (INTER, HIDDEN),
                   p + "mlp.down_proj.weight": (HIDDEN, INTER),
                   p + "input_layernorm.weight": (HIDDEN,), p + "post_attention_layernorm.weight": (HIDDEN,)}
    if not tied:
        shapes["lm_head.weight"] = (VOCAB, HIDDEN)
    return {name: (rng.standard_normal(shape) * 0.05 + (1.0 if len(shape) == 1 else 0.0)).astype(np.float32)
            for name, shape in shapes.items()}


def gguf_name(hf_name: str) -> str:
    fixed = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    if hf_name in fixed:
        return fixed[hf_name]
    layer, rest = hf_name.removeprefix("model.layers.").split(".", 1)
    table = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}
    return f"blk.{layer}.{table[rest.removesuffix('.weight')]}.weight"


def base_metadata() -> dict:
    return {"llama.block_count": LAYERS, "llama.context_length": 256, "llama.embedding_length": HIDDEN,
            "llama.feed_forward_length": INTER, "llama.attention.head_count": HEADS,
            "llama.attention.head_count_kv": KV_HEADS, "llama.rope.freq_base": 10000.0,
            "llama.attention.layer_norm_rms_epsilon": 1e-6, "llama.vocab_size": VOCAB,
            "llama.rope.dimension_count": HEAD_DIM,
            "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "smollm", "tokenizer.ggml.tokens": TOKENS,
            "tokenizer.ggml.token_type": TOKEN_TYPES, "tokenizer.ggml.merges": [" ".join(m) for m in MERGES],
            "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
            "tokenizer.ggml.padding_token_id": 2, "tokenizer.ggml.unknown_token_id": 0,
            "tokenizer.ggml.add_bos_token": False, "tokenizer.chat_template": CHAT_TEMPLATE}


def write_gguf(path: Path, weights: dict[str, np.ndarray], *, qtype: Q = Q.F32, arch: str = "llama",
               meta: dict | None = None, drop: tuple[str, ...] = (), raw: dict | None = None) -> Path:
    """A llama.cpp-style GGUF: q/k rows permuted, 2-D weights in `qtype`, norms F32; `raw` overrides tensors."""
    writer = gguf.GGUFWriter(str(path), arch=arch)
    metadata = base_metadata() | (meta or {})
    for key, value in metadata.items():
        if key in drop:
            continue
        if isinstance(value, bool):
            writer.add_bool(key, value)
        elif isinstance(value, int):
            writer.add_uint32(key, value)
        elif isinstance(value, float):
            writer.add_float32(key, value)
        elif isinstance(value, str):
            writer.add_string(key, value)
        else:
            writer.add_array(key, value)
    for hf_name, w in weights.items():
        name = gguf_name(hf_name)
        if name in (raw or {}):
            writer.add_tensor(name, *raw[name])
            continue
        if ".attn_q." in name or ".attn_k." in name:
            w = llama_cpp_permute(w, HEADS if ".attn_q." in name else KV_HEADS)
        if w.ndim == 2 and qtype != Q.F32:
            writer.add_tensor(name, gguf.quants.quantize(w, qtype), raw_dtype=qtype)
        else:
            writer.add_tensor(name, w)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def load_dir(model_dir: Path) -> dict[str, np.ndarray]:
    index = model_dir / "model.safetensors.index.json"
    if not index.exists():
        return load_file(str(model_dir / "model.safetensors"))
    tensors = {}
    for shard in sorted(set(json.loads(index.read_text())["weight_map"].values())):
        tensors |= load_file(str(model_dir / shard))
    return tensors


@pytest.fixture(scope="module")
def untied(tmp_path_factory):
    """(HF weights, GGUF path, converted dir) of an untied F32 model."""
    tmp = tmp_path_factory.mktemp("untied")
    weights = hf_weights(tied=False)
    src = write_gguf(tmp / "tiny.gguf", weights)
    return weights, src, convert_gguf(src, tmp / "hf")


def test_convert_gguf_f32_weights_exact(untied):
    weights, _, out = untied
    got = load_dir(out)
    assert sorted(got) == sorted(weights) and "lm_head.weight" in got
    assert (out / "model.safetensors").is_file() and not (out / "model.safetensors.index.json").exists()
    for name, w in weights.items():
        assert got[name].dtype == np.float32 and got[name].shape == w.shape, name
        np.testing.assert_array_equal(got[name], w, err_msg=name)


def test_convert_gguf_tied_output_has_no_lm_head(tmp_path):
    weights = hf_weights(tied=True)
    out = convert_gguf(write_gguf(tmp_path / "tied.gguf", weights), tmp_path / "hf")
    got = load_dir(out)
    assert "lm_head.weight" not in got and sorted(got) == sorted(weights)
    assert json.loads((out / "config.json").read_text())["tie_word_embeddings"] is True


@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_1], ids=["Q8_0", "Q4_1"])
def test_convert_gguf_quantized_within_block_error(tmp_path, qtype):
    """Q8_0 rounds to steps of max|x| / 127 per 32-block, Q4_1 to (max - min) / 15 (error <= half a step, plus
    f16 scales): the bound is one step of the whole tensor. A wrong q/k row order would be off by O(|w|)."""
    weights = hf_weights(tied=False, seed=3)
    got = load_dir(convert_gguf(write_gguf(tmp_path / "q.gguf", weights, qtype=qtype), tmp_path / "hf"))
    for name, w in weights.items():
        if w.ndim == 1:
            np.testing.assert_array_equal(got[name], w, err_msg=name)  # norms stay F32, as llama.cpp writes them
            continue
        step = np.abs(w).max() / 127 if qtype == Q.Q8_0 else (w.max() - w.min()) / 15
        err = np.abs(got[name] - w).max()
        assert 0 < err <= step, (name, err, step)


def interleaved_rope(x: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """ggml's rope mode 0 (llama): rotates adjacent pairs (x[2i], x[2i+1]). x [T, heads, d]."""
    d = x.shape[-1]
    ang = pos[:, None, None] * 10000.0 ** (-np.arange(0, d, 2) / d)
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = a * np.cos(ang) - b * np.sin(ang), b * np.cos(ang) + a * np.sin(ang)
    return out


def half_rope(x: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """HF Llama's rotate_half: rotates pairs (x[i], x[i + d/2]). x [T, heads, d]."""
    d = x.shape[-1]
    ang = pos[:, None, None] * 10000.0 ** (-np.arange(0, d, 2) / d)
    a, b = x[..., : d // 2], x[..., d // 2:]
    return np.concatenate([a * np.cos(ang) - b * np.sin(ang), b * np.cos(ang) + a * np.sin(ang)], axis=-1)


def test_convert_gguf_qk_scores_match_llama_cpp_rope(untied):
    """What the permutation is for: GGUF rows with llama.cpp's interleaved RoPE and the converted rows with
    HF's half rotation give the same attention scores (head h of q reads kv head h // 2)."""
    _, src, out = untied
    reader = gguf.GGUFReader(src)
    raw = {t.name: np.asarray(t.data, dtype=np.float64) for t in reader.tensors}
    got = load_dir(out)
    x, pos = np.random.default_rng(5).standard_normal((7, HIDDEN)), np.arange(7) * 3.0

    def scores(q_w, k_w, rope):
        q = rope((x @ q_w.T).reshape(7, HEADS, HEAD_DIM), pos)
        k = np.repeat(rope((x @ k_w.T).reshape(7, KV_HEADS, HEAD_DIM), pos), HEADS // KV_HEADS, axis=1)
        return np.einsum("thd,shd->hts", q, k)

    want = scores(raw["blk.1.attn_q.weight"], raw["blk.1.attn_k.weight"], interleaved_rope)
    have = scores(got["model.layers.1.self_attn.q_proj.weight"].astype(np.float64),
                  got["model.layers.1.self_attn.k_proj.weight"].astype(np.float64), half_rope)
    np.testing.assert_allclose(have, want, rtol=1e-9, atol=1e-9)
    assert not np.allclose(scores(raw["blk.1.attn_q.weight"], raw["blk.1.attn_k.weight"], half_rope), want)


def test_convert_gguf_config_fields(untied):
    config = json.loads((untied[2] / "config.json").read_text())
    assert config == {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "rope_theta": 10000.0, "rope_scaling": None, "rms_norm_eps": 1e-6, "max_position_embeddings": 256,
        "vocab_size": 267, "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2,
        "hidden_act": "silu", "attention_bias": False, "mlp_bias": False, "attention_dropout": 0.0,
        "torch_dtype": "float32", "use_cache": True}
    assert json.loads((untied[2] / "generation_config.json").read_text()) == {
        "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2}


def test_convert_gguf_rope_scaling_linear(tmp_path):
    meta = {"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": 4.0}
    out = convert_gguf(write_gguf(tmp_path / "s.gguf", hf_weights(tied=True), meta=meta), tmp_path / "hf")
    assert json.loads((out / "config.json").read_text())["rope_scaling"] == {"rope_type": "linear", "factor": 4.0}


def test_convert_gguf_tokenizer_config(untied):
    assert json.loads((untied[2] / "tokenizer_config.json").read_text()) == {
        "tokenizer_class": "GPT2Tokenizer", "add_bos_token": False, "add_eos_token": False,
        "add_prefix_space": False, "clean_up_tokenization_spaces": False, "model_max_length": 256,
        "bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "pad_token": "<|im_end|>",
        "unk_token": "<|endoftext|>", "chat_template": CHAT_TEMPLATE}


def test_convert_gguf_tokenizer_encodes_and_decodes(untied):
    tok = Tokenizer.from_file(str(untied[2] / "tokenizer.json"))
    assert tok.get_vocab_size() == VOCAB
    enc = tok.encode("<|im_start|>hello the 12<think><|im_end|>")
    assert enc.tokens == ["<|im_start|>", "hello", "Ġthe", "Ġ", "1", "2", "<think>", "<|im_end|>"]  # smollm: digits apart
    assert enc.ids[0] == 1 and enc.ids[-1] == 2 and enc.ids[-2] == TOKENS.index("<think>")
    text = "héllo, the wörld 12!\n"
    assert tok.decode(tok.encode(text).ids) == text
    assert tok.decode(enc.ids, skip_special_tokens=True) == "hello the 12<think>"
    added = {t["content"]: t["special"] for t in json.loads((untied[2] / "tokenizer.json").read_text())["added_tokens"]}
    assert added == {"<|endoftext|>": True, "<|im_start|>": True, "<|im_end|>": True, "<think>": False}


def test_convert_gguf_gpt2_pre_tokenizer_keeps_digit_merges(tmp_path):
    out = convert_gguf(write_gguf(tmp_path / "g.gguf", hf_weights(tied=True), meta={"tokenizer.ggml.pre": "gpt2"}),
                       tmp_path / "hf")
    assert Tokenizer.from_file(str(out / "tokenizer.json")).encode("12").tokens == ["12"]


def test_convert_gguf_add_bos_token_prepends_bos(tmp_path):
    meta = {"tokenizer.ggml.add_bos_token": True}
    out = convert_gguf(write_gguf(tmp_path / "b.gguf", hf_weights(tied=True), meta=meta), tmp_path / "hf")
    assert Tokenizer.from_file(str(out / "tokenizer.json")).encode("hello").tokens == ["<|im_start|>", "hello"]
    assert json.loads((out / "tokenizer_config.json").read_text())["add_bos_token"] is True


def test_convert_gguf_stamp(untied):
    _, src, out = untied
    stamp = json.loads((out / STAMP_FILE).read_text())
    files = {p.name: p.stat().st_size for p in out.iterdir() if p.name != STAMP_FILE}
    assert stamp == {"converter_version": CONVERTER_VERSION, "source": "tiny.gguf",
                     "source_sha256": hashlib.sha256(src.read_bytes()).hexdigest(),
                     "source_size": src.stat().st_size, "source_mtime_ns": src.stat().st_mtime_ns,
                     "dtype": "float32", "files": files}


def test_convert_gguf_shards_with_index(tmp_path, monkeypatch):
    weights = hf_weights(tied=False)
    monkeypatch.setattr(gguf_convert, "SHARD_MAX_BYTES", 100_000)  # embedding and lm_head: 68,352 bytes each
    out = convert_gguf(write_gguf(tmp_path / "s.gguf", weights), tmp_path / "hf")
    index = json.loads((out / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 2 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    assert not (out / "model.safetensors").exists() and sorted(index["weight_map"]) == sorted(weights)
    assert index["metadata"]["total_size"] == sum(w.nbytes for w in weights.values())
    for shard in shards:
        assert sum(w.nbytes for name, w in weights.items() if index["weight_map"][name] == shard) <= 100_000
    got = load_dir(out)
    for name, w in weights.items():
        np.testing.assert_array_equal(got[name], w, err_msg=name)


def test_convert_gguf_replaces_earlier_conversion_only(tmp_path):
    src = write_gguf(tmp_path / "t.gguf", hf_weights(tied=True))
    out = convert_gguf(src, tmp_path / "hf")
    (out / "stale.txt").write_text("from an earlier run")
    convert_gguf(src, out)
    assert not (out / "stale.txt").exists() and (out / STAMP_FILE).is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "t.gguf"]  # no temporary sibling left
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match=f"mine: non-empty directory without {STAMP_FILE}"):
        convert_gguf(src, foreign)
    assert (foreign / "notes.txt").read_text() == "keep me"


def _truncated(path: Path, keep: int) -> Path:
    """good_file[:keep] (-5000: without the end of the tensor data; 200: cut inside the metadata)."""
    good = write_gguf(path.with_suffix(".full"), hf_weights(tied=True)).read_bytes()
    path.write_bytes(good[:keep])
    return path


ERROR_CASES = {
    "missing file": (lambda p: p / "absent.gguf", FileNotFoundError, ["absent.gguf: GGUF file not found"]),
    "bad magic": (lambda p: (p / "x.gguf", (p / "x.gguf").write_bytes(b"PK\x03\x04" + bytes(64)))[0], ValueError,
                  ["x.gguf: not a GGUF file", "b'PK\\x03\\x04'", "expected b'GGUF'"]),
    "empty file": (lambda p: (p / "e.gguf", (p / "e.gguf").write_bytes(b""))[0], ValueError,
                   ["e.gguf: not a GGUF file (magic b''"]),
    "truncated": (lambda p: _truncated(p / "cut.gguf", -5000), ValueError, ["cut.gguf: truncated"]),
    "truncated header": (lambda p: _truncated(p / "head.gguf", 200), ValueError, ["head.gguf: truncated"]),
    "arch gpt2": (lambda p: write_gguf(p / "a.gguf", hf_weights(True), arch="gpt2"), ValueError,
                  ["a.gguf: general.architecture = 'gpt2'; allowed: 'llama'"]),
    "sentencepiece": (lambda p: write_gguf(p / "sp.gguf", hf_weights(True), meta={"tokenizer.ggml.model": "llama"}),
                      ValueError, ["sp.gguf: tokenizer.ggml.model = 'llama'; allowed: 'gpt2'", "SentencePiece"]),
    "pre default": (lambda p: write_gguf(p / "pre.gguf", hf_weights(True), meta={"tokenizer.ggml.pre": "default"}),
                    ValueError, ["pre.gguf: tokenizer.ggml.pre = 'default'; allowed: 'gpt2', 'smollm'"]),
    "missing key": (lambda p: write_gguf(p / "m.gguf", hf_weights(True), drop=("llama.embedding_length",)),
                    ValueError, ["m.gguf: missing metadata key 'llama.embedding_length'"]),
    "shape mismatch": (lambda p: write_gguf(p / "sh.gguf", hf_weights(True), raw={
                           "blk.1.attn_k.weight": (np.zeros((HEADS * HEAD_DIM, HIDDEN), np.float32),)}),
                       ValueError, ["sh.gguf: tensor blk.1.attn_k.weight has shape [64, 64]", "expected [32, 64]"]),
    "missing tensor": (lambda p: write_gguf(p / "mt.gguf", {k: v for k, v in hf_weights(True).items()
                                                            if k != "model.norm.weight"}),
                       ValueError, ["mt.gguf: missing tensor 'output_norm.weight'"]),
    "cannot dequantize": (lambda p: write_gguf(p / "i.gguf", hf_weights(True), raw={
                              "blk.0.attn_norm.weight": (np.ones(HIDDEN, np.int32),)}),
                          ValueError, ["i.gguf: tensor blk.0.attn_norm.weight is stored as I32", "cannot dequantize"]),
}


@pytest.mark.parametrize("case", list(ERROR_CASES))
def test_convert_gguf_rejects(tmp_path, case):
    make_src, error, fragments = ERROR_CASES[case]
    src = make_src(tmp_path)
    with pytest.raises(error) as info:
        convert_gguf(src, tmp_path / "hf")
    message = str(info.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message
    assert not (tmp_path / "hf").exists() and not list(tmp_path.glob(".hf.*"))


def test_convert_gguf_rejects_bfloat16(untied, tmp_path):
    with pytest.raises(ValueError, match=r"dtype = 'bfloat16'; allowed: 'float32'"):
        convert_gguf(untied[1], tmp_path / "hf", dtype="bfloat16")


def test_cli_convert_gguf(untied, tmp_path, capsys):
    from specworker.cli import EXIT_USAGE, main

    assert main(["convert-gguf", str(untied[1]), str(tmp_path / "hf")]) == 0
    assert (tmp_path / "hf" / "config.json").is_file() and "hf" in capsys.readouterr().out
    assert main(["convert-gguf", str(tmp_path / "absent.gguf"), str(tmp_path / "hf2")]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("specworker: error: ") and "absent.gguf: GGUF file not found" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.skipif(not (DEFAULT_MODEL_DIR / STAMP_FILE).is_file(),
                    reason="models/smollm2-135m not converted (make test runs tools/prepare_default_model.py first)")
def test_default_model_dir_smollm2():
    config = json.loads((DEFAULT_MODEL_DIR / "config.json").read_text())
    assert {k: config[k] for k in ("num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
                                   "head_dim", "intermediate_size", "vocab_size", "tie_word_embeddings",
                                   "rope_theta", "eos_token_id")} == {
        "num_hidden_layers": 30, "hidden_size": 576, "num_attention_heads": 9, "num_key_value_heads": 3,
        "head_dim": 64, "intermediate_size": 1536, "vocab_size": 49152, "tie_word_embeddings": True,
        "rope_theta": 100000.0, "eos_token_id": 2}
    tok = Tokenizer.from_file(str(DEFAULT_MODEL_DIR / "tokenizer.json"))
    assert tok.token_to_id("<|im_start|>") == 1 and tok.token_to_id("<|im_end|>") == 2
    assert tok.encode("<|im_start|>user\nHi<|im_end|>").ids[::4] == [1, 2]
    index = json.loads((DEFAULT_MODEL_DIR / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] == 4 * 134_515_008 and "lm_head.weight" not in index["weight_map"]
    for shard in set(index["weight_map"].values()):
        assert (DEFAULT_MODEL_DIR / shard).stat().st_size <= gguf_convert.SHARD_MAX_BYTES + 100_000
    stamp = json.loads((DEFAULT_MODEL_DIR / STAMP_FILE).read_text())
    assert stamp["source"] == "SmolLM2-135M-Instruct.Q4_1.gguf" and stamp["converter_version"] == CONVERTER_VERSION
    for name, size in stamp["files"].items():
        assert (DEFAULT_MODEL_DIR / name).stat().st_size == size, name
