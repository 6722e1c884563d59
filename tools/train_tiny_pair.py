"""Trains the built-in tiny target and its MTP draft on Python's own help texts (CPU, fixed seed).

Corpus: pydoc_data.topics.topics (ships with CPython, so it is offline on any machine), byte-level
with BOS per topic. Topics sorted by name; every 10th (index % 10 == 5) is held out as eval text.
Phase 1 trains the target (next byte); phase 2 trains the MTP draft on the frozen target's hidden
states to predict the byte after next. Writes config.json, model.safetensors, mtp.safetensors.

    nice python tools/train_tiny_pair.py --out specworker/model_executor/models/weights/tiny
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import paddle
import paddle.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specworker.config import BUILTIN_TARGETS  # noqa: E402
from specworker.model_executor.models.checkpoint import save_mtp, save_target  # noqa: E402
from specworker.model_executor.models.llama import LlamaArch, LlamaModel  # noqa: E402
from specworker.model_executor.models.mtp import MTPDraft  # noqa: E402
from specworker.tokenizer import ByteTokenizer  # noqa: E402

EVAL_EVERY, EVAL_OFFSET = 10, 5  # topics (sorted by name) with index % 10 == 5 are held out


def parse_args(argv=None) -> argparse.Namespace:
    tiny = BUILTIN_TARGETS["builtin:tiny"]
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="output model directory")
    p.add_argument("--steps", type=int, default=700, help="target optimizer steps")
    p.add_argument("--mtp-steps", type=int, default=400, help="MTP draft optimizer steps")
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--mtp-lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--eval-windows", type=int, default=64, help="training-text windows for the final train loss")
    for key in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "intermediate_size"):
        p.add_argument("--" + key.replace("_", "-"), type=int, default=tiny[key])
    return p.parse_args(argv)


def load_corpus() -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(train ids, eval ids, eval topic names): BOS + UTF-8 bytes per topic, concatenated."""
    from pydoc_data.topics import topics

    tok = ByteTokenizer()
    names = sorted(topics)
    train, held = [], []
    for i, name in enumerate(names):
        (held if i % EVAL_EVERY == EVAL_OFFSET else train).extend(tok.encode(topics[name]))
    held_names = [n for i, n in enumerate(names) if i % EVAL_EVERY == EVAL_OFFSET]
    return np.array(train, np.int64), np.array(held, np.int64), held_names


def random_windows(stream: np.ndarray, batch: int, length: int, rng: np.random.Generator) -> paddle.Tensor:
    starts = rng.integers(0, len(stream) - length, size=batch)
    return paddle.to_tensor(np.stack([stream[s:s + length] for s in starts]))  # [batch, length]


def eval_windows(stream: np.ndarray, length: int, limit: int) -> list[paddle.Tensor]:
    """Non-overlapping [8, length] batches covering the stream (the first `limit` windows; 0 = all)."""
    n = (len(stream) - 1) // length
    n = min(n, limit) if limit else n
    wins = np.stack([stream[i * length:(i + 1) * length] for i in range(n)])
    return [paddle.to_tensor(wins[i:i + 8]) for i in range(0, n, 8)]


