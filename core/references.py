"""One check for every model, run or file reference a user gives: :func:`check_reference`.

Every place that turns a user's text into something the server opens goes through it: the zoo's
:func:`core.zoo.resolve` (so every :func:`core.zoo.load_model` and :func:`core.zoo.fingerprint`), the Mix-LN runs
(:func:`core.mixln.folders.resolve_run`), NeuZip's training sources (``mixln:<run>``, the random-weight
configurations) and a link's open inputs (:class:`core.analyses.Param`). A new kind of reference is one
:class:`Registry` handed to it, so it cannot skip the check:

- a **prefix** (``mixln:pre-ln``) is looked up, as text, among the names its registry lists (``listed()``: name ->
  the folder the server keeps for it); the text after the prefix is never joined to a path. In local mode a registry
  may also read a reference it does not list (``local``: e.g. a run folder the user trained); in public mode it
  may not, and the answer is :func:`core.zoo.hub.not_offered`;
- a **bare name** registry (``prefix=None``: the random-weight configurations) matches whole names only;
- anything else is a **model**: a registered name, an allowed hub id, or (local mode only) a folder.

In public mode (:func:`core.settings.is_public`) every refusal is the same :class:`core.errors.NotOffered` message
whatever the reference names, given before anything on the server is looked at: it names no path and its timing does
not depend on what exists.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from core.errors import BadInputError, ModelLoadError

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass(frozen=True)
class Registry:
    """A kind of reference besides the zoo's models.

    name : what :attr:`Reference.kind` says for it (``"mixln-run"``).
    listed : ``() -> {name: folder or None}``: what the server offers, from its own registry (never from the
        reference); ``None`` for an entry that is not a folder (a configuration).
    prefix : ``"mixln:"``: references that start with it belong here; ``None``: whole names of ``listed()``.
    local : local mode only: ``(text after the prefix) -> folder`` for a reference the registry does not list (it
        raises a :class:`BadInputError` naming the fix); ``None``: only listed names.
    what, example : for messages: ``"Mix-LN run"``, ``"mixln:pre-ln"``.
    """

    name: str
    listed: Callable[[], Mapping[str, Path | None]]
    prefix: str | None = None
    local: Callable[[str], Path] | None = None
    what: str = ""
    example: str = ""


@dataclass(frozen=True)
class Reference:
    """A checked reference: ``kind`` is ``registered``, ``hub``, ``local`` (a model folder, local mode only) or a
    :attr:`Registry.name`; ``name`` the reference without its prefix; ``folder`` what the server opens for it (a
    registry's own folder, the user's folder in local mode, or None: a hub id, a configuration)."""

    text: str
    kind: str
    name: str
    folder: Path | None


def _public() -> bool:
    from core.settings import is_public

    return is_public()


def _refused():
    from core.zoo.hub import not_offered

    return not_offered()


def check_reference(ref, registries: tuple[Registry, ...] = (), *, models: bool = True) -> Reference:
    """The one check of a reference (see the module doc): a prefix of ``registries``, a bare name of one of them, or
    (with ``models``) a model of the zoo. Raises :class:`core.errors.NotOffered` in public mode for anything not
    listed (one message, no file system call), :class:`ModelLoadError` / :class:`BadInputError` otherwise."""
    if not isinstance(ref, (str, os.PathLike)) or isinstance(ref, bytes):
        raise ModelLoadError(f"{ref!r} is not a model name.", fix="choose a model from `python -m core models list`.")
    text = os.fspath(ref).strip()
    if not text:
        raise ModelLoadError("no model given.", fix="choose a model from `python -m core models list`.")
    for reg in registries:
        if reg.prefix is not None and text.startswith(reg.prefix):
            return _prefixed(reg, text)
    for reg in registries:
        if reg.prefix is None and text in (listed := reg.listed()):
            return Reference(text, reg.name, text, listed[text])
    if not models:
        if _public():
            raise _refused()
        shown = ", ".join(r.example or r.what for r in registries)
        raise BadInputError(f"{text!r} is not one of the references this input takes.", fix=f"use e.g. {shown}.")
    return _model(text)


def _prefixed(reg: Registry, text: str) -> Reference:
    name = text[len(reg.prefix):].strip()
    listed = reg.listed()
    if name in listed:  # looked up as text: the registry's own folder, never the reference joined to a path
        return Reference(text, reg.name, name, listed[name])
    if _public():
        raise _refused()
    if reg.local is not None and name:
        return Reference(text, reg.name, name, reg.local(name))
    some = ", ".join(f"{reg.prefix}{n}" for n in list(listed)[:6])
    raise BadInputError(f"no {reg.what or reg.name} {text!r}.", fix=f"use one of {some or 'none found'}.")


def _model(text: str) -> Reference:
    """A model of the zoo: a registered name, a hub id (on the allow-list), or in local mode a folder."""
    from core.zoo import registry
    from core.zoo.hub import allowed_hub_models, check_allowed

    if text in registry.registered_names():
        return Reference(text, "registered", text, registry.folder_of(text))
    if _public():  # a registered name or an allowed hub id; anything else, one message, no file system call
        if text in (allowed_hub_models() or ()) and HUB_ID.match(text):
            return Reference(text, "hub", text, None)
        raise _refused()
    path = Path(os.path.expanduser(text))
    try:
        exists = path.exists()
    except OSError:  # e.g. a name longer than a file name may be (ENAMETOOLONG): not a folder here
        exists = False
    if exists:
        if not path.is_dir():
            raise ModelLoadError(f"{text} is a file; a model is a folder (config.json + *.safetensors).",
                                 fix="pass the folder that holds the file.")
        return Reference(text, "local", text, path)
    if HUB_ID.match(text) and not text.startswith((".", "/", "~")):
        check_allowed(text)
        return Reference(text, "hub", text, None)
    raise ModelLoadError(f"{text!r} is not a registered model, an existing folder or a hub id.",
                         fix=f"choose one of {', '.join(registry.registered_names())}, or give a folder path.")


def offered(registries: tuple[Registry, ...] = (), *, models: bool = True) -> list[str]:
    """What a visitor of a public server may name in an input that takes ``registries`` (and models): the listed
    names with their prefixes, then :func:`core.zoo.hub.offered_models`."""
    from core.zoo.hub import offered_models

    names = [f"{r.prefix or ''}{n}" for r in registries for n in r.listed()]
    return names + (offered_models() if models else [])


__all__ = ["Registry", "Reference", "check_reference", "offered", "HUB_ID"]
