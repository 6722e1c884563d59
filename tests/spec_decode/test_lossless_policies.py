"""Lossless under every speculation policy (CPU, tiny pair): greedy output equals non-speculative output for
randomized requests with arrivals, aborts, reorders, penalties, stop tokens and per-request
num_speculative_tokens overrides, while k_b changes from step to step and slot to slot (a random test policy,
schedule, adaptive) and some requests are admitted draft-less (the random policy; adaptive where K = 0 is settled,
on given step costs); MTP and ngram. Also: an override of 0 never drafts, a draft-less request gets no draft
prefill and never drafts, the MTP loop runs max k_b substeps, seeded sampling is reproducible and batch invariant
under adaptive."""

import dataclasses

import numpy as np
import pytest

from specworker.spec_decode.mtp_proposer import MTPProposer
from specworker.worker.worker import Worker
from tests.spec_decode.random_policy import RandomPolicy
from tests.spec_decode.synthetic_costs import adaptive_with, drafts_pay_below
from tests.spec_decode.test_lossless import _repetitive_prompts, _requests, _shuffler
from tests.worker.worker_harness import Req, alone, drive, make_config, random_requests

SCHED = dict(max_num_batched_tokens=24)  # chunked prefill mixed with decode
# (name, make_config kwargs, requests); MTP shapes sum to >= 200 compared requests
MTP_SHAPES = [
    ("random_k3", dict(method="mtp", k=3, steps=3), 80),
    ("adaptive_k3", dict(method="mtp", k=3, steps=3, policy="adaptive"), 80),
    ("adaptive_draftless_k3", dict(method="mtp", k=3, steps=3, policy="adaptive"), 80),
    ("schedule_k2", dict(method="mtp", k=2, steps=2, policy="schedule", schedule={1: 2, 2: 1, 4: 0}), 80),
]
# shapes whose adaptive policy runs on given step costs: drafts pay below 3 slots, K = 0 is settled from 3 on, so
# requests admitted into a fuller batch are draft-less while earlier ones still draft
SYNTHETIC_COSTS = {"adaptive_draftless_k3": drafts_pay_below(3)}
NGRAM_SHAPES = [
    ("random_k3", dict(method="ngram", k=3), 50),
    ("adaptive_k3", dict(method="ngram", k=3, policy="adaptive"), 50),
]
COMPARED = {}  # shape name -> compared requests


def _with_overrides(reqs, seed):
    """About a third of the requests cap their drafts: num_speculative_tokens 0 (off), 1 or 2."""
    rng = np.random.default_rng(seed)
    out = []
    for r in reqs:
        if rng.random() < 0.35:
            r = dataclasses.replace(r, params=dataclasses.replace(r.params,
                                                                  num_speculative_tokens=int(rng.integers(0, 3))))
        out.append(r)
    return out


def _worker(name, kw, seed):
    config = make_config(**kw, **SCHED)
    spec, num_slots = config.speculative_config, config.scheduler.max_num_seqs
    policy = None
    if "policy" not in kw:  # the random test policy: k_b uniform in 0..k_max per slot per step
        policy = RandomPolicy(num_slots, spec.max_policy_draft_len, seed)
    elif name in SYNTHETIC_COSTS:
        policy = adaptive_with(num_slots, spec.max_policy_draft_len, SYNTHETIC_COSTS[name], ready=False)
    return Worker(config, policy=policy)


def _check_lossless(label, name, kw, n, seed, reqs):
    baseline = drive(Worker(make_config(**SCHED)), [dataclasses.replace(r, abort_at=None) for r in reqs])
    worker = _worker(name, kw, seed)
    spec = drive(worker, reqs, between=_shuffler(seed))
    survivors = [r.req_id for r in reqs if r.abort_at is None or r.req_id in spec]
    assert len(survivors) >= n // 2
    for req_id in survivors:
        assert spec[req_id] == baseline[req_id], (label, req_id)
    COMPARED[label] = len(survivors)
    return worker


