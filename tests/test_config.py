"""specworker.config: shipped configs load, every bad config is rejected with key path, value and what is allowed."""

from __future__ import annotations

import copy
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from specworker.config import (ConfigError, ModelConfig, SchedulerConfig, SpeculativeConfig, WorkerConfig,
                               config_from_dict, load_config)

REPO = Path(__file__).resolve().parent.parent
SHIPPED = sorted((REPO / "configs").glob("*.yaml"))
DELETE = object()

# A valid tiny MTP config; every bad case below changes it in one or two places.
BASE = {
    "model": {"path": "builtin:tiny", "dtype": "float32"},
    "scheduler": {"max_num_seqs": 4, "max_model_len": 256, "block_size": 16, "num_blocks": 64,
                  "max_num_batched_tokens": 512},
    "speculative_config": {"method": "mtp", "model": "builtin:tiny-mtp", "num_speculative_tokens": 3,
                           "num_model_steps": 1, "verify_strategy": "greedy"},
    "device": "cpu",
    "seed": 0,
}


def patched(patch: dict) -> dict:
    """BASE with `{"section.key": value}` (or a top-level key) set, or removed with DELETE."""
    data = copy.deepcopy(BASE)
    for dotted, value in patch.items():
        *parents, leaf = dotted.split(".")
        node = data
        for name in parents:
            node = node[name]
        if value is DELETE:
            del node[leaf]
        else:
            node[leaf] = value
    return data


# Patches turning BASE into a valid ngram / suffix config (no draft model).
NGRAM = {"speculative_config.method": "ngram", "speculative_config.model": DELETE}
SUFFIX = {"speculative_config.method": "suffix", "speculative_config.model": DELETE}
WITH_NGRAM = {"speculative_config.mtp_strategy": "with_ngram"}  # BASE's MTP drafts extended by n-gram lookup


def write(tmp_path: Path, data) -> Path:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def bad(id_, patch, key, shown, allowed, check_paths=True):
    return pytest.param(patch, key, shown, allowed, check_paths, id=id_)


