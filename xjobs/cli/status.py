"""`xjobsd status` (not yet built)."""

from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("status", help="(not yet available)")
    p.set_defaults(handler=lambda args: 1)
