"""Adapters that run the gate inside other proxies (LiteLLM)."""
