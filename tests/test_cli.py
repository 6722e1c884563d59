"""`python -m specworker` as a subprocess: exit codes, one-line errors, no tracebacks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def specworker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specworker", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=60)


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr and result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("specworker: error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_cli_run_default_config_prints_resolved_config():
    result = specworker("run")
    assert result.returncode == 0 and "Traceback" not in result.stderr, result
    assert "configs/mtp_tiny.yaml" in result.stdout
    assert "method: mtp" in result.stdout and "speculative_config.max_draft_token_num: 4" in result.stdout


def test_cli_check_config_ok():
    result = specworker("check-config", "configs/baseline_tiny.yaml")
    assert result.returncode == 0 and result.stdout.strip() == "configs/baseline_tiny.yaml: ok", result


def test_cli_run_missing_config():
    assert_one_line_error(specworker("run", "--config", "configs/nope.yaml"), "configs/nope.yaml", "not found")


def test_cli_check_config_unknown_key(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("scheduler:\n  max_num_seqs: 4\n  bogus: 1\n")
    assert_one_line_error(specworker("check-config", str(path)), str(path), "scheduler.bogus = 1", "unknown key",
                          "allowed: max_num_seqs")


def test_cli_missing_checkpoint_and_usage_errors(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model: {path: no-such-ckpt}\n")
    assert_one_line_error(specworker("run", "--config", str(path)), "model.path = 'no-such-ckpt'", "does not exist")
    assert specworker("run", "--config", str(path), "--no-check-paths").returncode == 0
    assert_one_line_error(specworker("frobnicate"), "invalid choice: 'frobnicate'")