BAD_CONFIGS = [
    # unknown keys, at every level
    bad("unknown_top_level_key", {"modle": {"path": "x"}}, "modle", "{'path': 'x'}",
        "model, scheduler, speculative_config, parallel_config, device, seed, debug_checks"),
    bad("unknown_parallel_key", {"parallel_config": {"tp": 2}}, "parallel_config.tp", "2", "tensor_parallel_size"),
    bad("tensor_parallel_size_zero", {"parallel_config": {"tensor_parallel_size": 0}},
        "parallel_config.tensor_parallel_size", "0", "1..64"),
    bad("tensor_parallel_size_not_int", {"parallel_config": {"tensor_parallel_size": "2"}},
        "parallel_config.tensor_parallel_size", "'2'", "an integer"),
    # the tiny model has 6 heads, 2 KV heads, intermediate 512: 3 splits the heads but not the KV heads
    bad("tensor_parallel_size_kv_heads", {"parallel_config": {"tensor_parallel_size": 3}},
        "parallel_config.tensor_parallel_size", "3",
        "a common divisor of model's num_heads = 6, num_kv_heads = 2 and intermediate_size = 512"),
    bad("tensor_parallel_size_heads", {"parallel_config": {"tensor_parallel_size": 4}},
        "parallel_config.tensor_parallel_size", "4", "a common divisor of model's num_heads = 6"),
    bad("tensor_parallel_size_intermediate",
        {"model.intermediate_size": 511, "parallel_config": {"tensor_parallel_size": 2}},
        "parallel_config.tensor_parallel_size", "2",
        "a common divisor of model's num_heads = 6, num_kv_heads = 2 and intermediate_size = 511"),
    bad("unknown_model_key", {"model.pth": "x"}, "model.pth", "'x'", "path, dtype, vocab_size"),
    bad("unknown_scheduler_key", {"scheduler.max_seqs": 4}, "scheduler.max_seqs", "4", "max_num_seqs, max_model_len"),
    bad("unsupported_fastdeploy_key", {"speculative_config.quantization": "WINT8"},
        "speculative_config.quantization", "'WINT8'", "method, num_speculative_tokens, num_model_steps"),
    # wrong types
    bad("int_given_as_string", {"scheduler.max_num_seqs": "4"}, "scheduler.max_num_seqs", "'4'", "an integer"),
    bad("bool_is_not_an_int", {"scheduler.block_size": True}, "scheduler.block_size", "true", "an integer"),
    bad("float_is_not_an_int", {"scheduler.max_model_len": 256.0}, "scheduler.max_model_len", "256.0", "an integer"),
    bad("yaml_reads_1e-6_as_string", {"model.rms_norm_eps": "1e-6"}, "model.rms_norm_eps", "'1e-6'",
        "a number or null"),
    bad("int_is_not_a_bool", {"debug_checks": 1}, "debug_checks", "1", "true or false"),
    bad("yes_is_a_bool_not_a_string", {"model.dtype": True}, "model.dtype", "true", "a string"),
    bad("section_not_a_mapping", {"scheduler": 8}, "scheduler", "8", "a mapping with keys max_num_seqs"),
    bad("section_null", {"speculative_config": None}, "speculative_config", "null", "a mapping with keys method"),
    # out of range
    bad("zero_slots", {"scheduler.max_num_seqs": 0}, "scheduler.max_num_seqs", "0", "an integer >= 1"),
    bad("negative_seed", {"seed": -1}, "seed", "-1", "0..4294967295"),
    bad("vocab_smaller_than_bytes", {"model.vocab_size": 200}, "model.vocab_size", "200", "an integer > 256"),
    bad("negative_rope_theta", {"model.rope_theta": -1.0}, "model.rope_theta", "-1.0", "a number > 0"),
    bad("block_size_not_power_of_two", {"scheduler.block_size": 24}, "scheduler.block_size", "24",
        "a power of two in 1..1024"),
    bad("too_many_speculative_tokens", {"speculative_config.num_speculative_tokens": 6},
        "speculative_config.num_speculative_tokens", "6", "1..5 with method 'mtp'"),
    bad("unsupported_candidate_len", {"speculative_config.max_candidate_len": 15}, "speculative_config.max_candidate_len",
        "15", "1..10 or 20..100 in steps of 10"),
    bad("zero_verify_window", {"speculative_config.verify_window": 0}, "speculative_config.verify_window", "0",
        "an integer >= 1"),
    bad("head_dim_not_integral", {"model.hidden_size": 130}, "model.hidden_size", "130",
        "a multiple of model.num_heads = 6"),
    bad("kv_heads_not_a_divisor", {"model.num_kv_heads": 4}, "model.num_kv_heads", "4",
        "a divisor of model.num_heads = 6"),
    # bad enum values
    bad("bad_dtype", {"model.dtype": "fp16"}, "model.dtype", "'fp16'", "'float32', 'float16', 'bfloat16'"),
    bad("bad_linear_weight_dtype", {"model.linear_weight_dtype": "float16"}, "model.linear_weight_dtype",
        "'float16'", "'float32', 'bfloat16'"),
    bad("bad_method", {"speculative_config.method": "eagle"}, "speculative_config.method", "'eagle'",
        "'none', 'naive', 'mtp', 'ngram', 'suffix'"),
    bad("bad_verify_strategy", {"speculative_config.verify_strategy": "top_p"}, "speculative_config.verify_strategy",
        "'top_p'", "'greedy', 'topp', 'target_match', 'rejection'"),
    bad("bad_accept_policy", {"speculative_config.accept_policy": "all"}, "speculative_config.accept_policy", "'all'",
        "'normal', 'accept_all', 'reject_all'"),
    bad("bad_device", {"device": "cuda"}, "device", "'cuda'", "'cpu', 'gpu'"),
    bad("unknown_builtin_target", {"model.path": "builtin:huge"}, "model.path", "'builtin:huge'",
        "a checkpoint path or 'builtin:tiny'"),
    bad("unknown_builtin_draft", {"speculative_config.model": "builtin:tiny-eagle"}, "speculative_config.model",
        "'builtin:tiny-eagle'", "a draft checkpoint path or 'builtin:tiny-mtp'"),
    # impossible combinations
    bad("model_steps_exceed_k", {"speculative_config.num_model_steps": 4}, "speculative_config.num_model_steps", "4",
        "1..num_speculative_tokens = 3"),
    bad("mtp_without_draft_model", {"speculative_config.model": DELETE}, "speculative_config.model", "null",
        "a draft checkpoint path or 'builtin:tiny-mtp'"),
    bad("method_none_with_k", {"speculative_config.method": "none", "speculative_config.model": DELETE},
        "speculative_config.num_speculative_tokens", "3", "0 (or method: mtp, ngram or suffix)"),
    bad("method_naive_with_draft_model", {"speculative_config.method": "naive",
                                          "speculative_config.num_speculative_tokens": DELETE},
        "speculative_config.model", "'builtin:tiny-mtp'", "null (or method: mtp)"),
    bad("method_none_with_model_steps", {"speculative_config": {"method": "none", "num_model_steps": 2}},
        "speculative_config.num_model_steps", "2", "1 (or method: mtp)"),
    bad("batched_tokens_below_slots", {"scheduler.max_num_batched_tokens": 2}, "scheduler.max_num_batched_tokens", "2",
        ">= scheduler.max_num_seqs = 4"),
    bad("batched_tokens_below_verify_width", {"scheduler.max_num_batched_tokens": 8},
        "scheduler.max_num_batched_tokens", "8", ">= max_num_seqs * (num_speculative_tokens + 1) = 16"),
    bad("kv_cache_shorter_than_a_sequence", {"scheduler.num_blocks": 8}, "scheduler.num_blocks", "8",
        ">= ceil(max_model_len / block_size) = 16"),
    bad("model_len_below_one_verify_step", {"scheduler.max_model_len": 4}, "scheduler.max_model_len", "4",
        ">= num_speculative_tokens + 2 = 5"),
    bad("int32_offsets_overflow", {"scheduler.max_num_seqs": 4096, "scheduler.max_model_len": 2**20,
                                   "scheduler.num_blocks": 2**16, "scheduler.max_num_batched_tokens": 2**16},
        "scheduler.max_model_len", "1048576", "max_num_seqs * max_model_len <= 2147483647"),
    bad("half_precision_on_cpu", {"model.dtype": "bfloat16"}, "model.dtype", "'bfloat16'", "'float32' on device 'cpu'"),
    bad("benchmark_mode_with_accept_all", {"speculative_config.benchmark_mode": True,
                                           "speculative_config.accept_policy": "accept_all"},
        "speculative_config.accept_policy", "'accept_all'", "'normal' or 'reject_all' with benchmark_mode: true"),
    # method ngram (BASE turned into an ngram config by NGRAM)
    bad("ngram_min_size_zero", {**NGRAM, "speculative_config.min_ngram_size": 0}, "speculative_config.min_ngram_size",
        "0", "1..64"),
    bad("ngram_min_above_max", {**NGRAM, "speculative_config.min_ngram_size": 4}, "speculative_config.max_ngram_size",
        "3", "min_ngram_size = 4..64"),
    bad("ngram_max_size_above_64", {**NGRAM, "speculative_config.max_ngram_size": 65},
        "speculative_config.max_ngram_size", "65", "min_ngram_size = 1..64"),
    bad("ngram_too_many_tokens", {**NGRAM, "speculative_config.num_speculative_tokens": 6},
        "speculative_config.num_speculative_tokens", "6", "1..5 with method 'ngram'"),
    bad("ngram_without_tokens", {**NGRAM, "speculative_config.num_speculative_tokens": 0},
        "speculative_config.num_speculative_tokens", "0", "1..5 with method 'ngram'"),
    bad("ngram_with_draft_model", {**NGRAM, "speculative_config.model": "builtin:tiny-mtp"}, "speculative_config.model",
        "'builtin:tiny-mtp'", "null (or method: mtp)"),
    bad("ngram_with_model_steps", {**NGRAM, "speculative_config.num_model_steps": 2},
        "speculative_config.num_model_steps", "2", "1 (or method: mtp)"),
    bad("ngram_size_with_method_mtp", {"speculative_config.max_ngram_size": 5}, "speculative_config.max_ngram_size",
        "5", "3, the default (or method: ngram)"),
    bad("ngram_size_with_method_none", {"speculative_config": {"method": "none", "min_ngram_size": 2}},
        "speculative_config.min_ngram_size", "2", "1, the default (or method: ngram)"),
    # mtp_strategy (BASE is method mtp, k = 3, num_model_steps = 1)
    bad("bad_mtp_strategy", {"speculative_config.mtp_strategy": "ngram"}, "speculative_config.mtp_strategy",
        "'ngram'", "'default', 'with_ngram'"),
    bad("with_ngram_with_method_ngram", {**NGRAM, "speculative_config.mtp_strategy": "with_ngram"},
        "speculative_config.mtp_strategy", "'with_ngram'", "'default' (or method: mtp)"),
    bad("with_ngram_with_method_none", {"speculative_config": {"method": "none", "mtp_strategy": "with_ngram"}},
        "speculative_config.mtp_strategy", "'with_ngram'", "'default' (or method: mtp)"),
    bad("with_ngram_without_room_after_mtp", {**WITH_NGRAM, "speculative_config.num_model_steps": 3},
        "speculative_config.num_speculative_tokens", "3", "> num_model_steps = 3 with mtp_strategy 'with_ngram'"),
    bad("with_ngram_min_above_max", {**WITH_NGRAM, "speculative_config.min_ngram_size": 4},
        "speculative_config.max_ngram_size", "3", "min_ngram_size = 4..64"),
    bad("with_ngram_max_size_above_64", {**WITH_NGRAM, "speculative_config.max_ngram_size": 65},
        "speculative_config.max_ngram_size", "65", "min_ngram_size = 1..64"),
    # method suffix (BASE turned into a suffix config by SUFFIX; k = 3)
    bad("suffix_depth_below_k_plus_1", {**SUFFIX, "speculative_config.suffix_max_depth": 3},
        "speculative_config.suffix_max_depth", "3", "num_speculative_tokens + 1 = 4..64"),
    bad("suffix_depth_above_64", {**SUFFIX, "speculative_config.suffix_max_depth": 65},
        "speculative_config.suffix_max_depth", "65", "num_speculative_tokens + 1 = 4..64"),
    bad("suffix_negative_cache", {**SUFFIX, "speculative_config.suffix_max_cached_requests": -1},
        "speculative_config.suffix_max_cached_requests", "-1", "0 (no global tree)..100000"),
    bad("suffix_zero_spec_factor", {**SUFFIX, "speculative_config.suffix_max_spec_factor": 0.0},
        "speculative_config.suffix_max_spec_factor", "0.0", "a number > 0"),
    bad("suffix_prob_above_1", {**SUFFIX, "speculative_config.suffix_min_token_prob": 1.5},
        "speculative_config.suffix_min_token_prob", "1.5", "0..1"),
    bad("suffix_with_draft_model", {**SUFFIX, "speculative_config.model": "builtin:tiny-mtp"},
        "speculative_config.model", "'builtin:tiny-mtp'", "null (or method: mtp)"),
    bad("suffix_key_with_method_ngram", {**NGRAM, "speculative_config.suffix_max_depth": 12},
        "speculative_config.suffix_max_depth", "12", "24, the default (or method: suffix)"),
    # speculation policy
    bad("unknown_policy", {"speculative_config.policy": "greedy"}, "speculative_config.policy", "'greedy'",
        "'fixed', 'schedule', 'adaptive'"),
    bad("adaptive_policy_with_tensor_parallel", {"speculative_config.policy": "adaptive",
                                                 "parallel_config": {"tensor_parallel_size": 2}},
        "speculative_config.policy", "'adaptive'", "'fixed' or 'schedule' with parallel_config.tensor_parallel_size > 1"),
    bad("policy_without_proposer", {"speculative_config": {"method": "none", "policy": "adaptive"}},
        "speculative_config.policy", "'adaptive'", "'fixed' (or method: mtp, ngram or suffix)"),
    bad("schedule_policy_without_schedule", {"speculative_config.policy": "schedule"}, "speculative_config.schedule",
        "null", "a mapping {smallest batch size: k}"),
    bad("schedule_with_policy_fixed", {"speculative_config.schedule": {1: 1}}, "speculative_config.schedule",
        "((1, 1),)", "null (or policy: schedule)"),
    bad("schedule_without_batch_size_1", {"speculative_config.policy": "schedule",
                                          "speculative_config.schedule": {4: 1, 16: 0}},
        "speculative_config.schedule", "{4: 1, 16: 0}", "a key 1 (every batch size needs an entry)"),
    bad("schedule_k_above_model_steps", {"speculative_config.policy": "schedule", "speculative_config.num_model_steps": 2,
                                         "speculative_config.schedule": {1: 3, 8: 0}},
        "speculative_config.schedule.1", "3", "0..2 (the drafts a step can hold: num_model_steps)"),
    bad("schedule_negative_k", {"speculative_config.policy": "schedule", "speculative_config.schedule": {1: -1}},
        "speculative_config.schedule.1", "-1", "0..1"),
    bad("schedule_batch_size_zero", {"speculative_config.policy": "schedule", "speculative_config.schedule": {0: 1}},
        "speculative_config.schedule.0", "1", "keys: batch sizes >= 1 (integers)"),
    bad("schedule_k_not_an_integer", {"speculative_config.policy": "schedule",
                                      "speculative_config.schedule": {1: "two"}},
        "speculative_config.schedule.1", "'two'", "an integer k >= 0"),
    bad("schedule_a_list", {"speculative_config.policy": "schedule", "speculative_config.schedule": [1, 2]},
        "speculative_config.schedule", "[1, 2]", "a mapping or null"),
    # draft vocabulary (method mtp; the tiny target's vocabulary has 259 ids)
    bad("draft_vocab_size_negative", {"speculative_config.draft_vocab_size": -1},
        "speculative_config.draft_vocab_size", "-1", "0 (the whole vocabulary) or an integer >= 1 (with method: mtp)"),
    bad("draft_vocab_size_not_int", {"speculative_config.draft_vocab_size": 64.0},
        "speculative_config.draft_vocab_size", "64.0", "an integer"),
    bad("draft_vocab_size_bool", {"speculative_config.draft_vocab_size": True},
        "speculative_config.draft_vocab_size", "true", "an integer"),
    bad("draft_vocab_size_above_vocab", {"speculative_config.draft_vocab_size": 260},
        "speculative_config.draft_vocab_size", "260", "0 (the whole vocabulary) or 1..259, the vocabulary size of "
        "model.path 'builtin:tiny'"),
    bad("draft_vocab_size_with_method_ngram", {**NGRAM, "speculative_config.draft_vocab_size": 64},
        "speculative_config.draft_vocab_size", "64", "0, the default (or method: mtp)"),
    bad("draft_vocab_size_with_method_none", {"speculative_config": {"method": "none", "draft_vocab_size": 64}},
        "speculative_config.draft_vocab_size", "64", "0, the default (or method: mtp)"),
    bad("draft_vocab_size_with_tensor_parallel", {"speculative_config.draft_vocab_size": 64,
                                                  "parallel_config": {"tensor_parallel_size": 2}},
        "speculative_config.draft_vocab_size", "64", "0 with parallel_config.tensor_parallel_size > 1"),
    bad("builtin_draft_of_another_target", {"model.path": "some/ckpt"}, "speculative_config.model",
        "'builtin:tiny-mtp'", "a draft of model.path", check_paths=False),
    bad("architecture_set_for_checkpoint", {"model.path": "some/ckpt", "model.hidden_size": 64}, "model.hidden_size",
        "64", "null (or a builtin: model.path)", check_paths=False),
    bad("missing_checkpoint", {"model.path": "no/such/ckpt"}, "model.path", "'no/such/ckpt'",
        "an existing checkpoint path or a builtin: name"),
]


