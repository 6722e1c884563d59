"""MTP drafting from a draft vocabulary (speculative_config.draft_vocab_size, docs/spec.md §5.3) on the built-in tiny
pair: the sub-vocabulary argmax is the full argmax restricted to it, V_d = V drafts exactly today's drafts, greedy
output equals non-speculative output with a small V_d, sampled drafts keep q = 0 outside the sub-vocabulary and
seeded runs stay reproducible and batch invariant. The tiny pair has no committed ranked list: `tiny_draft_dir`
derives one from the target's own greedy outputs (as tools/train_smollm2_mtp.py vocab does for SmolLM2)."""

import dataclasses
import shutil

import numpy as np
import paddle
import pytest
from safetensors.numpy import save_file

from specworker.config import ConfigError
from specworker.model_executor.models.checkpoint import BUILTIN_DRAFT_FILES, load_mtp, save_draft_vocab
from specworker.worker.worker import Worker
from tests.spec_decode.test_lossless import _requests, _shuffler
from tests.worker.worker_harness import alone, drive, make_config, random_requests, run_counting_host_copies

TINY_VOCAB = 259


@pytest.fixture(scope="module")
def ranked():
    """Every tiny id ranked by its count in the target's greedy outputs of 16 random requests (ties by id)."""
    reqs = random_requests(16, seed=404, max_prompt=32, max_tokens=(16, 32))
    outputs = drive(Worker(make_config()), reqs)
    counts = np.bincount(np.concatenate([tokens for tokens, _ in outputs.values()]), minlength=TINY_VOCAB)
    return np.argsort(-counts, kind="stable").astype(np.int32)


@pytest.fixture(scope="module")
def tiny_draft_dir(tmp_path_factory, ranked):
    """builtin:tiny-mtp's weights in a directory of their own, with `ranked` as its draft_vocab.safetensors."""
    path = tmp_path_factory.mktemp("tiny_mtp")
    shutil.copy(BUILTIN_DRAFT_FILES["builtin:tiny-mtp"], path / "mtp.safetensors")
    save_draft_vocab(ranked, path)
    return path


def _config(draft_dir, draft_vocab_size, *, k=2, strategy="greedy", **scheduler):
    config = make_config("mtp", k=k, steps=k, strategy=strategy, **scheduler)
    spec = dataclasses.replace(config.speculative_config, model=str(draft_dir), draft_vocab_size=draft_vocab_size)
    return dataclasses.replace(config, speculative_config=spec)


def _record_drafts(worker):
    """Per call of the proposer's draft sampler: (tokens [N], draft_probs[:, substep] [N, V] or None) as numpy."""
    proposer, calls = worker.runner.proposer, []
    draft_tokens = proposer._draft_tokens

    def recorded(logits, t, substep):
        tokens = draft_tokens(logits, t, substep)
        probs = None if proposer.draft_probs is None else proposer.draft_probs[:, substep].numpy()
        calls.append((tokens.numpy(), probs))
        return tokens

    proposer._draft_tokens = recorded
    return calls


@pytest.mark.parametrize("size,weight_dtype", [(1, "float32"), (37, "float32"), (TINY_VOCAB, "float32"),
                                               (37, "bfloat16")])
def test_draft_vocab_argmax_is_full_argmax_restricted_to_it(tiny_draft_dir, ranked, size, weight_dtype):
    """The proposer's greedy draft with V_d ids = the id among ranked[:V_d] with the largest full-vocabulary
    logit (first in rank order on a tie): the gathered lm_head columns and the map back line up, also with the
    linear weights stored in bfloat16 (the sub-weight is rounded as the full lm_head is)."""
    config = _config(tiny_draft_dir, size)
    config = dataclasses.replace(config, model=dataclasses.replace(config.model, linear_weight_dtype=weight_dtype))
    proposer = Worker(config).runner.proposer
    rows = paddle.to_tensor(np.random.default_rng(size).standard_normal((9, 192)).astype(np.float32))
    full = proposer.draft.compute_logits(rows).numpy()  # [9, V]
    ids = ranked[:size]
    want = ids[np.argmax(full[:, ids], axis=-1)]
    logits = proposer.draft.draft_logits(rows)
    assert logits.shape == [9, size]
    np.testing.assert_array_equal(logits.numpy(), full[:, ids])  # the same bits, column for column
    np.testing.assert_array_equal(proposer._argmax(logits, None, 0).numpy(), want)


def test_draft_vocab_of_the_whole_vocabulary_drafts_todays_tokens(tiny_draft_dir):
    """V_d = V (every id, in rank order) proposes exactly the drafts of draft_vocab_size 0, substep for substep."""
    reqs = _requests(seed=7, n=12)
    runs = []
    for size in (0, TINY_VOCAB):
        worker = Worker(_config(tiny_draft_dir, size))
        calls = _record_drafts(worker)
        runs.append((drive(worker, reqs), calls))
    assert runs[0][0] == runs[1][0]
    assert len(runs[0][1]) == len(runs[1][1]) > 0
    for (full, _), (sub, _) in zip(runs[0][1], runs[1][1]):
        np.testing.assert_array_equal(sub, full)


