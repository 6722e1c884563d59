"""The speculative-vs-baseline benchmark: per batch size, the same greedy requests run non-speculative and
speculative, interleaved in one process, with warm-up and repetitions; every run's token ids are compared
between the two modes. Returns plain data (bench.json); printing and plotting live in cli / report.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import statistics
from collections.abc import Callable, Sequence

from specworker.batch_run import BatchRun, UserError, load_worker, run_batch, run_lockstep
from specworker.config import SchedulerConfig, SpeculativeConfig, WorkerConfig
from specworker.sampling_params import SamplingParams

__all__ = ["BenchSettings", "OutputMismatch", "batch_prompts", "bench_configs", "first_mismatch", "num_runs", "run_bench",
           "parse_policies", "policy_configs", "run_policy_bench", "spread"]

MODES = ("baseline", "speculative")


class OutputMismatch(RuntimeError):
    """Greedy speculative output differs from greedy non-speculative output: a correctness failure."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class BenchSettings:
    batch_sizes: tuple[int, ...]  # concurrent requests (= slots) per measurement
    max_tokens: int  # generated tokens per request at most
    warmup: int  # untimed runs per mode and batch size (still checked for equality)
    repeats: int  # timed runs per mode and batch size
    chat: bool = False  # prompts go through the model's chat template as one user message each
    rotate_prompts: bool = False  # run r takes the next batch_size prompts of the set (else always the first)
    policies: tuple[str, ...] = ()  # side-by-side policies (parse_policies); empty: baseline vs the config
    lockstep: bool = False  # policies: every repetition runs them step by step in turns (batch_run.run_lockstep)

    def __post_init__(self) -> None:
        if not self.batch_sizes or any(b < 1 for b in self.batch_sizes):
            raise UserError(f"--batch-sizes = {','.join(map(str, self.batch_sizes))}; allowed: integers >= 1")
        if self.lockstep and not self.policies:
            raise UserError("--lockstep without --policies; allowed: --lockstep with --policies (it steps the "
                            "policies' workers in turns)")
        for name, low in (("max_tokens", 1), ("warmup", 0), ("repeats", 1)):
            if getattr(self, name) < low:
                raise UserError(f"--{name.replace('_', '-')} = {getattr(self, name)}; allowed: an integer >= {low}")


def spread(values: Sequence[float]) -> dict[str, float]:
    """min / median / max of one figure over the repetitions."""
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def bench_configs(config: WorkerConfig, batch_size: int) -> tuple[WorkerConfig, WorkerConfig]:
    """(baseline, speculative) configs for batch_size slots: the speculative one is config with the
    scheduler widened to batch_size slots; the baseline is the same without a draft (method none)."""
    sched, spec = config.scheduler, config.speculative_config
    if not spec.needs_proposer:
        raise UserError(f"speculative_config.method = {spec.method!r}: bench compares against speculative "
                        "decoding; allowed: a config with a proposer, method: mtp, ngram or suffix (e.g. "
                        "configs/mtp_tiny.yaml, configs/ngram_tiny.yaml)")
    wide = SchedulerConfig(
        max_num_seqs=batch_size, max_model_len=sched.max_model_len, block_size=sched.block_size,
        num_blocks=max(sched.num_blocks, batch_size * config.max_blocks_per_seq),
        max_num_batched_tokens=max(sched.max_num_batched_tokens, batch_size * spec.max_draft_token_num))
    speculative = dataclasses.replace(config, scheduler=wide)
    return dataclasses.replace(speculative, speculative_config=SpeculativeConfig()), speculative


def first_mismatch(baseline: BatchRun, speculative: BatchRun) -> str | None:
    """None when every request generated the same ids in both runs, else where they first differ."""
    for i, (a, b) in enumerate(zip(baseline.token_ids, speculative.token_ids)):
        if a != b:
            j = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            got = lambda ids: ids[j] if j < len(ids) else "end"  # noqa: E731
            return (f"request {i} ({baseline.prompts[i][:30]!r}...) differs at token {j}: baseline {got(a)}, "
                    f"speculative {got(b)} ({len(a)} vs {len(b)} tokens)")
    return None


