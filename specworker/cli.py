"""Command line of specworker: `run`, `bench`, `check-config` and `convert-gguf`. The only module that prints.

User mistakes (bad config, bad arguments, unreadable files, weights that do not load, `device: gpu` on a
CPU-only Paddle) end in one `specworker: error: ...` line on stderr and exit status 2; a bench whose
speculative output differs from the baseline exits 1; an unexpected exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import typing
import warnings
from pathlib import Path

from specworker.batch_run import DEFAULT_PROMPTS, UserError
from specworker.config import LOSSY_VERIFY_STRATEGIES, ConfigError, launched_world, load_config

logger = logging.getLogger(__name__)

PROG = "specworker"
CONFIGS = Path(__file__).resolve().parent.parent / "configs"
DEFAULT_CONFIG = CONFIGS / "smollm2.yaml"  # run: the real default model (created by `make run` / `make test`)
DEFAULT_BENCH_CONFIG = CONFIGS / "mtp_tiny.yaml"  # bench: a speculative config
EXIT_MISMATCH = 1
EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line, like a config error."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(EXIT_USAGE, f"{PROG}: error: {message} (see --help)\n")


def _int_at_least(low: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer; allowed: an integer >= {low}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value}; allowed: an integer >= {low}")
        return value
    return parse


def _float_at_least(low: float):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number; allowed: a number >= {low}") from None
        if not value >= low:
            raise argparse.ArgumentTypeError(f"{value}; allowed: a number >= {low}")
        return value
    return parse


def _batch_sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}; allowed: comma-separated integers >= 1, e.g. 1,4,16") from None
    if any(b < 1 for b in sizes):
        raise argparse.ArgumentTypeError(f"{text!r} has a batch size < 1; allowed: comma-separated integers >= 1")
    return sizes


def _write(path: Path, write: typing.Callable[[Path], None]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(path)
    except OSError as err:
        raise UserError(f"{path}: cannot write ({type(err).__name__}: {err.strerror or err})") from None


def _shown(path: Path) -> Path:
    """path relative to the working directory when it lies below it (messages, bench.json)."""
    try:
        return path.resolve().relative_to(Path.cwd())
    except ValueError:
        return path


def _load(args: argparse.Namespace):
    from specworker.batch_run import load_prompts

    args.config = _shown(args.config)
    config = load_config(args.config)
    logger.info("resolved config from %s:\n%s", args.config, config.describe())
    return config, load_prompts(args.prompts)


def _cmd_run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from specworker.batch_run import encode_prompts, load_worker, queue_prompts, run_queued
    from specworker.hf_tokenizer import load_tokenizer
    from specworker.report import run_metrics, run_metrics_table
    from specworker.sampling_params import SamplingParams

    config, prompts = _load(args)
    if config.parallel_config.tensor_parallel_size > 1 and launched_world() is None:
        return _launch_ranks(args, config)
    worker = load_worker(config, source=str(args.config))
    try:
        tokenizer = load_tokenizer(config.model.path)
    except (FileNotFoundError, ValueError) as err:
        raise UserError(f"{args.config}: cannot load the tokenizer: {err}") from None
    prompt_ids = encode_prompts(tokenizer, prompts, chat=args.chat)
    params = SamplingParams(temperature=args.temperature, max_tokens=args.max_tokens, ignore_eos=args.ignore_eos,
                            seed=config.seed if args.temperature > 0 else None)
    spec = config.speculative_config
    if args.temperature > 0 and spec.needs_proposer and spec.verify_strategy in LOSSY_VERIFY_STRATEGIES:
        print(f"{PROG}: note: speculative_config.verify_strategy = {spec.verify_strategy!r} is lossy at temperature "
              f"{args.temperature}: sampled tokens do not follow the target's distribution (use 'rejection', the "
              "default, or 'target_match')", file=sys.stderr)
    req_ids = queue_prompts(worker, prompts, params, tokenizer=tokenizer, chat=args.chat)
    with tqdm(total=len(prompts) * args.max_tokens, unit="tok", desc="generating", file=sys.stderr) as bar:
        run = run_queued(worker, prompts, req_ids, on_tokens=bar.update, tokenizer=tokenizer)
        bar.total = bar.n  # requests that stop at eos end early
        bar.refresh()
    mode = "chat" if args.chat else "completion"
    how = "greedy" if args.temperature == 0 else f"temperature {args.temperature} (seed {config.seed})"
    print(f"# {args.config}: {len(prompts)} prompts ({mode}), {how}, max_tokens {args.max_tokens}")
    for i, (prompt, text, reason) in enumerate(zip(run.prompts, run.texts, run.finish_reasons), 1):
        shown, shown_prompt = text.replace("\n", "\\n"), prompt.replace("\n", "\\n")
        print(f"[{i}] {shown_prompt} >>> {shown}  ({reason.value})")
    print()
    print(run_metrics_table(run))
    if args.json is not None and worker.tp.rank == 0:  # every rank has the same completions
        data = {"config": str(args.config), "max_tokens": args.max_tokens, "chat": args.chat,
                "ignore_eos": args.ignore_eos, "metrics": run_metrics(run),
                "completions": [{"prompt": p, "prompt_token_ids": pids, "text": t, "token_ids": ids,
                                 "finish_reason": r.value}
                                for p, pids, t, ids, r in zip(run.prompts, prompt_ids, run.texts, run.token_ids,
                                                              run.finish_reasons)]}
        _write(args.json, lambda path: path.write_text(json.dumps(data, indent=1) + "\n"))
        print(f"wrote {args.json}")
    return 0


def _check_tp_sizes(config, source: str) -> None:
    """ConfigError (naming `source`) when parallel_config.tensor_parallel_size does not divide the heads, KV heads
    or intermediate size in the model's config.json; reads no weights."""
    from specworker.config import check_tensor_parallel
    from specworker.model_executor.models.checkpoint import config_json, read_target_arch

    try:
        arch = read_target_arch(config.model)
    except (FileNotFoundError, ValueError) as err:
        raise UserError(f"{source}: cannot read the model's architecture: {err}") from None
    try:
        check_tensor_parallel(config.parallel_config.tensor_parallel_size, num_heads=arch.num_heads,
                              num_kv_heads=arch.num_kv_heads, intermediate_size=arch.intermediate_size,
                              where=str(config_json(config.model)))
    except ConfigError as err:
        raise err.in_source(source) from None


