"""bench --policies: the list is parsed with clear errors, and each name maps to the config it runs."""

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