def batch_prompts(prompts: Sequence[str], batch_size: int, run: int) -> list[str]:
    """The prompts of one run: batch_size consecutive prompts of the set from run * batch_size on, wrapping
    around. Example: 5 prompts, batch size 2 -> run 0: [p0, p1], run 1: [p2, p3], run 2: [p4, p0]."""
    return [prompts[(run * batch_size + i) % len(prompts)] for i in range(batch_size)]


def _summary(runs: list[BatchRun]) -> dict:
    out = {"tokens_per_s": spread([r.tokens_per_s for r in runs]), "seconds": spread([r.seconds for r in runs]),
           "num_tokens": spread([r.num_tokens for r in runs]), "num_steps": spread([r.num_steps for r in runs]),
           "ms_per_step": spread([1e3 * r.seconds / max(r.num_steps, 1) for r in runs]),
           "phase_seconds": {p: spread([r.phase_seconds[p] for r in runs]) for p in runs[0].phase_seconds}}
    if runs[0].draft_lens is not None:
        out["policy_drafts_per_batch_size"] = runs[-1].draft_lens.as_dict()  # the last timed run's choices
        out["policy_drafts_per_slot"] = spread([r.draft_lens.mean_drafts_per_slot() for r in runs])
    if runs[0].spec_stats is not None:
        out["mean_acceptance_length"] = spread([r.spec_stats.mean_acceptance_length for r in runs])
        k = runs[0].spec_stats.num_speculative_tokens
        out["acceptance_per_position"] = [spread([r.spec_stats.acceptance_per_position[i] for r in runs])
                                          for i in range(k)]
        out["drafted_per_position"] = [spread([r.spec_stats.drafted_per_position[i] for r in runs]) for i in range(k)]
    return out


def _bench_one(config: WorkerConfig, prompts: Sequence[str], batch_size: int, settings: BenchSettings,
               on_run: Callable[[], None] | None) -> dict:
    """Interleaved baseline / speculative runs at one batch size; raises OutputMismatch on any difference."""
    configs = dict(zip(MODES, bench_configs(config, batch_size)))
    workers = {mode: load_worker(cfg, source=f"bench batch size {batch_size} ({mode})") for mode, cfg in configs.items()}
    params = SamplingParams(temperature=0.0, max_tokens=settings.max_tokens)
    timed = {mode: [] for mode in MODES}
    for rep in range(settings.warmup + settings.repeats):
        requests = batch_prompts(prompts, batch_size, rep if settings.rotate_prompts else 0)
        order = MODES if rep % 2 == 0 else MODES[::-1]  # alternate who goes first: drift hits both
        runs = {}
        for mode in order:
            runs[mode] = run_batch(workers[mode], requests, params, chat=settings.chat)
            if on_run is not None:
                on_run()
        where = first_mismatch(runs["baseline"], runs["speculative"])
        if where is not None:
            raise OutputMismatch(f"bench batch size {batch_size}, repetition {rep}: greedy outputs differ: {where}")
        if rep >= settings.warmup:
            for mode in MODES:
                timed[mode].append(runs[mode])
    speedups = [s.tokens_per_s / b.tokens_per_s for b, s in zip(timed["baseline"], timed["speculative"])]
    return {"batch_size": batch_size, "num_requests": batch_size, "outputs_equal": True,
            "speedup": spread(speedups), **{mode: _summary(timed[mode]) for mode in MODES}}


