"""Trains a one-layer MTP draft head for SmolLM2-135M on this CPU (docs/smollm2_mtp.md has the recipe and figures).

Stages (each reads the previous one's files in --work):
  cache   the frozen target over every document of data.json (tools/smollm2_mtp_data.py): its last hidden
          states h_p (before the final norm, float16 on disk), its greedy token g_p = argmax logits_p
          (the target's prediction for token p + 1) and its --top-k most likely tokens with their
          log-probabilities (the distillation targets); computed once, never per epoch.
  train   the draft (MTPDraft: eh_proj over concat(enorm(embed(t_{j+1})), hnorm(h_j)), one decoder layer of
          the target's shape, the target's final norm / embedding / lm_head shared and frozen), unrolled over
          --unroll chained substeps as the engine runs them (MTPDraft.forward_train_unrolled). Loss per substep:
          on --ce-rows sampled columns, (1 - w) x the cross entropy against the target's greedy token g_{j+1}
          plus w x the cross entropy against its top-k distribution renormalized (w = --soft-weight), plus
          --reg-weight x the mean squared error between final_norm(draft output) and final_norm(h_{j+1}) on
          every column (what the shared lm_head reads; EAGLE-style feature regression). Writes
          --out/mtp.safetensors; logs losses and the held-out chained acceptance per substep.
  vocab   the draft vocabulary: every token id ranked by its count among the target's greedy answer tokens of
          the train split (ties by id), written as --out/draft_vocab.safetensors (checkpoint.DRAFT_VOCAB_FILE).
  eval    held-out chained acceptance of a written head; with --draft-vocab N [N ...] also of the head drafting
          from the first N ids of that ranking only (0: the full vocabulary; docs/spec.md §5.3).

Chained acceptance without re-running the target: on the held-out answers, which the target itself
generated greedily, an accepted draft equals the next true token, so the target's verdict on draft s of
anchor i is g_{i+s} from the cache and substep s's teacher-forced output at column i + s - 1 is exactly
what the engine's substep s computes for that anchor. P(first k accepted) is the mean over anchors of
prod_{s<=k} [argmax(substep s at column i + s - 1) == g_{i+s}]; anchors are positions whose chain lies in
one answer (and where the answer's tokens equal the cached g, i.e. no near-tie between the two paths).

    nice python tools/smollm2_mtp_data.py --out W
    nice python tools/train_smollm2_mtp.py cache --work W
    nice python tools/train_smollm2_mtp.py train --work W --out specworker/model_executor/models/weights/smollm2_mtp
    nice python tools/train_smollm2_mtp.py vocab --work W --out specworker/model_executor/models/weights/smollm2_mtp
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import paddle
import paddle.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specworker.config import load_config  # noqa: E402
from specworker.model_executor.models.checkpoint import (  # noqa: E402
    _load_state, draft_file, load_mtp, load_target, read_draft_vocab, read_target_arch, save_draft_vocab, save_mtp,
    skip_random_init)
from specworker.model_executor.models.mtp import MTPDraft  # noqa: E402

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "smollm2.yaml"
SPLITS = ("train", "held")
# per cached position: token id, target hidden state, greedy token, document index, in-answer flag, and the
# target's top-k next-token ids with their log-probabilities (the soft distillation targets)
CACHE_KEYS = ("ids", "hidden", "greedy", "doc", "answer", "top_ids", "top_logp")


def load_frozen_target():
    model = load_target(load_config(CONFIG).model)
    for p in model.parameters():
        p.stop_gradient = True
    return model


def documents(data: dict, split: str, doc_tokens: int) -> list[tuple[list[int], int]]:
    """(token ids, first answer position) per document of the split: text documents (their first doc_tokens
    tokens; no answer region: answer start = len), then chat documents (prompt + answer)."""
    docs = [(ids[:doc_tokens], len(ids[:doc_tokens])) for ids in data["docs"][split]]
    docs += [(c["prompt_ids"] + c["answer_ids"], len(c["prompt_ids"])) for c in data["chat"][split]]
    return [d for d in docs if len(d[0]) >= 8]


# ---- cache ----
@paddle.no_grad()
def cache(args) -> None:
    data = json.loads((Path(args.work) / "data.json").read_text())
    model = load_frozen_target()
    t0 = time.time()
    for split in args.splits.split(","):
        docs = documents(data, split, args.doc_tokens)
        ids, hid, greedy, doc, answer, top_ids, top_logps = [], [], [], [], [], [], []
        lists = (ids, hid, greedy, doc, answer, top_ids, top_logps)
        first = reuse_cache(args.reuse_cache, split, docs, lists) if args.reuse_cache else 0
        for n, (toks, start) in enumerate(docs[first:], start=first):
            x = paddle.to_tensor(np.array(toks, np.int64)[None])
            h = model.forward_train(x)[0]  # [L, H]
            logits = model.logits_train(h)  # [L, V]
            g = logits.argmax(-1)  # [L]
            top_logit, top_id = paddle.topk(logits, args.top_k, axis=-1)  # [L, top_k], descending
            top_logp = top_logit - paddle.logsumexp(logits, axis=-1, keepdim=True)
            ids.append(np.array(toks, np.int32))
            hid.append(h.numpy().astype(np.float16))
            greedy.append(g.numpy().astype(np.int32))
            doc.append(np.full(len(toks), n, np.int32))
            answer.append(np.arange(len(toks)) >= start)
            top_ids.append(top_id.numpy().astype(np.int32))
            top_logps.append(top_logp.numpy().astype(np.float16))
            if (n + 1) % 50 == 0:
                print(f"[cache {split}] {n + 1}/{len(docs)} documents {time.time() - t0:.0f}s", flush=True)
        arrays = {key: np.concatenate(rows) for key, rows in zip(CACHE_KEYS, lists)}
        np.savez(Path(args.work) / f"cache_{split}.npz", **arrays)
        print(f"[cache {split}] {len(docs)} documents, {len(arrays['ids'])} tokens, "
              f"{int(arrays['answer'].sum())} answer tokens {time.time() - t0:.0f}s", flush=True)


def reuse_cache(work: str, split: str, docs: list[tuple[list[int], int]], arrays: tuple[list, ...]) -> int:
    """Appends to `arrays` (one list per CACHE_KEYS entry) the per-document rows of an earlier cache of `split`
    (e.g. before more chat prompts were added) for the longest prefix of `docs` it holds, checked token for
    token; returns that prefix's length. The target's forward over one document is deterministic, so the rows
    are those a fresh cache would compute."""
    old = load_cache(work, split)
    bounds = np.flatnonzero(np.diff(old["doc"], prepend=-1, append=-2))  # each document's first row, then the end
    count = 0
    for n in range(min(len(bounds) - 1, len(docs))):
        lo, hi = bounds[n], bounds[n + 1]
        toks, start = docs[n]
        if old["doc"][lo] != n or old["ids"][lo:hi].tolist() != toks or int((~old["answer"][lo:hi]).sum()) != start:
            break
        for out, key in zip(arrays, CACHE_KEYS):
            out.append(old[key][lo:hi])
        count = n + 1
    print(f"[cache {split}] reusing {count} of {len(docs)} documents from {work}", flush=True)
    return count


def load_cache(work: str, split: str) -> dict[str, np.ndarray]:
    with np.load(Path(work) / f"cache_{split}.npz") as f:
        return {k: f[k] for k in f.files}


# ---- windows ----
def window_batch(c: dict, starts: np.ndarray, length: int):
    """Windows of length + 2 tokens from `starts`: (ids [B, L+2] int64, hidden [B, L+2, H] float32,
    greedy [B, L+2] int64, same_doc [B, L] bool: column j's prediction (token j + 2) stays in column j's document,
    answer [B, L+2] bool, raw ids [B, L+2] numpy, soft targets: (top ids [B, L+2, top_k] int64, their
    probabilities renormalized over the top k [B, L+2, top_k] float32) or None for a cache without them)."""
    idx = starts[:, None] + np.arange(length + 2)[None]
    doc = c["doc"][idx]
    soft = None
    if "top_ids" in c:
        logp = c["top_logp"][idx].astype(np.float32)
        prob = np.exp(logp - logp.max(-1, keepdims=True))
        soft = (paddle.to_tensor(c["top_ids"][idx].astype(np.int64)),
                paddle.to_tensor(prob / prob.sum(-1, keepdims=True)))
    return (paddle.to_tensor(c["ids"][idx].astype(np.int64)), paddle.to_tensor(c["hidden"][idx].astype(np.float32)),
            paddle.to_tensor(c["greedy"][idx].astype(np.int64)), doc[:, :length] == doc[:, 2:], c["answer"][idx],
            c["ids"][idx], soft)


def substep_outputs(draft: MTPDraft, ids, hidden, length: int, unroll: int) -> list[paddle.Tensor]:
    """Per substep s = 1..unroll: [B, L, H], column j predicting token j + 2 (MTPDraft.forward_train_unrolled)."""
    return draft.forward_train_unrolled(ids[:, 1:length + 1], hidden[:, :length], unroll)


def pick_logits(logits: paddle.Tensor, ids: paddle.Tensor) -> paddle.Tensor:
    """logits[r, ids[r, i]] as [R, I], by one gather over the flattened logits (with autograd)."""
    rows, width = logits.shape
    flat = ids + paddle.arange(rows, dtype="int64").unsqueeze(-1) * width
    return paddle.gather(logits.reshape([-1]), flat.reshape([-1])).reshape(flat.shape)


class TrainVocab:
    """The cross entropy over the draft vocabulary only (--train-vocab N: the first N ranked ids), as the engine
    drafts with draft_vocab_size = N: logits are norm(x) @ lm_head[:, ids] (a sixth of the lm_head's work at
    N = 8192, the step's largest part), labels and top-k targets become columns of that slice; a position whose
    greedy token is outside it is not sampled for the cross entropy (the draft cannot propose it), and top-k
    entries outside it get probability 0 (the rest renormalized; the greedy token keeps every row non-empty)."""

    def __init__(self, model, ranked: np.ndarray):
        vocab = model.arch.vocab_size
        column = np.full(vocab, -1, dtype=np.int64)
        column[ranked] = np.arange(len(ranked))
        self.column = paddle.to_tensor(column)
        self.head = paddle.gather(model.lm_head, paddle.to_tensor(ranked.astype(np.int64)), axis=1).detach()
        self.norm = model.norm

    def logits(self, rows: paddle.Tensor) -> paddle.Tensor:
        return paddle.matmul(self.norm.forward_train(rows), self.head)

    def columns(self, ids: paddle.Tensor) -> paddle.Tensor:
        return paddle.gather(self.column, ids.reshape([-1])).reshape(ids.shape)

    def soft(self, top_ids: paddle.Tensor, top_prob: paddle.Tensor) -> tuple[paddle.Tensor, paddle.Tensor]:
        cols = self.columns(top_ids)
        inside = cols >= 0
        prob = paddle.where(inside, top_prob, paddle.zeros_like(top_prob))
        prob = prob / paddle.clip(prob.sum(-1, keepdim=True), min=1e-12)
        return paddle.where(inside, cols, paddle.zeros_like(cols)), prob


def losses(model, draft, batch, args, rng, vocab: TrainVocab | None = None
           ) -> tuple[paddle.Tensor, list[float], list[float]]:
    """(weighted loss, CE per substep, regression MSE per substep) of one batch of windows."""
    ids, hidden, greedy, same_doc, _, _, soft = batch
    length, b = args.seq_len, ids.shape[0]
    outs = substep_outputs(draft, ids, hidden, length, args.unroll)
    target_feat = model.norm.forward_train(hidden[:, 1:length + 1])  # [B, L, H]: what lm_head reads at j + 1
    labels = greedy[:, 1:length + 1]  # [B, L]: g_{j+1}
    if args.soft_weight and soft is None:
        raise ValueError("--soft-weight needs a cache with the target's top-k (re-run the cache stage)")
    if args.soft_weight:  # the target's top-k distribution of token j + 2, per column j: [B * L, top_k]
        top_ids = soft[0][:, 1:length + 1].reshape([b * length, -1])
        top_prob = soft[1][:, 1:length + 1].reshape([b * length, -1])
    logits_of = model.logits_train
    labelled = np.ones((b, length), dtype=bool)
    if vocab is not None:
        labels = vocab.columns(labels)
        labelled = labels.numpy() >= 0
        labels = paddle.clip(labels, min=0)
        if args.soft_weight:
            top_ids, top_prob = vocab.soft(top_ids, top_prob)
        logits_of = vocab.logits
    feat_scale = float(target_feat.square().mean())
    total, ces, regs = 0.0, [], []
    for s, out in enumerate(outs):
        valid = same_doc.copy()
        valid[:, :s] = False  # columns j < s have no anchor for substep s + 1
        rows = np.flatnonzero((valid & labelled).reshape(-1))
        pick = paddle.to_tensor(rng.choice(rows, size=min(args.ce_rows, len(rows)), replace=False))
        flat = out.reshape([b * length, -1])
        logits = logits_of(paddle.gather(flat, pick))  # [R, V] (or [R, N] with --train-vocab)
        label = paddle.gather(labels.reshape([-1]), pick)  # [R]
        ce_rows = F.cross_entropy(logits, label.unsqueeze(-1), reduction="none").reshape([-1])  # [R]
        ce = ce_rows.mean()
        loss_ce = ce
        if args.soft_weight:  # cross entropy against the target's top-k distribution (distillation)
            # -sum_k q_k log p(id_k) = logsumexp(logits) - sum_k q_k logits[id_k] (sum_k q_k = 1), and
            # logsumexp(logits) = ce_rows + logits[label]: the logits are picked by flat gathers (paddle's
            # logsumexp and take_along_axis over [R, V] cost 4x and 500x the cross entropy on this CPU)
            soft_ce = (ce_rows + pick_logits(logits, label.unsqueeze(-1)).reshape([-1])
                       - (paddle.gather(top_prob, pick) * pick_logits(logits, paddle.gather(top_ids, pick))).sum(-1))
            loss_ce = (1 - args.soft_weight) * ce + args.soft_weight * soft_ce.mean()
        mask = paddle.to_tensor(valid.astype(np.float32))
        diff = (model.norm.forward_train(out) - target_feat).square().mean(-1)  # [B, L]
        # relative to the target features' mean square, so the weight does not depend on the norm's scale
        reg = (diff * mask).sum() / mask.sum() / feat_scale
        weight = args.substep_weight ** s
        total = total + weight * (loss_ce + args.reg_weight * reg)
        ces.append(float(ce))
        regs.append(float(reg))
    return total / sum(args.substep_weight ** s for s in range(len(outs))), ces, regs


@paddle.no_grad()
def chain_acceptance(model, draft, c: dict, length: int, depth: int, max_windows: int,
                     vocabs: tuple[np.ndarray | None, ...] = (None,)) -> tuple[list[list[float]], int]:
    """Held-out P(first k chained drafts accepted), k = 1..depth (module docstring), per entry of `vocabs` (the
    token ids a draft may propose: the argmax over those columns only; None: every id), and the anchor count."""
    n, first_answer = len(c["ids"]), int(np.argmax(c["answer"]))  # text documents come first, then chats
    starts = np.arange(first_answer, n - length - 2, length)[:max_windows]
    accepted, count = np.zeros((len(vocabs), depth)), 0
    for i in range(0, len(starts), 8):
        ids, hidden, greedy, _, answer, raw, _ = window_batch(c, starts[i:i + 8], length)
        outs = substep_outputs(draft, ids, hidden, length, depth)
        g = greedy.numpy()
        doc = c["doc"][starts[i:i + 8, None] + np.arange(length + 2)[None]]
        # anchor i (column i): substep s's draft at column i + s - 1 is checked against g_{i+s}; the chain
        # continues on true tokens t_{i+s+1} == g_{i+s} (answers are the target's greedy output)
        hits = [[] for _ in vocabs]
        for s, out in enumerate(outs, start=1):
            logits = model.logits_train(out).numpy()  # [b, L, V]: column j predicts token j + 2
            for v, ids in enumerate(vocabs):
                d = logits.argmax(-1) if ids is None else ids[logits[..., ids].argmax(-1)]  # [b, L] token ids
                hit = np.zeros_like(d, dtype=bool)
                hit[:, :length - s + 1] = d[:, s - 1:] == g[:, s:length + 1]
                hits[v].append(hit)
        anchors = length - depth  # anchor i's chain reads window positions i + 1 .. i + depth + 1 <= length
        ok_anchor = doc[:, depth + 1:depth + 1 + anchors] == doc[:, 1:1 + anchors]
        for s in range(1, depth + 1):  # the chain's tokens lie in one answer, and the true tokens are g's
            cols = np.arange(anchors) + s
            ok_anchor &= answer[:, cols] & answer[:, cols + 1] & (raw[:, cols + 1] == g[:, cols])
        for v, vocab_hits in enumerate(hits):
            chain = np.cumprod(np.stack([h[:, :anchors] for h in vocab_hits], -1), axis=-1)  # [b, anchors, depth]
            accepted[v] += chain[ok_anchor].sum(0)
        count += int(ok_anchor.sum())
    return (accepted / max(count, 1)).tolist(), count


def lr_at(step: int, total: int, peak: float) -> float:
    warm = max(1, total // 25)
    if step < warm:
        return peak * (step + 1) / warm
    return peak * (0.05 + 0.475 * (1 + math.cos(math.pi * (step - warm) / max(1, total - warm))))


def train(args) -> None:
    paddle.seed(args.seed)
    rng = np.random.default_rng(args.seed)
    t0 = time.time()
    model = load_frozen_target()
    train_c, held_c = load_cache(args.work, "train"), load_cache(args.work, "held")
    print(f"train {len(train_c['ids'])} tokens ({int(train_c['answer'].sum())} answer), held-out "
          f"{len(held_c['ids'])} tokens ({int(held_c['answer'].sum())} answer)", flush=True)
    if args.init:  # continue from a written head (a warm start: its own cosine schedule from --lr)
        with skip_random_init():
            draft = MTPDraft(model)
        _load_state(draft, draft_file(str(args.init)), model.arch, model.tp)
        draft.train()
    else:
        draft = MTPDraft(model)
        # eh_proj starts as identity on the hidden half: the draft's first output is the target's own feature
        # h_j plus the layer's small residual, so training starts from the target's logits at j instead of
        # random logits (cross entropy ~8 instead of ~28 at step 1)
        h = model.arch.hidden_size
        init = draft.eh_proj.numpy()
        init[h:] = np.eye(h, dtype=np.float32)
        draft.eh_proj.set_value(init)
    ranked = None
    if args.train_vocab:
        if args.train_vocab > model.arch.vocab_size:
            raise SystemExit(f"--train-vocab {args.train_vocab}: allowed 0 (the full vocabulary) to the target's "
                             f"vocabulary size {model.arch.vocab_size}")
        ranked = read_draft_vocab(Path(args.vocab_from or args.init or args.out),
                                  model.arch.vocab_size)[:args.train_vocab].astype(np.int64)
    vocab = None if ranked is None else TrainVocab(model, ranked)
    params = draft.parameters()
    print(f"draft: {sum(int(np.prod(p.shape)) for p in params)} parameters, unroll {args.unroll}", flush=True)
    opt = paddle.optimizer.AdamW(learning_rate=args.lr, parameters=params, weight_decay=0.01, beta1=0.9,
                                 beta2=0.95, grad_clip=paddle.nn.ClipGradByGlobalNorm(1.0))
    log = []
    n, steps, step_start = len(train_c["ids"]), args.steps, time.time()
    for step in range(args.steps):
        if step == 5 and args.minutes:  # fit the run into --minutes at the measured step time
            steps = min(args.steps, max(10, int(args.minutes * 60 / ((time.time() - step_start) / 5))))
            print(f"{(time.time() - step_start) / 5:.1f} s/step: {steps} steps in {args.minutes} min", flush=True)
        if step == steps:
            break
        opt.set_lr(lr_at(step, steps, args.lr))
        starts = rng.integers(0, n - args.seq_len - 2, size=args.batch_size)
        loss, ces, regs = losses(model, draft, window_batch(train_c, starts, args.seq_len), args, rng, vocab)
        loss.backward()
        opt.step()
        opt.clear_grad()
        last = step + 1 == steps
        if (step + 1) % args.log_every == 0 or last:
            entry = {"step": step + 1, "loss": float(loss), "ce": ces, "reg": regs, "s": round(time.time() - t0)}
            if (step + 1) % args.eval_every == 0 or last:
                draft.eval()
                windows = 10 ** 6 if last else args.eval_windows  # the final evaluation reads every window
                chains, entry["anchors"] = chain_acceptance(model, draft, held_c, args.seq_len, 3, windows,
                                                            (None,) if ranked is None else (None, ranked))
                entry["held_chain"] = chains[0]
                if ranked is not None:  # drafting from the training vocabulary, as the engine does
                    entry["held_chain_vocab"] = chains[1]
                draft.train()
            log.append(entry)
            print(json.dumps(entry), flush=True)
    out = Path(args.out)
    save_mtp(draft, out)
    (out / "train_log.json").write_text(json.dumps({"args": vars(args), "log": log}, indent=1))
    print(f"wrote {out / 'mtp.safetensors'} after {time.time() - t0:.0f}s", flush=True)


def draft_vocab(args) -> None:
    """Every token id ranked by its count among the train split's answer tokens (the target's greedy output),
    most frequent first, ties by smaller id; ids never seen follow by id. Writes --out/draft_vocab.safetensors."""
    c = load_cache(args.work, "train")
    vocab_size = read_target_arch(load_config(CONFIG).model).vocab_size
    counts = np.bincount(c["ids"][c["answer"]], minlength=vocab_size)  # [V]
    ranked = np.argsort(-counts, kind="stable").astype(np.int32)  # stable: equal counts keep id order
    save_draft_vocab(ranked, args.out)
    total, seen = int(counts.sum()), int((counts > 0).sum())
    cover = {n: round(float(counts[ranked[:n]].sum()) / total, 4) for n in (1024, 4096, 8192, 16384, 32768)}
    print(json.dumps({"answer_tokens": total, "distinct": seen, "coverage": cover}))


def evaluate(args) -> None:
    model = load_frozen_target()
    draft = load_mtp(str(Path(args.out)), model)
    held_c = load_cache(args.work, "held")
    sizes = args.draft_vocab or [0]
    ranked = read_draft_vocab(Path(args.out)) if any(sizes) else None
    vocabs = tuple(ranked[:n].astype(np.int64) if n else None for n in sizes)
    chains, anchors = chain_acceptance(model, draft, held_c, args.seq_len, 3, 10 ** 6, vocabs)
    for n, chain in zip(sizes, chains):
        print(json.dumps({"draft_vocab": n, "held_chain": chain, "anchors": anchors,
                          "al_k2": 1 + chain[0] + chain[1], "al_k3": 1 + sum(chain)}), flush=True)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("stage", choices=("cache", "train", "vocab", "eval"))
    p.add_argument("--work", required=True, help="data.json and the caches")
    p.add_argument("--out", default=None, help="directory of mtp.safetensors (train, vocab, eval)")
    p.add_argument("--steps", type=int, default=1000, help="optimizer steps at most")
    p.add_argument("--minutes", type=float, default=0, help="fewer steps if they would take longer (0: off); "
                   "the step time is measured over the first 5 steps, evaluations not counted")
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=1.5e-3)
    p.add_argument("--unroll", type=int, default=3)
    p.add_argument("--substep-weight", type=float, default=0.8, help="substep s weighs this ** (s - 1)")
    p.add_argument("--ce-rows", type=int, default=512, help="sampled columns per substep for the cross entropy")
    p.add_argument("--reg-weight", type=float, default=1.0)
    p.add_argument("--soft-weight", type=float, default=0.5,
                   help="weight of the cross entropy against the target's top-k distribution (distillation); "
                   "1 - this weighs the cross entropy against its greedy token")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--init", default=None, help="train: start from this directory's mtp.safetensors")
    p.add_argument("--train-vocab", type=int, default=0,
                   help="train: cross entropy over the first N ranked ids of draft_vocab.safetensors (0: all)")
    p.add_argument("--vocab-from", default=None,
                   help="train: directory of draft_vocab.safetensors (default: --init, else --out)")
    p.add_argument("--splits", default="train,held", help="cache: which splits")
    p.add_argument("--threads", type=int, default=2, help="math library threads (Paddle's default is 1)")
    p.add_argument("--top-k", type=int, default=16, help="cache: the target's top-k next tokens kept per position")
    p.add_argument("--doc-tokens", type=int, default=384, help="cache: first tokens of each text document")
    p.add_argument("--reuse-cache", default=None, help="cache: an earlier --work whose cached documents are reused "
                   "where they are the same documents (reuse_cache)")
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--eval-every", type=int, default=200)
    p.add_argument("--eval-windows", type=int, default=12,
                   help="held-out chat windows of the periodic evaluations (the final one and eval read all 44)")
    p.add_argument("--draft-vocab", type=int, nargs="+", default=None, metavar="N",
                   help="eval: draft from the first N ids of --out's ranked draft vocabulary (0: all); several N "
                   "share one pass")
    args = p.parse_args(argv)
    if args.draft_vocab and min(args.draft_vocab) < 0:
        p.error(f"--draft-vocab {args.draft_vocab}: allowed: integers >= 0")
    if args.train_vocab < 0:
        p.error(f"--train-vocab {args.train_vocab}: allowed: 0 (the full vocabulary) or a positive id count")
    if args.stage != "cache" and args.out is None:
        p.error(f"{args.stage} needs --out")
    paddle.base.core.set_num_threads(args.threads)
    {"cache": cache, "train": train, "vocab": draft_vocab, "eval": evaluate}[args.stage](args)


if __name__ == "__main__":
    main()
