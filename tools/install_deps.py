"""Install specworker's dependencies into the running interpreter (the project's .venv).

Keeps a Paddle that is already importable and built with CUDA (GPU users install
paddlepaddle-gpu for their CUDA themselves); otherwise installs the CPU wheel pinned in
requirements.txt. Then installs the package itself in editable mode.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _cuda_paddle_present() -> bool:
    probe = "import paddle, sys; sys.exit(0 if paddle.is_compiled_with_cuda() else 1)"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "-q", *args], check=True)


def main() -> None:
    reqs = [
        line.split("#")[0].strip()
        for line in (ROOT / "requirements.txt").read_text().splitlines()
        if line.split("#")[0].strip()
    ]
    if _cuda_paddle_present():
        print("deps: keeping the installed CUDA build of Paddle")
        reqs = [r for r in reqs if not r.lower().startswith("paddlepaddle")]
    _pip(*reqs)
    _pip("--no-deps", "--no-build-isolation", "-e", str(ROOT))


if __name__ == "__main__":
    main()