@pytest.mark.parametrize("patch, key, shown, allowed, check_paths", BAD_CONFIGS)
def test_config_rejects_bad_value(tmp_path, patch, key, shown, allowed, check_paths):
    path = write(tmp_path, patched(patch))
    with pytest.raises(ConfigError) as info:
        load_config(path, check_paths=check_paths)
    message = str(info.value)
    assert message.startswith(f"{path}: {key} = {shown}: "), message
    assert f"; allowed: {allowed}" in message, message
    assert "\n" not in message and info.value.key == key


@pytest.mark.parametrize("text, fragment", [
    pytest.param(None, "config file not found", id="missing_file"),
    pytest.param("model: {path: builtin:tiny\n", "invalid YAML at line 2, column 1", id="yaml_syntax_error"),
    pytest.param("- model\n- scheduler\n", "(top level) = ['model', 'scheduler']: not a mapping; allowed: a mapping "
                 "with keys model, scheduler", id="top_level_list"),
    pytest.param("", "(top level) = null: not a mapping", id="empty_file"),
    pytest.param("seed: 1\nseed: 2\n", "duplicate key 'seed' at line 2", id="duplicate_key"),
    pytest.param(b"seed: \xff\n", "cannot read config file (UnicodeDecodeError", id="not_utf8"),
])
def test_load_config_rejects_bad_file(tmp_path, text, fragment):
    path = tmp_path / "c.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    elif text is not None:
        path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and fragment in message and "\n" not in message, message


