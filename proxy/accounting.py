"""Token accounting per message and per request, and context windows per model.

- OpenAI model families are counted with tiktoken (``o200k_base`` / ``cl100k_base`` via
  :mod:`proxy.tokenizer`, offline): the count of a text equals tiktoken's count for it.
- Families for which litellm bundles a tokenizer (DeepSeek; its Anthropic tokenizer for
  Claude, an estimate for Claude 3 and later) use litellm's counter, never downloading one. Everything else is estimated with ``cl100k_base``; such
  counts are flagged ``exact=False`` ("estimate"). Upstream ``usage`` is the truth and is
  recorded beside the estimate by the tracker.
- Context windows come from litellm's *local* model map, read as the JSON data file it
  ships (``model_prices_and_context_window_backup.json``) without importing litellm, so
  they are known from the first request. ``import litellm`` takes seconds, so it happens
  only in :meth:`TokenAccounting.warm` / :meth:`TokenAccounting.preload_litellm` (run
  them in a thread, off the request path), and only for what needs litellm itself: the
  non-OpenAI counters and windows the map does not list. An OpenAI family with a
  known window never imports it. Until a model is
  warm, :meth:`TokenAccounting.model_info` answers with a provisional info (tiktoken
  estimate, window from the map) and never blocks.
- The import leaves ~350,000 long-lived objects; right after it they are moved to the
  cyclic GC's permanent generation (``gc.freeze()``, once per process), or every full
  collection would traverse them again (100-250 ms pauses on the request path).

Per-message counts are cached by (tokenizer, message digest), so each message is
tokenised once however many requests repeat it.

Bounded work on the event loop: a text longer than :data:`LOOP_EXACT_CHARS` is never
tokenised whole there (tiktoken takes ~0.15 s per MB of ordinary text and ~0.5 s per MB
of one unbroken run, superlinear in the run's length). Its count is *estimated* from
:data:`SAMPLE_CHARS` characters of it in windows spread from head to tail, scaled to
its length (:func:`estimate`), unless :meth:`TokenAccounting.precount` — run in a
worker thread, where tiktoken releases the GIL — already counted it exactly. Texts over
:data:`MAX_EXACT_CHARS` are estimated the same way everywhere: counting even their first
256 K characters exactly cost ~0.25 s of CPU per 10 MB single-run text, on the core the
event loop needs (``bench.stall``), for an estimate all the same; ``precount`` makes
that estimate too (tiktoken over a single run's windows is still milliseconds), so
that the loop finds it made. A message whose count
is an estimate is remembered as such (:meth:`TokenAccounting.is_estimated`),
so the token timeline can say so. A message costs its text and tool-call
names plus :data:`MESSAGE_OVERHEAD` tokens (OpenAI chat framing); a request adds the
system prompt, the tool definitions and :data:`REPLY_OVERHEAD`.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib.util
import json
import logging
import os
import re
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from proxy.core.messages import Message, Snapshot, tools_text
from proxy.tokenizer import encoding_name_for_model, get_encoding

__all__ = [
    "LOOP_EXACT_CHARS",
    "MAX_EXACT_CHARS",
    "MESSAGE_OVERHEAD",
    "REPLY_OVERHEAD",
    "ModelInfo",
    "TokenAccounting",
    "is_openai_model",
]

log = logging.getLogger(__name__)

MESSAGE_OVERHEAD = 3
REPLY_OVERHEAD = 3
_CACHE_MAX = 200_000
#: Texts up to this many characters (tool names, short arguments, "continue") are also
#: counted once per tokenizer and text, whichever message they appear in.
_SHORT_TEXT = 256
_SHORT_MAX = 20_000
#: Longest text tokenised whole on the event loop (characters); longer ones are estimated
#: there unless counted beforehand in a thread (:meth:`TokenAccounting.precount`).
LOOP_EXACT_CHARS = 8 * 1024
#: Longest text tokenised whole at all (characters); longer ones are always estimated
#: (a 4 MB unbroken run would cost seconds of CPU: tiktoken is superlinear in a run).
MAX_EXACT_CHARS = 256 * 1024

_OPENAI_PREFIXES = (
    "gpt-", "chatgpt-", "o1", "o3", "o4", "text-embedding", "text-davinci", "davinci", "babbage",
    "codex", "ft:gpt", "computer-use",
)  # fmt: skip


def is_openai_model(model: str | None) -> bool:
    """Is ``model`` an OpenAI model (so tiktoken is its own tokenizer)?"""
    if not model:
        return False
    m = model.lower()
    if m.startswith(("openai/", "azure/")):
        m = m.split("/", 1)[1]
    return m.startswith(_OPENAI_PREFIXES)


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """What accounting knows of a model. ``tokenizer`` names the counter
    (``tiktoken:o200k_base``, ``litellm:deepseek``...); ``exact`` is false when it is
    not the model's own tokenizer (counts are estimates). ``window`` is the maximum input
    tokens, ``None`` when unknown (or not warmed yet)."""

    model: str
    tokenizer: str
    exact: bool
    window: int | None
    warm: bool


_FREEZE_LOCK = threading.Lock()
_frozen = False


def _freeze_long_lived() -> None:
    """Collect, then move every live object to the GC's permanent generation (once per
    process): full collections then traverse only objects created afterwards."""
    global _frozen
    with _FREEZE_LOCK:
        if _frozen:
            return
        _frozen = True
    gc.collect()
    gc.freeze()


def _litellm() -> Any:
    """Import litellm lazily, offline (local model map, no tokenizer downloads)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    fresh = "litellm" not in sys.modules
    import litellm

    if fresh:
        _freeze_long_lived()

    for attr in ("disable_hf_tokenizer_download", "suppress_debug_info"):
        with contextlib.suppress(Exception):  # attribute missing in some versions
            setattr(litellm, attr, True)
    return litellm


