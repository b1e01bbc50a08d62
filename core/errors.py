"""Errors a user can act on.

Every problem caused by the user's input or set-up (a missing dataset, an unknown model, a bad
parameter) is raised as a :class:`LayerwiseError` carrying the fix. The CLI prints it and exits
with code 2; the UI shows it as ``gr.Error``. Anything else is a bug and keeps its traceback.
"""
from __future__ import annotations


class LayerwiseError(Exception):
    """A problem the user can fix; ``fix`` names what to do."""

    def __init__(self, message: str, fix: str | None = None):
        super().__init__(message)
        self.message = message
        self.fix = fix

    def __str__(self) -> str:
        return self.message if not self.fix else f"{self.message} Fix: {self.fix}"


class DataMissingError(LayerwiseError):
    """A dataset has not been prepared (or its source is unreachable)."""


class ModelLoadError(LayerwiseError):
    """A model reference cannot be resolved or its weights cannot be read safely."""


class BadInputError(LayerwiseError):
    """An argument is out of range or malformed."""


class NotOffered(ModelLoadError, BadInputError):
    """Public mode refused a reference (a model or run that the server does not list, a path): one message for all of
    them (:func:`core.zoo.hub.not_offered`). Both a model and an input error, so code that tries a run name, then a
    model, meets it as either."""


class Cancelled(LayerwiseError):
    """The user stopped the computation (Stop in the UI); nothing half-done is cached.

    Raised by a progress callable (:func:`core.runner.cancellable`); a runner that keeps what it finished raises
    it again with ``partial`` (e.g. the samples explained so far), which its caller may return.
    """

    def __init__(self, message: str = "Stopped.", fix: str | None = None, partial=None):
        super().__init__(message, fix)
        self.partial = partial


class StorageError(LayerwiseError):
    """The user's folder (``$LAYERWISE_HOME``) cannot be written: read-only, no permission, or full."""


#: errno values that mean "this folder cannot be written", with what to say about each.
STORAGE_ERRNOS = {30: "the file system is read-only", 13: "permission denied", 1: "not permitted",
                  28: "no space left on the device", 122: "the disk quota is exceeded"}


def storage_error(exc: BaseException) -> StorageError | None:
    """A :class:`StorageError` naming the fix for an ``OSError`` that means the folder cannot be written
    (EROFS, EACCES, EPERM, ENOSPC, EDQUOT); None for any other error (a bug keeps its traceback)."""
    if not isinstance(exc, OSError) or exc.errno not in STORAGE_ERRNOS:
        return None
    where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
    full = exc.errno in (28, 122)
    fix = ("free some space (`python -m core cache clear` empties the results cache), or point LAYERWISE_HOME at a "
           "folder with room." if full else "point LAYERWISE_HOME at a folder you can write, or fix its permissions.")
    return StorageError(f"cannot write to the Layerwise folder{where}: {STORAGE_ERRNOS[exc.errno]}.", fix=fix)
