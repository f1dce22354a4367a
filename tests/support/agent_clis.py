"""The agent CLIs users run (Claude Code, Codex CLI), run as users run them, sealed off the internet.

The binaries are the npm packages pinned in ``tests/clients/package.json`` (``npm ci --prefix
tests/clients``; ``.ci/run`` does it). Each run gets its own HOME and config directory, a fake API
key, every switch the CLI has against telemetry, update checks and other side traffic turned off,
and an HTTP(S) proxy that is an ``OutboundTrap``: a connection a CLI still tries to open to any host
but 127.0.0.1 lands there, is refused and recorded, so a test can assert there was none::

    with OutboundTrap() as trap:
        claude = ClaudeCode(workdir, base_url=sieve.base_url, trap=trap, headers={"x-sieve-target-tokens": "900"})
        done = claude.run("ALPHA: read the files")          # claude -p "..."
        again = claude.run("BETA: and now", resume=True)    # claude -p --continue "..."
        assert trap.attempts == []
"""

from __future__ import annotations

import os
import shutil
import socketserver
import subprocess
import threading
from pathlib import Path
from typing import Mapping

import pytest

CLIENTS_DIR = Path(__file__).resolve().parents[1] / "clients"
BIN_DIR = CLIENTS_DIR / "node_modules" / ".bin"
RUN_TIMEOUT_S = 180
LOOPBACK = "127.0.0.1,localhost"


def cli_binary(name: str) -> Path:
    """The pinned CLI ``name``; skipped where node is missing, a clear failure where npm ci was not run."""
    if shutil.which("node") is None:
        pytest.skip("node is not installed: the agent CLIs are npm packages (apt-get install nodejs npm)")
    binary = BIN_DIR / name
    if not binary.exists():
        pytest.fail(f"{binary} is missing: run `npm ci --prefix {CLIENTS_DIR.relative_to(Path.cwd())}` "
                    "(.ci/run does) to install the pinned agent CLIs", pytrace=False)
    return binary


class _TrapHandler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        first_line = self.request.recv(4096).split(b"\r\n", 1)[0].decode(errors="replace")
        self.server.attempts.append(first_line)  # type: ignore[attr-defined]
        self.request.sendall(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")


class OutboundTrap:
    """A proxy on loopback that refuses every connection and records its request line
    (``CONNECT host:443 HTTP/1.1`` for HTTPS): what a CLI tried to reach beyond loopback."""

    def __init__(self) -> None:
        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _TrapHandler)
        self._server.daemon_threads = True
        self._server.attempts = []  # type: ignore[attr-defined]

    @property
    def attempts(self) -> list[str]:
        return list(self._server.attempts)  # type: ignore[attr-defined]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> "OutboundTrap":
        threading.Thread(target=self._server.serve_forever, name="outbound-trap", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def sealed_environment(home: Path, trap: OutboundTrap) -> dict[str, str]:
    """A bare environment: PATH, a fresh HOME, and every proxy variable pointing at the trap."""
    proxy = {name: trap.url for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy",
                                         "all_proxy")}
    home.mkdir(parents=True, exist_ok=True)
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8",
            "TERM": "dumb", "NO_PROXY": LOOPBACK, "no_proxy": LOOPBACK, **proxy}


def run_cli(argv: list[str], workdir: Path, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=workdir, env=dict(env), stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=RUN_TIMEOUT_S)


