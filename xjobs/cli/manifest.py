"""``xjobsd manifest``: the job manifest of an app, and its drift check.

    xjobsd manifest --app myapp.jobs > xjobs.manifest.json       write it (commit the file)
    xjobsd manifest --app myapp.jobs --check xjobs.manifest.json  exit 1 with a diff on drift

No database is read: the manifest is what the code declares (``xjobs.manifest``).
"""

from __future__ import annotations

import argparse
import sys

from ..config import load_settings
from ..errors import InvalidOption
from ..manifest import drift, render
from ..registry import REGISTRY
from .common import import_apps


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("manifest", help="the app's jobs and tasks as stable JSON; --check for drift",
                            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--app", action="append", default=[], help="module declaring the jobs (repeatable)")
    parser.add_argument("--check", metavar="FILE", help="compare with a committed manifest; exit 1 on drift")
    parser.add_argument("--config", default=None, help="an xjobs.toml naming the apps")
    parser.set_defaults(handler=manifest)


def manifest(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)   # no database: the code alone
    apps = args.app or list(settings.apps) or (["xjobs.contrib.django.worker"] if settings.django else [])
    if not apps:
        raise InvalidOption("app", "name the module(s) declaring the jobs: --app myapp.jobs")
    import_apps(apps)
    if args.check is None:
        sys.stdout.write(render(REGISTRY))
        return 0
    try:
        with open(args.check, encoding="utf-8") as committed:
            text = committed.read()
    except OSError as exc:
        raise InvalidOption("check", f"cannot read {args.check!r}: {exc.strerror}") from None
    diff = drift(text, REGISTRY, label=args.check)
    if not diff:
        print(f"{args.check}: the code declares exactly this manifest")
        return 0
    sys.stdout.write(diff)
    print(f"\n{args.check} differs from what the code declares; write it again with "
          f"`xjobsd manifest --app {' --app '.join(apps)} > {args.check}` if the change is meant",
          file=sys.stderr)
    return 1
