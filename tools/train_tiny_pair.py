"""Trains the built-in tiny target and its MTP draft on Python's own help texts (CPU, fixed seed).

Corpus: pydoc_data.topics.topics (ships with CPython, so it is offline on any machine), byte-level
with BOS per topic. Topics sorted by name; every 10th (index % 10 == 5) is held out as eval text.
Phase 1 trains the target (next byte); phase 2 trains the MTP draft on the frozen target, unrolled over
--mtp-unroll chained substeps (substep 1 reads the target's hidden states, later ones the draft's own, as
the engine's substeps do; MTPDraft.forward_train_unrolled). Writes config.json, model.safetensors,
mtp.safetensors, then prints eval losses, the draft/target top-1 agreement and the chained 1..3-draft
acceptance (--eval-only re-evaluates a written pair; --init-target DIR skips phase 1 and keeps DIR's target).

    nice python tools/train_tiny_pair.py --out specworker/model_executor/models/weights/tiny
    nice python tools/train_tiny_pair.py --out DIR --init-target specworker/model_executor/models/weights/tiny
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import paddle
import paddle.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specworker.config import BUILTIN_TARGETS, ModelConfig  # noqa: E402
from specworker.model_executor.models.checkpoint import (CONFIG_FILE, TARGET_FILE, load_mtp,  # noqa: E402
                                                          load_target, save_mtp, save_target)
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
    p.add_argument("--eval-limit", type=int, default=0, help="held-out windows to evaluate (0: all)")
    p.add_argument("--eval-only", action="store_true", help="load the pair from --out and only evaluate it")
    p.add_argument("--init-target", default=None, help="train only the draft on the target in this model directory "
                   "(its config.json / model.safetensors are copied to --out unchanged)")
    p.add_argument("--mtp-unroll", type=int, default=3, help="chained draft substeps trained per position (>= 1)")
    p.add_argument("--mtp-substep-weight", type=float, default=1.0,
                   help="loss weight of substep s is this ** (s - 1); the loss is the weighted mean")
    for key in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "intermediate_size"):
        p.add_argument("--" + key.replace("_", "-"), type=int, default=tiny[key])
    args = p.parse_args(argv)
    if args.mtp_unroll < 1:
        p.error(f"--mtp-unroll = {args.mtp_unroll}; allowed: >= 1")
    if args.init_target is not None and args.eval_only:
        p.error("--init-target and --eval-only exclude each other (--eval-only loads the pair from --out)")
    return args


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


def mtp_outputs(model: LlamaModel, draft: MTPDraft, ids: paddle.Tensor, substeps: int):
    """ids [B, L + 2] -> (per substep s = 1..substeps: draft logits [B, L, V], column j predicting token
    j+2 (columns j < s - 1 have no anchor), target hidden [B, L + 1, H] h_0 .. h_L)."""
    with paddle.no_grad():
        hidden = model.forward_train(ids[:, :-1])
    length = ids.shape[1] - 2
    # teacher forcing: every substep reads the true token_{j+1}; only its hidden input is the draft's own
    outs = draft.forward_train_unrolled(ids[:, 1:length + 1], hidden[:, :length], substeps)
    return [model.logits_train(out) for out in outs], hidden


def substep_losses(logits: list[paddle.Tensor], ids: paddle.Tensor) -> list[paddle.Tensor]:
    """Mean cross entropy of substep s over its anchored columns j >= s - 1 (labels token_{j+2} = ids[:, j + 2])."""
    return [F.cross_entropy(lg[:, s:].reshape([-1, lg.shape[-1]]), ids[:, 2 + s:].reshape([-1, 1]))
            for s, lg in enumerate(logits)]


def mtp_loss(model: LlamaModel, draft: MTPDraft, ids: paddle.Tensor, args) -> tuple[paddle.Tensor, list]:
    """(weighted mean of the substep losses, the substep losses) for the --mtp-unroll chain."""
    losses = substep_losses(mtp_outputs(model, draft, ids, args.mtp_unroll)[0], ids)
    weights = [args.mtp_substep_weight ** s for s in range(len(losses))]
    return sum(w * loss for w, loss in zip(weights, losses)) / sum(weights), losses


def train(params, loss_fn, stream, args, steps, peak_lr, name, rng) -> float:
    opt = paddle.optimizer.AdamW(learning_rate=peak_lr, parameters=params, weight_decay=0.1,
                                 beta1=0.9, beta2=0.95, grad_clip=paddle.nn.ClipGradByGlobalNorm(1.0))
    start, running = time.time(), None
    for step in range(steps):
        opt.set_lr(lr_at(step, steps, peak_lr))
        loss, parts = loss_fn(random_windows(stream, args.batch_size, args.seq_len + 2, rng))
        loss.backward()
        opt.step()
        opt.clear_grad()
        value = float(loss)
        running = value if running is None else 0.95 * running + 0.05 * value
        if (step + 1) % args.log_every == 0 or step + 1 == steps:
            each = f" substeps {' / '.join(f'{float(x):.4f}' for x in parts)}" if len(parts) > 1 else ""
            print(f"[{name}] step {step + 1}/{steps} loss {value:.4f} (avg {running:.4f}){each} "
                  f"lr {opt.get_lr():.2e} {time.time() - start:.0f}s", flush=True)
    return running


@paddle.no_grad()
def evaluate(model: LlamaModel, draft: MTPDraft | None, batches, substeps: int = 1) -> dict:
    """Eval losses (nats/byte): target, draft per substep 1..substeps (anchored columns only), and the
    teacher-forced first-draft top-1 == target top-1 rate."""
    t_loss = agree = count = 0.0
    d_loss, d_count = np.zeros(substeps), np.zeros(substeps)
    for ids in batches:  # [b, L]; target sees L - 1 tokens, the draft L - 2 positions
        n = ids.shape[0] * (ids.shape[1] - 2)
        t_loss += float(target_loss(model, ids[:, :-1])) * n
        if draft is not None:
            d_logits, hidden = mtp_outputs(model, draft, ids, substeps)
            for s, loss in enumerate(substep_losses(d_logits, ids)):
                d_loss[s] += float(loss) * ids.shape[0] * (ids.shape[1] - 2 - s)
                d_count[s] += ids.shape[0] * (ids.shape[1] - 2 - s)
            t_top1 = model.logits_train(hidden[:, 1:]).argmax(-1)  # target's guess for token i+2
            agree += float((d_logits[0].argmax(-1) == t_top1).astype("float32").sum())
        count += n
    out = {"target_loss": t_loss / count}
    if draft is not None:
        out.update(mtp_loss=(d_loss / d_count).tolist(), agreement=agree / count)
    return out


@paddle.no_grad()
def chain_acceptance(model: LlamaModel, draft: MTPDraft, batches, positions, depth: int = 3) -> list[float]:
    """P(the first k chained drafts are all accepted), k = 1..depth, greedy, teacher-forced prefixes.

    At draft position i the draft proposes d1 from (token_{i+1}, h_i), then d2 from (d1, its own hidden),
    and so on, with the KV of positions <= i from true inputs, exactly as in the engine's substeps. The
    target then verifies tokens[.. i+1] + [d1 .. d_{depth-1}] and each d_k is accepted while it equals the
    target's argmax (one verify step). Averaged over eval windows and the draft positions in `positions`.
    """
    accepted, count = np.zeros(depth), 0
    for ids in batches:
        hidden = model.forward_train(ids[:, :-1])
        for i in positions:
            d_ids, d_hid, drafts = ids[:, 1:i + 2], hidden[:, :i + 1], []
            for _ in range(depth):
                out = draft.forward_train(d_ids, d_hid)[:, -1:]  # [b, 1, H]
                drafts.append(model.logits_train(out).argmax(-1))  # [b, 1]
                d_ids, d_hid = paddle.concat([d_ids, drafts[-1]], 1), paddle.concat([d_hid, out], 1)
            verify = paddle.concat([ids[:, :i + 2]] + drafts[:-1], 1)  # [b, i + 1 + depth]
            t_top1 = model.logits_train(model.forward_train(verify)[:, i + 1:]).argmax(-1)  # [b, depth]
            ok = (paddle.concat(drafts, 1) == t_top1).numpy().cumprod(axis=1)
            accepted += ok.sum(0)
            count += ok.shape[0]
    return (accepted / count).tolist()


def train_pair(args, train_ids: np.ndarray, batches, rng) -> tuple[LlamaModel, MTPDraft]:
    tiny = BUILTIN_TARGETS["builtin:tiny"]
    arch = LlamaArch(vocab_size=tiny["vocab_size"], rope_theta=tiny["rope_theta"], rms_norm_eps=tiny["rms_norm_eps"],
                     **{k: getattr(args, k) for k in ("hidden_size", "num_layers", "num_heads", "num_kv_heads",
                                                      "intermediate_size")})
    model = LlamaModel(arch)
    print(f"target: {arch}, {sum(int(np.prod(p.shape)) for p in model.parameters())} parameters")
    train(model.parameters(), lambda ids: (target_loss(model, ids[:, :-1]), []), train_ids, args, args.steps,
          args.lr, "target", rng)
    print(f"[target] eval loss {evaluate(model, None, batches)['target_loss']:.4f} nats/byte", flush=True)
    return model, train_draft(model, args, train_ids, rng)


def train_draft(model: LlamaModel, args, train_ids: np.ndarray, rng) -> MTPDraft:
    """A fresh draft trained on the frozen `model` over args.mtp_unroll chained substeps."""
    for p in model.parameters():
        p.stop_gradient = True
    draft = MTPDraft(model)
    print(f"draft: {sum(int(np.prod(p.shape)) for p in draft.parameters())} parameters of its own, "
          f"{args.mtp_unroll} substeps (weights {args.mtp_substep_weight} ** (s - 1))")
    train(draft.parameters(), lambda ids: mtp_loss(model, draft, ids, args), train_ids, args, args.mtp_steps,
          args.mtp_lr, "mtp", rng)
    return draft


def copy_target(src: str, out: str) -> None:
    """Copies src's config.json and model.safetensors into out byte for byte (nothing when the same directory)."""
    src_dir, out_dir = Path(src).resolve(), Path(out).resolve()
    if src_dir == out_dir:
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in (CONFIG_FILE, TARGET_FILE):
        shutil.copyfile(src_dir / name, out_dir / name)


