"""How a failure is written down: one line for ``last_error`` and the logs (``describe``: the
message and the innermost frame of the application's code, never one of xjobs), and
the whole traceback, bounded, for the job's history (``full_traceback``). Neither may raise:
an exception whose ``__str__`` or formatting fails is still recorded."""

from __future__ import annotations

import os
import traceback

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_MAX_ERROR = 4000
_MAX_TRACEBACK = 16_384   # characters of a traceback kept in the history
_TRACEBACK_HEAD = 2_048   # ... the first ones (where the run began) and the last (where it failed)


def full_traceback(error: BaseException) -> str | None:
    """The failure as Python prints it, chained causes included, bounded: the head and the
    tail are kept (the raise site is at the end), the middle is cut and the cut is said."""
    try:
        text = "".join(traceback.format_exception(error))
    except Exception:   # an exception whose formatting fails still gets its one-line error
        return None
    if len(text) <= _MAX_TRACEBACK:
        return text
    tail = _MAX_TRACEBACK - _TRACEBACK_HEAD
    return (f"{text[:_TRACEBACK_HEAD]}\n... {len(text) - _MAX_TRACEBACK} characters cut ...\n"
            f"{text[-tail:]}")


def describe(error: BaseException) -> str:
    try:
        message = str(error)
    except Exception:  # an exception whose __str__ raises still gets recorded
        message = f"<unprintable {type(error).__name__}>"
    try:
        frames: list[traceback.FrameSummary] = traceback.extract_tb(error.__traceback__)
    except Exception:
        frames = []
    where = next((f" (at {frame.filename}:{frame.lineno})" for frame in reversed(frames)
                  if not _ours(frame.filename)), "")
    text = f"{type(error).__name__}: {message}{where}"
    return text if len(text) <= _MAX_ERROR else text[: _MAX_ERROR - 3] + "..."


def _ours(filename: str) -> bool:
    """A frame of xjobs itself: the place an operator looks for is the application's line that
    raised (``ctx.signal.raise_if_set()``, ``ctx.step.run``), not the library's inside it."""
    return os.path.abspath(filename).startswith(_PACKAGE)


__all__ = ["describe", "full_traceback"]
