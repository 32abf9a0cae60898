"""An MCP client as an assistant runs one: ``xjobsd mcp`` started as a subprocess, spoken to
over its stdin and stdout by the official SDK's client, each answer and refusal read back."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Awaitable, Callable

import anyio
import orjson
from mcp import Client, StdioServerParameters

from tests.cli.commands import ROOT


def with_server(env: dict[str, str], args: list[str], talk: Callable[[Client], Awaitable[Any]],
                cwd: str | Path = ROOT, mode: str = "auto") -> Any:
    """Start ``xjobsd mcp *args`` with ``env`` (over the SDK's few default variables, and this
    interpreter's ``PYTHONPATH``) in ``cwd``, run ``talk`` against it, and stop it. ``mode``:
    the client's ``auto`` (the newest protocol the server speaks), or ``legacy``, the
    initialize handshake of the clients before it (structured content only as an object)."""
    server = StdioServerParameters(command=sys.executable, args=["-m", "xjobs.cli", "mcp", *args],
                                   env={"PYTHONPATH": os.environ.get("PYTHONPATH", ""), **env}, cwd=cwd)

    async def session() -> Any:
        with anyio.fail_after(60):
            async with Client(server, read_timeout_seconds=30, mode=mode) as client:
                return await talk(client)
    return anyio.run(session)


def answered(result) -> Any:
    """A tool's answer: its text and its structured content say the same JSON."""
    assert not result.is_error, result.content
    [text] = result.content
    data = orjson.loads(text.text)
    structured = result.structured_content
    assert (structured if isinstance(data, dict) else next(iter(structured.values()))) == data
    return data


def refusal(result) -> tuple[str, str, str | None]:
    assert result.is_error
    [text] = result.content
    error = result.structured_content["error"]
    assert text.text == f"{error['code']}: {error['message']}"
    return error["code"], error["message"], error["hint"]