def test_config_has_at_least_twenty_distinct_bad_cases():
    assert len({p.id for p in BAD_CONFIGS}) == len(BAD_CONFIGS) >= 20


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_config_loads_and_round_trips(path):
    config = load_config(path, check_paths=False)
    assert config_from_dict(config.to_dict(), check_paths=False) == config
    assert config_from_dict(yaml.safe_load(config.describe()), check_paths=False) == config


def test_shipped_configs_present():
    assert {p.name for p in SHIPPED} >= {"baseline.yaml", "mtp.yaml", "baseline_tiny.yaml", "mtp_tiny.yaml"}


@pytest.mark.parametrize("name", ["baseline_tiny.yaml", "mtp_tiny.yaml"])
def test_builtin_configs_load_with_path_checks(name):
    assert load_config(REPO / "configs" / name).model.path == "builtin:tiny"


def test_shipped_mtp_config_values():
    spec = load_config(REPO / "configs" / "mtp.yaml", check_paths=False).speculative_config
    assert (spec.method, spec.num_speculative_tokens, spec.num_model_steps, spec.verify_strategy) == (
        "mtp", 2, 2, "greedy")
    assert spec.enabled and spec.needs_proposer and spec.max_draft_token_num == 3
    baseline = load_config(REPO / "configs" / "baseline.yaml", check_paths=False)
    assert not baseline.speculative_config.enabled and baseline.max_output_token_num == 64