def run_bench(config: WorkerConfig, prompts: Sequence[str], settings: BenchSettings, *, config_source: str,
              prompts_source: str | None = None, on_run: Callable[[], None] | None = None) -> dict:
    """Every batch size of settings; the bench.json content. on_run is called after each run (progress)."""
    import paddle

    for batch_size in settings.batch_sizes:
        bench_configs(config, batch_size)  # reject a bad config before any run
    results = [_bench_one(config, prompts, b, settings, on_run) for b in settings.batch_sizes]
    return {
        "config": config_source, "prompts": prompts_source, "num_prompts": len(prompts),
        "settings": dataclasses.asdict(settings) | {"temperature": 0.0},
        "method": config.speculative_config.method,
        "num_speculative_tokens": config.speculative_config.num_speculative_tokens,
        "num_model_steps": config.speculative_config.num_model_steps,
        "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                    "cpu_count": os.cpu_count(),
                    "python": platform.python_version(), "paddle": paddle.__version__, "device": config.device},
        "results": results,
    }


def num_runs(settings: BenchSettings) -> int:
    """Runs run_bench / run_policy_bench make (progress bar total)."""
    modes = len(settings.policies) if settings.policies else len(MODES)
    return len(settings.batch_sizes) * (settings.warmup + settings.repeats) * modes


POLICY_HELP = "none, fixed1..fixed5 (policy fixed, k drafts), adaptive, schedule (the config's schedule)"


