"""specworker: speculative-decoding worker for PaddlePaddle LLM serving engines.

Paddle is deliberately not in install_requires: the CPU wheel and the GPU wheels are
different distributions (paddlepaddle / paddlepaddle-gpu); tools/install_deps.py picks one.
"""

from setuptools import find_packages, setup

setup(
    name="specworker",
    version="0.1.0",
    description="Speculative-decoding (MTP) worker for PaddlePaddle serving engines",
    packages=find_packages(include=["specworker", "specworker.*"]),
    package_data={"specworker": ["data/*.txt"]},
    python_requires=">=3.10",
    install_requires=["numpy>=1.26", "pyyaml>=6.0", "safetensors>=0.4", "tokenizers>=0.20", "gguf>=0.10", "jinja2>=3.1", "tqdm>=4.66", "matplotlib>=3.7"],
    entry_points={"console_scripts": ["specworker = specworker.cli:main"]},
)
