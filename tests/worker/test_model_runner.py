"""ModelRunner.step's contract: one device-to-host copy per step and no other host read (CUDA-graph
and async safety), fixed share_inputs (no entry added, replaced or reallocated), stale metadata rejected."""

import pytest

from specworker.model_executor.forward_meta import StaleForwardMetaError
from specworker.sampling_params import SamplingParams
from specworker.worker.worker import Worker
from tests.sync_guard import HostReadError, allow_host_reads, forbid_host_reads
from tests.worker.worker_harness import make_config, random_requests, run_counting_host_copies

CONFIGS = {"none": dict(), "mtp_k2": dict(method="mtp", k=2, steps=2), "mtp_k3_steps1": dict(method="mtp", k=3),
           "ngram_k3": dict(method="ngram", k=3), "suffix_k3": dict(method="suffix", k=3),
           "mtp_k3_adaptive": dict(method="mtp", k=3, steps=3, policy="adaptive"),
           "mtp_k2_schedule": dict(method="mtp", k=2, steps=2, policy="schedule", schedule={1: 2, 3: 1, 4: 0}),
           "ngram_k3_adaptive": dict(method="ngram", k=3, policy="adaptive")}


def _worker(name):
    worker = Worker(make_config(**CONFIGS[name], max_num_batched_tokens=16))
    for r in random_requests(6, seed=9, max_prompt=30, max_tokens=(3, 12), sampled=True):
        worker.add_request(r.req_id, r.prompt, r.params)
    return worker


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_model_runner_step_reads_device_values_once(name, monkeypatch):
    """Whole engine steps (scheduling writes, pre_process, forward, sampling, verify, update, proposer) under a
    guard that fails any host read of a device tensor, except the one sanctioned copy, which must happen exactly
    once a step."""
    steps, copies = run_counting_host_copies(monkeypatch, _worker(name))
    assert steps > 3 and copies == list(range(steps))


def test_model_runner_guard_catches_a_host_read(monkeypatch):
    """The guard above can fail: a stray .numpy() in the step path raises."""
    worker = _worker("none")
    original = worker.runner.model.compute_logits

    def peeking(rows):
        rows.numpy()
        return original(rows)

    monkeypatch.setattr(worker.runner.model, "compute_logits", peeking)
    with forbid_host_reads(), pytest.raises(HostReadError):
        with allow_host_reads():
            pass
        worker.step()


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_model_runner_step_keeps_share_inputs_fixed(name):
    """No share_inputs entry is added, dropped or replaced by another tensor over a whole run (the
    proposer's batch too): every buffer a captured graph would read stays the same object and shape."""
    worker = _worker(name)
    batches = [worker.input_batch] + ([worker.runner.proposer.batch] if hasattr(worker.runner.proposer, "batch")
                                      else [])
    before = [{k: (id(t), tuple(t.shape), t.dtype) for k, t in b.share_inputs.items()} for b in batches]
    tensors = [dict(b.share_inputs) for b in batches]  # keep them alive so ids cannot be reused
    while worker.has_unfinished():
        worker.step()
    after = [{k: (id(t), tuple(t.shape), t.dtype) for k, t in b.share_inputs.items()} for b in batches]
    assert after == before and len(tensors) == len(batches)
    for b in batches:
        b.check()


def test_model_runner_rejects_meta_made_stale_during_the_step(monkeypatch):
    """A reorder between pre_process and verification (here forced from inside compute_logits) makes the
    step's ForwardMeta stale: the runner refuses to feed it to the sampler."""
    worker = Worker(make_config())
    worker.add_request("a", [1, 2, 3], SamplingParams(max_tokens=4, temperature=0.0))
    worker.add_request("b", [4, 5], SamplingParams(max_tokens=4, temperature=0.0))
    model = worker.runner.model
    original = model.compute_logits

    def reorder_inside(rows):
        worker.runner.swap_states(0, 1)
        return original(rows)

    monkeypatch.setattr(model, "compute_logits", reorder_inside)
    with pytest.raises(StaleForwardMetaError, match="the speculative sampler"):
        worker.step()


def test_model_runner_index_tensors_live_in_the_step_buffers(monkeypatch):
    """pre_process writes the step's index tensors into the batch's PER_STEP buffers (fixed addresses for
    graph capture) and the ForwardMeta the model sees refers to those buffers."""
    worker = Worker(make_config())
    worker.add_request("a", [1, 2, 3], SamplingParams(max_tokens=2, temperature=0.0))
    worker.add_request("b", [4, 5], SamplingParams(max_tokens=2, temperature=0.0))
    si = worker.input_batch.share_inputs
    seen = {}
    original = worker.runner.model.forward

    def spy(ids, meta, *rest):
        seen.update(ids=ids.data_ptr(), cu=meta.cu_seqlens_q.data_ptr(), out=meta.batch_id_per_token_output.data_ptr())
        return original(ids, meta, *rest)

    monkeypatch.setattr(worker.runner.model, "forward", spy)
    worker.step()
    assert seen == {"ids": si["ids_remove_padding"].data_ptr(), "cu": si["cu_seqlens_q"].data_ptr(),
                    "out": si["batch_id_per_token_output"].data_ptr()}
    assert si["cu_seqlens_q"].numpy()[:3].tolist() == [0, 3, 5]
    assert si["ids_remove_padding"].numpy()[:5].tolist() == [1, 2, 3, 4, 5]


def test_model_runner_files_no_step_cost_across_an_empty_batch():
    """A step's cost is its start to the next step's start; when its batch then empties (the requests finish on the
    host: max_tokens, a stop token), the time until the next request arrives is idle. The policy's cost model read
    such a gap as a 445 ms decode step at one slot (the bench's other workers ran in between), and its fits at small
    batch sizes drafted nothing after it. The first step of the next batch carries no cost, and every cost the
    policy is given comes from a step of the same batch."""
    worker = Worker(make_config(method="mtp", k=2, steps=2, policy="adaptive"))
    policy = worker.runner.policy
    seen = []
    choose = policy.choose
    policy.choose = lambda step: (seen.append(step.cost), choose(step))[1]
    for batch in range(3):
        mark = len(seen)
        for i, r in enumerate(random_requests(3, seed=batch, max_prompt=12, max_tokens=(6, 20))):
            worker.add_request(f"{batch}-{i}", r.prompt, r.params)
        while worker.has_unfinished():
            worker.step()
        assert worker.runner._last_step is None  # nothing left to file
        assert seen[mark] is None  # the batch's first step: nothing before it in this batch
        assert any(cost is not None for cost in seen[mark:])  # its decode steps were filed (the test can fail)
