"""`python -m specworker` as a subprocess: exit codes, one-line errors, no tracebacks; tiny `run` and `bench`
on a random-weight checkpoint written by the test (independent of the trained built-in pair)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.smollm2 import require_smollm2

REPO = Path(__file__).resolve().parent.parent
BUILTIN_WEIGHTS = REPO / "specworker" / "model_executor" / "models" / "weights" / "tiny" / "model.safetensors"


def specworker(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specworker", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str, code: int = 2) -> None:
    assert result.returncode == code, result
    assert "Traceback" not in result.stderr and result.stdout == ""
    lines = [line for line in result.stderr.splitlines() if line.startswith("specworker: error: ")]
    assert len(lines) == 1, result.stderr
    if code == 2:  # a usage error comes before any progress bar
        assert result.stderr.splitlines() == lines, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def write_config(path: Path, model: str, *, method: str = "mtp", device: str = "cpu", max_model_len: int = 128,
                 accept_policy: str = "normal") -> Path:
    spec = (f"  method: mtp\n  model: {model}\n  num_speculative_tokens: 2\n  num_model_steps: 2\n"
            f"  verify_strategy: greedy\n  accept_policy: {accept_policy}\n") if method == "mtp" else "  method: none\n"
    path.write_text(f"model: {{path: {model}, dtype: float32}}\n"
                    f"scheduler: {{max_num_seqs: 2, max_model_len: {max_model_len}, block_size: 16, num_blocks: 32, "
                    f"max_num_batched_tokens: 64}}\nspeculative_config:\n{spec}device: {device}\nseed: 0\n")
    return path


@pytest.fixture(scope="module")
def tiny_ckpt(tmp_path_factory) -> Path:
    """A small random-weight target + MTP checkpoint (2 layers, hidden 64, byte vocab)."""
    import paddle

    from specworker.model_executor.models import checkpoint as ck
    from specworker.model_executor.models.llama import LlamaArch, LlamaModel
    from specworker.model_executor.models.mtp import MTPDraft

    out = tmp_path_factory.mktemp("ckpt")
    arch = LlamaArch(vocab_size=259, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=128,
                     rope_theta=10000.0, rms_norm_eps=1e-6)
    paddle.seed(1)
    model = LlamaModel(arch)
    ck.save_target(model, out)
    ck.save_mtp(MTPDraft(model), out)
    return out


@pytest.fixture
def prompts_file(tmp_path) -> Path:
    path = tmp_path / "prompts.txt"
    path.write_text("Hello there\n\nA short prompt\nThird one\n")
    return path


def test_cli_check_config_ok():
    result = specworker("check-config", "configs/baseline_tiny.yaml")
    lines = result.stdout.splitlines()
    assert result.returncode == 0 and lines[0] == "configs/baseline_tiny.yaml: ok", result
    assert lines[1].startswith("model: builtin:tiny") and "4 layers, hidden 192" in lines[1] and "1.7M parameters" in lines[1]


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
    assert specworker("check-config", str(path), "--no-check-paths").returncode == 0
    assert_one_line_error(specworker("frobnicate"), "invalid choice: 'frobnicate'")


def test_cli_run_weights_folder_without_checkpoint(tmp_path):
    empty = tmp_path / "empty_ckpt"
    empty.mkdir()
    config = write_config(tmp_path / "c.yaml", str(empty), method="none")
    assert_one_line_error(specworker("run", "--config", str(config)), "cannot load the model weights",
                          str(empty / "config.json"), "not found")


def test_cli_run_draft_weights_missing(tmp_path, tiny_ckpt):
    config = write_config(tmp_path / "c.yaml", str(tiny_ckpt))
    config.write_text(config.read_text().replace(f"  model: {tiny_ckpt}", f"  model: {tmp_path}"))
    assert_one_line_error(specworker("run", "--config", str(config)), "cannot load the model weights",
                          str(tmp_path / "mtp.safetensors"), "weights file not found")


def test_cli_run_prompts_file_unreadable(tmp_path):
    bad_utf8 = tmp_path / "latin1.txt"
    bad_utf8.write_bytes(b"caf\xe9\n")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    cases = [(tmp_path / "missing.txt", "prompts file not found"), (tmp_path, "cannot read prompts file"),
             (bad_utf8, "UnicodeDecodeError"), (empty, "no prompts")]
    for path, why in cases:
        for command in ("run", "bench"):
            assert_one_line_error(specworker(command, "--prompts", str(path)), str(path), why)


def test_cli_bench_rejects_batch_size_zero():
    assert_one_line_error(specworker("bench", "--batch-sizes", "1,0,4"), "--batch-sizes", "'1,0,4'",
                          "integers >= 1")
    assert_one_line_error(specworker("bench", "--batch-sizes", "1,x"), "--batch-sizes", "'1,x'")
    assert_one_line_error(specworker("run", "--max-tokens", "0"), "--max-tokens", "allowed: an integer >= 1")


def test_cli_run_gpu_config_without_cuda_paddle(tmp_path):
    import paddle

    if paddle.is_compiled_with_cuda():
        pytest.skip("this Paddle is a CUDA build: device gpu is allowed")
    config = tmp_path / "gpu.yaml"
    config.write_text((REPO / "configs" / "mtp_tiny.yaml").read_text().replace("device: cpu", "device: gpu"))
    for command in ("run", "bench"):
        assert_one_line_error(specworker(command, "--config", str(config)), "device = 'gpu'", "CPU-only",
                              "paddlepaddle-gpu")


def test_cli_run_prompt_longer_than_max_model_len(tmp_path, tiny_ckpt):
    config = write_config(tmp_path / "c.yaml", str(tiny_ckpt), max_model_len=32)
    prompts = tmp_path / "p.txt"
    prompts.write_text("ok\n" + "x" * 40 + "\n")
    assert_one_line_error(specworker("run", "--config", str(config), "--prompts", str(prompts), "--max-tokens", "4"),
                          "prompt 2", "max_model_len = 32")


def test_cli_run_tiny_prints_completions_and_metrics(tmp_path, tiny_ckpt, prompts_file):
    config = write_config(tmp_path / "c.yaml", str(tiny_ckpt))
    out = tmp_path / "out" / "run.json"
    result = specworker("run", "--config", str(config), "--prompts", str(prompts_file), "--max-tokens", "6",
                        "--json", str(out))
    assert result.returncode == 0 and "Traceback" not in result.stderr, result
    assert "generating" in result.stderr and "tok" in result.stderr  # the tqdm bar
    for line in ("[1] Hello there >>> ", "[2] A short prompt >>> ", "[3] Third one >>> ", "| requests ",
                 "| tokens/s ", "| mean acceptance length ", "| acceptance, draft position 2 ", "| time: pre_process ",
                 "| time: target forward ", "| time: sampling/verify ", "| time: proposer ", "| time: update "):
        assert line in result.stdout, (line, result.stdout)
    data = json.loads(out.read_text())
    completions = data["completions"]
    assert [c["prompt"] for c in completions] == ["Hello there", "A short prompt", "Third one"]
    assert all(1 <= len(c["token_ids"]) <= 6 for c in completions)
    assert data["metrics"]["tokens"] == sum(len(c["token_ids"]) for c in completions)
    assert data["metrics"]["spec_decode"]["num_steps"] > 0


def test_cli_bench_tiny_writes_json_png_and_readme(tmp_path, tiny_ckpt, prompts_file):
    from specworker.report import README_BEGIN, README_END

    config = write_config(tmp_path / "c.yaml", str(tiny_ckpt))
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n{README_BEGIN}\nold table\n{README_END}\ntail\n")
    out = tmp_path / "bench"
    result = specworker("bench", "--config", str(config), "--prompts", str(prompts_file), "--batch-sizes", "1,2",
                        "--max-tokens", "4", "--warmup", "1", "--repeats", "2", "--out", str(out), "--readme",
                        str(readme))
    assert result.returncode == 0 and "Traceback" not in result.stderr, result
    bench = json.loads((out / "bench.json").read_text())
    assert [r["batch_size"] for r in bench["results"]] == [1, 2]
    for r in bench["results"]:
        assert r["outputs_equal"] is True
        for figure in (r["speedup"], r["baseline"]["tokens_per_s"], r["speculative"]["mean_acceptance_length"],
                       r["speculative"]["phase_seconds"]["target_forward"]):
            assert figure["min"] <= figure["median"] <= figure["max"]
        assert len(r["speculative"]["acceptance_per_position"]) == 2 and "mean_acceptance_length" not in r["baseline"]
        assert [d["min"] > 0 for d in r["speculative"]["drafted_per_position"]] == [True, True]  # num_model_steps 2
        assert r["baseline"]["num_tokens"] == r["speculative"]["num_tokens"]
    assert (out / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table_rows = [line for line in result.stdout.splitlines() if line.startswith("| 1 ") or line.startswith("| 2 ")]
    assert len(table_rows) == 2, result.stdout
    text = readme.read_text()
    assert "old table" not in text and table_rows[0] in text and text.endswith(f"{README_END}\ntail\n")


@pytest.mark.parametrize("lockstep", [False, True], ids=["sequential", "lockstep"])
def test_cli_bench_policies_side_by_side(tmp_path, tiny_ckpt, prompts_file, lockstep):
    """bench --policies: every policy at every batch size, outputs equal to none's, the adaptive-vs-best ratio and
    the policy table; --lockstep steps the policies' workers in turns (batch_run.run_lockstep)."""
    config = write_config(tmp_path / "c.yaml", str(tiny_ckpt))
    out = tmp_path / "bench"
    result = specworker("bench", "--config", str(config), "--prompts", str(prompts_file), "--batch-sizes", "1,2",
                        "--max-tokens", "4", "--warmup", "1", "--repeats", "2", "--out", str(out), "--policies",
                        "none,fixed1,adaptive", *(["--lockstep"] if lockstep else []), timeout=120)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result
    bench = json.loads((out / "bench.json").read_text())
    assert bench["settings"]["lockstep"] is lockstep and bench["policies"] == ["none", "fixed1", "adaptive"]
    for r in bench["results"]:
        assert r["outputs_equal"] is True and set(r["policies"]) == {"none", "fixed1", "adaptive"}
        assert r["policies"]["none"]["num_tokens"] == r["policies"]["adaptive"]["num_tokens"]
        assert r["adaptive_vs_best"]["best"] in ("none", "fixed1")
        profile = r["adaptive_cost_profile"]  # measured at the adaptive worker's start, up to its slots
        assert profile["batch_sizes"] == [1, 2][:r["batch_size"]] and len(profile["seconds"][0]) == 2
        served = r["adaptive_served_pairs"]  # what the served pairs corrected of the profile: one row a size
        assert np.shape(served["pairs"]) == np.shape(served["log_shift"]) == np.shape(profile["seconds"])
        for figure in (r["policies"]["fixed1"]["speedup"], r["adaptive_vs_best"]["paired"]):
            assert 0 < figure["min"] <= figure["median"] <= figure["max"]
    assert (out / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_bench_lockstep_needs_policies(tmp_path, tiny_ckpt):
    config = write_config(tmp_path / "c.yaml", str(tiny_ckpt))
    assert_one_line_error(specworker("bench", "--config", str(config), "--lockstep"),
                          "--lockstep without --policies; allowed: --lockstep with --policies")


def test_cli_bench_fails_when_outputs_differ(tmp_path, tiny_ckpt, prompts_file):
    """accept_all keeps every draft, so greedy speculative output is not the target's: the check must say so."""
    config = write_config(tmp_path / "c.yaml", str(tiny_ckpt), accept_policy="accept_all")
    result = specworker("bench", "--config", str(config), "--prompts", str(prompts_file), "--batch-sizes", "2",
                        "--max-tokens", "8", "--out", str(tmp_path / "bench"))
    assert_one_line_error(result, "batch size 2", "greedy outputs differ", "baseline", "speculative", code=1)
    assert not (tmp_path / "bench" / "bench.json").exists()


def test_cli_bench_rejects_non_speculative_config_and_readme_without_markers(tmp_path, tiny_ckpt):
    config = write_config(tmp_path / "c.yaml", str(tiny_ckpt), method="none")
    assert_one_line_error(specworker("bench", "--config", str(config)), "speculative_config.method = 'none'",
                          "method: mtp")
    readme = tmp_path / "README.md"
    readme.write_text("# no markers\n")
    assert_one_line_error(specworker("bench", "--readme", str(readme)), "README has no bench markers")


@pytest.mark.parametrize("name", ["mtp_tiny.yaml", "ngram_tiny.yaml"])
def test_bench_configs_accept_every_proposer_method(name):
    """bench compares any proposer method against the same scheduler without one."""
    from specworker.bench import bench_configs
    from specworker.config import load_config

    config = load_config(REPO / "configs" / name)
    baseline, speculative = bench_configs(config, 8)
    assert speculative.speculative_config == config.speculative_config and speculative.scheduler.max_num_seqs == 8
    assert baseline.speculative_config.method == "none" and baseline.scheduler == speculative.scheduler


def test_cli_run_default_config_is_make_run():
    """`make run` = `specworker run`: SmolLM2-135M (configs/smollm2.yaml) on the packaged prompts."""
    require_smollm2()
    result = specworker("run", "--max-tokens", "4")
    assert result.returncode == 0 and "Traceback" not in result.stderr, result
    assert result.stdout.startswith("# configs/smollm2.yaml: 16 prompts (completion), greedy, max_tokens 4")
    assert "[16] " in result.stdout and "| tokens/s " in result.stdout


def test_cli_prompts_jsonl_and_json_fields(tmp_path, tiny_ckpt):
    config = write_config(tmp_path / "c.yaml", str(tiny_ckpt))
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "two\nlines"}) + "\n\n" + json.dumps({"prompt": "second"}) + "\n")
    out = tmp_path / "run.json"
    result = specworker("run", "--config", str(config), "--prompts", str(prompts), "--max-tokens", "5",
                        "--ignore-eos", "--json", str(out))
    assert result.returncode == 0, result
    assert "[1] two\\nlines >>> " in result.stdout
    data = json.loads(out.read_text())
    assert data["ignore_eos"] is True and data["chat"] is False
    first = data["completions"][0]
    assert set(first) == {"prompt", "prompt_token_ids", "text", "token_ids", "finish_reason"}
    assert first["prompt"] == "two\nlines" and first["prompt_token_ids"][0] == 256  # BOS + bytes
    assert [len(c["token_ids"]) for c in data["completions"]] == [5, 5] and first["finish_reason"] == "length"


