"""Shared test set-up.

Triton kernels run on CPU only under its interpreter, which must be switched on before triton is
imported anywhere, so it is set here, first. Tests never touch the user's own cache: they get a
private LAYERWISE_HOME, except that prepared datasets and converted models are reused from the
real cache (read-only) because preparing them is the job of `python -m core data prepare`.
"""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("LAYERWISE_ONLINE", "0")