@functools.lru_cache(maxsize=1)
def _local_model_map() -> dict[str, Any]:
    """litellm's bundled model map (``model_prices_and_context_window_backup.json``),
    read as data without importing litellm (~20 ms once, vs seconds for the import).
    Empty when litellm or the file is missing."""
    try:
        spec = importlib.util.find_spec("litellm")
        if spec is None or not spec.submodule_search_locations:
            return {}
        for folder in spec.submodule_search_locations:
            path = os.path.join(folder, "model_prices_and_context_window_backup.json")
            if os.path.exists(path):
                with open(path, encoding="utf-8") as fh:
                    data = json.load(fh)
                return data if isinstance(data, dict) else {}
    except (OSError, ValueError, ImportError) as exc:
        log.debug("token accounting: no local model map: %s", type(exc).__name__)
    return {}


def _window_from_map(cost: Mapping[str, Any], model: str) -> int | None:
    """The model's input window from a litellm-style model map: exact name, lower-cased,
    without a provider prefix, then without a date suffix (``-2024-08-06``/``-20241022``)."""
    base = model.split("/", 1)[-1]
    keys = [model, model.lower(), base, re.sub(r"-(\d{4}-\d{2}-\d{2}|\d{8})$", "", base)]
    for key in keys:
        info = cost.get(key)
        if isinstance(info, dict):
            for field in ("max_input_tokens", "max_tokens"):
                v = info.get(field)
                if isinstance(v, int) and v > 0:
                    return v
    return None


def window_for(model: str | None) -> int | None:
    """Context window of ``model`` from litellm's local model map, without importing
    litellm; None when unknown."""
    return _window_from_map(_local_model_map(), model) if model else None


def _window_from_litellm(litellm: Any, model: str) -> int | None:
    window = window_for(model) or _window_from_map(getattr(litellm, "model_cost", {}) or {}, model)
    if window is not None:
        return window
    try:
        info = litellm.get_model_info(model)
        v = info.get("max_input_tokens") or info.get("max_tokens")
        return int(v) if v else None
    except Exception:
        return None


#: A text too long to count exactly is estimated from this many characters of it, taken
#: as :data:`SAMPLES` windows spread evenly from its head to its tail.
SAMPLE_CHARS = LOOP_EXACT_CHARS
SAMPLES = 4


