"""bench --policies: the list is parsed with clear errors, and each name maps to the config it runs; lockstep
runs step the policies' workers in turns, each on its own clock."""

import dataclasses

import pytest

from specworker.batch_run import UserError
from specworker.bench import adaptive_vs_best, parse_policies, policy_configs, spread
from specworker.config import load_config
from tests.test_config import REPO


def test_parse_policies_accepts_a_list_with_none():
    assert parse_policies("none, fixed1,fixed3,adaptive") == ("none", "fixed1", "fixed3", "adaptive")


@pytest.mark.parametrize("text,why", [("fixed1,adaptive", "no 'none'"), ("none,fixed9", "unknown 'fixed9'"),
                                      ("none,none", "a name twice"), ("none,greedy", "unknown 'greedy'")])
def test_parse_policies_rejects_bad_lists(text, why):
    with pytest.raises(UserError, match=f"--policies = {text}: {why}; allowed: a comma-separated list"):
        parse_policies(text)


def test_policy_configs_map_names_to_configs():
    config = load_config(REPO / "configs" / "mtp_tiny.yaml")
    out = policy_configs(config, 32, ("none", "fixed1", "fixed3", "adaptive"))
    assert out["none"].speculative_config.method == "none"
    shapes = {n: (c.speculative_config.num_speculative_tokens, c.speculative_config.num_model_steps,
                  c.speculative_config.policy) for n, c in out.items() if n != "none"}
    assert shapes == {"fixed1": (1, 1, "fixed"), "fixed3": (3, 3, "fixed"), "adaptive": (3, 3, "adaptive")}
    assert all(c.scheduler.max_num_seqs == 32 for c in out.values())
    assert out["adaptive"].scheduler.max_num_batched_tokens >= 32 * 4


def test_policy_configs_schedule_needs_the_configs_schedule():
    config = load_config(REPO / "configs" / "mtp_tiny.yaml")
    with pytest.raises(UserError, match="the config has no speculative_config.schedule"):
        policy_configs(config, 4, ("none", "schedule"))
    scheduled = load_config(REPO / "configs" / "mtp_tiny_schedule.yaml")
    assert policy_configs(scheduled, 4, ("none", "schedule"))["schedule"].speculative_config.schedule_k(64) == 0



def test_adaptive_vs_best_pairs_the_runs_of_a_repetition():
    """The machine's speed drifts between repetitions (here 1, 2, 0.5): the ratio of medians mixes repetitions
    (0.9 / 1.0 of different ones), the paired ratio compares runs of one repetition (0.9 each time)."""
    from types import SimpleNamespace

    speed = (1.0, 2.0, 0.5)
    tps = {"none": [100 * s for s in speed], "fixed2": [120 * s for s in speed], "adaptive": [108 * s for s in speed]}
    timed = {n: [SimpleNamespace(tokens_per_s=v) for v in values] for n, values in tps.items()}
    out = {n: {"tokens_per_s": spread(values)} for n, values in tps.items()}
    ratio = adaptive_vs_best(timed, out)
    assert ratio["best"] == "fixed2" and ratio["ratio"] == pytest.approx(0.9)
    assert ratio["paired"] == pytest.approx({"min": 0.9, "median": 0.9, "max": 0.9})
    timed["adaptive"] = [timed["adaptive"][i] for i in (1, 2, 0)]  # the same runs paired with other repetitions
    assert adaptive_vs_best(timed, out)["paired"]["min"] == pytest.approx(0.9 * 0.25)


def test_own_clock_advances_only_inside_its_with(monkeypatch):
    """On a wall clock set by hand: 2 s inside `with`, 5 s outside (another worker's step), 1 s inside again."""
    from specworker import batch_run

    wall = [100.0]
    monkeypatch.setattr(batch_run.time, "perf_counter", lambda: wall[0])
    clock = batch_run.OwnClock()
    assert clock() == 0.0
    with clock:
        wall[0] += 2.0
        assert clock() == 2.0
    wall[0] += 5.0
    assert clock() == 2.0
    with clock:
        wall[0] += 1.0
    assert clock() == 3.0


def test_run_lockstep_steps_workers_in_turns_each_on_its_own_clock():
    """Two workers (no speculation, fixed k = 2) on the same prompts, stepped in turns: each gives the tokens it gives
    alone, its seconds are its own steps' (the two together within the wall time; each runner's step clock was its
    OwnClock and is the wall clock again afterwards), and a prompt one worker refuses leaves none with queued
    requests."""
    import time

    from specworker.batch_run import load_worker, run_batch, run_lockstep
    from specworker.bench import batch_prompts
    from specworker.sampling_params import SamplingParams

    config = load_config(REPO / "configs" / "mtp_tiny.yaml")
    configs = policy_configs(config, 3, ("none", "fixed2"))
    workers = [load_worker(configs[n]) for n in ("none", "fixed2")]
    prompts = batch_prompts(["The cat", "Once upon a time", "In the beginning"], 3, 0)
    params = SamplingParams(temperature=0.0, max_tokens=12)
    alone = [run_batch(w, prompts, params) for w in workers]
    seen = []
    original = workers[1].step

    def step():
        seen.append(workers[1].runner.clock)
        return original()

    workers[1].step = step
    start = time.perf_counter()
    runs = run_lockstep(workers, prompts, params)
    wall = time.perf_counter() - start
    assert [r.token_ids for r in runs] == [a.token_ids for a in alone] and runs[0].token_ids == runs[1].token_ids
    assert runs[1].num_steps < runs[0].num_steps  # fixed k = 2 drafts: fewer steps, the same tokens
    assert all(r.seconds > 0 for r in runs) and sum(r.seconds for r in runs) <= wall
    assert seen and all(type(c).__name__ == "OwnClock" for c in seen)
    assert all(w.runner.clock is time.perf_counter for w in workers)
    short = configs["fixed2"]
    short = load_worker(dataclasses.replace(short, scheduler=dataclasses.replace(short.scheduler, max_model_len=64)))
    with pytest.raises(UserError, match="prompt 2"):  # the first worker takes both prompts, the second refuses
        run_lockstep([workers[0], short], ["ok", "x" * 100], params)
    assert not workers[0].has_unfinished() and not short.has_unfinished()
    assert workers[0].runner.clock is time.perf_counter


def test_bench_settings_lockstep_needs_policies():
    from specworker.bench import BenchSettings

    with pytest.raises(UserError, match="--lockstep without --policies; allowed: --lockstep with --policies"):
        BenchSettings(batch_sizes=(1,), max_tokens=4, warmup=0, repeats=1, lockstep=True)
    assert BenchSettings(batch_sizes=(1,), max_tokens=4, warmup=0, repeats=1, policies=("none",), lockstep=True)
