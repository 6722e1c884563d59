"""The JSON files of a model directory (config.json, tokenizer_config.json, generation_config.json): one object
per file, every error naming the file. On floor 0, so the tokenizers and the checkpoint loaders share it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_json_object(path: Path) -> dict[str, Any]:
    """The JSON object in `path`. Raises ValueError naming the file when it is not UTF-8 JSON or not an object."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data
