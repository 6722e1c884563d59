"""The adaptive worker's cost profile at start (docs/adaptive.md, "Profiled step costs"): what it measures (every K
at every batch size, full drafts for a lookup proposer), that the worker is left as it was (no request, no
statistics, its own policy on the profile's costs), and that greedy output is unchanged."""

import dataclasses

import numpy as np
import pytest

import specworker.worker.cost_profiling as cost_profiling
from specworker.config_checks import ConfigError
from specworker.sampling_params import SamplingParams
from specworker.spec_decode.cost_profile import ProfiledCosts, prefill_cost
from specworker.spec_decode.policy import AdaptivePolicy
from specworker.spec_decode.step_cost_model import StepCostModel
from specworker.worker.worker import Worker
from tests.worker.worker_harness import drive, make_config, random_requests


def _capture_rows(monkeypatch, prefills=None):
    """The steady rows profile_step_costs builds its profile from (and its prefill samples into `prefills`)."""
    seen = []
    build = cost_profiling.build_profile

    def spy(rows, k_max, samples=()):
        seen.extend(rows)
        if prefills is not None:
            prefills.extend(samples)
        return build(rows, k_max, samples)

    monkeypatch.setattr(cost_profiling, "build_profile", spy)
    return seen


@pytest.mark.parametrize("method, kw", [("mtp", dict(k=2, steps=2)), ("ngram", dict(k=2))])
def test_profile_measures_every_k_at_every_batch_size(monkeypatch, method, kw):
    prefills = []
    rows = _capture_rows(monkeypatch, prefills)
    worker = Worker(make_config(method=method, policy="adaptive", **kw))
    profile = worker.cost_profile
    assert profile is not None and profile.batch_sizes.tolist() == [1, 2, 4]  # max_num_seqs 4
    assert (profile.steps >= 6).all()  # 6 rounds, 2 steady steps of each K a round (less a hold cut by a fresh batch)
    for b in (1, 2, 4):
        rounds = sorted({r.round for r in rows if r.cost.num_slots == b})  # 6, and up to 24 while a ratio is unsettled
        assert rounds == list(range(len(rounds))) and 6 <= len(rounds) <= 24
        for k in range(3):
            assert sorted({r.round for r in rows if r.cost.num_slots == b and r.k == k}) == rounds
    assert (profile.seconds > 0).all() and (profile.verify > 0).all()
    assert isinstance(worker.runner.policy.costs, ProfiledCosts) and worker.runner.policy.profiled
    # a step held at K fed K drafts a slot, the lookup's own finds or not (the synthetic prompt repeats nothing)
    assert rows and all(row.cost.num_drafts == row.k * row.cost.num_slots for row in rows)
    assert all(row.cost.num_substeps == (row.k if method == "mtp" else 0) for row in rows)
    # every batch's prefill step gave (its prompt tokens, the proposer's seconds): 8-token prompts, 1 + 2 + 4 requests
    # at least once each; the slope of one on the other is the draft prefill's cost a token
    assert sum(tokens for tokens, _ in prefills) >= 8 * (1 + 2 + 4) and all(t > 0 and s >= 0 for t, s in prefills)
    assert profile.prefill_per_token == prefill_cost(prefills) >= 0.0


def test_profile_measures_more_rounds_while_a_ratio_is_unsettled(monkeypatch):
    """Past `rounds`, another round at a batch size while a K's ratio error there exceeds target_error (read from the
    rows so far by cost_profile.ratio_errors): up to twice `rounds`, then up to max_rounds (four times `rounds` by
    default) while the rounds past `rounds` have taken less than extra_seconds."""
    config = make_config(method="mtp", k=2, steps=2, policy="adaptive")
    worker = Worker(dataclasses.replace(config, speculative_config=dataclasses.replace(
        config.speculative_config, profile_rounds=0)))  # no profile at start: measured below
    assert worker.cost_profile is None

    def rounds_at(size):
        return sorted({r.round for r in rows if r.cost.num_slots == size})

    rows = _capture_rows(monkeypatch)
    cost_profiling.profile_step_costs(worker, rounds=2, target_error=float("inf"))
    assert all(rounds_at(b) == [0, 1] for b in (1, 2, 4))
    rows.clear()
    cost_profiling.profile_step_costs(worker, rounds=2, target_error=0.0)  # never settled: the cap
    assert all(rounds_at(b) == list(range(8)) for b in (1, 2, 4))
    rows.clear()
    cost_profiling.profile_step_costs(worker, rounds=2, target_error=0.0, extra_seconds=0.0)  # no time past 2x
    assert all(rounds_at(b) == [0, 1, 2, 3] for b in (1, 2, 4))
    rows.clear()
    cost_profiling.profile_step_costs(worker, rounds=2, max_rounds=5, target_error=0.0)
    assert all(rounds_at(b) == list(range(5)) for b in (1, 2, 4))
    # unsettled until the rows at the size hold three rounds: a third round, no fourth
    seen = []

    def errors(at_b, k_max):
        seen.append({r.round for r in at_b})
        return np.array([0.0] + [0.0 if len({r.round for r in at_b}) >= 3 else 0.2] * k_max)

    monkeypatch.setattr(cost_profiling, "ratio_errors", errors)
    rows.clear()
    profile = cost_profiling.profile_step_costs(worker, rounds=2, target_error=0.05)
    assert all(rounds_at(b) == [0, 1, 2] for b in (1, 2, 4)) and profile.steps.min() >= 6
    assert len(seen) == 2 * 3  # after rounds 2 and 3, at each of the three sizes
    assert not worker.has_unfinished() and worker.num_steps == 0


