"""The factories' own refusals, each with its stable code: what ``backfill()``, ``purge()``,
``export_rows()`` and the paging loop they share refuse (``webhook()``'s are in ``errors.py``,
beside the receiver's ``verify``, which the api room holds)."""

from __future__ import annotations

from ..errors import XJobsError


class PurgeTargetInvalid(XJobsError):
    """A purge's target is no target (no ``name`` or ``purge_expired``), or answered something
    other than a count of deleted rows."""

    code = "X_PURGE_TARGET_INVALID"


class PurgeTargetDuplicate(PurgeTargetInvalid):
    """Two of a purge's targets share a name: refused before the first delete."""

    code = "X_PURGE_TARGET_DUPLICATE"


class PageCheckpointInvalid(XJobsError):
    """A page's recorded checkpoint is not one the paging loop wrote: nothing is guessed from it."""

    code = "X_PAGE_CHECKPOINT_INVALID"


class PageSourceInvalid(XJobsError):
    """A paged source answered something other than ``(rows, next_cursor)``."""

    code = "X_PAGE_SOURCE_INVALID"


class BackfillStalled(XJobsError):
    """The source ran out while ``count`` still finds rows to sweep: the two disagree."""

    code = "X_BACKFILL_STALLED"


class BackfillRefused(XJobsError):
    """A backfill may not run now; the gate RETURNS one of these (it does not raise it)."""

    code = "X_BACKFILL_REFUSED"


class BackfillEnvironment(BackfillRefused):
    """Its ``environments`` leave this environment out (the pass raises it, the gate returns it)."""

    code = "X_BACKFILL_ENVIRONMENT"


class BackfillRequires(BackfillRefused):
    """Its ``requires`` precondition is not met."""

    code = "X_BACKFILL_REQUIRES"


class BackfillAlreadyRan(BackfillRefused):
    """A run of it completed; only ``force`` runs another."""

    code = "X_BACKFILL_ALREADY_RAN"


class ExportPartTooLarge(XJobsError):
    """One page encoded past the export's ``max_part_bytes``; refused before the part is written."""

    code = "X_EXPORT_PART_TOO_LARGE"


class ExportRowInvalid(XJobsError):
    """A row the export's source answered cannot be written: a missing column, a value count
    that is not the column count, or a value with no form in the format (NaN, an object)."""

    code = "X_EXPORT_ROW_INVALID"


class ExportStorageMissing(XJobsError):
    """An export writes to a URL and fsspec (``pip install 'xjobsd[export]'``), or the
    filesystem its scheme needs (``s3fs`` for ``s3://``), is not installed."""

    code = "X_EXPORT_STORAGE_MISSING"