@pytest.mark.parametrize("size,k", [(12, 2), (48, 3)])
def test_draft_vocab_greedy_output_equals_non_speculative(tiny_draft_dir, ranked, size, k):
    """Small V_d, so drafts outside it are missed: output still equals plain greedy decoding (arrivals, aborts,
    row moves, chunked prefill), every draft lies in ranked[:V_d], and drafts are both accepted and rejected."""
    reqs = _requests(seed=300 + size)
    sched = dict(max_num_batched_tokens=24)
    baseline = drive(Worker(make_config(**sched)), [dataclasses.replace(r, abort_at=None) for r in reqs])
    worker = Worker(_config(tiny_draft_dir, size, k=k, **sched))
    calls = _record_drafts(worker)
    got = drive(worker, reqs, between=_shuffler(size))
    survivors = [r.req_id for r in reqs if r.abort_at is None or r.req_id in got]
    assert len(survivors) >= len(reqs) // 2
    for req_id in survivors:
        assert got[req_id] == baseline[req_id], req_id
    assert set(np.concatenate([tokens for tokens, _ in calls]).tolist()) <= set(ranked[:size].tolist())
    stats = worker.spec_stats
    assert 0 < stats.num_accepted < stats.num_drafted, (stats.num_accepted, stats.num_drafted)


def test_draft_vocab_sampled_drafts_reproducible_batch_invariant_and_zero_outside(tiny_draft_dir, ranked):
    """Rejection verification with sampled drafts from V_d = 40 ids: q sums to 1 over ranked[:40] and is 0
    elsewhere; seeded requests give the same tokens run twice and alone as in a batch."""
    config = _config(tiny_draft_dir, 40, k=3, strategy="rejection")
    reqs = random_requests(6, seed=78, max_prompt=24, max_tokens=(8, 20), sampled=True)
    worker = Worker(config)
    calls = _record_drafts(worker)
    first = drive(worker, reqs)
    assert worker.spec_stats.num_drafted > 0
    outside = np.setdiff1d(np.arange(TINY_VOCAB), ranked[:40])
    for tokens, probs in calls:
        assert np.isin(tokens, ranked[:40]).all()
        assert not probs[:, outside].any()
        np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=0, atol=1e-5)
    assert drive(Worker(config), reqs) == first
    assert alone(config, reqs) == first


def test_draft_vocab_size_without_ranked_list_is_a_config_error():
    """builtin:tiny-mtp has no draft_vocab.safetensors: draft_vocab_size > 0 fails at load, naming the key."""
    with pytest.raises(ConfigError, match=r"speculative_config.draft_vocab_size = 64: .*draft_vocab.safetensors "
                                          r"does not exist; allowed: 0 for this draft"):
        Worker(_config("builtin:tiny-mtp", 64))


def test_draft_vocab_size_above_a_checkpoints_vocabulary_is_a_config_error(tiny_draft_dir):
    """A checkpoint target's vocabulary is known only at load (the config checks builtin targets)."""
    target = Worker(make_config()).runner.model
    with pytest.raises(ConfigError, match=r"speculative_config.draft_vocab_size = 260: larger than the vocabulary; "
                                          r"allowed: 0 \(the whole vocabulary\) or 1..259"):
        load_mtp(str(tiny_draft_dir), target, draft_vocab_size=260)


@pytest.mark.parametrize("ranked_list", [np.arange(258, dtype=np.int32), np.zeros(259, dtype=np.int32),
                                         np.arange(259, dtype=np.int64)], ids=["short", "repeated_id", "int64"])
def test_draft_vocab_file_not_a_permutation_is_rejected(tmp_path, ranked_list):
    shutil.copy(BUILTIN_DRAFT_FILES["builtin:tiny-mtp"], tmp_path / "mtp.safetensors")
    save_file({"draft_vocab": ranked_list}, str(tmp_path / "draft_vocab.safetensors"))
    with pytest.raises(ValueError, match=r"draft_vocab.safetensors: 'draft_vocab' is .* expected a permutation of "
                                         r"0..258 as \[259\] int32"):
        Worker(_config(tmp_path, 16))


@pytest.mark.parametrize("strategy", ["greedy", "rejection"])
def test_draft_vocab_step_reads_device_values_once(tiny_draft_dir, strategy, monkeypatch):
    """The sub-vocabulary logits, the map back and the scatter of q add no host read to the step (docs/spec.md
    §5.3): the step's one sanctioned copy stays its only one."""
    worker = Worker(_config(tiny_draft_dir, 24, k=2, strategy=strategy, max_num_batched_tokens=16))
    for r in random_requests(6, seed=9, max_prompt=30, max_tokens=(3, 12), sampled=True):
        worker.add_request(r.req_id, r.prompt, r.params)
    steps, copies = run_counting_host_copies(monkeypatch, worker)
    assert steps > 3 and copies == list(range(steps))