def _launch_ranks(args: argparse.Namespace, config) -> int:
    """`specworker run` with tensor_parallel_size N > 1, started by hand: checks that N divides the model's
    heads, KV heads and intermediate size, then runs this same command as N ranks (tp_launch.run_ranks)."""
    import os

    from specworker.tp_launch import run_ranks

    size = config.parallel_config.tensor_parallel_size
    _check_tp_sizes(config, str(args.config))
    package_root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
    print(f"{PROG}: starting {size} ranks (python -m paddle.distributed.launch); rank logs in "
          f"{args.tp_log_dir}/workerlog.*", file=sys.stderr)
    status = run_ranks(size, [sys.executable, "-m", "specworker", *args.argv], args.tp_log_dir, env=env)
    if status != 0:
        raise UserError(f"a rank failed (launcher exit status {status}); see {args.tp_log_dir}/workerlog.*")
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from specworker.batch_run import encode_prompts, load_worker, tokenizer_of
    from specworker.bench import (BenchSettings, bench_configs, num_runs, parse_policies, policy_configs, run_bench,
                                  run_policy_bench)
    from specworker.report import bench_table, plot_bench, plot_policies, policy_table, splice_readme

    try:
        import matplotlib  # noqa: F401  (bench.png; checked before minutes of runs)
    except ImportError:
        raise UserError("bench needs matplotlib for bench.png; allowed: pip install matplotlib "
                        "(it is in requirements.txt)") from None
    config, prompts = _load(args)
    settings = BenchSettings(batch_sizes=args.batch_sizes, max_tokens=args.max_tokens, warmup=args.warmup,
                             repeats=args.repeats, chat=args.chat, rotate_prompts=args.rotate_prompts,
                             policies=parse_policies(args.policies) if args.policies else (), lockstep=args.lockstep)
    readme = None
    if args.readme is not None:  # read before the bench runs, so a bad path fails fast
        try:
            readme = args.readme.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise UserError(f"{args.readme}: cannot read ({type(err).__name__})") from None
        splice_readme(readme, "", "")
    for batch_size in settings.batch_sizes:  # config, device and weights errors before the progress bar
        bench_configs(config, batch_size)
        if settings.policies:
            policy_configs(config, batch_size, settings.policies)
    worker = load_worker(config, source=str(args.config))
    if args.chat:  # a model without a chat template fails here, not after the first runs
        encode_prompts(tokenizer_of(worker), prompts, chat=True)
    with tqdm(total=num_runs(settings), unit="run", desc="bench", file=sys.stderr) as bar:
        runner = run_policy_bench if settings.policies else run_bench
        bench = runner(config, prompts, settings, config_source=str(args.config),
                       prompts_source=str(_shown(args.prompts)), on_run=bar.update)
    table = policy_table(bench) if settings.policies else bench_table(bench)
    plot = plot_policies if settings.policies else plot_bench
    _write(args.out / "bench.json", lambda path: path.write_text(json.dumps(bench, indent=1) + "\n"))
    _write(args.out / "bench.png", lambda path: plot(bench, path))
    machine = bench["machine"]
    prompts = f"`{_shown(args.prompts)}`" + (" (chat template)" if args.chat else "")
    which = "the next batch-size prompts in each run" if args.rotate_prompts else "the first batch-size prompts"
    turns = " (the policies stepped in turns, each on its own clock)" if args.lockstep else ""
    note = (f"`{args.config}`, {prompts} ({which}), greedy, {args.max_tokens} new tokens per request, batch size = "
            f"requests = slots, median of {args.repeats} runs after {args.warmup} warm-up{turns}; {machine['device']} "
            f"({machine['cpu_count']} cores, {machine['processor']}), Paddle {machine['paddle']}. "
            + ("Greedy outputs of every policy were identical token for token." if settings.policies else
               "Greedy outputs of both modes were identical token for token."))
    print(table)
    print(f"\n{note}\nwrote {args.out / 'bench.json'} and {args.out / 'bench.png'}")
    if readme is not None:
        _write(args.readme, lambda path: path.write_text(splice_readme(readme, table, note), encoding="utf-8"))
        print(f"updated the results table in {args.readme}")
    return 0