def test_ngram_config_defaults_and_values():
    spec = config_from_dict(patched(NGRAM)).speculative_config
    assert (spec.method, spec.num_speculative_tokens, spec.max_ngram_size, spec.min_ngram_size) == ("ngram", 3, 3, 1)
    assert spec.enabled and spec.needs_proposer and spec.model is None and spec.max_draft_token_num == 4
    sizes = {"speculative_config.max_ngram_size": 5, "speculative_config.min_ngram_size": 5}
    spec = config_from_dict(patched({**NGRAM, **sizes})).speculative_config
    assert (spec.max_ngram_size, spec.min_ngram_size) == (5, 5)  # min == max is allowed
    shipped = load_config(REPO / "configs" / "ngram_tiny.yaml").speculative_config
    assert (shipped.method, shipped.model, shipped.num_model_steps) == ("ngram", None, 1)


def test_with_ngram_config_defaults_and_values():
    spec = config_from_dict(patched(WITH_NGRAM)).speculative_config
    assert spec.with_ngram and (spec.max_ngram_size, spec.min_ngram_size) == (3, 1)
    sizes = {"speculative_config.max_ngram_size": 5, "speculative_config.min_ngram_size": 2}
    spec = config_from_dict(patched({**WITH_NGRAM, **sizes})).speculative_config
    assert (spec.max_ngram_size, spec.min_ngram_size) == (5, 2)
    assert not config_from_dict(patched({})).speculative_config.with_ngram  # mtp_strategy default
    rejection = {**WITH_NGRAM, "speculative_config.verify_strategy": "rejection"}  # one-hot n-gram draft probs
    assert config_from_dict(patched(rejection)).speculative_config.verify_strategy == "rejection"
    shipped = load_config(REPO / "configs" / "mtp_tiny_with_ngram.yaml").speculative_config
    assert (shipped.method, shipped.mtp_strategy, shipped.num_model_steps, shipped.num_speculative_tokens) == (
        "mtp", "with_ngram", 2, 3)


