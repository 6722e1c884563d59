"""Training text for SmolLM2-135M's MTP head (tools/train_smollm2_mtp.py), built offline on this machine.

Two sources, each split into train / held-out by document (every HELD_EVERY-th document is held out):
  * docs: Python's bundled help topics (pydoc_data.topics) and the standard library's module docstrings,
    tokenized as plain text (BOS-free, as the model sees a continuation);
  * chat: the target's own greedy answers (SmolLM2-135M-Instruct through its chat template, specworker's
    non-speculative worker) to instruction prompts built here from fixed templates x subjects, the
    distribution an MTP / EAGLE head drafts at serving time.
Writes OUT/data.json: {"docs": {"train": [[ids], ...], "held": [...]}, "chat": {...}, "prompts": {...}}
with the chat documents as prompt ids + answer ids (answer_start marks where the answer begins).

    nice python tools/smollm2_mtp_data.py --out /tmp/mtp_data --max-tokens 160
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import itertools
import json
import pkgutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specworker.config import load_config  # noqa: E402
from specworker.llm import LLM  # noqa: E402
from specworker.sampling_params import SamplingParams  # noqa: E402

HELD_EVERY = 8  # documents (in their fixed order) with index % 8 == 3 are held out
HELD_OFFSET = 3
CONFIG = Path(__file__).resolve().parents[1] / "configs" / "smollm2.yaml"

TEMPLATES = (
    "Explain {s} in simple terms.",
    "Write a short story about {s}.",
    "Give me five tips about {s}.",
    "What are the pros and cons of {s}?",
    "Write a short poem about {s}.",
    "Describe {s} to a ten-year-old.",
    "Write a Python function related to {s} and explain how it works.",
    "Summarize the history of {s} in one paragraph.",
    "What are common mistakes people make with {s}?",
    "Write an email to a friend about {s}.",
    "List the key facts about {s}.",
    "How would you teach {s} to a beginner?",
)
SUBJECTS = (
    "photosynthesis", "the water cycle", "black holes", "volcanoes", "the French revolution", "jazz music",
    "learning a new language", "saving money", "climate change", "the human heart", "electric cars",
    "machine learning", "the internet", "chess", "gardening", "coffee", "the moon landing", "earthquakes",
    "recycling", "sleep", "bread baking", "the stock market", "bees", "the Roman empire", "vaccines",
    "renewable energy", "time management", "public speaking", "dinosaurs", "the ocean", "friendship",
    "running a marathon", "origami", "the printing press", "rainbows", "cats", "dogs", "mountains",
    "sorting algorithms", "Python lists", "recursion", "binary numbers", "databases", "unit testing",
    "version control with git", "regular expressions", "prime numbers", "the Pythagorean theorem",
    "a lighthouse", "a rainy day", "a city at night", "a robot that learns to paint", "an old library",
    "a journey by train", "winter holidays", "a small bakery", "space exploration", "honey", "bicycles",
    "the solar system",
)


MORE_TEMPLATES = (
    "Write a dialogue between two people about {s}.",
    "Why is {s} important?",
    "Give a step-by-step guide related to {s}.",
    "Tell me a fun fact about {s}.",
    "Explain {s} using an analogy.",
    "Write a news article about {s}.",
)


MORE_SUBJECTS = (
    "the immune system", "glaciers", "the Silk Road", "classical music", "writing a resume", "budgeting for a trip",
    "deforestation", "the human brain", "trains", "data structures", "the periodic table", "tennis", "houseplants",
    "tea", "the first airplane", "hurricanes", "composting", "exercise", "making pizza", "interest rates", "ants",
    "ancient Egypt", "antibiotics", "solar panels", "note taking", "job interviews", "sharks", "the desert",
    "kindness", "learning to swim", "knitting", "the telephone", "snowflakes", "owls", "horses", "rivers",
    "hash tables", "Python dictionaries", "loops in programming", "fractions", "spreadsheets", "debugging code",
    "open source software", "JSON files", "probability", "triangles", "a haunted house", "a lost key",
    "a village by the sea", "a dragon who is afraid of the dark", "a museum at midnight", "a road trip",
    "a birthday party", "a farmers market", "the deep sea", "maple syrup", "skateboards", "the water wheel",
    "a school garden", "the night sky",
)


EXTRA_SUBJECTS = (
    "the circulatory system", "coral reefs", "the Renaissance", "rock music", "asking for a raise",
    "packing for a hike", "air pollution", "the digestive system", "ships", "linked lists", "magnets", "basketball", "succulents",
    "chocolate", "the steam engine", "tornadoes", "water conservation", "stretching", "making soup", "inflation",
    "butterflies", "ancient Greece", "allergies", "wind turbines", "reading faster", "first day at a new job",
    "whales", "the rainforest", "patience", "learning to ride a bike", "pottery", "the radio", "clouds", "penguins",
    "elephants", "lakes", "binary search", "Python strings", "functions in programming", "percentages",
    "email etiquette", "reading error messages", "web browsers", "CSV files", "statistics", "circles",
    "a secret garden", "a broken clock", "a town in the mountains", "a robot who wants to be a chef",
    "a train station at dawn", "a camping trip", "a wedding", "a flea market", "the north pole", "olive oil",
    "roller skates", "the windmill", "a school play", "the sunrise",
)


def chat_prompts() -> list[str]:
    """Templates x subjects, interleaved so every template and subject appears in both splits: first the first
    480 of TEMPLATES' pairs (the set of the first trained head; benchmarks/prompts/mtp_heldout.jsonl holds its
    held-out prompts), then the other 240 of TEMPLATES' pairs, then MORE_TEMPLATES x SUBJECTS (1,080 prompts: the
    first head's set), then every template x MORE_SUBJECTS (1,080 more: the committed head's set), then every
    template x EXTRA_SUBJECTS (1,080 more). Each part only appends, so earlier prompts keep their split."""
    pairs = list(itertools.product(range(len(SUBJECTS)), range(len(TEMPLATES))))
    first = [TEMPLATES[(t + s) % len(TEMPLATES)].format(s=SUBJECTS[s]) for s, t in pairs if (t + 2 * s) % 3 != 0]
    rest = [TEMPLATES[(t + s) % len(TEMPLATES)].format(s=SUBJECTS[s]) for s, t in pairs if (t + 2 * s) % 3 == 0]
    more = [MORE_TEMPLATES[(t + s) % len(MORE_TEMPLATES)].format(s=SUBJECTS[s])
            for s, t in itertools.product(range(len(SUBJECTS)), range(len(MORE_TEMPLATES)))]
    every = TEMPLATES + MORE_TEMPLATES
    later = [every[(t + s) % len(every)].format(s=subjects[s])
             for subjects in (MORE_SUBJECTS, EXTRA_SUBJECTS)
             for s, t in itertools.product(range(len(subjects)), range(len(every)))]
    return first + rest + more + later


def doc_texts() -> list[str]:
    """pydoc topics (sorted by name), then the docstrings of pure-Python standard library modules (sorted)."""
    from pydoc_data.topics import topics

    texts = [topics[name] for name in sorted(topics)]
    names = sorted(m.name for m in pkgutil.iter_modules() if m.module_finder.path.endswith("lib/python3.11"))
    for name in names:
        if name.startswith("_") or name in ("antigravity", "this", "idlelib", "turtledemo", "tkinter"):
            continue
        try:
            doc = importlib.import_module(name).__doc__
        except Exception:  # noqa: BLE001 - some modules do not import here (platform-specific)
            continue
        if doc and len(doc) > 200:
            texts.append(doc)
    return texts


def split(items: list) -> dict[str, list]:
    return {"train": [x for i, x in enumerate(items) if i % HELD_EVERY != HELD_OFFSET],
            "held": [x for i, x in enumerate(items) if i % HELD_EVERY == HELD_OFFSET]}


def progress(t0: float):
    """on_step callback printing finished requests every 100 steps."""
    state = {"steps": 0, "done": 0}

    def on_step(outs) -> None:
        state["steps"] += 1
        state["done"] += sum(o.finished for o in outs)
        if state["steps"] % 100 == 0:
            print(f"  step {state['steps']}: {state['done']} answers done, {time.time() - t0:.0f}s", flush=True)
    return on_step


def reused_answers(path: str, max_tokens: int) -> dict[str, dict]:
    """prompt -> chat document of an earlier data.json generated with the same max_tokens."""
    data = json.loads(Path(path).read_text())
    if data["recipe"]["max_tokens"] != max_tokens:
        raise SystemExit(f"--reuse {path}: generated with max_tokens {data['recipe']['max_tokens']}, not {max_tokens}")
    return {q: c for part in ("train", "held") for q, c in zip(data["prompts"][part], data["chat"][part])}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--max-tokens", type=int, default=160, help="answer tokens per chat prompt at most")
    p.add_argument("--max-num-seqs", type=int, default=32)
    p.add_argument("--limit", type=int, default=0, help="first N chat prompts only (0: all)")
    p.add_argument("--chunk", type=int, default=240, help="prompts per generation call (each call's answers are "
                   "appended to OUT/answers.jsonl, which a rerun reuses)")
    p.add_argument("--reuse", default=None, help="an earlier data.json: its answers are reused for the prompts it "
                   "has (the same tokens: greedy output is batch invariant), the others are generated")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    config = load_config(CONFIG)
    config = dataclasses.replace(config, scheduler=dataclasses.replace(
        config.scheduler, max_num_seqs=args.max_num_seqs, num_blocks=args.max_num_seqs * 32))
    llm = LLM(config)
    tok = llm.tokenizer
    docs = [tok.encode(t, add_special_tokens=False)[:2048] for t in doc_texts()]
    prompts = chat_prompts()[:args.limit or None]
    print(f"{len(docs)} documents ({sum(map(len, docs))} tokens), {len(prompts)} chat prompts", flush=True)
    known = reused_answers(args.reuse, args.max_tokens) if args.reuse else {}
    # answers.jsonl: every chunk's answers as soon as it is done, so an interrupted run resumes where it stopped
    journal = out / "answers.jsonl"
    if journal.exists():
        for line in journal.read_text().splitlines():
            row = json.loads(line)
            if row["max_tokens"] == args.max_tokens:
                known[row["prompt"]] = {"prompt_ids": row["prompt_ids"], "answer_ids": row["answer_ids"]}
    todo = [q for q in prompts if q not in known]
    t0, answer_tokens = time.time(), 0
    print(f"{len(prompts) - len(todo)} answers known, {len(todo)} to generate", flush=True)
    for start in range(0, len(todo), args.chunk):
        chunk = todo[start:start + args.chunk]
        outs = llm.chat([[{"role": "user", "content": q}] for q in chunk],
                        SamplingParams(temperature=0.0, max_tokens=args.max_tokens), on_step=progress(t0))
        with journal.open("a") as f:
            for q, o in zip(chunk, outs):
                known[q] = {"prompt_ids": tok.encode(o.prompt, add_special_tokens=False), "answer_ids": o.token_ids}
                f.write(json.dumps({"prompt": q, "max_tokens": args.max_tokens} | known[q]) + "\n")
        answer_tokens += sum(len(o.token_ids) for o in outs)
        print(f"  {start + len(chunk)} of {len(todo)} prompts answered, {time.time() - t0:.0f}s", flush=True)
    print(f"generated {answer_tokens} answer tokens for {len(todo)} prompts in {time.time() - t0:.0f}s "
          f"({len(prompts) - len(todo)} known)", flush=True)
    chat = [known[q] for q in prompts]
    data = {"docs": split(docs), "chat": split(chat), "prompts": split(prompts),
            "recipe": {"max_tokens": args.max_tokens, "held_every": HELD_EVERY, "held_offset": HELD_OFFSET,
                       "generation_s": round(time.time() - t0, 1)}}
    (out / "data.json").write_text(json.dumps(data))
    print(f"wrote {out / 'data.json'}", flush=True)


if __name__ == "__main__":
    main()