@pytest.mark.parametrize("name,kw,n", MTP_SHAPES, ids=[s[0] for s in MTP_SHAPES])
def test_mtp_lossless_under_policy(name, kw, n):
    seed = 700 + len(name)
    worker = _check_lossless("mtp_" + name, name, kw, n, seed, _with_overrides(_requests(seed, n), seed))
    stats = worker.spec_stats
    assert 0 < stats.num_accepted < stats.num_drafted
    chosen = worker.draft_len_stats
    assert chosen.steps and 0 < chosen.mean_drafts_per_slot()
    if "policy" not in kw:  # the random policy really varied k_b within steps and between steps
        history = np.array(worker.runner.policy.history)
        live = history >= 0
        assert len({int(k) for k in history[live]}) == kw["k"] + 1
        assert any(len(set(row[row >= 0].tolist())) > 1 for row in history)
        assert worker.runner.policy.num_draftless > 0
    if name in SYNTHETIC_COSTS:  # some requests were admitted draft-less, and drafting slots ran beside them
        assert worker.runner.policy.num_draftless > 0


@pytest.mark.parametrize("name,kw,n", NGRAM_SHAPES, ids=[s[0] for s in NGRAM_SHAPES])
def test_ngram_lossless_under_policy(name, kw, n):
    seed = 800 + len(name)
    reqs = _with_overrides(_repetitive_prompts(_requests(seed, n), seed), seed)
    worker = _check_lossless("ngram_" + name, name, kw, n, seed, reqs)
    assert 0 < worker.spec_stats.num_accepted < worker.spec_stats.num_drafted


def test_policy_lossless_request_count():
    """Runs after the runs above: the MTP shapes compared >= 200 requests."""
    if not all("mtp_" + s[0] in COMPARED for s in MTP_SHAPES):
        pytest.skip("run with the whole module to count the lossless requests")
    assert sum(n for name, n in COMPARED.items() if name.startswith("mtp_")) >= 200


@pytest.mark.parametrize("method", ["ngram", "suffix"])
def test_lookup_budget_is_capped_by_k_b_shifted_by_a_raise_and_restarts_after_zero(method):
    """A lookup proposer drafts at most speculate_update's budget, which the runner caps by the policy's k_b each
    step (docs/spec.md §2.3): budget := min(budget + max(k_b - previous k_b, 0), k_b), and a budget of 0 (a step
    held at k_b = 0) restarts at k_b. So a slot drafts at most k_b, a run of rejections still shortens its drafts
    under a policy that varies k_b (the policy used to overwrite the budget with k_b), and a slot raised from k to
    k' drafts up to k' - k more than its budget under k (it was capped at k' before 2026-12-07: a turn of K = 3
    after one of K = 1 drafted 1 token a step, where fixed k = 3 drafts 3)."""
    seed = 911
    config = make_config(method=method, k=3, **SCHED)
    worker = Worker(config, policy=RandomPolicy(config.scheduler.max_num_seqs, 3, seed, draftless_rate=0.0))
    runner = worker.runner
    choose, propose = runner._choose_draft_lens, runner._propose
    seen = {"capped": 0, "restarted": 0, "shifted": 0, "fed": 0}
    chosen = {}

    def checked_choose(step):
        before = runner._buffers.actual_draft_token_nums.numpy().copy()
        previous = runner.share_inputs["policy_draft_len_cpu"].numpy().copy()
        k_b = choose(step)
        after = runner._buffers.actual_draft_token_nums.numpy()
        raised = np.maximum(k_b - previous, 0)
        np.testing.assert_array_equal(after, np.where(before > 0, np.minimum(before + raised, k_b), k_b))
        seen["capped"] += int((step.live & (before > 0) & (before < k_b) & (raised == 0)).sum())
        seen["restarted"] += int((step.live & (before == 0) & (k_b > 0)).sum())
        seen["shifted"] += int((step.live & (before > 0) & (raised > 0) & (before < k_b)).sum())
        chosen["k_b"], chosen["live"] = k_b.copy(), step.live.copy()
        return k_b

    def checked_propose(hidden, meta, lens):
        out = propose(hidden, meta, lens)
        fed = runner._buffers.seq_lens_this_time.numpy()
        live = chosen["live"] & (fed > 0)
        assert (fed[live] - 1 <= chosen["k_b"][live]).all()
        seen["fed"] += int((fed[live] > 1).sum())
        return out

    runner._choose_draft_lens, runner._propose = checked_choose, checked_propose
    reqs = _repetitive_prompts(_requests(seed, 24), seed)
    baseline = drive(Worker(make_config(**SCHED)), [dataclasses.replace(r, abort_at=None) for r in reqs])
    out = drive(worker, reqs)
    assert all(out[r] == baseline[r] for r in out)
    # the cases the rule is about happened: a budget below k_b kept, one below a raised k_b shifted up, a budget of
    # 0 restarted, drafts fed
    assert all(seen.values()), seen


