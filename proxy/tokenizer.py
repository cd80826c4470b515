"""Offline tiktoken access shared by the whole project.

tiktoken downloads its BPE files on first use; there is no internet here nor in CI.
litellm ships ``cl100k_base``, ``o200k_base`` and ``p50k_base`` in
``litellm/litellm_core_utils/tokenizers/`` under tiktoken's cache-file names, so pointing
``TIKTOKEN_CACHE_DIR`` there makes tiktoken work offline (DESIGN §7).

Contracts:
- ``litellm`` is located with :func:`importlib.util.find_spec` and never imported
  (importing it takes seconds and may reach the network).
- ``TIKTOKEN_CACHE_DIR`` is set only if the caller has not set it already, and before the
  first :func:`tiktoken.get_encoding` made through this module.
- Encodings are cached per name; they are thread-safe to share.
- Counts made with these encodings are *estimates* for non-OpenAI models.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from functools import lru_cache
from pathlib import Path

import tiktoken

__all__ = ["encoding_for_model", "encoding_name_for_model", "get_encoding", "litellm_tokenizer_dir"]

_LOCK = threading.Lock()
_configured = False


def litellm_tokenizer_dir() -> Path | None:
    """Directory of the tiktoken files bundled with litellm, or ``None`` if absent."""
    try:
        spec = importlib.util.find_spec("litellm")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        cand = Path(loc) / "litellm_core_utils" / "tokenizers"
        if cand.is_dir():
            return cand
    return None


def _configure_offline_cache() -> None:
    global _configured
    if _configured:
        return
    with _LOCK:
        if _configured:
            return
        if not os.environ.get("TIKTOKEN_CACHE_DIR") and not os.environ.get("DATA_GYM_CACHE_DIR"):
            d = litellm_tokenizer_dir()
            if d is not None:
                os.environ["TIKTOKEN_CACHE_DIR"] = str(d)
        _configured = True


@lru_cache(maxsize=8)
def get_encoding(name: str) -> tiktoken.Encoding:
    """The tiktoken encoding ``name`` (``cl100k_base``, ``o200k_base``, ``p50k_base``),
    loaded offline from litellm's bundled files and cached."""
    _configure_offline_cache()
    return tiktoken.get_encoding(name)


_O200K_PREFIXES = ("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "chatgpt-4o", "o1", "o3", "o4", "gpt-oss", "codex")


def encoding_name_for_model(model: str | None) -> str:
    """``o200k_base`` for gpt-4o/4.1/5 and the o-series, else ``cl100k_base`` (the default
    for gpt-4/3.5 and for every non-OpenAI model, where counts are estimates)."""
    if not model:
        return "cl100k_base"
    m = model.lower().rsplit("/", 1)[-1]  # "openai/gpt-4o" -> "gpt-4o"
    if m.startswith("ft:"):
        m = m[3:]
    if m.startswith(_O200K_PREFIXES):
        return "o200k_base"
    return "cl100k_base"


def encoding_for_model(model: str | None) -> tiktoken.Encoding:
    """Encoding for ``model`` (see :func:`encoding_name_for_model`)."""
    return get_encoding(encoding_name_for_model(model))
