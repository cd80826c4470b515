"""E2E fixtures. ``httpx`` is imported here, on the main thread, before any proxy runs:
the proxy's background loop may import it lazily (via litellm) while an SDK call on the
main thread inspects ``sys.modules['httpx']`` — a partially initialised module there
breaks the SDK."""

import httpx  # noqa: F401