def test_cli_prompts_jsonl_errors(tmp_path):
    cases = [('{"prompt": "ok"}\nnot json\n', ":2: not a JSON object"),
             ('{"text": "no prompt field"}\n', ':1: needs a non-empty string field "prompt"'),
             ('{"prompt": ""}\n', ':1: needs a non-empty string field "prompt"')]
    for i, (text, why) in enumerate(cases):
        path = tmp_path / f"bad{i}.jsonl"
        path.write_text(text)
        assert_one_line_error(specworker("run", "--config", "configs/baseline_tiny.yaml", "--prompts", str(path)),
                              str(path), why)


def test_cli_chat_on_the_byte_model_is_a_usage_error(tmp_path, tiny_ckpt, prompts_file):
    config = write_config(tmp_path / "c.yaml", "builtin:tiny", method="none")
    assert_one_line_error(specworker("run", "--config", str(config), "--prompts", str(prompts_file), "--chat"),
                          "--chat", "no chat template")
    assert_one_line_error(specworker("bench", "--config", "configs/ngram_tiny.yaml", "--prompts", str(prompts_file),
                                     "--chat"), "--chat", "no chat template")


def test_cli_run_sampled_with_lossy_topp_says_so(tmp_path, tiny_ckpt, prompts_file):
    config = write_config(tmp_path / "c.yaml", str(tiny_ckpt))
    text = config.read_text().replace("verify_strategy: greedy", "verify_strategy: topp")
    config.write_text(text)
    result = specworker("run", "--config", str(config), "--prompts", str(prompts_file), "--max-tokens", "3",
                        "--temperature", "0.8")
    assert result.returncode == 0, result
    assert "note: speculative_config.verify_strategy = 'topp' is lossy at temperature 0.8" in result.stderr
    assert "temperature 0.8 (seed 0), max_tokens 3" in result.stdout
    quiet = specworker("run", "--config", str(config), "--prompts", str(prompts_file), "--max-tokens", "3")
    assert quiet.returncode == 0 and "lossy" not in quiet.stderr  # greedy: topp is exact
    assert_one_line_error(specworker("run", "--temperature", "-1"), "--temperature", "a number >= 0.0")