def main(argv=None) -> None:
    args = parse_args(argv)
    t0 = time.time()
    paddle.seed(args.seed)
    rng = np.random.default_rng(args.seed)
    train_ids, eval_ids, held = load_corpus()
    print(f"corpus: {len(train_ids)} train bytes, {len(eval_ids)} eval bytes (held-out topics: {', '.join(held)})")
    batches = eval_windows(eval_ids, args.seq_len + 2, args.eval_limit)  # default: all of the held-out text
    if args.eval_only:
        model = load_target(ModelConfig(path=args.out))
        draft = load_mtp(args.out, model)
    elif args.init_target is not None:
        model = load_target(ModelConfig(path=args.init_target))
        print(f"target: loaded from {args.init_target} (frozen, not trained)")
        draft = train_draft(model, args, train_ids, rng)
    else:
        model, draft = train_pair(args, train_ids, batches, rng)
    substeps = max(3, args.mtp_unroll)
    final_train = evaluate(model, draft, eval_windows(train_ids, args.seq_len + 2, args.eval_windows), substeps)
    final_eval = evaluate(model, draft, batches, substeps)
    for name, res in (("train", final_train), ("eval", final_eval)):
        print(f"final {name}: target loss {res['target_loss']:.4f} nats/byte, mtp loss per substep "
              + " / ".join(f"{x:.4f}" for x in res["mtp_loss"])
              + f", draft top-1 == target top-1 {res['agreement']:.4f}")
    if not args.eval_only:
        if args.init_target is not None:
            copy_target(args.init_target, args.out)
        else:
            save_target(model, args.out)
        save_mtp(draft, args.out)
        print(f"wrote {args.out} in {time.time() - t0:.0f}s", flush=True)
    positions = sorted({int(f * (args.seq_len - 3)) for f in (0.1, 0.3, 0.5, 0.7, 0.9)})
    chain = chain_acceptance(model, draft, batches, positions)
    print("eval chained greedy acceptance P(first k drafts accepted), k = 1, 2, 3: "
          + ", ".join(f"{a:.4f}" for a in chain) + f"; expected tokens per verify step {1 + sum(chain):.3f} "
          f"(draft positions {positions}) {time.time() - t0:.0f}s")


if __name__ == "__main__":
    main()
