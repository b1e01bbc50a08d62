"""What one request may cost, priced before it runs.

- **Images** are priced by their pixels, read from the file's header before anything is decoded
  (:func:`check_image_header`): over :func:`max_image_pixels` the image is refused at once, with no large allocation.
"""
from __future__ import annotations

import os

from core.errors import BadInputError

DEFAULT_IMAGE_PIXELS = 4096 * 4096  # 16.8 Mpx: a 12 Mpx phone photo passes; decoding one costs at most ~70 MB (RGBA)


def _env_number(name: str, default: float | None) -> float | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        return default
    return value if value > 0 else default


def max_image_pixels() -> int:
    """The most pixels an image may have (``LAYERWISE_MAX_IMAGE_PIXELS``, default 4096 x 4096)."""
    return int(_env_number("LAYERWISE_MAX_IMAGE_PIXELS", DEFAULT_IMAGE_PIXELS))


def check_image_header(width: int, height: int) -> None:
    """Refuse an image of ``width`` x ``height`` pixels (as its header states them) over :func:`max_image_pixels`,
    before it is decoded."""
    cap = max_image_pixels()
    if int(width) * int(height) > cap:
        raise BadInputError(f"The image is {width:,} x {height:,} pixels ({width * height / 1e6:.0f} Mpx); this app "
                            f"decodes at most {cap / 1e6:.1f} Mpx.",
                            fix="Upload a smaller image (a digit reads well at 28 x 28 to a few hundred pixels).")


__all__ = ["check_image_header", "max_image_pixels", "DEFAULT_IMAGE_PIXELS"]
