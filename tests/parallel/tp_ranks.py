"""The program every rank runs in the tensor-parallel tests (test_tensor_parallel.py starts it through
specworker.tp_launch). `python tp_ranks.py MODE OUT_DIR DEVICE`; each rank writes OUT_DIR/rank<r>.json. DEVICE cpu (gloo) or gpu (NCCL,
one GPU per rank): the same program either way.

Modes:
  logits    tiny target and MTP draft: TP shard vs the whole model (loaded in the same process) on a batched
            prefill and a verify step; batch invariance of the sharded model (a slot alone vs in the batch);
            the tiny Hugging Face architectures (biases added after the reduction, q/k norm, ERNIE's rotation)
  generate  tiny pair: Worker runs (TP non-speculative, TP MTP with aborts and reorders, TP seeded sampling;
            rank 0 also TP = 1) over random requests
  reduce    TensorParallel.reduce_sum over tensors of several sizes (3 ranks: the all-gather path), and
            gloo's own all_reduce for comparison
  smollm2   SmolLM2 at TP = 3: logits vs TP = 1, then greedy n-gram speculative vs non-speculative
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np
import paddle
import paddle.distributed as dist

from specworker.config import ModelConfig, ParallelConfig
from specworker.model_executor.models.checkpoint import load_mtp, load_target
from specworker.model_executor.parallel import SINGLE_RANK, init_tensor_parallel
from specworker.worker.worker import Worker
from tests.model_executor.test_llama import BLOCK_SIZE, MAX_BLOCKS, TargetRunner, block_tables, make_meta
from tests.spec_decode.test_lossless import _shuffler
from tests.worker.worker_harness import drive, make_config, random_requests

HF_MODELS = ("llama", "qwen2", "qwen3", "ernie4_5")  # biases (o, mlp), q/k/v bias, q/k norm, interleaved RoPE
PLACE = [None]  # this rank's place (main sets it)
GENERATE_REQUESTS = 64  # about 10% are aborted; the rest (>= 50) are compared
SAMPLED_REQUESTS = 16
SMOLLM2_REQUESTS, SMOLLM2_MAX_TOKENS = 16, 32


def _digest(*arrays: np.ndarray) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def _compare(ref: np.ndarray, got: np.ndarray) -> dict:
    scale = float(np.abs(ref).max())
    return {"max_abs": float(np.abs(ref - got).max()), "max_abs_over_max": float(np.abs(ref - got).max()) / scale,
            "argmax_agree": float((ref.argmax(-1) == got.argmax(-1)).mean()), "rows": int(ref.shape[0])}


def _target_steps(model, slots_prefill, slots_verify, n_slots):
    runner = TargetRunner(model, n_slots)
    hidden, logits, cu = runner.step(slots_prefill)
    _, verify_logits, cu_v = runner.step(slots_verify)
    return hidden[:cu[-1]], logits[:cu[-1]], verify_logits[:cu_v[-1]], cu


def _draft_logits(draft, hidden_size, slots):
    """One prefill step of the draft; prev_hidden rows from a fixed random draw."""
    meta, cu = make_meta({b: (tok, 0, True) for b, tok in slots.items()}, len(slots), 4)
    prev = np.random.default_rng(3).standard_normal([meta.token_num, hidden_size]).astype(np.float32)
    kv = draft.new_kv_cache(len(slots) * MAX_BLOCKS, BLOCK_SIZE)
    out = draft(meta.ids_remove_padding, paddle.to_tensor(prev), meta, kv, block_tables(len(slots)))
    return draft.compute_logits(out).numpy()[:cu[-1]]


def mode_logits(tp) -> dict:
    config = ModelConfig()
    full, shard = load_target(config, PLACE[0], SINGLE_RANK), load_target(config, PLACE[0], tp)
    rng = np.random.default_rng(0)
    prompts = {b: rng.integers(0, 256, 9 + 7 * b).tolist() for b in range(4)}
    prefill = {b: (p, 0, True) for b, p in prompts.items()}
    verify = {b: (rng.integers(0, 256, 3).tolist(), len(p), False) for b, p in prompts.items()}
    _, l1, v1, cu = _target_steps(full, prefill, verify, 4)
    _, l2, v2, _ = _target_steps(shard, prefill, verify, 4)
    # batch invariance under TP: slot 2 prefilled alone must give the bits it had in the batch of four
    _, alone, _, _ = _target_steps(shard, {0: prefill[2]}, {0: verify[2]}, 1)
    draft1, draft2 = load_mtp("builtin:tiny-mtp", full, PLACE[0]), load_mtp("builtin:tiny-mtp", shard, PLACE[0])
    d1 = _draft_logits(draft1, full.arch.hidden_size, prompts)
    d2 = _draft_logits(draft2, full.arch.hidden_size, prompts)
    return {"prefill": _compare(l1, l2), "verify": _compare(v1, v2), "draft": _compare(d1, d2),
            "alone_equals_batched": bool(np.array_equal(alone, l2[cu[2]:cu[3]])),
            "host_read": _host_read(shard, prefill), "hf": _hf_logits(tp), "digest": _digest(l2, v2, d2)}


def _hf_logits(tp) -> dict:
    """Per tiny Hugging Face architecture: TP shard vs the whole model on a batched prefill and verify step."""
    from specworker.model_executor.models.hf_checkpoint import load_hf_target
    from tests.model_executor.test_hf_golden import DATA

    rng = np.random.default_rng(4)
    out = {}
    for name in HF_MODELS:
        full, shard = load_hf_target(DATA / name, PLACE[0]), load_hf_target(DATA / name, PLACE[0], tp=tp)
        prompts = {b: rng.integers(0, full.arch.vocab_size, 5 + 4 * b).tolist() for b in range(3)}
        prefill = {b: (p, 0, True) for b, p in prompts.items()}
        verify = {b: (rng.integers(0, full.arch.vocab_size, 3).tolist(), len(p), False) for b, p in prompts.items()}
        _, l1, v1, _ = _target_steps(full, prefill, verify, 3)
        _, l2, v2, _ = _target_steps(shard, prefill, verify, 3)
        out[name] = {"prefill": _compare(l1, l2), "verify": _compare(v1, v2), "digest": _digest(l2, v2)}
    return out


def _host_read(model, slots) -> str | None:
    """The sharded forward and logits (collectives included) under the host-read guard: None, or the error."""
    from tests.sync_guard import HostReadError, forbid_host_reads

    meta, _ = make_meta(slots, len(slots), 4)
    runner = TargetRunner(model, len(slots))
    try:
        with forbid_host_reads():
            model.compute_logits(model(meta.ids_remove_padding, meta, runner.kv, runner.tables))
    except HostReadError as err:
        return str(err)
    return None


def _tokens(results: dict) -> dict:
    return {req_id: tokens for req_id, (tokens, _) in results.items()}


def mode_generate(tp) -> dict:
    parallel = ParallelConfig(tensor_parallel_size=tp.size)

    def config(*args, **kw):
        return dataclasses.replace(make_config(*args, **kw), parallel_config=parallel, device=DEVICE[0])

    sched = dict(max_num_batched_tokens=24)  # prompts up to 40 tokens: chunked prefill mixed with decode
    reqs = random_requests(GENERATE_REQUESTS, seed=21, max_prompt=40, max_tokens=(1, 24), arrive_span=20,
                           abort_rate=0.1)
    whole = [dataclasses.replace(r, abort_at=None) for r in reqs]
    t0 = time.perf_counter()
    base = drive(Worker(config(**sched)), whole)
    spec_worker = Worker(config("mtp", k=2, steps=2, **sched))
    spec = drive(spec_worker, reqs, between=_shuffler(5))
    sampled_reqs = random_requests(SAMPLED_REQUESTS, seed=8, max_prompt=24, max_tokens=(4, 16), sampled=True)
    sampled = drive(Worker(config("mtp", k=2, steps=2, strategy="rejection")), sampled_reqs)
    out = {"base": _tokens(base), "spec": _tokens(spec), "sampled": _tokens(sampled),
           "aborted": [r.req_id for r in reqs if r.req_id not in spec],
           "accepted": spec_worker.spec_stats.num_accepted, "drafted": spec_worker.spec_stats.num_drafted,
           "seconds": time.perf_counter() - t0}
    if tp.rank == 0:  # the single-rank reference, for the agreement figure
        out["tp1"] = _tokens(drive(Worker(dataclasses.replace(make_config(**sched), device=DEVICE[0])), whole))
    return out


def mode_reduce(tp) -> dict:
    rng = np.random.default_rng(100 + tp.rank)
    base = (rng.standard_normal(1 << 15) * 10.0 ** rng.integers(-3, 4, 1 << 15)).astype(np.float32)
    sizes = (7, 577, 4096, 1 << 15)
    ours, gloo = {}, {}
    for n in sizes:
        ours[n] = tp.reduce_sum(paddle.to_tensor(base[:n].copy())).numpy()
        t = paddle.to_tensor(base[:n].copy())
        dist.all_reduce(t)
        gloo[n] = t.numpy()
    big = sizes[-1]
    return {"ours_prefix_invariant": all(np.array_equal(ours[n], ours[big][:n]) for n in sizes),
            "gloo_prefix_invariant": all(np.array_equal(gloo[n], gloo[big][:n]) for n in sizes),
            "digest": _digest(*(ours[n] for n in sizes))}


def mode_smollm2(tp) -> dict:
    from tests.smollm2 import SMOLLM2_DIR

    config = ModelConfig(path=str(SMOLLM2_DIR))
    shard = load_target(config, PLACE[0], tp)
    full = load_target(config, PLACE[0], SINGLE_RANK) if tp.rank == 0 else None
    rng = np.random.default_rng(1)
    prompts = {b: rng.integers(0, 49152, 6 + 5 * b).tolist() for b in range(3)}
    prefill = {b: (p, 0, True) for b, p in prompts.items()}
    verify = {b: (rng.integers(0, 49152, 3).tolist(), len(p), False) for b, p in prompts.items()}
    _, l2, v2, _ = _target_steps(shard, prefill, verify, 3)
    out = {"digest": _digest(l2, v2)}
    if full is not None:
        _, l1, v1, _ = _target_steps(full, prefill, verify, 3)
        out.update(prefill=_compare(l1, l2), verify=_compare(v1, v2))
    del full
    return {**out, **_smollm2_generate(tp, shard)}


def _smollm2_generate(tp, shard) -> dict:
    """Greedy n-gram speculative (k 3) vs non-speculative over the packaged prompts, sharing the loaded shard."""
    from specworker.batch_run import DEFAULT_PROMPTS, load_prompts
    from specworker.config import load_config
    from specworker.hf_tokenizer import load_tokenizer
    from specworker.sampling_params import SamplingParams
    from tests.smollm2 import SMOLLM2_CONFIG
    from tests.worker.worker_harness import Req

    config = load_config(SMOLLM2_CONFIG)
    tokenizer = load_tokenizer(config.model.path)
    params = SamplingParams(max_tokens=SMOLLM2_MAX_TOKENS, temperature=0.0, ignore_eos=True)
    reqs = [Req(f"p{i}", tokenizer.encode(text), params)
            for i, text in enumerate(load_prompts(DEFAULT_PROMPTS)[:SMOLLM2_REQUESTS])]
    parallel = ParallelConfig(tensor_parallel_size=tp.size)
    ngram = dataclasses.replace(load_config(SMOLLM2_CONFIG.with_name("smollm2_ngram.yaml")),
                                parallel_config=parallel, device=DEVICE[0])
    out = {}
    for name, cfg in (("base", dataclasses.replace(config, parallel_config=parallel, device=DEVICE[0])),
                      ("spec", ngram)):
        worker = Worker(cfg, model=shard)
        t0 = time.perf_counter()
        out[name] = _tokens(drive(worker, reqs))
        out[f"{name}_tokens_per_s"] = sum(map(len, out[name].values())) / (time.perf_counter() - t0)
    return out


MODES = {"logits": mode_logits, "generate": mode_generate, "reduce": mode_reduce, "smollm2": mode_smollm2}


DEVICE = ["cpu"]


def main() -> None:
    mode, out_dir, DEVICE[0] = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    tp = init_tensor_parallel(dist.get_world_size())
    if DEVICE[0] == "gpu":  # one GPU per rank, as Worker does
        device_id = dist.ParallelEnv().device_id
        paddle.set_device(f"gpu:{device_id}")
        PLACE[0] = paddle.CUDAPlace(device_id)
    result = {"rank": tp.rank, "size": tp.size, **MODES[mode](tp)}
    (out_dir / f"rank{tp.rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
