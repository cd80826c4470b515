"""The three interventions of DESIGN §4 as pure functions over request/response bodies.

- :mod:`.reinject` — put dropped bindings back, right after the summary, in a message
  valid for the dialect (tool-call pairing and Anthropic alternation preserved).
- :mod:`.reject` — the non-retryable rejection text and bodies (DESIGN §6).
- :mod:`.contract` — the contract added to a summarization request, and
  :mod:`.summary` — the check of the summary in its response (JSON or SSE stream) with a
  delimited verbatim section appended for what is still missing.
- :mod:`.tripwire` — hallucinated identifiers in tool calls after a compaction.
- :mod:`.spill` — the text that tells a model how to recall a spilled region.

Nothing here does I/O: inputs are parsed bodies, binding lists and policy settings;
outputs are new bodies or event bytes. Input bodies are never mutated.
"""

from .bindings import Binding, render_binding_lines, select_within_budget
from .contract import add_summary_contract, contract_text
from .reinject import ReinjectResult, reinject
from .reject import error_body, rejection_message
from .summary import SummaryStreamPatcher, missing_bindings, patch_summary_json, verbatim_section
from .tripwire import Hallucination, find_hallucinations

__all__ = [
    "Binding",
    "Hallucination",
    "ReinjectResult",
    "SummaryStreamPatcher",
    "add_summary_contract",
    "contract_text",
    "error_body",
    "find_hallucinations",
    "missing_bindings",
    "patch_summary_json",
    "reinject",
    "rejection_message",
    "render_binding_lines",
    "select_within_budget",
    "verbatim_section",
]