def parse_policies(text: str) -> tuple[str, ...]:
    """"none,fixed1,fixed2,adaptive" -> its names; UserError on an unknown, repeated or missing-baseline list."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    allowed = {"none", "adaptive", "schedule"} | {f"fixed{k}" for k in range(1, 6)}
    bad = [n for n in names if n not in allowed]
    if bad or len(set(names)) != len(names) or "none" not in names:
        why = f"unknown {bad[0]!r}" if bad else "a name twice" if len(set(names)) != len(names) else "no 'none'"
        raise UserError(f"--policies = {text}: {why}; allowed: a comma-separated list holding none (the baseline) "
                        f"and any of {POLICY_HELP}")
    return names


def policy_configs(config: WorkerConfig, batch_size: int, policies: Sequence[str]) -> dict[str, WorkerConfig]:
    """policy name -> the config it runs at batch_size slots. fixedK: k = K (MTP: num_model_steps = K too);
    adaptive: k = the largest fixed K listed (else the config's), policy adaptive; schedule: the config with
    policy schedule (its schedule key); none: no proposer."""
    _, base = bench_configs(config, batch_size)
    spec = base.speculative_config
    fixed = [int(n[5:]) for n in policies if n.startswith("fixed")]
    k_top = max(fixed, default=spec.num_speculative_tokens)

    def with_k(k: int, policy: str, schedule=None) -> WorkerConfig:
        steps = k if spec.method == "mtp" else 1
        new = dataclasses.replace(spec, num_speculative_tokens=k, num_model_steps=steps, policy=policy,
                                  schedule=schedule)
        sched = dataclasses.replace(base.scheduler, max_num_batched_tokens=max(
            base.scheduler.max_num_batched_tokens, batch_size * (k + 1)))
        return dataclasses.replace(base, speculative_config=new, scheduler=sched)

    out = {}
    for name in policies:
        if name == "none":
            out[name] = dataclasses.replace(base, speculative_config=SpeculativeConfig())
        elif name == "adaptive":
            out[name] = with_k(k_top, "adaptive")
        elif name == "schedule":
            if spec.schedule is None:
                raise UserError("--policies schedule: the config has no speculative_config.schedule; allowed: a "
                                "config with policy: schedule and a schedule")
            out[name] = dataclasses.replace(base, speculative_config=dataclasses.replace(spec, policy="schedule"))
        else:
            out[name] = with_k(int(name[5:]), "fixed")
    return out


def _policies_one(config: WorkerConfig, prompts: Sequence[str], batch_size: int, settings: BenchSettings,
                  on_run: Callable[[], None] | None) -> dict:
    """Interleaved runs of every policy at one batch size; raises OutputMismatch when any differs from none."""
    names = settings.policies
    workers = {n: load_worker(c, source=f"bench batch size {batch_size} ({n})")
               for n, c in policy_configs(config, batch_size, names).items()}
    params = SamplingParams(temperature=0.0, max_tokens=settings.max_tokens)
    timed = {n: [] for n in names}
    for rep in range(settings.warmup + settings.repeats):
        requests = batch_prompts(prompts, batch_size, rep if settings.rotate_prompts else 0)
        shift = rep % len(names)  # rotate who goes first: drift hits every policy
        order, runs = names[shift:] + names[:shift], {}
        if settings.lockstep:
            runs = dict(zip(order, run_lockstep([workers[n] for n in order], requests, params, chat=settings.chat)))
            if on_run is not None:
                for _ in order:
                    on_run()
        else:
            for name in order:
                runs[name] = run_batch(workers[name], requests, params, chat=settings.chat)
                if on_run is not None:
                    on_run()
        for name in names:
            where = first_mismatch(runs["none"], runs[name])
            if where is not None:
                raise OutputMismatch(f"bench batch size {batch_size}, repetition {rep}, policy {name}: greedy "
                                     f"outputs differ from none: {where}")
        if rep >= settings.warmup:
            for name in names:
                timed[name].append(runs[name])
    out = {n: _summary(timed[n]) | {"speedup": spread([r.tokens_per_s / b.tokens_per_s
                                                        for b, r in zip(timed["none"], timed[n])])}
           for n in names}
    result = {"batch_size": batch_size, "num_requests": batch_size, "outputs_equal": True, "policies": out}
    if "adaptive" in names:
        result["adaptive_vs_best"] = adaptive_vs_best(timed, out)
        profile = workers["adaptive"].cost_profile  # the step costs it chose by (None: measured while serving)
        result["adaptive_cost_profile"] = None if profile is None else profile.to_dict()
        # what the served pairs corrected of it (ProfiledCosts.served_pairs)
        result["adaptive_served_pairs"] = (None if profile is None else
                                           workers["adaptive"].runner.policy.costs.served_pairs())
    return result


def adaptive_vs_best(timed: dict[str, list[BatchRun]], out: dict) -> dict:
    """Adaptive against the best other policy (the highest median tok/s): `ratio`, the ratio of the two medians,
    and `paired`, the spread over repetitions of adaptive's tok/s / the best's in the same repetition. A repetition
    runs every policy back to back (within ~1 s at batch 1), so the paired ratio cancels the load drift between
    repetitions that the medians keep (on this 2-core VM a policy's tok/s spans +-25% over five repetitions)."""
    best = max((n for n in out if n != "adaptive"), key=lambda n: out[n]["tokens_per_s"]["median"])
    paired = [a.tokens_per_s / b.tokens_per_s for a, b in zip(timed["adaptive"], timed[best])]
    return {"best": best, "ratio": out["adaptive"]["tokens_per_s"]["median"] / out[best]["tokens_per_s"]["median"],
            "paired": spread(paired)}


def run_policy_bench(config: WorkerConfig, prompts: Sequence[str], settings: BenchSettings, *, config_source: str,
                     prompts_source: str | None = None, on_run: Callable[[], None] | None = None) -> dict:
    """settings.policies side by side at every batch size; the bench.json content (results[i]["policies"])."""
    import paddle

    for batch_size in settings.batch_sizes:
        policy_configs(config, batch_size, settings.policies)  # reject a bad config before any run
    results = [_policies_one(config, prompts, b, settings, on_run) for b in settings.batch_sizes]
    return {
        "config": config_source, "prompts": prompts_source, "num_prompts": len(prompts),
        "settings": dataclasses.asdict(settings) | {"temperature": 0.0},
        "method": config.speculative_config.method, "policies": list(settings.policies),
        "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                    "cpu_count": os.cpu_count(),
                    "python": platform.python_version(), "paddle": paddle.__version__, "device": config.device},
        "results": results,
    }