def test_profile_leaves_the_worker_as_it_was():
    config = make_config(method="mtp", k=2, steps=2, policy="adaptive")
    worker = Worker(config)
    assert not worker.has_unfinished() and worker.requests == {}
    assert worker.num_steps == 0 and sum(worker.phase_seconds.values()) == 0
    assert worker.spec_stats.num_drafted == 0 and worker.draft_len_stats.as_dict() == {}
    assert worker.input_batch.occupied_slots == [] and worker.blocks.num_free == worker.blocks.num_blocks
    policy = worker.runner.policy
    assert isinstance(policy, AdaptivePolicy) and isinstance(policy.costs, ProfiledCosts)
    assert policy.num_choices == 0 and policy.total_reaches.sum() == 0  # the profile's steps taught it nothing
    assert worker.runner._last_step is None  # the first step's cost does not span the profile


def test_profile_keeps_greedy_output():
    reqs = random_requests(12, seed=3, arrive_span=6, abort_rate=0.1)
    base = drive(Worker(make_config()), reqs)
    config = make_config(method="mtp", k=2, steps=2, policy="adaptive")
    profiled = Worker(config)
    assert profiled.cost_profile is not None
    assert drive(profiled, reqs) == base
    # the same worker serves seeded sampled requests as one without a profile does
    plain = Worker(dataclasses.replace(config, speculative_config=dataclasses.replace(
        config.speculative_config, profile_rounds=0)))
    assert plain.cost_profile is None and isinstance(plain.runner.policy.costs, StepCostModel)
    sampled = random_requests(6, seed=4, sampled=True)
    assert drive(profiled, sampled) == drive(plain, sampled)


def test_no_profile_without_adaptive_or_with_an_injected_policy():
    assert Worker(make_config(method="mtp", k=2, steps=2)).cost_profile is None
    config = make_config(method="mtp", k=2, steps=2, policy="adaptive")
    injected = AdaptivePolicy(config.scheduler.max_num_seqs, 2)
    worker = Worker(config, policy=injected)
    assert worker.cost_profile is None and isinstance(injected.costs, StepCostModel) and not injected.profiled


def test_profile_refuses_a_busy_worker():
    config = make_config(method="mtp", k=2, steps=2, policy="adaptive")
    worker = Worker(dataclasses.replace(config, speculative_config=dataclasses.replace(
        config.speculative_config, profile_rounds=0)))
    worker.add_request("r0", [1, 2, 3], SamplingParams(max_tokens=4, temperature=0.0))
    with pytest.raises(RuntimeError, match="holds requests"):
        cost_profiling.profile_step_costs(worker, rounds=2)
    assert list(worker.requests) == ["r0"]


def test_no_profile_where_a_request_cannot_last_one_hold():
    worker = Worker(make_config(method="mtp", k=2, steps=2, policy="adaptive", max_model_len=10))
    # 10 - 8 prompt tokens leave 2 tokens a request: fewer than the 3 steps of one hold
    assert worker.cost_profile is None and isinstance(worker.runner.policy.costs, StepCostModel)
    assert not worker.has_unfinished() and worker.num_steps == 0


@pytest.mark.parametrize("rounds, why", [(1, "a profile needs two rounds"), (-1, "out of range"), (65, "out of range")])
def test_profile_rounds_out_of_range(rounds, why):
    spec = make_config(method="mtp", k=2, steps=2, policy="adaptive").speculative_config
    with pytest.raises(ConfigError, match=rf"speculative_config.profile_rounds = {rounds}: {why}.*allowed: 0"):
        dataclasses.replace(spec, profile_rounds=rounds)


def test_profile_rows_cover_each_round(monkeypatch):
    rows = _capture_rows(monkeypatch)
    config = make_config(method="mtp", k=1, steps=1, policy="adaptive", max_num_seqs=2)
    Worker(dataclasses.replace(config, speculative_config=dataclasses.replace(
        config.speculative_config, profile_rounds=3)))
    for b in (1, 2):
        # 3 rounds, and up to 12 while a ratio there is known only to more than TARGET_ERROR (a noisy machine: the
        # extra rounds of profile_step_costs), every one of them holding each K
        measured = [sorted({r.round for r in rows if r.cost.num_slots == b and r.k == k}) for k in (0, 1)]
        assert measured[0] == measured[1] == list(range(len(measured[0]))) and 3 <= len(measured[0]) <= 12, measured
    assert np.all([r.cost.seconds > 0 for r in rows])
