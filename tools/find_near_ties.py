"""Finds greedy decoding steps of the built-in tiny target whose top-2 logits are nearly tied, and writes them
as requests for the end-to-end lossless tests (tests/data/near_ties_tiny.json).

A near tie is where non-invariant numerics flip the greedy token: a BLAS matmul changes a logit's last bits
with the number of rows in the call (~1e-5 here), so a step whose top-2 gap is under 1e-4 can emit another
token on a (k + 1)-row verify step than on a 1-row decode step. The scan runs the model's own inference path
(batch-invariant linear, paged attention; the Worker's exact bits) over windows of the held-out prompts and
of the default prompt set, greedily, and keeps every step with gap < --max-gap before any eos.

    .venv/bin/python tools/find_near_ties.py            # ~1-2 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import paddle

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specworker.config import ModelConfig  # noqa: E402
from specworker.hf_tokenizer import load_tokenizer  # noqa: E402
from specworker.model_executor.models.checkpoint import load_target  # noqa: E402
from specworker.model_executor.pre_and_post_process import pre_process  # noqa: E402
from specworker.tokenizer import EOS_TOKEN_ID, ByteTokenizer  # noqa: E402

BLOCK_SIZE, BLOCKS_PER_SLOT = 16, 8  # 128 positions per slot
OUT = ROOT / "tests" / "data" / "near_ties_tiny.json"


def _windows(rng: np.random.Generator, n: int, length: int) -> list[str]:
    texts = [line for f in ("benchmarks/heldout_prompts.txt", "specworker/data/prompts.txt")
             for line in (ROOT / f).read_text().splitlines() if len(line) > length]
    out = []
    for _ in range(n):
        text = texts[int(rng.integers(len(texts)))]
        start = int(rng.integers(0, len(text) - length + 1))
        out.append(text[start:start + length])
    return out


def scan(model, prompts: list[list[int]], steps: int) -> list[tuple[int, int, float, list[int]]]:
    """Greedy decode of every prompt at once; returns (prompt index, step, gap, tokens so far) per step."""
    n = len(prompts)
    kv = model.new_kv_cache(n * BLOCKS_PER_SLOT, BLOCK_SIZE)
    tables = paddle.to_tensor(np.arange(n * BLOCKS_PER_SLOT, dtype=np.int32).reshape(n, BLOCKS_PER_SLOT))
    out_tokens = [[] for _ in range(n)]
    done = np.zeros(n, bool)
    records = []
    for step in range(steps):
        width = max(len(p) for p in prompts) if step == 0 else 1
        input_ids = np.full([n, width], -1, np.int64)
        lens, enc, dec = np.zeros(n, np.int32), np.zeros(n, np.int32), np.zeros(n, np.int32)
        for b, p in enumerate(prompts):
            if done[b]:
                continue
            toks = p if step == 0 else [out_tokens[b][-1]]
            input_ids[b, :len(toks)], lens[b] = toks, len(toks)
            enc[b] = len(toks) if step == 0 else 0
            dec[b] = 0 if step == 0 else len(p) + step - 1
        meta = pre_process(input_ids=paddle.to_tensor(input_ids), seq_lens_this_time=paddle.to_tensor(lens),
                           seq_lens_encoder=paddle.to_tensor(enc), seq_lens_decoder=paddle.to_tensor(dec),
                           token_num_cpu=int(lens.sum()))
        hidden = model(meta.ids_remove_padding, meta, kv, tables)
        last = paddle.gather(hidden, paddle.clip(meta.cu_seqlens_q[1:] - 1, min=0))
        logits = model.compute_logits(last).numpy()
        for b in range(n):
            if done[b]:
                continue
            top2 = np.sort(logits[b])[-2:]
            records.append((b, step, float(top2[1] - top2[0]), list(out_tokens[b])))
            token = int(logits[b].argmax())
            out_tokens[b].append(token)
            done[b] |= token in getattr(model, "eos_token_ids", [EOS_TOKEN_ID])
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=256, help="prompts per scan batch")
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--steps", type=int, default=96)
    parser.add_argument("--max-gap", type=float, default=1e-4)
    parser.add_argument("--model", default="builtin:tiny", help="builtin:tiny or a Hugging Face checkpoint dir")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    model = load_target(ModelConfig(path=args.model))
    rng = np.random.default_rng(0)
    tok = ByteTokenizer() if args.model.startswith("builtin:") else load_tokenizer(args.model)
    cases, seen = [], 0
    for _ in range(args.batches):
        texts = _windows(rng, args.prompts, int(rng.integers(8, 24)))
        prompts = [tok.encode(t) for t in texts]
        for b, step, gap, _ in scan(model, prompts, args.steps):
            seen += 1
            if gap < args.max_gap:
                cases.append({"prompt": texts[b], "prompt_token_ids": prompts[b], "tie_step": step, "gap": gap})
    unique = {}
    for c in sorted(cases, key=lambda c: c["gap"]):  # the same window can be drawn twice: keep one
        unique.setdefault(tuple(c["prompt_token_ids"]), c)
    cases = list(unique.values())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    name = args.model if args.model.startswith("builtin:") else Path(args.model).name
    args.out.write_text(json.dumps({"model": name, "max_gap": args.max_gap, "steps_scanned": seen,
                                    "cases": cases}, indent=1) + "\n")
    print(f"{len(cases)} steps with top-2 gap < {args.max_gap} out of {seen} scanned -> {args.out}")


if __name__ == "__main__":
    main()
