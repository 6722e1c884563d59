"""HFTokenizer: a checkpoint's `tokenizer.json` through the `tokenizers` library, plus its chat template.

Owns text <-> ids for real checkpoints, as the checkpoint wrote them: special and added tokens from
tokenizer.json, whether bos is prepended from its post-processor, the chat template from
tokenizer_config.json (`chat_template`) or chat_template.jinja. `load_tokenizer` picks it or the byte
tokenizer of the built-in models. Stopping (eos ids) is the model's: generation_config.json, read by the
checkpoint loader.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from specworker.json_file import read_json_object
from specworker.tokenizer import ByteTokenizer

__all__ = ["HFTokenizer", "load_tokenizer"]

TOKENIZER_FILE, TOKENIZER_CONFIG_FILE, CHAT_TEMPLATE_FILE = "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"
CHAT_ROLES = ("system", "user", "assistant", "tool")


def _token_text(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or {"content": ...}."""
    if isinstance(value, Mapping):
        value = value.get("content")
    return value if isinstance(value, str) else None


class HFTokenizer:
    """tokenizer.json of a Hugging Face model directory. decode() drops special tokens."""

    def __init__(self, model_dir: str | Path):
        from tokenizers import Tokenizer

        model_dir = Path(model_dir)
        path = model_dir / TOKENIZER_FILE
        if not path.is_file():
            raise FileNotFoundError(f"{path}: tokenizer not found (a Hugging Face model directory holds "
                                    f"{TOKENIZER_FILE}; convert GGUF models with `specworker convert-gguf`)")
        try:
            self._tok = Tokenizer.from_file(str(path))
        except Exception as err:  # tokenizers raises a bare Exception on malformed files
            raise ValueError(f"{path}: not a readable tokenizer.json ({str(err).splitlines()[0]})") from None
        self.path = path
        cfg_path = model_dir / TOKENIZER_CONFIG_FILE
        cfg: dict[str, Any] = {}
        if cfg_path.is_file():
            cfg = read_json_object(cfg_path)
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        self.bos_token, self.eos_token = _token_text(cfg.get("bos_token")), _token_text(cfg.get("eos_token"))
        self.bos_token_id = self._id_of(self.bos_token)
        self.eos_token_id = self._id_of(self.eos_token)
        self.chat_template = self._read_template(model_dir, cfg, cfg_path)

    def _id_of(self, token: str | None) -> int | None:
        return None if token is None else self._tok.token_to_id(token)

    @staticmethod
    def _read_template(model_dir: Path, cfg: dict[str, Any], cfg_path: Path) -> str | None:
        template = cfg.get("chat_template")
        if isinstance(template, list):  # [{"name": "default", "template": ...}, ...]
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, Mapping)}
            template = named.get("default")
        if template is not None and not isinstance(template, str):
            raise ValueError(f"{cfg_path}: chat_template is a {type(template).__name__}; allowed: a string, or a "
                             "list with a {'name': 'default', 'template': ...} entry")
        jinja = model_dir / CHAT_TEMPLATE_FILE
        if template is None and jinja.is_file():
            template = jinja.read_text(encoding="utf-8")
        return template

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        """text -> ids; add_special_tokens applies the tokenizer's post-processor (e.g. a bos)."""
        if not isinstance(text, str):
            raise TypeError(f"HFTokenizer.encode: text is a {type(text).__name__}; allowed: a str")
        return self._tok.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, token_ids: Iterable[int]) -> str:
        """ids -> text, special tokens dropped. Raises ValueError for an id outside 0..vocab_size - 1."""
        ids = [int(t) for t in token_ids]
        for i, t in enumerate(ids):
            if not 0 <= t < self.vocab_size:
                raise ValueError(f"HFTokenizer.decode: token_ids[{i}] = {t}; allowed: 0..{self.vocab_size - 1}")
        return self._tok.decode(ids, skip_special_tokens=True)

    def apply_chat_template(self, messages: Sequence[Mapping[str, str]], *, add_generation_prompt: bool = True) -> str:
        """The chat prompt text for messages [{"role": ..., "content": ...}, ...] (encode it with
        add_special_tokens=False: the template writes its own special tokens)."""
        if self.chat_template is None:
            raise ValueError(f"{self.path.parent}: this model has no chat template ({TOKENIZER_CONFIG_FILE} "
                             f"chat_template or {CHAT_TEMPLATE_FILE}); allowed: plain prompts")
        check_messages(messages)
        from jinja2 import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str):
            raise ValueError(f"chat template: {message}")

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = raise_exception
        env.filters["tojson"] = lambda value, **_: json.dumps(value, ensure_ascii=False)
        try:
            return env.from_string(self.chat_template).render(
                messages=[dict(m) for m in messages], add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token or "", eos_token=self.eos_token or "", tools=None)
        except TemplateError as err:
            raise ValueError(f"{self.path.parent}: chat template failed: {err}") from None


def check_messages(messages: Any) -> None:
    """Raises TypeError / ValueError naming the message at fault unless messages is a non-empty list of
    {"role": one of CHAT_ROLES, "content": str}."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence) or not messages:
        raise TypeError(f"messages is {type(messages).__name__}; allowed: a non-empty list of "
                        "{'role': ..., 'content': ...} dicts")
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise TypeError(f"messages[{i}] is a {type(m).__name__}; allowed: a dict with 'role' and 'content'")
        if m.get("role") not in CHAT_ROLES:
            raise ValueError(f"messages[{i}].role = {m.get('role')!r}; allowed: " + ", ".join(map(repr, CHAT_ROLES)))
        if not isinstance(m.get("content"), str):
            raise TypeError(f"messages[{i}].content is a {type(m.get('content')).__name__}; allowed: a str")


def _is_tiny_layout(model_dir: Path) -> bool:
    """specworker's own tiny-model directory (config.json without Hugging Face's keys, no tokenizer.json)."""
    if (model_dir / TOKENIZER_FILE).is_file():
        return False
    try:
        cfg = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return False
    return isinstance(cfg, dict) and "num_layers" in cfg and "architectures" not in cfg


@functools.lru_cache(maxsize=8)
def load_tokenizer(model_path: str, tokenizer_dir: str | None = None):
    """The tokenizer of a model: ByteTokenizer for builtin: models and specworker's tiny-layout checkpoints,
    else HFTokenizer of the checkpoint directory (or of tokenizer_dir when given). Cached: tokenizers are
    immutable. Raises FileNotFoundError / ValueError naming the file."""
    if tokenizer_dir is None and (model_path.startswith("builtin:") or _is_tiny_layout(Path(model_path))):
        return ByteTokenizer()
    return HFTokenizer(tokenizer_dir or model_path)
