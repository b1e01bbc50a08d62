"""What one request may cost, priced before it runs (issue 42): one budget, one message.

- **Computations** are priced in floating-point operations before they start (:class:`Price`): a forward pass of a
  model of P parameters over T tokens costs about 2 P T, with the backward 6 P T (:func:`model_flops`); a request
  multiplies that by what it asks for (samples, steps x batch x tokens, training modes, settings). Every analysis
  whose request has a ``price()`` is charged in :func:`core.analyses.find` just before it is computed (a committed
  example or a cached result costs nothing); over :func:`max_request_flops` it is refused with one message that says
  what it would cost and what to lower. The budget is on in public mode only (``LAYERWISE_MAX_REQUEST_FLOPS``,
  default :data:`DEFAULT_PUBLIC_FLOPS`); set the variable to price requests locally too.
- **Images** are priced by their pixels, read from the file's header before anything is decoded
  (:func:`check_image_header`): over :func:`max_image_pixels` the image is refused at once, with no large allocation.

A price is an estimate, on the high side: it bounds the work and lets the message say why; the measured cost is in
``bench/``. On this project's 2-core machine a SmolLM2-135M training step of 256 tokens (2.1e11 operations) takes about
1.1 CPU seconds, so the default budget, 5e13, is about 4 CPU minutes.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from core.errors import BadInputError

DEFAULT_PUBLIC_FLOPS = 5e13  # floating-point operations one request may cost on a public server
SAMPLE_TOKENS = 64  # tokens a dataset sample is priced at (measured with the SmolLM2 tokenizer: arithmetic-words
# 22 on average, movie-sentiment 24, mmlu 61)

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


@dataclass(frozen=True)
class Price:
    """What a request would cost: ``flops`` (estimated floating-point operations), ``what`` (the factors, in words:
    "4 modes x 1 step x 64 x 4,096 tokens of smollm2-135m (134.5 M parameters)") and ``fix`` (what to lower)."""

    flops: float
    what: str
    fix: str = "ask for fewer samples, steps or settings, or a smaller model."


def model_parameters(ref: str) -> int:
    """The parameters of the model ``ref`` (:func:`core.zoo.parameter_count`: from its headers, nothing loaded)."""
    from core.zoo import parameter_count

    return parameter_count(ref)


def model_flops(parameters: float, tokens: float, backward: bool = False) -> float:
    """Operations of a pass over ``tokens`` tokens through ``parameters`` weights: 2 P T forward, 6 P T with the
    backward."""
    return (6.0 if backward else 2.0) * float(parameters) * float(tokens)


def max_request_flops() -> float | None:
    """The most operations one request may cost: ``LAYERWISE_MAX_REQUEST_FLOPS``, else :data:`DEFAULT_PUBLIC_FLOPS`
    in public mode and no limit locally."""
    from core.settings import is_public

    return _env_number("LAYERWISE_MAX_REQUEST_FLOPS", DEFAULT_PUBLIC_FLOPS if is_public() else None)


def charge(price: Price | None) -> None:
    """Refuse a request whose ``price`` is over :func:`max_request_flops` (one message: its cost, the budget, the
    fix); None (an unpriced request) passes."""
    budget = max_request_flops()
    if price is None or budget is None or price.flops <= budget:
        return
    raise BadInputError(f"This request would cost about {price.flops:.1e} operations ({price.what}); this server runs "
                        f"at most {budget:.1e} per request.", fix=price.fix)


def charge_request(request) -> None:
    """:func:`charge` the price of ``request`` (its ``price()``, if it has one)."""
    priced = getattr(request, "price", None)
    if callable(priced):
        charge(priced())


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


__all__ = ["Price", "charge", "charge_request", "max_request_flops", "model_flops", "model_parameters",
           "check_image_header", "max_image_pixels", "DEFAULT_IMAGE_PIXELS", "DEFAULT_PUBLIC_FLOPS", "SAMPLE_TOKENS"]
