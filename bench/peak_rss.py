"""Peak resident memory of this process, sampled every 2 ms by a thread (shared by the bench scripts and the child
scripts bench/lrp.py starts).

    probe = PeakRSS().start(); ...; probe.stop()        # or: with PeakRSS(collect=True) as probe: ...
    probe.base, probe.peak                              # bytes at the start, and the highest seen
"""
from __future__ import annotations

import ctypes
import gc
import os
import threading
import time


def rss() -> int:
    """This process's resident memory, bytes."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def trim() -> None:
    """Give freed heap memory back to the OS (glibc), so that RSS growth shows what a step really allocates."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


class PeakRSS:
    """``start()`` trims the heap (after a garbage collection with ``collect``) and records ``base``; a thread keeps
    ``peak`` up to date until ``stop()``. Also a context manager."""

    def __init__(self, collect: bool = False):
        self.collect = collect

    def start(self) -> "PeakRSS":
        if self.collect:
            gc.collect()
        trim()
        self.base = self.peak = rss()
        self.running = True
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def _sample(self) -> None:
        while self.running:
            self.peak = max(self.peak, rss())
            time.sleep(0.002)

    def stop(self) -> "PeakRSS":
        self.running = False
        self.thread.join()
        self.peak = max(self.peak, rss())
        return self

    def __enter__(self) -> "PeakRSS":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