class ClaudeCode:
    """``claude -p`` (print mode: one prompt, the agent loop, the answer on stdout) against ``base_url``.

    ``ANTHROPIC_BASE_URL`` is the root the client appends ``/v1/messages`` to; extra request headers
    go in ``ANTHROPIC_CUSTOM_HEADERS`` (one ``Name: value`` a line). Side traffic off:
    ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC`` (auto-updater, telemetry, error reporting, bug
    command, in one) and each of those by name as well.
    """

    ALLOWED_TOOLS = "Bash"  # print mode asks no one: the scripted steps run this tool
    # A model with preserved thinking: Claude Code asks it to think (``thinking: adaptive``) and sends
    # its thinking blocks back, which a provider binds to their prefix (tests.support.prefix_checks).
    MODEL = "claude-sonnet-5-5"

    def __init__(self, workdir: Path, *, base_url: str, trap: OutboundTrap,
                 headers: Mapping[str, str] | None = None, api_key: str = "sk-ant-test-not-real") -> None:
        self.binary = cli_binary("claude")
        self.workdir = workdir
        root = workdir.parent / f"{workdir.name}-claude-home"
        self.env = sealed_environment(root, trap) | {
            "ANTHROPIC_BASE_URL": base_url,
            "ANTHROPIC_API_KEY": api_key,
            "ANTHROPIC_MODEL": self.MODEL,
            "CLAUDE_CONFIG_DIR": str(root / ".claude"),
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "DISABLE_BUG_COMMAND": "1",
        }
        if headers:
            self.env["ANTHROPIC_CUSTOM_HEADERS"] = "\n".join(f"{k}: {v}" for k, v in headers.items())

    def run(self, prompt: str, *, resume: bool = False) -> subprocess.CompletedProcess[str]:
        argv = [str(self.binary), "-p", prompt, "--allowedTools", self.ALLOWED_TOOLS, "--output-format", "text"]
        return run_cli(argv + (["--continue"] if resume else []), self.workdir, self.env)

    def version(self) -> str:
        return run_cli([str(self.binary), "--version"], self.workdir, self.env).stdout.strip()


class CodexCli:
    """``codex exec`` (non-interactive: one prompt, the agent loop, the answer on stdout) against ``base_url``.

    The provider is a ``[model_providers.sieve]`` table in ``$CODEX_HOME/config.toml`` with
    ``wire_api = "responses"`` (the client appends ``/responses`` to ``base_url``) and extra request
    headers in ``http_headers``. Side traffic off: ``check_for_update_on_startup = false``,
    ``[analytics] enabled = false``, ``[feedback] enabled = false`` and ``[features] plugins = false``
    (the curated-plugin sync otherwise reaches github.com and chatgpt.com at start-up).
    """

    MODEL = "gpt-5-codex"

    def __init__(self, workdir: Path, *, base_url: str, trap: OutboundTrap,
                 headers: Mapping[str, str] | None = None, api_key: str = "sk-test-not-real") -> None:
        self.binary = cli_binary("codex")
        self.workdir = workdir
        root = workdir.parent / f"{workdir.name}-codex-home"
        codex_home = root / ".codex"
        codex_home.mkdir(parents=True, exist_ok=True)
        (codex_home / "config.toml").write_text(self.config_toml(base_url, headers or {}))
        self.env = sealed_environment(root, trap) | {"CODEX_HOME": str(codex_home), "SIEVE_API_KEY": api_key}

    @classmethod
    def config_toml(cls, base_url: str, headers: Mapping[str, str]) -> str:
        header_table = ", ".join(f'"{k}" = "{v}"' for k, v in headers.items())
        return f"""model = "{cls.MODEL}"
model_provider = "sieve"
check_for_update_on_startup = false

[analytics]
enabled = false

[feedback]
enabled = false

[features]
plugins = false

[model_providers.sieve]
name = "Sieve"
base_url = "{base_url}"
wire_api = "responses"
env_key = "SIEVE_API_KEY"
http_headers = {{ {header_table} }}
"""

    def run(self, prompt: str, *, resume: bool = False) -> subprocess.CompletedProcess[str]:
        flags = ["--skip-git-repo-check"]
        argv = [str(self.binary), "exec", *(["resume", "--last"] if resume else []), *flags, prompt]
        return run_cli(argv, self.workdir, self.env)

    def version(self) -> str:
        return run_cli([str(self.binary), "--version"], self.workdir, self.env).stdout.strip()
