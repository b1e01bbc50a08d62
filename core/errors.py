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


class Cancelled(LayerwiseError):
    """The user stopped the computation (Stop in the UI); nothing half-done is cached.

    Raised by a progress callable (:func:`core.runner.cancellable`); a runner that keeps what it finished raises
    it again with ``partial`` (e.g. the samples explained so far), which its caller may return.
    """

    def __init__(self, message: str = "Stopped.", fix: str | None = None, partial=None):
        super().__init__(message, fix)
        self.partial = partial
