"""A local stand-in of the Hugging Face hub's file API, for testing the online path with no hub reachable.

It serves repositories from folders, the way ``huggingface_hub`` (and so ``transformers`` and ``datasets``)
reads them when ``HF_ENDPOINT`` points here:

- ``HEAD|GET /<repo>/resolve/<rev>/<path>`` and ``/datasets/<repo>/resolve/<rev>/<path>``: the file, with the
  headers the client reads (``X-Repo-Commit``, ``ETag``, ``Content-Length``; ``Range`` honoured);
- ``GET /api/{models,datasets}/<repo>`` and ``.../revision/<rev>``: repo info (``sha``, ``siblings``);
- ``GET /api/{models,datasets}/<repo>/tree/<rev>[/<path>]``: the file listing;
- ``POST /api/{models,datasets}/<repo>/paths-info/<rev>``: info on given paths.

Missing repos and files answer 404 with ``X-Error-Code`` (``RepoNotFound``, ``EntryNotFound``,
``RevisionNotFound``) as the hub does. ``hang = True`` makes it accept connections and never answer (a hub
that does not respond). Every request is recorded in ``requests`` as ``(method, path)``.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

MAIN = "main"


class Repo:
    """One repository: its files (relative path -> bytes on disk) and a commit sha."""

    def __init__(self, repo_id: str, kind: str, folder: Path):
        self.repo_id, self.kind, self.folder = repo_id, kind, folder
        digest = hashlib.sha1()
        for path in self.files():
            digest.update(path.encode() + (folder / path).read_bytes())
        self.sha = digest.hexdigest()

    def files(self) -> list[str]:
        return sorted(str(p.relative_to(self.folder)) for p in self.folder.rglob("*") if p.is_file())

    def entry(self, path: str) -> dict:
        data = (self.folder / path).read_bytes()
        return {"type": "file", "path": path, "size": len(data), "oid": hashlib.sha1(data).hexdigest()}

    def info(self) -> dict:
        return {"id": self.repo_id, "modelId": self.repo_id, "sha": self.sha, "private": False, "gated": False,
                "disabled": False, "downloads": 0, "likes": 0, "tags": [], "lastModified": "2026-01-01T00:00:00.000Z",
                "siblings": [{"rfilename": f} for f in self.files()]}


class HubStandIn:
    """A threaded HTTP server over ``root``; add repositories with :meth:`add`, then :meth:`start`."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.repos: dict[tuple[str, str], Repo] = {}
        self.requests: list[tuple[str, str]] = []
        self.hang = False
        self.delay = 0.0  # seconds before each answer (a slow hub)
        self._server: ThreadingHTTPServer | None = None

    # ---- content ----------------------------------------------------------------------------------------------
    def add(self, repo_id: str, files: dict[str, bytes | Path] | Path, kind: str = "model") -> Repo:
        """Serve ``files`` (a folder, or a dict of relative path -> bytes or file) as ``repo_id``."""
        folder = self.root / f"{kind}s" / repo_id
        if folder.exists():
            shutil.rmtree(folder)
        if isinstance(files, (str, Path)):
            shutil.copytree(files, folder)
        else:
            for rel, content in files.items():
                target = folder / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                if isinstance(content, Path):
                    shutil.copyfile(content, target)
                else:
                    target.write_bytes(content)
        repo = Repo(repo_id, kind, folder)
        self.repos[(kind, repo_id)] = repo
        return repo

    # ---- server -----------------------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "HubStandIn":
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_HEAD(self):
                hub._answer(self, head=True)

            def do_GET(self):
                hub._answer(self, head=False)

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                hub._answer(self, head=False, body=body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self.hang = False
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # ---- routing ----------------------------------------------------------------------------------------------
    def _answer(self, h: BaseHTTPRequestHandler, head: bool, body: bytes = b"") -> None:
        path = urllib.parse.unquote(urllib.parse.urlsplit(h.path).path)
        self.requests.append((h.command, path))
        while self.hang:
            time.sleep(0.05)
        if self.delay:
            time.sleep(self.delay)
        parts = [p for p in path.split("/") if p]
        try:
            if parts[:1] == ["api"] and len(parts) >= 4 and parts[1] in ("models", "datasets"):
                query = urllib.parse.parse_qs(urllib.parse.urlsplit(h.path).query)
                recursive = query.get("recursive", ["false"])[0].lower() in ("1", "true")
                return self._api(h, parts[1][:-1], parts[2:], body, recursive)
            kind = "model"
            if parts[:1] == ["datasets"]:
                kind, parts = "dataset", parts[1:]
            if len(parts) >= 5 and parts[2] == "resolve":
                return self._resolve(h, kind, "/".join(parts[:2]), parts[3], "/".join(parts[4:]), head)
        except (BrokenPipeError, ConnectionResetError):
            return
        self._send(h, 404, {"error": "Not Found"}, code="EntryNotFound" if "resolve" in parts else None)

    def _repo(self, h, kind: str, repo_id: str, rev: str) -> Repo | None:
        repo = self.repos.get((kind, repo_id))
        if repo is None:
            self._send(h, 404, {"error": "Repository not found"}, code="RepoNotFound")
            return None
        if rev not in (MAIN, repo.sha):
            self._send(h, 404, {"error": f"Invalid rev id: {rev}"}, code="RevisionNotFound")
            return None
        return repo

    def _send_tree(self, h, repo: Repo, prefix: str, recursive: bool) -> None:
        """The entries under ``prefix``: files and folders one level down, or every file when recursive."""
        base = f"{prefix}/" if prefix else ""
        below = [f for f in repo.files() if f.startswith(base)]
        if prefix and not below:
            return self._send(h, 404, {"error": f"{prefix} does not exist"}, code="EntryNotFound")
        entries, folders = [], []
        for f in below:
            rest = f[len(base):]
            if "/" in rest:
                folder = base + rest.split("/")[0]
                if folder not in folders:
                    folders.append(folder)
                if not recursive:
                    continue
            if recursive or "/" not in rest:
                entries.append(repo.entry(f))
        dirs = [{"type": "directory", "path": d, "size": 0, "oid": hashlib.sha1(d.encode()).hexdigest()}
                for d in folders]
        return self._send(h, 200, dirs + entries)

    def _api(self, h, kind: str, parts: list[str], body: bytes, recursive: bool = False) -> None:
        repo_id, rest = "/".join(parts[:2]), parts[2:]
        rev = MAIN
        if rest[:1] in (["revision"], ["tree"], ["paths-info"]) and len(rest) >= 2:
            rev = urllib.parse.unquote(rest[1])
        repo = self._repo(h, kind, repo_id, rev)
        if repo is None:
            return
        if not rest or rest[0] == "revision":
            return self._send(h, 200, repo.info())
        if rest[0] == "tree":
            return self._send_tree(h, repo, "/".join(rest[2:]).strip("/"), recursive)
        if rest[0] == "paths-info":
            fields = urllib.parse.parse_qs(body.decode()) if body else {}
            try:
                wanted = json.loads(body).get("paths", [])
            except (ValueError, AttributeError):
                wanted = fields.get("paths", [])
            return self._send(h, 200, [repo.entry(p) for p in wanted if p in repo.files()])
        self._send(h, 404, {"error": "Not Found"})

    def _resolve(self, h, kind: str, repo_id: str, rev: str, path: str, head: bool) -> None:
        repo = self._repo(h, kind, repo_id, urllib.parse.unquote(rev))
        if repo is None:
            return
        file = repo.folder / path
        if path not in repo.files():
            return self._send(h, 404, {"error": f"{path} does not exist"}, code="EntryNotFound",
                              extra={"X-Repo-Commit": repo.sha})
        data = file.read_bytes()
        status, start = 200, 0
        rng = h.headers.get("Range")
        if rng and rng.startswith("bytes="):
            first, _, last = rng[6:].partition("-")
            start = int(first or 0)
            end = int(last) + 1 if last else len(data)
            data, status = data[start:end], 206
        headers = {"X-Repo-Commit": repo.sha, "ETag": f'"{hashlib.sha1(file.read_bytes()).hexdigest()}"',
                   "Content-Type": "application/octet-stream", "Accept-Ranges": "bytes"}
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        if not head:
            h.wfile.write(data)

    @staticmethod
    def _send(h, status: int, doc, code: str | None = None, extra: dict | None = None) -> None:
        payload = json.dumps(doc).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(payload)))
        if code:
            h.send_header("X-Error-Code", code)
            h.send_header("X-Error-Message", doc.get("error", ""))
        for k, v in (extra or {}).items():
            h.send_header(k, v)
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(payload)
