"""The gate: conversation identity and tracking, its JSON API, and (later) policy."""
