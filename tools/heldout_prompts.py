"""Writes prompts cut from the tiny pair's held-out text (pydoc_data.topics, topics with index % 10 == 5 in
name order; see docs/tiny_pair.md), one per line, for measuring acceptance on text the pair never saw:
    python tools/heldout_prompts.py benchmarks/heldout_prompts.txt
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pydoc_data.topics import topics
from train_tiny_pair import EVAL_EVERY, EVAL_OFFSET  # the held-out split (tools/ is on sys.path when run)


def heldout_prompts(count: int, length: int) -> list[str]:
    """`count` prompts of about `length` characters: the starts of the held-out topics' paragraphs."""
    names = sorted(topics)
    held = [topics[n] for i, n in enumerate(names) if i % EVAL_EVERY == EVAL_OFFSET]
    paragraphs = [" ".join(p.split()) for text in held for p in text.split("\n\n")]
    paragraphs = [p for p in paragraphs if len(p) >= 2 * length and p.isascii()]
    step = max(len(paragraphs) // count, 1)
    return [p[:length].rstrip() for p in paragraphs[::step][:count]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--count", type=int, default=32)
    parser.add_argument("--length", type=int, default=48)
    args = parser.parse_args()
    prompts = heldout_prompts(args.count, args.length)
    args.out.write_text("\n".join(prompts) + "\n", encoding="utf-8")
    print(f"{args.out}: {len(prompts)} held-out prompts")


if __name__ == "__main__":
    main()