@pytest.mark.parametrize("kw", [dict(method="mtp", k=2, steps=2), dict(method="ngram", k=3),
                                dict(method="mtp", k=3, steps=3, policy="adaptive")], ids=["mtp", "ngram", "adaptive"])
def test_override_zero_never_drafts_while_others_do(kw):
    reqs = random_requests(4, seed=31, max_prompt=20, max_tokens=(20, 30))
    reqs = [dataclasses.replace(r, prompt=(r.prompt[:3] * 10)[:20]) for r in reqs]  # ngram finds matches too
    off = {"q0", "q2"}
    reqs = [dataclasses.replace(r, params=dataclasses.replace(r.params, num_speculative_tokens=0))
            if r.req_id in off else r for r in reqs]
    worker = Worker(make_config(**kw))
    for r in reqs:
        worker.add_request(r.req_id, r.prompt, r.params)
    stats = {}
    while worker.has_unfinished():
        for out in worker.step():
            stats[out.request_id] = out.spec_stats
    assert all(stats[r].num_drafted == 0 for r in off)
    assert all(stats[r].num_drafted > 0 for r in ("q1", "q3"))


@pytest.mark.parametrize("schedule,expected", [({1: 1}, {1}), ({1: 0}, {0, 1}), ({1: 2}, {2})])
def test_mtp_draft_loop_runs_only_the_substeps_some_slot_needs(schedule, expected, monkeypatch):
    """k = 3, num_model_steps = 3: the draft forward runs max_b k_b times per round (0 for a decode round when
    every slot has k_b = 0; 1 for a round with a prefill chunk, which the draft must prefill)."""
    worker = Worker(make_config("mtp", k=3, steps=3, policy="schedule", schedule=schedule))
    proposer = worker.runner.proposer
    calls, rounds = [0], []
    forward = proposer.draft.forward

    def counted(*args, **kwargs):
        calls[0] += 1
        return forward(*args, **kwargs)

    run = MTPProposer.run

    def counted_run(self, inputs):
        calls[0] = 0
        out = run(self, inputs)
        rounds.append(calls[0])
        assert out.num_substeps == calls[0]
        return out

    monkeypatch.setattr(proposer.draft, "forward", counted)
    monkeypatch.setattr(MTPProposer, "run", counted_run)
    for r in random_requests(3, seed=5, max_prompt=20, max_tokens=(10, 20)):
        worker.add_request(r.req_id, r.prompt, r.params)
    while worker.has_unfinished():
        worker.step()
    assert set(rounds) == expected, rounds
    if schedule[1] > 0:
        assert worker.spec_stats.drafted_per_position[schedule[1]:] == [0] * (3 - schedule[1])


@pytest.mark.parametrize("strategy", ["rejection", "target_match"])
def test_seeded_sampling_reproducible_and_batch_invariant_under_adaptive(strategy):
    """Sampled requests give the same tokens run twice, and the same alone as in a batch, although adaptive's
    choices follow measured timings: under target_match the tokens do not depend on k_b; under rejection they
    would, so sampled requests keep their cap (policy.pinned)."""
    config = make_config("mtp", k=3, steps=3, strategy=strategy, policy="adaptive")
    reqs = random_requests(6, seed=77, max_prompt=24, max_tokens=(8, 20), sampled=True)
    worker = Worker(config)
    first = drive(worker, reqs)
    assert worker.spec_stats.num_drafted > 0
    assert drive(Worker(config), reqs) == first
    assert alone(config, reqs) == first


def _record_draft_prefills(worker):
    """req ids whose draft row got a prompt chunk (MTPProposer.write_prefill reached the draft batch)."""
    written, batch = set(), worker.runner.proposer.batch
    write_row = batch.write_row

    def recorded(slot, values):
        written.add(worker.input_batch.req_ids[slot])
        return write_row(slot, values)

    batch.write_row = recorded
    return written


def _record_admissions(worker):
    """req id -> whether the policy let it draft (SpeculationPolicy.admit, at its first chunk)."""
    admitted, policy = {}, worker.runner.policy
    admit = policy.admit

    def recorded(slot, num_slots, remaining=None, prompt_left=None):
        admitted[worker.input_batch.req_ids[slot]] = may = admit(slot, num_slots, remaining, prompt_left)
        return may

    policy.admit = recorded
    return admitted