def estimate(fn: Callable[[str], int], text: str) -> int:
    """Tokens of ``text`` estimated from :data:`SAMPLES` windows of it (head, tail and
    evenly between; :data:`SAMPLE_CHARS` characters in all), scaled to its length. The
    cost is bounded whatever the text's length; windows spread over it see a text whose
    kind changes along it (prose, then a base64 blob) as a head alone would not."""
    width = SAMPLE_CHARS // SAMPLES
    if len(text) <= SAMPLE_CHARS:
        return fn(text)
    step = (len(text) - width) / (SAMPLES - 1)
    sampled = sum(fn(text[at : at + width]) for at in (round(i * step) for i in range(SAMPLES)))
    return max(1, round(sampled * len(text) / (width * SAMPLES)))


def _precountable(m: Message) -> bool:
    """Whether ``m`` has a text the event loop does not tokenise whole: one a thread
    counts exactly, or one estimated everywhere (the thread makes the estimate, a few ms
    of tiktoken on a single run's windows, and the loop finds it made)."""
    return any(len(p.text) > LOOP_EXACT_CHARS for p in m.parts)


def _exactly_countable(m: Message) -> bool:
    """Whether ``m`` has a text a thread counts exactly and the event loop estimates."""
    return any(LOOP_EXACT_CHARS < len(p.text) <= MAX_EXACT_CHARS for p in m.parts)


