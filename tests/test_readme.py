"""README.md's "Embedding specworker in an engine" example, extracted and executed, so the README cannot rot."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SECTION = "## Embedding specworker in an engine"
BUILTIN_WEIGHTS = REPO / "specworker" / "model_executor" / "models" / "weights" / "tiny" / "model.safetensors"


def embedding_example(readme: str) -> str:
    """The first ```python block of the section; ValueError when the section or the block is missing."""
    start = readme.find(SECTION)
    if start < 0:
        raise ValueError(f"README.md has no {SECTION!r} section")
    section = readme[start:readme.find("\n## ", start + len(SECTION))]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    if match is None:
        raise ValueError(f"README.md section {SECTION!r} has no ```python block")
    return match.group(1)


def test_readme_embedding_example_extraction_rejects_missing_block():
    with pytest.raises(ValueError, match="no ```python block"):
        embedding_example(f"{SECTION}\n\ntext only\n\n## Next\n```python\nx = 1\n```\n")


@pytest.mark.skipif(not BUILTIN_WEIGHTS.exists(), reason="builtin:tiny weights are not in this checkout")
def test_readme_embedding_example_runs(monkeypatch, capsys):
    monkeypatch.chdir(REPO)  # the example loads configs/mtp_tiny.yaml
    namespace: dict = {}
    exec(compile(embedding_example((REPO / "README.md").read_text()), "README.md", "exec"), namespace)
    finished = namespace["finished"]
    assert set(finished) == {"a", "b", "c"}
    assert finished["b"].finish_reason.value == "abort"
    assert all(out.finish_reason.value in ("stop", "length") for rid, out in finished.items() if rid != "b")
    assert 1 <= len(finished["a"].output_token_ids) <= 24 and finished["c"].output_token_ids
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["a", "b", "c", "mean"], lines
