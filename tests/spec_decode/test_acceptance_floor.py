"""Acceptance floor: the trained tiny pair's mean acceptance length at k = 2 (configs/mtp_tiny.yaml) on the
held-out prompts it never trained on. Greedy drafting and verification are deterministic and batch
invariant, so the figure is exact: a silent acceptance regression (draft weights, proposer, verify) fails."""

import dataclasses
from pathlib import Path

from specworker.batch_run import load_prompts, run_batch
from specworker.config import load_config
from specworker.sampling_params import SamplingParams
from specworker.worker.worker import Worker

REPO = Path(__file__).resolve().parents[2]
MEASURED_AL = 2.597  # 32 held-out prompts x 48 tokens, measured when this floor was set (576 verify steps)
MARGIN = 0.05


def test_tiny_pair_acceptance_floor_on_heldout_prompts():
    config = load_config(REPO / "configs" / "mtp_tiny.yaml")
    assert config.speculative_config.num_speculative_tokens == 2
    config = dataclasses.replace(config, scheduler=dataclasses.replace(
        config.scheduler, max_num_seqs=32, num_blocks=528, max_num_batched_tokens=4096))
    prompts = load_prompts(REPO / "benchmarks" / "heldout_prompts.txt")
    run = run_batch(Worker(config), prompts, SamplingParams(temperature=0.0, max_tokens=48))
    stats = run.spec_stats
    assert len(prompts) == 32 and stats.num_steps > 500
    assert stats.mean_acceptance_length >= MEASURED_AL - MARGIN, stats.mean_acceptance_length
