"""Every kernel, imported: each module registers its self-check with :mod:`kernels.dispatch` when it is imported, and
this module imports them all by name (explicit imports: the dispatcher, which every kernel imports, imports none of
them). Use :func:`warm` and :func:`check_all` from here to be sure every kernel's check is registered."""
from __future__ import annotations

from kernels import (neuzip_bits, neuzip_encode, neuzip_gemv, neuzip_rans, rmsnorm,  # noqa: F401 (register)
                     selective_scan, topk_mask)
from kernels.dispatch import check_all, warm  # noqa: F401 (re-exported: every check registered)

KERNEL_MODULES = tuple(m.__name__ for m in (neuzip_bits, neuzip_rans, neuzip_gemv, neuzip_encode, rmsnorm,
                                            selective_scan, topk_mask))