def test_draftless_admission_skips_the_draft_prefill_and_never_drafts():
    """Adaptive with K = 0 settled at every batch size (given costs: each draft costs a whole step): every request is
    admitted draft-less, so no draft prefill is written and the draft model never runs, not even on prefill steps;
    no request drafts; output equals non-speculative output."""
    seed = 901
    reqs = _with_overrides(_requests(seed, 30), seed)
    config = make_config("mtp", k=3, steps=3, policy="adaptive", **SCHED)
    worker = Worker(config, policy=adaptive_with(4, 3, lambda batch, k: 0.01 * (1 + 2 * k)))
    prefilled, forwards = _record_draft_prefills(worker), [0]
    forward = worker.runner.proposer.draft.forward

    def counted(*args, **kwargs):
        forwards[0] += 1
        return forward(*args, **kwargs)

    worker.runner.proposer.draft.forward = counted
    admitted = _record_admissions(worker)
    spec = drive(worker, reqs, between=_shuffler(seed))
    baseline = drive(Worker(make_config(**SCHED)), [dataclasses.replace(r, abort_at=None) for r in reqs])
    assert spec and all(spec[req_id] == baseline[req_id] for req_id in spec)
    assert admitted and not any(admitted.values())
    assert worker.runner.policy.num_draftless == sum(r.params.num_speculative_tokens != 0 for r in reqs
                                                     if r.req_id in admitted)
    assert prefilled == set() and forwards[0] == 0
    assert worker.spec_stats.num_drafted == 0


def test_draftless_slots_never_draft_beside_drafting_ones():
    """Drafts pay below 3 slots (given costs): requests admitted while the batch is small draft, those admitted into
    a fuller batch are draft-less; the draft model runs for the first beside the second (mixed batches), yet a
    draft-less request never drafts and never gets a draft prefill; output equals non-speculative output."""
    reqs = random_requests(24, seed=17, max_prompt=30, max_tokens=(12, 40), arrive_span=60, abort_rate=0.1)
    config = make_config("mtp", k=3, steps=3, policy="adaptive", **SCHED)
    worker = Worker(config, policy=adaptive_with(4, 3, drafts_pay_below(3)))
    prefilled, admitted = _record_draft_prefills(worker), _record_admissions(worker)
    stats = {}
    original_collect = worker._collect

    def collect(plan, out):
        outputs = original_collect(plan, out)
        stats.update({o.request_id: o.spec_stats.num_drafted for o in outputs})
        return outputs

    worker._collect = collect
    spec = drive(worker, reqs, between=_shuffler(17))
    baseline = drive(Worker(make_config(**SCHED)), [dataclasses.replace(r, abort_at=None) for r in reqs])
    assert all(spec[req_id] == baseline[req_id] for req_id in spec)
    draftless = {r for r, may in admitted.items() if not may}
    drafting = set(admitted) - draftless
    assert draftless and drafting, admitted
    assert all(stats[r] == 0 for r in draftless if r in stats)
    assert any(stats.get(r, 0) > 0 for r in drafting)
    assert not prefilled & draftless and prefilled >= drafting


@pytest.mark.parametrize("strategy", ["rejection", "target_match"])
def test_seeded_sampling_reproducible_and_batch_invariant_with_draftless_admission(strategy):
    """Given costs make requests admitted into a batch of 3 or more draft-less, alone they draft: under target_match
    a sampled request's tokens do not depend on k_b, so run twice, in a batch or alone they are the same; under
    rejection they would, so a sampled request is never admitted draft-less (pinned)."""
    config = make_config("mtp", k=3, steps=3, strategy=strategy, policy="adaptive")
    reqs = random_requests(6, seed=78, max_prompt=24, max_tokens=(8, 20), sampled=True)
    pin = strategy == "rejection"
    policies = [adaptive_with(4, 3, drafts_pay_below(3), pin_sampled=pin) for _ in range(3)]
    first = drive(Worker(config, policy=policies[0]), reqs)
    assert drive(Worker(config, policy=policies[1]), reqs) == first
    assert alone(config, reqs, policy=policies[2]) == first
    assert (policies[0].num_draftless > 0) == (strategy == "target_match")
    assert policies[2].num_draftless == 0  # alone: one slot, drafts pay


