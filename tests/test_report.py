"""report: the run metrics table, the bench table and the README splice, on literal inputs."""

from __future__ import annotations

import pytest

from specworker.batch_run import BatchRun, UserError
from specworker.report import README_BEGIN, README_END, bench_table, format_table, run_metrics_table, splice_readme
from specworker.spec_decode.metrics import SpecDecodeStats
from specworker.worker.request import FinishReason


def fig(value: float) -> dict:
    return {"min": value, "median": value, "max": value}


def test_format_table_pads_and_aligns():
    assert format_table(("a", "bb"), [("xyz", "1"), ("q", "22")]) == (
        "| a   | bb |\n"
        "|-----|---:|\n"
        "| xyz |  1 |\n"
        "| q   | 22 |")


def test_run_metrics_table_marks_never_drafted_positions():
    stats = SpecDecodeStats(3, num_steps=4, num_drafted=4, num_accepted=3, accepted_per_position=[3, 0, 0],
                            drafted_per_position=[4, 0, 0])
    run = BatchRun(prompts=["p", "q"], token_ids=[[1, 2, 3], [4, 5, 6, 7]], texts=["", ""],
                   finish_reasons=[FinishReason.LENGTH] * 2, seconds=2.0, num_steps=4,
                   phase_seconds={"pre_process": 0.5, "target_forward": 1.0, "sampling_verify": 0.1, "update": 0.1,
                                  "proposer": 0.2}, spec_stats=stats)
    lines = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:4]]
             for line in run_metrics_table(run).splitlines()[2:]}
    assert lines["generated tokens"] == ["7", ""] and lines["tokens/s"] == ["3.5", ""]
    assert lines["mean acceptance length"][0] == "1.750"
    assert lines["acceptance, draft position 1"] == ["0.750", "3/4 verify steps"]
    assert lines["acceptance, draft position 2"] == ["n/a", "never drafted"]
    assert lines["time: target forward"] == ["1.000 s", "50.0%  250.00 ms/step"]
    assert lines["time: other (scheduler, outputs)"][0] == "0.100 s"


def test_bench_table_one_row_per_batch_size():
    spec = {"tokens_per_s": fig(30.0), "mean_acceptance_length": fig(1.8), "num_steps": fig(10),
            "acceptance_per_position": [fig(0.8), fig(0.0)], "drafted_per_position": [fig(9), fig(0)]}
    bench = {"results": [{"batch_size": 4, "speedup": {"min": 1.4, "median": 1.5, "max": 1.61},
                          "baseline": {"tokens_per_s": fig(20.0), "num_steps": fig(18)}, "speculative": spec}]}
    row = bench_table(bench).splitlines()[2]
    assert [c.strip() for c in row.strip("|").split("|")] == ["4", "20.0", "30.0", "1.50 (1.40-1.61)", "1.80",
                                                              "0.80 / -", "18 / 10"]


@pytest.mark.parametrize("method, label", [(None, "MTP"), ("mtp", "MTP"), ("ngram", "ngram")])
def test_bench_table_names_the_method(method, label):
    """bench.json records the method; files from before that are MTP runs."""
    spec = {"tokens_per_s": fig(30.0), "mean_acceptance_length": fig(1.8), "num_steps": fig(10),
            "acceptance_per_position": [fig(0.8)], "drafted_per_position": [fig(9)]}
    bench = {"results": [{"batch_size": 1, "speedup": fig(1.5), "baseline": {"tokens_per_s": fig(20.0),
                                                                         "num_steps": fig(18)}, "speculative": spec}]}
    if method is not None:
        bench["method"] = method
    header = [c.strip() for c in bench_table(bench).splitlines()[0].strip("|").split("|")]
    assert header[2] == f"{label} tok/s" and header[-1] == f"steps base / {label}"


def test_splice_readme_replaces_between_markers_only():
    readme = f"head\n{README_BEGIN}\nold\n{README_END}\ntail\n"
    assert splice_readme(readme, "TABLE", "note") == f"head\n{README_BEGIN}\nnote\n\nTABLE\n{README_END}\ntail\n"
    with pytest.raises(UserError, match="no bench markers"):
        splice_readme("head\n", "TABLE", "note")
