"""proxy.tokenizer works offline from litellm's bundled BPE files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from proxy import tokenizer

ROOT = Path(__file__).resolve().parents[3]


def test_encodings_load_offline_from_litellm() -> None:
    d = tokenizer.litellm_tokenizer_dir()
    assert d is not None and d.is_dir()
    enc = tokenizer.get_encoding("cl100k_base")
    assert enc.decode(enc.encode("hello world")) == "hello world"
    assert os.environ.get("TIKTOKEN_CACHE_DIR")
    assert tokenizer.get_encoding("cl100k_base") is enc  # cached


@pytest.mark.parametrize(
    "model,name",
    [
        ("gpt-4o", "o200k_base"),
        ("gpt-4o-mini-2024-07-18", "o200k_base"),
        ("gpt-4.1", "o200k_base"),
        ("gpt-5", "o200k_base"),
        ("o1-preview", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("openai/gpt-4o", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("claude-sonnet-4", "cl100k_base"),
        (None, "cl100k_base"),
        ("", "cl100k_base"),
    ],
)
def test_encoding_for_model(model: str | None, name: str) -> None:
    assert tokenizer.encoding_name_for_model(model) == name
    assert tokenizer.encoding_for_model(model).name == name


def test_litellm_is_not_imported() -> None:
    code = (
        "import os, sys; os.environ.pop('TIKTOKEN_CACHE_DIR', None)\n"
        "from proxy.tokenizer import get_encoding\n"
        "assert get_encoding('o200k_base').encode('hi')\n"
        "assert 'litellm' not in sys.modules, 'litellm was imported'\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stderr