def test_config_dataclasses_are_frozen():
    config = WorkerConfig()
    for obj, name, value in [(config, "seed", 1), (config.model, "dtype", "float16"),
                             (config.scheduler, "max_num_seqs", 2), (config.speculative_config, "method", "mtp")]:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(obj, name, value)
    with pytest.raises((AttributeError, TypeError)):
        config.scheduler.new_field = 1  # slots: no attribute can be added either


def test_config_derived_values_are_properties_not_fields():
    config = load_config(REPO / "configs" / "mtp_tiny.yaml")
    assert config.speculative_config.max_draft_token_num == config.speculative_config.num_speculative_tokens + 1
    assert config.max_blocks_per_seq == 17 and config.max_output_token_num == 12  # ceil((256 + 3) / 16); N 4, D 3
    assert config.scheduler.blocks_per_full_seq == 16
    flat = {name for section in config.to_dict().values() if isinstance(section, dict) for name in section}
    assert not flat & {"max_draft_token_num", "enabled", "needs_proposer", "max_blocks_per_seq", "head_dim"}


def test_config_builtin_architecture_defaults_and_overrides():
    assert ModelConfig().vocab_size == 259 and ModelConfig().head_dim == 32
    model = config_from_dict({"model": {"num_layers": 6, "rope_theta": 500}}).model
    assert model.num_layers == 6 and model.hidden_size == 192
    assert model.rope_theta == 500.0 and isinstance(model.rope_theta, float)  # an int is accepted for a float


