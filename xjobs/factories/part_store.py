"""Where an export's parts go: the ``PartStore`` seam and its fsspec implementation.

A store takes whole objects, ``put(key, data)``, and nothing else: no append, no multipart
upload, no listing. An object store's PUT buffers the object anyway, which is why an export
writes one bounded part per page rather than one object per export, and why a page that runs
twice simply replaces its own part with the same bytes.

``to=`` is one of:

- a URL or a path, handed to fsspec: a local directory (``/srv/exports/orders``,
  ``file://...``; a relative path is the worker's working directory's), ``memory://exports`` (one process's memory, for tests), or any scheme whose
  fsspec filesystem is installed (``s3://bucket/prefix`` with ``s3fs``, ``gs://`` with
  ``gcsfs``...). fsspec is the ``export`` extra; it is imported when the export is declared,
  and a missing one (or a missing filesystem for the scheme) is ``X_EXPORT_STORAGE_MISSING``
  there, not at the first page. The filesystem itself is opened at the first part, in the
  worker process, so no client made before the fork is shared with children.
- an object with ``put(key: str, data: bytes)``, the app's own store;
- a callable taking the job's input and answering either of those, for a destination per
  run (``lambda i: f"s3://exports/{i['org']}/{i['day']}"``).

On a local filesystem a part is written beside its final name and renamed over it, so a
reader (or a run killed mid-write) never leaves a truncated part where a whole one was;
object stores' PUTs are already whole-or-nothing.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import TYPE_CHECKING, Callable, Protocol, Union, runtime_checkable

from ..errors import InvalidOption
from .refusals import ExportStorageMissing
if TYPE_CHECKING:
    from fsspec import AbstractFileSystem


@runtime_checkable
class PartStore(Protocol):
    """An app's object store: ``put`` writes (or replaces) one whole object under ``key``."""

    def put(self, key: str, data: bytes) -> None: ...


Destination = Union[str, "os.PathLike[str]", PartStore]


def _fsspec_filesystem_class(url: str) -> None:
    """Refuse, at declaration, a URL whose storage cannot be loaded in this environment."""
    try:
        import fsspec
    except ImportError:
        raise ExportStorageMissing(f"to={url!r} is written through fsspec, which is not installed: "
                                   "pip install 'xjobsd[export]'") from None
    protocol, _ = fsspec.core.split_protocol(url)
    try:
        fsspec.get_filesystem_class(protocol or "file")
    except ImportError as exc:
        raise ExportStorageMissing(f"to={url!r}: the filesystem for {protocol}:// is not installed "
                                   f"({exc})") from None
    except ValueError as exc:
        raise InvalidOption("to", f"{url!r}: {exc}") from None


class FsspecStore:
    """Parts under a URL's prefix, through fsspec; the filesystem is opened at the first ``put``."""

    def __init__(self, url: str) -> None:
        _fsspec_filesystem_class(url)
        self.url = url
        self._fs: AbstractFileSystem | None = None
        self._root = ""

    def _open(self) -> tuple[AbstractFileSystem, str]:
        if self._fs is None:
            import fsspec.core
            self._fs, self._root = fsspec.core.url_to_fs(self.url)
        return self._fs, self._root

    def path(self, key: str) -> str:
        """Where ``key`` lands in the filesystem's own terms."""
        fs, root = self._open()
        return f"{root.rstrip('/')}/{key}" if root else key

    def put(self, key: str, data: bytes) -> None:
        fs, _ = self._open()
        path = self.path(key)
        if "file" in _protocols(fs):
            _replace_local(path, data)
        else:
            fs.pipe_file(path, data)

    def __repr__(self) -> str:
        return f"<FsspecStore {self.url!r}>"


def _protocols(fs: AbstractFileSystem) -> tuple[str, ...]:
    protocol = fs.protocol
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)


def _replace_local(path: str, data: bytes) -> None:
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".part-", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def store_for(destination: object) -> PartStore:
    """The store one destination names (a URL or path, or an app's store)."""
    if (isinstance(destination, PartStore) and callable(getattr(destination, "put", None))
            and not isinstance(destination, (str, os.PathLike))):
        return destination
    if isinstance(destination, os.PathLike):
        destination = os.fspath(destination)
    if isinstance(destination, str):
        if not destination.strip() or "\x00" in destination:
            raise InvalidOption("to", f"must be a non-empty URL or path, got {destination!r}")
        return FsspecStore(destination)
    raise InvalidOption("to", f"must be a URL or path, an object with put(key, data), or a callable "
                              f"taking the input and answering one; got {type(destination).__name__}")


def resolver(to: object) -> Callable[[object], PartStore]:
    """``to=`` as a function of the job's input. A fixed destination is checked (and its
    storage imported) now, at declaration; one computed per run is checked when it runs."""
    if to is None:
        raise InvalidOption("to", "is required: where the parts are written")
    if callable(to) and not callable(getattr(to, "put", None)):
        def per_run(input: object) -> PartStore:
            return store_for(to(input))
        return per_run
    store = store_for(to)
    return lambda _input: store


__all__ = ["Destination", "FsspecStore", "PartStore", "resolver", "store_for"]