def test_bench_batch_prompts_rotate_through_the_set():
    from specworker.bench import batch_prompts

    prompts = ["p0", "p1", "p2", "p3", "p4"]
    assert [batch_prompts(prompts, 2, run) for run in range(3)] == [["p0", "p1"], ["p2", "p3"], ["p4", "p0"]]
    assert batch_prompts(prompts, 7, 0) == ["p0", "p1", "p2", "p3", "p4", "p0", "p1"]
    assert batch_prompts(prompts, 1, 6) == ["p1"]


def test_cli_bench_smollm2_chat_rotating_prompts(tmp_path):
    """bench --chat --rotate-prompts on the real model: the JSON records both, outputs stay equal."""
    require_smollm2()
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"Repeat after me: {w} {w} {w}"}) + "\n"
                               for w in ("red", "green", "blue")))
    out = tmp_path / "bench"
    result = specworker("bench", "--config", "configs/smollm2_ngram.yaml", "--prompts", str(prompts), "--chat",
                        "--rotate-prompts", "--batch-sizes", "1", "--max-tokens", "3", "--warmup", "0", "--repeats",
                        "2", "--out", str(out), timeout=300)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result
    bench = json.loads((out / "bench.json").read_text())
    assert bench["settings"]["chat"] is True and bench["settings"]["rotate_prompts"] is True
    assert bench["method"] == "ngram" and bench["num_prompts"] == 3 and bench["prompts"].endswith("p.jsonl")
    assert "(chat template) (the next batch-size prompts in each run)" in result.stdout
