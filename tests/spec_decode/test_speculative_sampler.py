"""SpeculativeSampler end to end through the Worker: every verify_strategy x accept_policy from YAML, and the
reasoning-phase constraint."""

import numpy as np
import paddle
import pytest

from specworker.config import load_config
from specworker.model_executor.models.checkpoint import load_target
from specworker.sampling_params import SamplingParams
from specworker.spec_decode.speculative_sampler import ReasoningConstraint
from specworker.worker.worker import Worker
from tests.worker.worker_harness import drive, make_config, random_requests

STRATEGIES = ("greedy", "target_match", "rejection", "topp")
POLICIES = ("normal", "accept_all", "reject_all")
YAML = """
model: {{path: builtin:tiny}}
scheduler: {{max_num_seqs: 4, max_model_len: 96, block_size: 8, num_blocks: 64, max_num_batched_tokens: 64}}
speculative_config:
  method: mtp
  model: builtin:tiny-mtp
  num_speculative_tokens: 2
  num_model_steps: 2
  verify_strategy: {strategy}
  accept_policy: {policy}
"""


@pytest.fixture(scope="module")
def greedy_reference():
    reqs = random_requests(6, seed=21, max_tokens=(6, 16))
    return reqs, {k: v[0] for k, v in drive(Worker(make_config()), reqs).items()}


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_speculative_sampler_every_strategy_and_policy_from_yaml(strategy, policy, tmp_path, greedy_reference):
    """Greedy requests: every strategy with the normal or reject_all policy reproduces greedy decoding
    (greedy rows have one-hot probabilities, so even topp and rejection are exact); accept_all takes every
    draft (lossy by design) and must accept all of them."""
    path = tmp_path / "spec.yaml"
    path.write_text(YAML.format(strategy=strategy, policy=policy))
    config = load_config(path)
    assert (config.speculative_config.verify_strategy, config.speculative_config.accept_policy) == (strategy, policy)
    reqs, want = greedy_reference
    worker = Worker(config)
    got = {k: v[0] for k, v in drive(worker, reqs).items()}
    stats = worker.spec_stats
    assert set(got) == set(want)
    if policy == "accept_all":
        assert stats.num_accepted == stats.num_drafted > 0
    else:
        assert got == want
    if policy == "reject_all":
        assert stats.num_accepted == 0 and stats.num_drafted > 0
    if policy == "normal":
        assert stats.num_accepted > 0


class _Scripted:
    """The built-in model, but the logits of call i (batch of one, non-speculative) push hard towards
    script[i]: the generated history is known, so the reasoning status machine can be driven."""

    def __init__(self, model, script):
        self.model, self.arch, self.script, self.calls = model, model.arch, script, 0

    def forward(self, *args):
        return self.model.forward(*args)

    def new_kv_cache(self, *args):
        return self.model.new_kv_cache(*args)

    def compute_logits(self, rows):
        bias = np.zeros([rows.shape[0], self.arch.vocab_size], np.float32)
        bias[:, self.script[min(self.calls, len(self.script) - 1)]] = 1e3
        self.calls += 1
        return self.model.compute_logits(rows) + paddle.to_tensor(bias)


def test_reasoning_constraint_forces_allowed_token_after_think_end():
    """History "x\\n>\\n\\n" with '>' as </think>: the next row may only take an allowed id ('A'), though the
    model pushes 'z'. Without enable_thinking the answer starts at once: its first token is the constrained
    one (the op's status 0 -> 2 on a non-thinking request's first token), and nothing after it."""
    config = make_config()
    nl, end, allowed = ord("\n"), ord(">"), ord("A")
    script = [ord("x"), nl, end, nl, nl, ord("z"), ord("z")]
    constraint = ReasoningConstraint(think_end_id=end, line_break_id=nl, allowed_token_ids=(allowed,))
    outs = {}
    for thinking in (True, False):
        model = _Scripted(load_target(config.model, paddle.CPUPlace()), script)
        worker = Worker(config, model=model, reasoning=constraint)
        params = SamplingParams(max_tokens=7, temperature=0.0, ignore_eos=True, enable_thinking=thinking)
        worker.add_request("r", [256, 65], params)
        outs[thinking] = drive(worker, [])["r"][0]
    assert outs[False] == [allowed] + script[1:]
    assert outs[True] == script[:5] + [allowed, ord("z")]


def test_reasoning_constraint_rejects_bad_ids():
    with pytest.raises(ValueError, match="allowed_token_ids"):
        ReasoningConstraint(think_end_id=1, line_break_id=2, allowed_token_ids=())
    with pytest.raises(ValueError, match="think_end_id"):
        ReasoningConstraint(think_end_id=-1, line_break_id=2, allowed_token_ids=(3,))


def test_rejection_samples_drafts_and_keeps_their_distributions():
    """With verify_strategy rejection the MTP drafts are drawn from the request's sampling distribution,
    which is kept per slot for verification: every fed draft has q > 0 and each q sums to 1. Seeded
    sampled speculation stays batch invariant (every draw is keyed by seed and position)."""
    config = make_config("mtp", k=2, steps=2, strategy="rejection")
    reqs = random_requests(6, seed=31, sampled=True, max_tokens=(8, 16))
    worker = Worker(config)
    for r in reqs:
        worker.add_request(r.req_id, r.prompt, r.params)
    checked = 0
    while worker.has_unfinished():
        worker.step()
        probs = worker.runner.proposer.buffers["draft_probs"].numpy()  # [N, k, V]
        drafts = worker.input_batch.share_inputs["draft_tokens"].numpy()  # [N, D]
        for slot in worker.input_batch.occupied_slots:
            for i in range(2):
                token = drafts[slot, i + 1]
                if token >= 0:
                    assert probs[slot, i, token] > 0 and abs(probs[slot, i].sum() - 1) < 1e-4
                    checked += 1
    assert checked > 10
    alone = {}
    for r in reqs:
        alone.update(drive(Worker(config), [r]))
    assert {k: v[0] for k, v in drive(Worker(config), reqs).items()} == {k: v[0] for k, v in alone.items()}
