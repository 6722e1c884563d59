"""Worker end to end (non-speculative, CPU, built-in tiny model): batch invariance, chunked prefill,
reorder fuzz, KV exhaustion, stop conditions, and bad input that leaves the worker usable."""

import dataclasses

import numpy as np
import pytest

from specworker.sampling_params import SamplingParams
from specworker.worker.request import FinishReason
from specworker.worker.worker import Worker
from tests.worker.worker_harness import alone, drive, make_config, random_requests


@pytest.fixture(scope="module")
def config():
    return make_config()


def _tokens(results):
    return {k: v[0] for k, v in results.items()}


def test_worker_greedy_batch_invariant_with_arrivals_and_aborts(config):
    """Each request's greedy tokens are identical alone, in a full batch, and with staggered arrivals and
    aborts around it (bit-exact numerics: batch-invariant linear and attention)."""
    reqs = random_requests(10, seed=1, arrive_span=8, abort_rate=0.25)
    mixed = drive(Worker(config), reqs)
    together = drive(Worker(config), [dataclasses.replace(r, arrive=0, abort_at=None) for r in reqs])
    single = alone(config, reqs)
    assert _tokens(together) == _tokens(single)
    survivors = {r.req_id for r in reqs if r.abort_at is None}
    assert survivors and set(mixed) >= survivors
    for req_id in survivors:
        assert mixed[req_id][0] == single[req_id][0], req_id


def test_worker_seeded_sampling_batch_invariant(config):
    reqs = random_requests(8, seed=2, sampled=True, arrive_span=5)
    batched = drive(Worker(config), reqs)
    assert _tokens(batched) == _tokens(alone(config, reqs))
    again = drive(Worker(config), reqs)
    assert _tokens(again) == _tokens(batched)


def test_worker_seeded_sampling_depends_on_seed(config):
    prompt = [72, 101, 108, 108, 111]
    outs = []
    for seed in (1, 2):
        w = Worker(config)
        outs.append(drive(w, [_req("a", prompt, temperature=1.0, seed=seed, max_tokens=16)])["a"][0])
    assert outs[0] != outs[1]


def _req(req_id, prompt, **kw):
    from tests.worker.worker_harness import Req

    return Req(req_id, prompt, SamplingParams(**kw))


def test_worker_chunked_prefill_equals_unchunked():
    """max_num_batched_tokens 8 splits 40-token prompts into 5+ chunks (mixed with decode slots)."""
    reqs = random_requests(6, seed=3, max_prompt=40, arrive_span=4)
    small = drive(Worker(make_config(max_num_batched_tokens=8)), reqs)
    big = drive(Worker(make_config(max_num_batched_tokens=256)), reqs)
    assert _tokens(small) == _tokens(big)


def test_worker_reorder_fuzz_changes_no_output(config):
    """Random swaps, condense and the prefill/decode split between steps: outputs unchanged."""
    reqs = random_requests(10, seed=4, arrive_span=6, abort_rate=0.2)
    rng = np.random.default_rng(0)

    def shuffle(worker, step):
        batch = worker.input_batch
        for _ in range(int(rng.integers(0, 3))):
            i, j = (int(x) for x in rng.integers(0, batch.num_slots, size=2))
            worker.runner.swap_states(i, j)
        if rng.random() < 0.3:
            worker.runner.condense()
        if rng.random() < 0.3:
            worker.runner.reorder_split_prefill_and_decode()

    plain = drive(Worker(config), reqs)
    fuzzed = drive(Worker(config), reqs, between=shuffle)
    assert _tokens(fuzzed) == _tokens(plain)


def test_worker_kv_exhaustion_queues_and_completes():
    """12 blocks of 8 hold at most two of these requests at once: the rest queue, nothing is corrupted."""
    reqs = random_requests(6, seed=5, max_prompt=30, max_tokens=(10, 16))
    tight = Worker(make_config(num_blocks=12))
    seen_waiting = []
    out = drive(tight, reqs, between=lambda w, s: seen_waiting.append(len(w.scheduler.waiting)))
    assert max(seen_waiting) >= 2
    assert _tokens(out) == _tokens(drive(Worker(make_config()), reqs))


def test_worker_stop_conditions(config):
    """max_tokens gives LENGTH with exactly max_tokens tokens; a stop token ends the request and is kept."""
    w = Worker(config)
    base = drive(w, [_req("a", [65, 66, 67], temperature=0.0, max_tokens=12, ignore_eos=True)])["a"]
    assert len(base[0]) == 12 and base[1] is FinishReason.LENGTH
    stop_at = base[0][5]
    first = base[0].index(stop_at)
    cut = drive(w, [_req("b", [65, 66, 67], temperature=0.0, max_tokens=12, ignore_eos=True,
                         stop_token_ids=[stop_at])])["b"]
    assert cut == (base[0][:first + 1], FinishReason.STOP)


class _EosBiased:
    """The built-in model with a huge EOS logit, so greedy decoding wants EOS at every step."""

    def __init__(self, model, eos_id):
        import paddle

        self.model, self.arch = model, model.arch
        bias = np.zeros([model.arch.vocab_size], np.float32)
        bias[eos_id] = 1e4
        self.bias = paddle.to_tensor(bias)

    def forward(self, *args):
        return self.model.forward(*args)

    def new_kv_cache(self, *args):
        return self.model.new_kv_cache(*args)

    def compute_logits(self, rows):
        return self.model.compute_logits(rows) + self.bias


def test_worker_eos_stops_unless_ignored(config):
    """EOS ends a request (kept, STOP); ignore_eos and min_tokens mask it (penalty op's min_len)."""
    import paddle

    from specworker.model_executor.models.checkpoint import load_target
    from specworker.tokenizer import EOS_TOKEN_ID

    model = _EosBiased(load_target(config.model, paddle.CPUPlace()), EOS_TOKEN_ID)
    w = Worker(config, model=model)
    out = drive(w, [_req("a", [65], temperature=0.0, max_tokens=5),
                    _req("b", [65], temperature=0.0, max_tokens=5, ignore_eos=True),
                    _req("c", [65], temperature=0.0, max_tokens=5, min_tokens=3)])
    assert out["a"] == ([EOS_TOKEN_ID], FinishReason.STOP)
    assert len(out["b"][0]) == 5 and EOS_TOKEN_ID not in out["b"][0] and out["b"][1] is FinishReason.LENGTH
    assert len(out["c"][0]) == 4 and out["c"][0][3] == EOS_TOKEN_ID and out["c"][1] is FinishReason.STOP


def test_worker_abort_frees_slot_and_blocks(config):
    w = Worker(config)
    w.add_request("a", [1, 2, 3], SamplingParams(max_tokens=30, temperature=0.0))
    w.step()
    free_before = w.blocks.num_free
    out = w.abort("a")
    assert out.finished and out.finish_reason is FinishReason.ABORT
    assert not w.has_unfinished() and w.blocks.num_free > free_before and w.input_batch.occupied_slots == []
    w.add_request("a", [1, 2, 3], SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True))  # id reusable
    assert drive(w, [])["a"][1] is FinishReason.LENGTH
