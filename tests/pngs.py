"""PNG files of any size written without holding their pixels (a decompression bomb for the hostile-visitor tests
and bench/hostile.py); no dependency beyond the standard library."""
from __future__ import annotations

from pathlib import Path


def png_bomb(path: Path, width: int = 13_000, height: int = 13_000, rows: int | None = None) -> Path:
    """A grey PNG of ``width`` x ``height`` black pixels written without holding it (256 rows compressed at a time):
    13,000 x 13,000 is 169 Mpx in ~740 KB (under PIL's own limit of 179 Mpx; the issue's was 657 KB). ``rows``: only
    the first rows' data (a file whose header states the size, for a test that never decodes it)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    squeeze, count = zlib.compressobj(1), height if rows is None else rows
    block = b"\0" * (width + 1) * 256  # 256 rows of filter byte 0, then the row
    data = b"".join(squeeze.compress(block[:(width + 1) * min(256, count - i)]) for i in range(0, count, 256))
    data += squeeze.flush()
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)))
        f.write(chunk(b"IDAT", data) + chunk(b"IEND", b""))
    return path