def lr_at(step: int, total: int, peak: float) -> float:
    """Linear warm-up over 5% of the steps, then cosine decay to 10% of the peak."""
    warm = max(1, total // 20)
    if step < warm:
        return peak * (step + 1) / warm
    frac = (step - warm) / max(1, total - warm)
    return peak * (0.1 + 0.45 * (1 + math.cos(math.pi * frac)))


def target_loss(model: LlamaModel, ids: paddle.Tensor) -> paddle.Tensor:
    """Mean next-token cross entropy over ids [B, L + 1]."""
    logits = model.logits_train(model.forward_train(ids[:, :-1]))
    return F.cross_entropy(logits.reshape([-1, logits.shape[-1]]), ids[:, 1:].reshape([-1, 1]))


def mtp_outputs(model: LlamaModel, draft: MTPDraft, ids: paddle.Tensor):
    """ids [B, L + 2] -> (draft logits [B, L, V] for token i+2, target logits [B, L + 1, V]) ."""
    with paddle.no_grad():
        hidden = model.forward_train(ids[:, :-1])  # [B, L + 1, H], h_0 .. h_L
    length = ids.shape[1] - 2
    draft_hidden = draft.forward_train(ids[:, 1:length + 1], hidden[:, :length])
    return model.logits_train(draft_hidden), hidden


def mtp_loss(model: LlamaModel, draft: MTPDraft, ids: paddle.Tensor) -> paddle.Tensor:
    logits, _ = mtp_outputs(model, draft, ids)
    return F.cross_entropy(logits.reshape([-1, logits.shape[-1]]), ids[:, 2:].reshape([-1, 1]))


def train(params, loss_fn, stream, args, steps, peak_lr, name, rng) -> float:
    opt = paddle.optimizer.AdamW(learning_rate=peak_lr, parameters=params, weight_decay=0.1,
                                 beta1=0.9, beta2=0.95, grad_clip=paddle.nn.ClipGradByGlobalNorm(1.0))
    start, running = time.time(), None
    for step in range(steps):
        opt.set_lr(lr_at(step, steps, peak_lr))
        loss = loss_fn(random_windows(stream, args.batch_size, args.seq_len + 2, rng))
        loss.backward()
        opt.step()
        opt.clear_grad()
        value = float(loss)
        running = value if running is None else 0.95 * running + 0.05 * value
        if (step + 1) % args.log_every == 0 or step + 1 == steps:
            print(f"[{name}] step {step + 1}/{steps} loss {value:.4f} (avg {running:.4f}) "
                  f"lr {opt.get_lr():.2e} {time.time() - start:.0f}s", flush=True)
    return running


@paddle.no_grad()
def evaluate(model: LlamaModel, draft: MTPDraft | None, batches) -> dict[str, float]:
    """Eval losses (nats/byte) and the teacher-forced draft top-1 == target top-1 rate."""
    t_loss = d_loss = agree = count = 0.0
    for ids in batches:  # [b, L]; target sees L - 1 tokens, the draft L - 2 positions
        n = ids.shape[0] * (ids.shape[1] - 2)
        t_loss += float(target_loss(model, ids[:, :-1])) * n
        if draft is not None:
            d_logits, hidden = mtp_outputs(model, draft, ids)
            labels = ids[:, 2:]
            d_loss += float(F.cross_entropy(d_logits.reshape([-1, d_logits.shape[-1]]), labels.reshape([-1, 1]))) * n
            t_top1 = model.logits_train(hidden[:, 1:]).argmax(-1)  # target's guess for token i+2
            agree += float((d_logits.argmax(-1) == t_top1).astype("float32").sum())
        count += n
    out = {"target_loss": t_loss / count}
    if draft is not None:
        out.update(mtp_loss=d_loss / count, agreement=agree / count)
    return out


def main(argv=None) -> None:
    args = parse_args(argv)
    t0 = time.time()
    paddle.seed(args.seed)
    rng = np.random.default_rng(args.seed)
    train_ids, eval_ids, held = load_corpus()
    print(f"corpus: {len(train_ids)} train bytes, {len(eval_ids)} eval bytes (held-out topics: {', '.join(held)})")
    tiny = BUILTIN_TARGETS["builtin:tiny"]
    arch = LlamaArch(vocab_size=tiny["vocab_size"], rope_theta=tiny["rope_theta"], rms_norm_eps=tiny["rms_norm_eps"],
                     **{k: getattr(args, k) for k in ("hidden_size", "num_layers", "num_heads", "num_kv_heads",
                                                      "intermediate_size")})
    model = LlamaModel(arch)
    n_params = sum(int(np.prod(p.shape)) for p in model.parameters())
    print(f"target: {arch}, {n_params} parameters")
    batches = eval_windows(eval_ids, args.seq_len + 2, 0)  # all of the held-out text

    train(model.parameters(), lambda ids: target_loss(model, ids[:, :-1]), train_ids, args, args.steps,
          args.lr, "target", rng)
    print(f"[target] eval loss {evaluate(model, None, batches)['target_loss']:.4f} nats/byte", flush=True)
    for p in model.parameters():
        p.stop_gradient = True
    draft = MTPDraft(model)
    print(f"draft: {sum(int(np.prod(p.shape)) for p in draft.parameters())} parameters of its own")
    train(draft.parameters(), lambda ids: mtp_loss(model, draft, ids), train_ids, args, args.mtp_steps,
          args.mtp_lr, "mtp", rng)

    final_train = evaluate(model, draft, eval_windows(train_ids, args.seq_len + 2, args.eval_windows))
    final_eval = evaluate(model, draft, batches)
    for name, res in (("train", final_train), ("eval", final_eval)):
        print(f"final {name}: target loss {res['target_loss']:.4f} nats/byte, mtp loss {res['mtp_loss']:.4f}, "
              f"draft top-1 == target top-1 {res['agreement']:.4f}")
    save_target(model, args.out)
    save_mtp(draft, args.out)
    print(f"wrote {args.out} in {time.time() - t0:.0f}s")


if __name__ == "__main__":
    main()