def test_policy_is_told_the_remaining_tokens_only_while_nothing_waits(monkeypatch):
    """PolicyStep.remaining: None while a request waits for a slot; then, per slot, max_tokens less the tokens the
    request has after the step (0 for a free slot). Checked against the outputs the worker returns."""
    worker = Worker(make_config(method="mtp", k=2, steps=2, policy="adaptive", max_num_seqs=2))
    seen = []
    choose = worker.runner.policy.choose
    monkeypatch.setattr(worker.runner.policy, "choose",
                        lambda step: (seen.append(step.remaining_tokens()), choose(step))[1])
    reqs = random_requests(3, seed=5, max_prompt=12, max_tokens=(6, 14))
    for r in reqs:
        worker.add_request(r.req_id, r.prompt, r.params)
    budget = {r.req_id: r.params.max_tokens for r in reqs}
    made = {r.req_id: 0 for r in reqs}
    batch = worker.runner.input_batch
    while worker.has_unfinished():
        free = {slot for slot, req_id in enumerate(batch.req_ids) if req_id is None}
        outs = worker.step()
        waiting = bool(worker.scheduler.waiting)  # as the step saw it, after its admissions
        slots = {out.request_id: batch.slot_of(out.request_id) for out in outs if not out.finished}
        for out in outs:
            made[out.request_id] += len(out.new_token_ids)
        remaining = seen[-1]
        if waiting:
            assert remaining is None
            continue
        assert remaining is not None
        for req_id, slot in slots.items():
            assert remaining[slot] == budget[req_id] - made[req_id]
        free &= {slot for slot, req_id in enumerate(batch.req_ids) if req_id is None}  # free during the step
        assert all(remaining[slot] == 0 for slot in free)
    assert any(r is None for r in seen) and any(r is not None for r in seen)


def test_worker_builds_the_remaining_tokens_only_for_a_decision(monkeypatch):
    """The remaining tokens (a loop over the running requests, then a subtraction) are built only in a step whose
    choose makes a decision (the drain objective, the rate, the demotion verdict) or admits a request, not in the
    steps that keep the last decision: PolicyStep.remaining is a function the policy calls where it reads it."""
    worker = Worker(make_config(method="mtp", k=2, steps=2, policy="adaptive", max_num_seqs=3))
    policy, events = worker.runner.policy, []
    per_slot, choose = worker._per_slot, policy.choose
    monkeypatch.setattr(worker, "_per_slot", lambda value: (events.append("built"), per_slot(value))[1])
    monkeypatch.setattr(policy, "choose", lambda step: (events.append("step"), choose(step))[1])
    for name in ("best_k_draining", "best_k"):  # the drain objective's decision, or the rate's (one live slot)
        monkeypatch.setattr(policy, name, lambda *a, decide=getattr(policy, name): (events.append("decided"),
                                                                                    decide(*a))[1])
    for r in random_requests(3, seed=11, max_prompt=10, max_tokens=(40, 60)):
        worker.add_request(r.req_id, r.prompt, r.params)
    steps = []
    while worker.has_unfinished():
        events.clear()
        admitted = bool(worker.scheduler.waiting)
        worker.step()
        steps.append((admitted, list(events)))
    kept = [e for admitted, e in steps if not admitted and "decided" not in e and "step" in e]
    assert len(kept) > 10  # most decode steps keep the decision
    assert all("built" not in e for e in kept)
    assert any("built" in e and "decided" in e for _, e in steps)


def test_admission_is_told_the_remaining_tokens_only_when_nothing_waits(monkeypatch):
    """SpeculationPolicy.admit(remaining=, prompt_left=): None while a request still waits after the step's admissions
    (2 slots, 3 requests: the first two); for the third, admitted when nothing else waits, per slot max_tokens less
    the tokens its request had returned before that step (the new one's max_tokens), 0 at a free slot, and the prompt
    tokens each slot has still to prefill (the new one's whole prompt). Checked against the outputs the worker
    returns."""
    worker = Worker(make_config(method="mtp", k=2, steps=2, policy="adaptive", max_num_seqs=2))
    batch = worker.runner.input_batch
    reqs = random_requests(3, seed=5, max_prompt=12, max_tokens=(6, 14))
    made = {r.req_id: 0 for r in reqs}
    seen = {}  # req_id -> (remaining, the slots' requests, the tokens returned so far) at its admission
    admit = worker.runner.policy.admit

    def spy(slot, num_slots, remaining=None, prompt_left=None):
        seen[batch.req_ids[slot]] = (None if remaining is None else remaining.copy(), list(batch.req_ids), dict(made),
                                     None if prompt_left is None else prompt_left.copy())
        return admit(slot, num_slots, remaining, prompt_left)

    monkeypatch.setattr(worker.runner.policy, "admit", spy)
    for r in reqs:
        worker.add_request(r.req_id, r.prompt, r.params)
    while worker.has_unfinished():
        for out in worker.step():
            made[out.request_id] += len(out.new_token_ids)
    assert seen[reqs[0].req_id][0] is None and seen[reqs[1].req_id][0] is None
    assert seen[reqs[0].req_id][3] is None and seen[reqs[1].req_id][3] is None
    remaining, slots, returned, prompt_left = seen[reqs[2].req_id]
    prompts = {r.req_id: len(r.prompt) for r in reqs}
    # the other slot's prompt was prefilled steps ago; the new request's is all to come
    assert prompt_left.tolist() == [prompts[req_id] if req_id == reqs[2].req_id else 0 for req_id in slots]
    budget = {r.req_id: r.params.max_tokens for r in reqs}
    expected = [0 if req_id is None else budget[req_id] - returned[req_id] for req_id in slots]
    assert remaining is not None and remaining.tolist() == expected
    assert expected.count(budget[reqs[2].req_id]) >= 1 and sum(e > 0 for e in expected) == 2


