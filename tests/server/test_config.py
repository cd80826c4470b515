"""Proxy configuration: defaults, the example file, validation errors, overrides."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from proxy.config import (
    ConfigError,
    GateSettings,
    Overrides,
    ProxyConfig,
    ServerSettings,
    StateSettings,
    Upstream,
    apply_overrides,
    load_config,
)

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def test_embedded_defaults() -> None:
    config = load_config(None)
    assert (config.server.host, config.server.port) == ("127.0.0.1", 8788)
    assert config.server.max_body_bytes == 64 * 1024 * 1024
    assert config.default.name == "openai"
    assert config.default.base_url == "https://api.openai.com/v1"
    anthropic = config.upstreams[1]
    assert anthropic.base_url == "https://api.anthropic.com" and anthropic.matches_model(
        "claude-opus-4"
    )
    assert config.state.backend == "sqlite" and config.policy == "default" and config.gate.fail_open


def test_example_file_documents_exactly_the_defaults() -> None:
    assert load_config(REPO / "config.example.yaml") == ProxyConfig()


def test_every_option_appears_in_example() -> None:
    text = (REPO / "config.example.yaml").read_text()

    def keys(cls: type) -> list[str]:
        out = []
        for f in dataclasses.fields(cls):
            out.append(f.name)
            if dataclasses.is_dataclass(f.type if isinstance(f.type, type) else None):
                out.extend(keys(f.type))  # type: ignore[arg-type]
        return out

    for cls in (ProxyConfig, ServerSettings, Upstream, StateSettings, GateSettings):
        for name in keys(cls):
            assert f"{name}:" in text, name


def test_partial_file_keeps_other_defaults(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, "server:\n  port: 9999\n"))
    assert config.server.port == 9999 and config.server.host == "127.0.0.1"
    assert config.upstreams == ProxyConfig().upstreams


def test_env_expansion_for_api_key_and_port(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "server:\n  port: ${PORT}\n"
        "upstreams:\n  - name: o\n    base_url: https://example.test/v1\n    api_key: ${MY_KEY}\n",
    )
    config = load_config(path, environ={"PORT": "7000", "MY_KEY": "sk-secret-value"})
    assert config.server.port == 7000
    assert config.upstreams[0].api_key == "sk-secret-value"
    assert "sk-secret-value" not in repr(config)


def test_missing_env_var_names_file_line_and_var(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "upstreams:\n  - name: o\n    base_url: https://x.test\n    api_key: ${NOPE_KEY}\n",
    )
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    assert (
        str(info.value)
        == f"{path}:4: upstreams[0].api_key: environment variable NOPE_KEY is not set"
    )
    assert info.value.line == 4 and info.value.file == str(path)


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        (
            "server:\n  upstrem: x\n",
            2,
            "unknown key 'upstrem' in server (expected one of: host, port,",
        ),
        ("server:\n  port: '80'\n", 2, "server.port: expected integer, got string"),
        ("server:\n  port: 70000\n", 2, "port must be between 0 and 65535"),
        ("server:\n  read_timeout: -1\n", 2, "read_timeout must be positive"),
        ("gate:\n  fail_open: maybe\n", 2, "gate.fail_open: expected boolean, got string"),
        (
            "state:\n  backend: postgres\n",
            2,
            "invalid value 'postgres' (expected one of: sqlite, memory, redis)",
        ),
        ("state:\n  backend: redis\n", 2, "backend redis needs url"),
        ("state:\n  backend: redis\n  url: http://x:6379\n", 3, "url must be a redis://"),
        ("server:\n  workers: 0\n", 2, "workers must be between 1 and 256"),
        ("state:\n  hot_conversations: 0\n", 2, "hot_conversations must be positive"),
        (
            "upstreams:\n  - name: a\n    base_url: ftp://x\n",
            3,
            "base_url must be an absolute http(s) URL",
        ),
        ("upstreams:\n  - base_url: https://x\n", 2, "missing required key 'name' in upstreams[0]"),
        ("upstreams: []\n", 1, "at least one upstream is required"),
        (
            "upstreams:\n  - {name: a, base_url: 'https://a'}\n  - {name: a, base_url: 'https://b'}\n",
            1,
            "duplicate upstream name(s): a",
        ),
        ("default_upstream: nope\n", 1, "default_upstream 'nope' is not one of: openai, anthropic"),
        (
            "upstreams:\n  - name: a\n    base_url: https://a\n    models: claude-*\n",
            4,
            "expected a list",
        ),
        ("polcy: strict\n", 1, "unknown key 'polcy' in config"),
        ("server: [1]\n", 1, "server: expected a mapping, got list"),
        ("server:\n  port: 1\n  port: 2\n", 3, "duplicate key 'port' (first defined on line 2)"),
        ("server:\n  port: [\n", 3, "invalid YAML"),
    ],
)
def test_validation_errors_name_file_and_line(
    tmp_path: Path, text: str, line: int, fragment: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert message.startswith(f"{path}:{line}: "), message
    assert fragment in message, message


def test_all_errors_reported_together(tmp_path: Path) -> None:
    path = write(tmp_path, "server:\n  prot: 1\n  host: 5\nstate:\n  ttl_seconds: x\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert [e.line for e in info.value.errors] == [2, 3, 5]


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "absent.yaml")
    assert "file not found" in str(info.value)


def test_overrides() -> None:
    config = apply_overrides(
        ProxyConfig(),
        Overrides(host="0.0.0.0", port=1234, upstream="https://api.anthropic.com", policy="strict"),
    )
    assert (config.server.host, config.server.port, config.policy) == ("0.0.0.0", 1234, "strict")
    assert [u.base_url for u in config.upstreams] == ["https://api.anthropic.com"]
    assert config.default.name == "upstream"
    assert apply_overrides(ProxyConfig(), Overrides()) == ProxyConfig()
    with pytest.raises(ValueError):
        apply_overrides(ProxyConfig(), Overrides(upstream="not a url"))
