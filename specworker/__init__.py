"""specworker: the speculative-decoding worker for PaddlePaddle LLM serving engines."""

__version__ = "0.1.0"