def _cmd_check_config(args: argparse.Namespace) -> int:
    from specworker.batch_run import describe_model

    config = load_config(args.path, check_paths=not args.no_check_paths)
    model = None if args.no_check_paths else describe_model(config, source=str(args.path))  # opens the weights
    if model is not None:
        _check_tp_sizes(config, str(args.path))
    print(f"{args.path}: ok")
    if model is not None:
        print(model)
    return 0


def _cmd_convert_gguf(args: argparse.Namespace) -> int:
    from specworker.model_executor.models.gguf_convert import convert_gguf

    try:
        out = convert_gguf(args.src, args.dst, dtype=args.dtype)
    except (ValueError, OSError) as err:  # every message names the file (and the field) at fault
        raise UserError(str(err)) from None
    print(f"wrote {out} (Hugging Face Llama directory, {args.dtype} weights)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Speculative-decoding worker for PaddlePaddle.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run = commands.add_parser("run", help="generate greedily for a batch of prompts and print metrics")
    run.add_argument("--max-tokens", type=_int_at_least(1), default=64, help="new tokens per prompt at most")
    run.add_argument("--json", type=Path, metavar="OUT", help="also write completions and metrics as JSON")
    run.add_argument("--ignore-eos", action="store_true", help="generate max-tokens tokens, past eos")
    run.add_argument("--temperature", type=_float_at_least(0.0), default=0.0,
                     help="0 = greedy (default); > 0 samples, seeded by the config's seed")
    run.add_argument("--tp-log-dir", type=Path, default=Path("build/tp_logs"),
                     help="with parallel_config.tensor_parallel_size > 1: where each rank's log goes")
    run.set_defaults(func=_cmd_run)
    bench = commands.add_parser("bench", help="speculative vs non-speculative throughput per batch size")
    bench.add_argument("--batch-sizes", type=_batch_sizes, default=(1, 4, 16, 32), help="e.g. 1,4,16,32")
    bench.add_argument("--max-tokens", type=_int_at_least(1), default=96, help="new tokens per request at most")
    bench.add_argument("--warmup", type=_int_at_least(0), default=1, help="untimed runs per mode and batch size")
    bench.add_argument("--repeats", type=_int_at_least(1), default=7, help="timed runs per mode and batch size")
    bench.add_argument("--out", type=Path, default=Path("build/bench"), help="folder for bench.json, bench.png")
    bench.add_argument("--readme", type=Path, help="also write the table into this README between its markers")
    bench.add_argument("--rotate-prompts", action="store_true", help="each run takes the next batch-size prompts "
                       "of the set (default: every run repeats the first batch-size prompts)")
    bench.add_argument("--policies", help="compare speculation policies side by side, e.g. "
                       "none,fixed1,fixed2,fixed3,adaptive (none is the baseline)")
    bench.add_argument("--lockstep", action="store_true", help="with --policies: each repetition steps the "
                       "policies' workers in turns, one step each, each timed by its own clock (load changes reach "
                       "every policy alike; default: their runs one after the other)")
    bench.set_defaults(func=_cmd_bench)
    for sub, default in ((run, DEFAULT_CONFIG), (bench, DEFAULT_BENCH_CONFIG)):
        sub.add_argument("--config", type=Path, default=default, help=f"YAML config (default: configs/{default.name})")
        sub.add_argument("--chat", action="store_true", help="send each prompt as a user message through the "
                         "model's chat template")
        sub.add_argument("--prompts", type=Path, default=DEFAULT_PROMPTS, help="one prompt per line, or JSON Lines "
                         '({"prompt": "..."} a line; default: the packaged prompt set)')
    check = commands.add_parser("check-config", help="validate a YAML config")
    check.add_argument("path", type=Path)
    check.add_argument("--no-check-paths", action="store_true", help="do not require checkpoint paths to exist")
    check.set_defaults(func=_cmd_check_config)
    convert = commands.add_parser("convert-gguf", help="convert a llama.cpp GGUF (llama architecture) into a "
                                  "Hugging Face model directory")
    convert.add_argument("src", type=Path, help="the .gguf file")
    convert.add_argument("dst", type=Path, help="directory to write (an earlier conversion there is replaced)")
    convert.add_argument("--dtype", default="float32", help="storage dtype of the weights (only float32)")
    convert.set_defaults(func=_cmd_convert_gguf)
    return parser


def main(argv: list[str] | None = None) -> int:
    from specworker.bench import OutputMismatch

    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # a tensor-parallel run starts itself once per rank
    # Paddle's extension loader warns on every start when ccache is absent; it says nothing about the run.
    warnings.filterwarnings("ignore", message="No ccache found")
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except (ConfigError, UserError) as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except OutputMismatch as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return EXIT_MISMATCH
