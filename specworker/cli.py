"""Command line of specworker: `run` and `check-config`. The only module that prints.

User mistakes (bad config, bad arguments) end in one `specworker: error: ...` line on stderr and exit
status 2; an unexpected exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys
import typing
from pathlib import Path

from specworker.config import ConfigError, load_config

logger = logging.getLogger(__name__)

PROG = "specworker"
DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "mtp_tiny.yaml"
EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line, like a config error."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(EXIT_USAGE, f"{PROG}: error: {message} (see --help)\n")


def _cmd_run(args: argparse.Namespace) -> int:
    config = load_config(args.config, check_paths=not args.no_check_paths)
    logger.info("resolved config from %s", args.config)
    # TODO(config): the engine loop replaces this; for now `run` validates and shows the config.
    print(f"# resolved config from {args.config}")
    print(config.describe())
    return 0


def _cmd_check_config(args: argparse.Namespace) -> int:
    load_config(args.path, check_paths=not args.no_check_paths)
    print(f"{args.path}: ok")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Speculative-decoding worker for PaddlePaddle.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run = commands.add_parser("run", help="validate the config and print it resolved (engine loop: later)")
    run.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help=f"YAML config (default: {DEFAULT_CONFIG})")
    run.set_defaults(func=_cmd_run)
    check = commands.add_parser("check-config", help="validate a YAML config")
    check.add_argument("path", type=Path)
    check.set_defaults(func=_cmd_check_config)
    for sub in (run, check):
        sub.add_argument("--no-check-paths", action="store_true", help="do not require checkpoint paths to exist")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except ConfigError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
