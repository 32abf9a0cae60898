"""The MCP server of ``xjobsd mcp``: the tools of ``tools.py`` on the official SDK, over stdio.

Each answer comes back twice, as MCP asks: as text, the JSON ``--json`` prints (compact), and
as structured content, the same JSON (a list under a key, since older protocol versions take
only an object there: ``{"jobs": [...]}``, ``{"queues": [...]}``). A refusal is a tool error,
so the model reads it and can correct itself: its text is ``X_CODE: message`` (what
``str(err)`` is everywhere), its structured content ``{"error": {"code", "message", "hint"}}``.
Arguments the tool's schema refuses come back alike, as ``X_INVALID_OPTION`` naming the field,
and a tool that does not exist as ``X_USAGE``.

Importing this module without the SDK installed raises ``ExtraMissing`` (``X_EXTRA_MISSING``,
naming the ``mcp`` extra), so ``xjobsd mcp`` says what to install in one line.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import orjson

from .. import __version__
from ..errors import ExtraMissing, InvalidOption, ReadOnly, UsageInvalid, XJobsError
from ..views import plain
from .tools import LISTED_UNDER, READS, WRITES, Tools

try:
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import CallToolResult, InputRequiredResult, TextContent, ToolAnnotations
    from pydantic import ValidationError
except ImportError as exc:      # the SDK is an extra: say which, not a traceback
    missing = (exc.name or "mcp").split(".")[0]
    raise ExtraMissing(f"xjobsd mcp needs the mcp extra, the MCP SDK ({missing} is not installed)",
                       hint="pip install 'xjobsd[mcp]'") from None

INSTRUCTIONS = (
    "xjobs is a durable background-job system on PostgreSQL, run by the xjobsd daemon. These tools "
    "read its queues, jobs, dead letters, cron tasks and the running daemon; every answer is the JSON "
    "`xjobsd ... --json` prints, with times as ISO-8601 in UTC. A refusal is a tool error whose text "
    "starts with a stable X_... code.")


def answer(value: Any, key: str | None = None) -> CallToolResult:
    """``value`` as ``--json`` prints it: ``plain`` (ISO-8601 times), as text and as structure."""
    data = plain(value)
    structured = {key: data} if key is not None else data
    return CallToolResult(content=[TextContent(type="text", text=orjson.dumps(data).decode())],
                          structured_content=structured)


def refusal(exc: XJobsError) -> CallToolResult:
    error = {"code": exc.code, "message": exc.args[0] if exc.args else str(exc), "hint": exc.hint}
    return CallToolResult(content=[TextContent(type="text", text=str(exc))],
                          structured_content={"error": error}, is_error=True)


def _tool(method: Callable[..., Any], key: str | None) -> Callable[..., CallToolResult]:
    """``method`` as the SDK takes a tool: the same parameters (its schema is made from them),
    answering a ``CallToolResult`` and any ``XJobsError`` as a refusal."""
    def call(**arguments: Any) -> CallToolResult:
        try:
            return answer(method(**arguments), key)
        except XJobsError as exc:
            return refusal(exc)
    signature = inspect.signature(method, eval_str=True)
    setattr(call, "__signature__", signature.replace(return_annotation=CallToolResult))
    return call


def described(method: Callable[..., Any]) -> str:
    """A method's docstring as a tool's description: one paragraph, as a client shows it."""
    return " ".join((inspect.getdoc(method) or "").split())


class XJobsServer(MCPServer[Any]):
    """The SDK's server with its refusals in the house style: a write tool asked of a server
    that only reads (it is not listed there, but a client may still call it by name), a tool
    that does not exist, and arguments the tool's schema refuses."""

    def __init__(self, tools: Tools, *, allow_writes: bool) -> None:
        super().__init__(name="xjobs", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")
        self.allow_writes = allow_writes
        self.offered = READS + (WRITES if allow_writes else ())
        for name in self.offered:
            writes = name in WRITES
            self.add_tool(_tool(getattr(tools, name), LISTED_UNDER.get(name)), name=name,
                          description=described(getattr(tools, name)),
                          annotations=ToolAnnotations(read_only_hint=not writes, destructive_hint=writes,
                                                      idempotent_hint=not writes, open_world_hint=False),
                          structured_output=False)

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Context[Any, Any] | None = None) -> CallToolResult | InputRequiredResult:
        if name in WRITES and not self.allow_writes:
            return refusal(ReadOnly(f"{name} changes the fleet, and this server only reads",
                                    hint="start it as `xjobsd mcp --allow-writes`"))
        if name not in self.offered:
            return refusal(UsageInvalid(f"no tool {name!r}: the tools are {', '.join(self.offered)}"))
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                first = exc.__cause__.errors()[0]
                field = ".".join(str(part) for part in first["loc"]) or "arguments"
                return refusal(InvalidOption(field, str(first["msg"])))
            raise


def serve(tools: Tools, *, allow_writes: bool) -> None:
    """Answer one client over stdin/stdout until it closes them."""
    XJobsServer(tools, allow_writes=allow_writes).run("stdio")
