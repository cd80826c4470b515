"""Token accounting: tiktoken-exact for OpenAI models, cached by digest, windows from
litellm's local map (warmed off the request path), estimates flagged."""

from __future__ import annotations

import subprocess
import sys

import pytest
import tiktoken

from proxy.accounting import MESSAGE_OVERHEAD, REPLY_OVERHEAD, TokenAccounting, is_openai_model
from proxy.core.messages import Part, Snapshot, make_message, text_message
from proxy.tokenizer import get_encoding

TEXTS = [
    "",
    "hello world",
    "Roll back to revision 3f2a9c1b7d4e; upload id 2~abcDEF_123 arn:aws:s3:::bucket/key",
    "emoji 🚀 and CJK 中文 and <|endoftext|> special-looking text",
    "def f(x):\n    return x ** 2\n" * 20,
]


@pytest.mark.parametrize("model,encoding", [("gpt-4o", "o200k_base"), ("gpt-4.1-mini", "o200k_base"),
                                            ("gpt-4", "cl100k_base"), ("gpt-3.5-turbo", "cl100k_base"),
                                            ("o3-mini", "o200k_base"), ("openai/gpt-5", "o200k_base")])
@pytest.mark.parametrize("text", TEXTS)
def test_openai_counts_equal_tiktoken(model: str, encoding: str, text: str) -> None:
    acc = TokenAccounting()
    expected = len(get_encoding(encoding).encode(text, disallowed_special=()))
    assert acc.count_text(model, text) == expected
    assert isinstance(get_encoding(encoding), tiktoken.Encoding)
    assert acc.model_info(model).exact


def test_message_count_is_text_plus_framing_and_cached() -> None:
    acc = TokenAccounting()
    enc = get_encoding("o200k_base")
    msg = make_message("assistant", (Part("text", "running it"), Part("tool_call", '{"cmd":"ls"}', tool_name="bash")))
    expected = MESSAGE_OVERHEAD + len(enc.encode("running it")) + len(enc.encode('{"cmd":"ls"}')) + len(enc.encode("bash")) + 1
    assert acc.count_message("gpt-4o", msg) == expected
    acc._counters["tiktoken:o200k_base"] = lambda text: 1 / 0  # type: ignore[assignment,misc]
    assert acc.count_message("gpt-4o", msg) == expected  # served from the digest cache


def test_binary_parts_are_not_tokenised() -> None:
    acc = TokenAccounting()
    img = make_message("user", (Part("binary", payload_digest="abc"),))
    assert acc.count_message("gpt-4o", img) == MESSAGE_OVERHEAD


def test_snapshot_count() -> None:
    acc = TokenAccounting()
    snap = Snapshot("openai_chat", "be careful", (text_message("user", "hi"), text_message("assistant", "hello")))
    enc = get_encoding("cl100k_base")
    n = REPLY_OVERHEAD + MESSAGE_OVERHEAD + len(enc.encode("be careful")) + 2 * MESSAGE_OVERHEAD + 2
    assert acc.count_snapshot("gpt-4", snap) == n
    assert acc.count_snapshot("gpt-4", snap, system_key="k") == n


def test_non_openai_models_are_estimates_until_and_after_warm() -> None:
    acc = TokenAccounting()
    info = acc.model_info("claude-sonnet-4-5")
    # Cold: an estimate, but the window is already known from the local model map.
    assert not info.exact and not info.warm and info.window == 200_000
    assert acc.count_text("claude-sonnet-4-5", "hello world") > 0
    warm = acc.warm("claude-sonnet-4-5")
    assert warm.warm and not warm.exact and warm.window and warm.window >= 100_000
    assert acc.count_text("claude-sonnet-4-5", "hello world") > 0
    assert not is_openai_model("claude-sonnet-4-5") and is_openai_model("gpt-4o")


def test_window_from_litellm_local_map() -> None:
    acc = TokenAccounting()
    assert acc.claim_warm("gpt-4o") and not acc.claim_warm("gpt-4o")
    info = acc.warm("gpt-4o")
    assert info.window == 128_000 and info.exact and info.tokenizer == "tiktoken:o200k_base"
    assert acc.warm("no-such-model-xyz").window is None


def test_counting_never_imports_litellm() -> None:
    code = (
        "import sys\nfrom proxy.accounting import TokenAccounting\n"
        "a = TokenAccounting(); a.count_text('gpt-4o', 'hi'); a.count_text('claude-3-opus', 'hi')\n"
        "a.model_info('claude-3-opus')\nassert 'litellm' not in sys.modules, 'imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_context_window_is_known_before_litellm_is_imported() -> None:
    """Windows come from litellm's bundled model map read as data: a cold model's
    provisional info already carries it (the dashboard shows share of window from the
    first request), and date-suffixed or provider-prefixed names resolve to the base."""
    from proxy.accounting import TokenAccounting, window_for

    info = TokenAccounting().model_info("gpt-4o-mini")
    assert info.warm is False
    assert info.window == 128000
    assert window_for("gpt-4o-2024-08-06") == window_for("gpt-4o") == 128000
    assert window_for("openai/gpt-4o") == 128000
    assert window_for("no-such-model-xyz") is None
    assert window_for(None) is None
