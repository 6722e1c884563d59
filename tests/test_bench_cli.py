"""benchmarks/bench_cli.py, the plumbing every kernel benchmark shares: its parser, option checks, the
PyTorch-baseline gate and the JSON report. (The benchmarks themselves need a GPU.)"""

import json

import numpy as np
import pytest

from benchmarks import bench_cli


def test_bench_cli_parser_defaults_to_the_results_file_and_the_given_iters():
    parser = bench_cli.kernel_bench_parser("A benchmark.\nMore prose.", "gpu_example", iters=7)
    bench_cli.add_repeat_options(parser)
    args = parser.parse_args([])
    assert parser.description == "A benchmark."
    assert args.out == bench_cli.RESULTS_DIR / "gpu_example.json"
    assert (args.iters, args.warmup, args.runs, args.seed) == (7, 10, 5, 0)
    assert parser.parse_args(["--out", "x.json", "--iters", "3"]).iters == 3


def test_bench_cli_comma_list_rejects_an_unknown_item_naming_the_option(capsys):
    parser = bench_cli.kernel_bench_parser("A benchmark.", "gpu_example", iters=1)
    bench_cli.check_comma_list(parser, "--configs", "main,copy", ("main", "copy"))
    with pytest.raises(SystemExit):
        bench_cli.check_comma_list(parser, "--configs", "main,bogus", ("main", "copy"))
    assert "--configs: unknown 'bogus'; choose from main, copy" in capsys.readouterr().err


def test_bench_cli_write_report_makes_the_folder_and_says_where(tmp_path, capsys):
    out = tmp_path / "new" / "r.json"
    bench_cli.write_report(out, {"us": np.float32(1.5)}, default=float)
    assert json.loads(out.read_text()) == {"us": 1.5}
    assert capsys.readouterr().out == f"wrote {out}\n"


def test_bench_cli_torch_baseline_gate_names_the_benchmark_and_the_reason(monkeypatch, capsys):
    monkeypatch.setattr(bench_cli, "_torch_baseline_unavailable_reason", lambda: "no CUDA GPU visible to PyTorch")
    assert bench_cli.import_torch_baseline("gpu_example") is None
    assert capsys.readouterr().err == "gpu_example: no CUDA GPU visible to PyTorch\n"