def test_config_relative_path_resolved_against_config_file(tmp_path, monkeypatch):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "configs").mkdir()
    path = tmp_path / "configs" / "c.yaml"
    path.write_text("model: {path: ../ckpt}\n")
    monkeypatch.chdir("/")
    assert load_config(path).model.path == str(tmp_path / "ckpt")


def test_config_error_is_value_error_with_source():
    with pytest.raises(ValueError, match=r"^my.yaml: scheduler.block_size = 0: "):
        config_from_dict({"scheduler": {"block_size": 0}}, source="my.yaml")
    with pytest.raises(ConfigError, match=r"^speculative_config.method = 'eagle': "):
        SpeculativeConfig(method="eagle")
    with pytest.raises(ConfigError, match=r"^scheduler.num_blocks = 1: "):
        SchedulerConfig(num_blocks=1)


def test_config_module_does_not_import_paddle():
    code = "import sys, specworker.config, specworker.cli; assert 'paddle' not in sys.modules, 'paddle imported'"
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)


def test_default_verify_strategy_is_lossless():
    from specworker.config import LOSSY_VERIFY_STRATEGIES, SpeculativeConfig

    default = SpeculativeConfig().verify_strategy
    assert default == "rejection" and default not in LOSSY_VERIFY_STRATEGIES


def test_schedule_config_loads_round_trips_and_picks_k(tmp_path):
    data = patched({"speculative_config.policy": "schedule", "speculative_config.num_model_steps": 3,
                    "speculative_config.schedule": {16: 1, 1: 3, 32: 0}})
    config = load_config(write(tmp_path, data))
    spec = config.speculative_config
    assert spec.schedule == ((1, 3), (16, 1), (32, 0))
    assert [spec.schedule_k(b) for b in (1, 15, 16, 31, 32, 64)] == [3, 3, 1, 1, 0, 0]
    assert config_from_dict(config.to_dict(), check_paths=False) == config
    assert load_config(write(tmp_path, yaml.safe_load(config.describe()))) == config