class TokenAccounting:
    """Counts tokens with a content-hash cache. Thread-safe for :meth:`warm`; the
    counting methods are meant for the event loop and never import litellm."""

    def __init__(self) -> None:
        self._info: dict[str, ModelInfo] = {}
        self._counters: dict[str, Callable[[str], int]] = {}
        self._cache: dict[tuple[str, str], int] = {}
        self._text_cache: dict[tuple[str, str], int] = {}
        self._short: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
        self._warming: set[str] = set()
        #: (tokenizer, digest) of messages whose cached count is an estimate
        self._estimated: set[tuple[str, str]] = set()

    # -- start-up

    def preload(self, encodings: tuple[str, ...] = ("o200k_base", "cl100k_base")) -> None:
        """Load the tiktoken encodings of the OpenAI families (and of every estimate)
        ahead of the first request, and litellm's local model map (context windows).
        Blocking: call it from a thread at startup."""
        _local_model_map()
        for name in encodings:
            try:
                get_encoding(name)
            except Exception as exc:  # pragma: no cover - tiktoken files missing
                log.warning("token accounting: no tokenizer %s: %s", name, type(exc).__name__)

    def preload_litellm(self) -> None:
        """Import litellm (model windows, non-OpenAI counters) ahead of the first
        :meth:`warm`. Blocking for seconds: call it from a daemon thread. Never raises."""
        try:
            _litellm()
        except Exception as exc:
            log.debug("token accounting: litellm unavailable: %s", type(exc).__name__)

    # -- model info

    def _provisional(self, model: str) -> ModelInfo:
        enc = encoding_name_for_model(model)
        return ModelInfo(model, f"tiktoken:{enc}", is_openai_model(model), window_for(model), warm=False)

    def model_info(self, model: str | None) -> ModelInfo:
        """Info for ``model`` without blocking: the warmed info if :meth:`warm` ran,
        else a provisional one."""
        m = model or ""
        info = self._info.get(m)
        return info if info is not None else self._provisional(m)

    def is_warm(self, model: str | None) -> bool:
        return (model or "") in self._info

    def claim_warm(self, model: str | None) -> bool:
        """True exactly once per cold model: the caller should then run :meth:`warm`
        (in a thread)."""
        m = model or ""
        if m in self._info:  # warm already: no lock on every request
            return False
        with self._lock:
            if m in self._info or m in self._warming:
                return False
            self._warming.add(m)
            return True

    def warm(self, model: str | None) -> ModelInfo:
        """Resolve the window and tokenizer of ``model`` (imports litellm; slow the first
        time — call it from a thread). Never raises."""
        m = model or ""
        prov = self._provisional(m)
        info = prov
        counter: Callable[[str], int] | None = None
        if m and prov.exact and prov.window is not None:
            # an OpenAI family whose window the model map knows: tiktoken counts it
            # exactly and litellm has nothing to add (its import costs seconds and ~150 MB)
            info = ModelInfo(m, prov.tokenizer, prov.exact, prov.window, warm=True)
        elif m:
            try:
                litellm = _litellm()
                window = _window_from_litellm(litellm, m)
                tokenizer, exact = prov.tokenizer, prov.exact
                if not prov.exact:
                    kind: str | None = None
                    try:
                        from litellm.utils import huggingface_tokenizer_kind

                        found = huggingface_tokenizer_kind(m)
                        # a plain str: litellm 1.108's Literal has no "deepseek" kind (mypy
                        # --strict called the comparison below unreachable)
                        kind = None if found is None else str(found)
                    except Exception:
                        kind = None
                    if kind in ("deepseek", "anthropic"):
                        tc = litellm.token_counter

                        def counter(text: str, _m: str = m, _tc: Any = tc) -> int:
                            return int(_tc(model=_m, text=text))

                        counter("warm up")
                        # litellm's Anthropic tokenizer predates Claude 3: an estimate.
                        tokenizer, exact = f"litellm:{kind}", kind == "deepseek"
                info = ModelInfo(m, tokenizer, exact, window, warm=True)
            except Exception as exc:  # litellm missing or broken: keep the estimate
                log.debug("token accounting: could not warm %s: %s", m, type(exc).__name__)
                info = ModelInfo(m, prov.tokenizer, prov.exact, None, warm=True)
        else:
            info = ModelInfo(m, prov.tokenizer, prov.exact, None, warm=True)
        with self._lock:
            if counter is not None:
                self._counters[info.tokenizer] = counter
        try:
            self._count_fn(info.tokenizer)("warm up")  # load the BPE file here, not on a request
        except Exception as exc:  # pragma: no cover - tiktoken files missing
            log.warning("token accounting: no tokenizer for %s: %s", m, type(exc).__name__)
        with self._lock:
            self._info[m] = info
            self._warming.discard(m)
        return info

    # -- counting

    def _count_fn(self, tokenizer: str) -> Callable[[str], int]:
        fn = self._counters.get(tokenizer)
        if fn is None:
            enc = get_encoding(tokenizer.split(":", 1)[1] if tokenizer.startswith("tiktoken:") else "cl100k_base")

            def fn(text: str, _enc: Any = enc) -> int:
                # tiktoken documents this as ``encode(text, disallowed_special=())``
                return len(_enc.encode_ordinary(text))

            self._counters[tokenizer] = fn
        return fn

    def count_text(self, model: str | None, text: str) -> int:
        """Tokens of ``text`` for ``model`` (for OpenAI models: exactly tiktoken's count;
        estimated beyond :data:`LOOP_EXACT_CHARS` characters)."""
        if not text:
            return 0
        tok = self.model_info(model).tokenizer
        return self._count_part(tok, self._count_fn(tok), text)[0] if len(text) > _SHORT_TEXT else self._count_fn(tok)(text)

    def _remember(self, cache: dict[tuple[str, str], int], key: tuple[str, str], n: int) -> None:
        with self._lock:
            if len(cache) >= _CACHE_MAX:
                for k in list(cache)[: _CACHE_MAX // 10]:
                    cache.pop(k, None)
                    if cache is self._cache:
                        self._estimated.discard(k)
            cache[key] = n

    def count_message(self, model: str | None, msg: Message, *, limit: int = LOOP_EXACT_CHARS) -> int:
        """Tokens of one message (text, tool-call names, framing); cached by digest.
        Texts over ``limit`` characters are estimated (see the module docstring)."""
        tok = self.model_info(model).tokenizer
        key = (tok, msg.digest)
        n = self._cache.get(key)
        if n is None or (limit > LOOP_EXACT_CHARS and key in self._estimated):
            fn = self._count_fn(tok)
            n = MESSAGE_OVERHEAD
            estimated = False
            for p in msg.parts:
                if p.kind in ("text", "tool_call", "tool_result", "thinking") and p.text:
                    k, est = self._count_part(tok, fn, p.text, limit)
                    n += k
                    estimated = estimated or est
                if p.kind == "tool_call" and p.tool_name:
                    n += self._count_part(tok, fn, p.tool_name, limit)[0] + 1
            if msg.name:
                n += 1
            self._remember(self._cache, key, n)
            if estimated:
                self._estimated.add(key)
            else:
                self._estimated.discard(key)
        return n

    def is_estimated(self, model: str | None, msg: Message) -> bool:
        """Whether the cached count of ``msg`` is an estimate (a text over the cap)."""
        return bool(self._estimated) and (self.model_info(model).tokenizer, msg.digest) in self._estimated

    def any_estimated(self, model: str | None, msgs: tuple[Message, ...]) -> bool:
        """Whether the count of any of ``msgs`` is an estimate."""
        if not self._estimated:
            return False
        tok = self.model_info(model).tokenizer
        return any((tok, m.digest) in self._estimated for m in msgs)

    def count_messages(self, model: str | None, msgs: tuple[Message, ...]) -> None:
        """Count ``msgs`` into the cache, as :meth:`count_message` would on the loop
        (blocking: run it in a worker thread, for a long history seen for the first time)."""
        for m in msgs:
            self.count_message(model, m)

    def precount(self, model: str | None, msgs: tuple[Message, ...]) -> None:
        """Count the messages with a text too long for the event loop: exactly up to
        :data:`MAX_EXACT_CHARS` characters, a longer text's estimate (the same one
        wherever it is made, here not on the loop). Blocking: run it in a worker thread
        (tiktoken releases the GIL while it encodes)."""
        for m in msgs:
            if self._to_precount(model, m):
                self.count_message(model, m, limit=MAX_EXACT_CHARS)

    def needs_precount(self, model: str | None, msgs: tuple[Message, ...]) -> bool:
        """Whether :meth:`precount` has anything to count in ``msgs``."""
        return any(self._to_precount(model, m) for m in msgs)

    def _to_precount(self, model: str | None, m: Message) -> bool:
        if not _precountable(m):
            return False
        key = (self.model_info(model).tokenizer, m.digest)
        if key not in self._cache:
            return True
        return key in self._estimated and _exactly_countable(m)  # an estimate the thread makes exact

    def _count_part(self, tok: str, fn: Callable[[str], int], text: str, limit: int = LOOP_EXACT_CHARS) -> tuple[int, bool]:
        """(tokens, estimated) of one text."""
        if len(text) > limit:
            return estimate(fn, text), True
        if len(text) > _SHORT_TEXT:
            return fn(text), False
        key = (tok, text)
        n = self._short.get(key)
        if n is None:
            n = fn(text)
            if len(self._short) >= _SHORT_MAX:
                self._short.clear()
            self._short[key] = n
        return n, False

    def count_keyed_text(self, model: str | None, key: str, text: str | Callable[[], str]) -> int:
        """Tokens of a large text identified by ``key`` (e.g. the system prompt's hash);
        ``text`` may be a callable, evaluated only on a cache miss."""
        tok = self.model_info(model).tokenizer
        k = (tok, key)
        n = self._text_cache.get(k)
        if n is None:
            n = self.count_text(model, text() if callable(text) else text)
            self._remember(self._text_cache, k, n)
        return n

    def count_snapshot(self, model: str | None, snap: Snapshot, system_key: str = "", tools_key: str = "") -> int:
        """Estimated prompt tokens of a whole request: system prompt, messages, tool
        definitions and reply framing. With ``system_key``/``tools_key`` (content hashes)
        those are tokenised once. Cost is O(messages) cache look-ups plus the
        tokenisation of messages not seen before."""
        total = self.framing_tokens(model, snap, system_key, tools_key)
        for m in snap.messages:
            total += self.count_message(model, m)
        return total

    def framing_tokens(self, model: str | None, snap: Snapshot, system_key: str = "", tools_key: str = "") -> int:
        """Tokens of a request outside its messages: reply framing, system prompt, tool
        definitions (tokenised once per ``system_key``/``tools_key`` content hash)."""
        total = REPLY_OVERHEAD
        if snap.system:
            total += MESSAGE_OVERHEAD + (
                self.count_keyed_text(model, "s:" + system_key, snap.system)
                if system_key
                else self.count_text(model, snap.system)
            )
        if snap.tools:
            tools = snap.tools
            total += (
                self.count_keyed_text(model, "t:" + tools_key, lambda: tools_text(tools))
                if tools_key
                else self.count_text(model, tools_text(tools))
            )
        return total