def test_admission_of_a_paused_prefill_is_told_the_remaining_tokens():
    """A request admitted while another's prompt fills the step's token budget starts its prefill a step later (the
    scheduler pauses it); its admission (at that first chunk) is on the drain objective too when nothing waits. Every
    admission gets remaining tokens exactly when no request waits at that step (3 slots, 3 requests, 24-token
    budget for prompts of 12-20 tokens: some first chunks come after their admission step)."""
    worker = Worker(make_config(method="mtp", k=2, steps=2, policy="adaptive", max_num_seqs=3,
                                max_num_batched_tokens=24))
    batch = worker.runner.input_batch
    seen, admitted_at = [], {}
    admit = worker.runner.policy.admit

    def spy(slot, num_slots, remaining=None, prompt_left=None):
        seen.append((batch.req_ids[slot], worker.num_steps, bool(worker.scheduler.waiting), remaining is not None))
        assert (prompt_left is None) == (remaining is None)
        return admit(slot, num_slots, remaining, prompt_left)

    worker.runner.policy.admit = spy
    reqs = random_requests(3, seed=11, max_prompt=20, max_tokens=(6, 10))
    reqs = [dataclasses.replace(r, prompt=(r.prompt * 3)[:12 + 4 * i]) for i, r in enumerate(reqs)]
    for r in reqs:
        worker.add_request(r.req_id, r.prompt, r.params)
    while worker.has_unfinished():
        before = worker.num_steps
        worker.step()
        for req in worker.scheduler.running:
            admitted_at.setdefault(req.req_id, before)
    assert len(seen) == 3 and all(told == (not waiting) for _, _, waiting, told in seen)
    assert any(step > admitted_at[req_id] for req_id, step, _, _ in seen)  # a first chunk after its admission
    assert all(told for *_, told in seen)  # nothing waits here: every admission drains


@pytest.mark.parametrize("kw,cuts", [(dict(method="mtp", k=2, steps=2), False),
                                     (dict(method="mtp", k=3, steps=3, policy="schedule", schedule={1: 2}), False),
                                     (dict(method="mtp", k=3, steps=3, policy="schedule", schedule={1: 0}), True)],
                         ids=["fixed", "schedule-2", "schedule-0"])
def test_mtp_cuts_drafts_only_where_a_decoding_slot_keeps_fewer(kw, cuts, monkeypatch):
    """MTPProposer._cap_drafts (two device ops) runs only in a round where some slot decoding next step has k_b
    below the substeps run: never under fixed k or a schedule at num_model_steps' K; a round with a prefill chunk
    under schedule {1: 0} runs one substep for the draft prefill while every decoding slot has k_b = 0, and cuts.
    Greedy output is that of no speculation either way."""
    worker = Worker(make_config(**kw))
    rounds = []
    cap = MTPProposer._cap_drafts

    def counted_cap(self, inputs):
        rounds.append((inputs.min_draft_len, inputs.max_draft_len))
        return cap(self, inputs)

    monkeypatch.setattr(MTPProposer, "_cap_drafts", counted_cap)
    reqs = random_requests(3, seed=11, max_prompt=20, max_tokens=(10, 20))
    out = drive(worker, reqs)
    assert out == drive(Worker(make_config(**SCHED)), reqs)
    assert bool(rounds) == cuts, rounds
    assert all(low < high or high == 0 for low, high in rounds)
