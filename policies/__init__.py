"""Shipped policy presets (YAML data, loaded by proxy.policy)."""
