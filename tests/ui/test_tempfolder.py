"""Gradio's temp folder bounded by size (issue 42, item 8): each distinct explanation added 4.85 MB, and only an
hourly sweep of old files bounded it. :func:`ui.tempfolder.sweep` removes the least recently written files until
the folder is under its cap, sparing the files just written. (Against a running app: tests/fuzz/test_public_app.py.)"""
from __future__ import annotations

import os
import time

from ui.tempfolder import folder_bytes, max_temp_bytes, sweep


def test_the_oldest_files_go_first_until_the_folder_is_under_its_cap(tmp_path, monkeypatch):
    now = time.time()
    for i in range(6):  # six explanations' downloads, a minute apart, the newest just written
        folder = tmp_path / f"hash{i}"
        folder.mkdir()
        (folder / "figure.html").write_bytes(b"x" * 1000)
        age = 60 * (6 - i) if i < 5 else 1
        os.utime(folder / "figure.html", (now - age, now - age))
        os.utime(folder, (now - age, now - age))
    assert folder_bytes(tmp_path) == 6000
    done = sweep(tmp_path, max_bytes=2500, grace=10)
    assert done == {"before": 6000, "after": 2000, "removed": 4}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hash4", "hash5"]  # emptied folders removed too
    assert sweep(tmp_path, max_bytes=500, grace=10)["after"] == 1000  # a file of the last seconds is spared
    monkeypatch.setenv("LAYERWISE_MAX_TEMP_MB", "3")
    assert max_temp_bytes() == 3_000_000
