"""Tests for the aiohttp proxy layer (proxy/server), config, yamlconf and CLI."""
