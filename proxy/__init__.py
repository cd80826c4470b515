"""compaction-gate: a transparent LLM API proxy that guards agent compaction."""

__version__ = "0.1.0"
