"""Finds greedy decoding steps of a target whose top-2 logits are nearly tied, and writes them as requests
for the end-to-end lossless tests (tests/data/near_ties_tiny.json, tests/data/near_ties_smollm2.json).

A near tie is where non-invariant numerics flip the greedy token: a BLAS matmul changes a logit's last bits
with the number of rows in the call (~1e-5 here), so a step whose top-2 gap is under 1e-4 can emit another
token on a (k + 1)-row verify step than on a 1-row decode step. The scan runs the model's own inference path
(batch-invariant linear, paged attention; the Worker's exact bits) greedily over many prompts at once and keeps
every step with gap < --max-gap before any eos (one per prompt, the smallest). Prompts are short windows of
the held-out prompts and of the default prompt set, and with --random-ids a fraction of random-id prompts
(1 to --max-random-len ids; a request kind the SmolLM2 lossless test uses, cheap to prefill when short).

    .venv/bin/python tools/find_near_ties.py --batches 24  # the tiny target: near_ties_tiny.json's 590k steps
    nice .venv/bin/python tools/find_near_ties.py --model models/smollm2-135m --prompts 256 --batches 8 \\
        --steps 32 --random-ids 0.5 --max-random-len 12 --out tests/data/near_ties_smollm2.json
        # 64,756 steps in 22 minutes on 2 loaded cores: 49 gaps < 1e-3, 7 < 1e-4, none < 1e-5
"""

from __future__ import annotations

import argparse
import json
import sys
import time
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
HISTOGRAM_EDGES = (1e-3, 1e-4, 1e-5, 1e-6)  # steps with gap < each edge are counted


def _windows(rng: np.random.Generator, n: int, length: int) -> list[str]:
    texts = [line for f in ("benchmarks/heldout_prompts.txt", "specworker/data/prompts.txt")
             for line in (ROOT / f).read_text().splitlines() if len(line) > length]
    out = []
    for _ in range(n):
        text = texts[int(rng.integers(len(texts)))]
        start = int(rng.integers(0, len(text) - length + 1))
        out.append(text[start:start + length])
    return out


def _top2_gaps(logits: np.ndarray) -> np.ndarray:
    """[R, V] float32 -> [R] largest minus second largest (0 for an exact tie)."""
    rows = np.arange(logits.shape[0])
    best = logits.argmax(axis=1)
    top = logits[rows, best]
    rest = logits.copy()
    rest[rows, best] = -np.inf
    return top - rest.max(axis=1)


def scan(model, prompts: list[list[int]], steps: int) -> list[tuple[int, int, float]]:
    """Greedy decode of every prompt at once; returns (prompt index, step, top-2 gap) per step before eos."""
    n = len(prompts)
    kv = model.new_kv_cache(n * BLOCKS_PER_SLOT, BLOCK_SIZE)
    tables = paddle.to_tensor(np.arange(n * BLOCKS_PER_SLOT, dtype=np.int32).reshape(n, BLOCKS_PER_SLOT))
    eos = set(getattr(model, "eos_token_ids", [EOS_TOKEN_ID]))
    last_token = np.zeros(n, np.int64)
    done = np.zeros(n, bool)
    records = []
    for step in range(steps):
        width = max(len(p) for p in prompts) if step == 0 else 1
        input_ids = np.full([n, width], -1, np.int64)
        lens, enc, dec = np.zeros(n, np.int32), np.zeros(n, np.int32), np.zeros(n, np.int32)
        for b, p in enumerate(prompts):
            if done[b]:
                continue
            toks = p if step == 0 else [last_token[b]]
            input_ids[b, :len(toks)], lens[b] = toks, len(toks)
            enc[b] = len(toks) if step == 0 else 0
            dec[b] = 0 if step == 0 else len(p) + step - 1
        meta = pre_process(input_ids=paddle.to_tensor(input_ids), seq_lens_this_time=paddle.to_tensor(lens),
                           seq_lens_encoder=paddle.to_tensor(enc), seq_lens_decoder=paddle.to_tensor(dec),
                           token_num_cpu=int(lens.sum()))
        hidden = model(meta.ids_remove_padding, meta, kv, tables)
        last = paddle.gather(hidden, paddle.clip(meta.cu_seqlens_q[1:] - 1, min=0))
        logits = model.compute_logits(last).numpy()  # [n, V]; rows of done slots are meaningless
        gaps = _top2_gaps(logits)
        for b in np.flatnonzero(~done):
            records.append((int(b), step, float(gaps[b])))
            last_token[b] = int(logits[b].argmax())
            done[b] |= int(last_token[b]) in eos
        if done.all():
            break
    return records


def _prompts(rng, ids_rng, tok, n: int, random_ids: float, max_random_len: int, vocab_size: int):
    """n prompts: (text or None, token ids); a random_ids fraction are random ids (drawn from ids_rng, so the
    text windows do not depend on the fraction), the rest text windows."""
    texts = _windows(rng, n, int(rng.integers(8, 24)))
    out = []
    for text in texts:
        if ids_rng.random() < random_ids:
            length = int(ids_rng.integers(1, max_random_len + 1))
            out.append((None, [int(t) for t in ids_rng.integers(0, vocab_size, size=length)]))
        else:
            out.append((text, tok.encode(text)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=256, help="prompts per scan batch")
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--steps", type=int, default=96)
    parser.add_argument("--max-gap", type=float, default=1e-4)
    parser.add_argument("--random-ids", type=float, default=0.0, help="fraction of random-id prompts")
    parser.add_argument("--max-random-len", type=int, default=40, help="random-id prompts have 1 to this many ids")
    parser.add_argument("--model", default="builtin:tiny", help="builtin:tiny or a Hugging Face checkpoint dir")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    started = time.monotonic()
    model = load_target(ModelConfig(path=args.model))
    rng, ids_rng = np.random.default_rng(0), np.random.default_rng(1)
    tok = ByteTokenizer() if args.model.startswith("builtin:") else load_tokenizer(args.model)
    cases, seen, below = [], 0, dict.fromkeys(HISTOGRAM_EDGES, 0)
    for batch in range(args.batches):
        prompts = _prompts(rng, ids_rng, tok, args.prompts, args.random_ids, args.max_random_len, model.arch.vocab_size)
        for b, step, gap in scan(model, [ids for _, ids in prompts], args.steps):
            seen += 1
            for edge in HISTOGRAM_EDGES:
                below[edge] += gap < edge
            if gap < args.max_gap:
                text, ids = prompts[b]
                cases.append({"prompt": text, "prompt_token_ids": ids, "tie_step": step, "gap": gap})
        print(f"batch {batch + 1}/{args.batches}: {seen} steps, {below[args.max_gap]} under {args.max_gap}, "
              f"{time.monotonic() - started:.0f} s", flush=True)
    unique = {}
    for c in sorted(cases, key=lambda c: c["gap"]):  # one case per prompt (the smallest gap): prompts are keys
        unique.setdefault(tuple(c["prompt_token_ids"]), c)
    cases = list(unique.values())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    name = args.model if args.model.startswith("builtin:") else Path(args.model).name
    histogram = {f"{edge:g}": below[edge] for edge in HISTOGRAM_EDGES}
    args.out.write_text(json.dumps({"model": name, "max_gap": args.max_gap, "steps_scanned": seen,
                                    "steps_below": histogram, "cases": cases}, indent=1) + "\n")
    print(f"{len(cases)} prompts with a top-2 gap < {args.max_gap} out of {seen} steps scanned "
          f"(steps below {histogram}) in {time.monotonic() - started:.0f} s -> {args.out}")


if __name__ == "__main__":
    main()
