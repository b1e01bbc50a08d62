"""A model's forward and its batch-1 generation as CUDA graphs: the host work of every layer (for a NeuZip model, every
compressed linear's decode launch) recorded once and replayed, instead of paid per call.

The H200 run of 2026-11-27 put the fused decode kernel at 0.022 ms of device time against 0.129 ms of wall time per
call: the compressed forward (2.26x bf16) was paced by the host, one Python call, launch and allocation per linear.
In a graph the decodes keep their launches (one per linear, into the one shared decompression buffer, whose address
the graph holds), but the host replays the whole forward with one call.

- :class:`StaticForward`: ``model(ids).logits`` for inputs of one shape; a static input buffer, the graph captured
  after warm-up calls (which allocate everything the forward needs: the decompression buffer, the corruption flag,
  the fused GEMV's gather indices), replayed per call. The forward writes its keys and values into a static cache of
  its own length, emptied in place at each call: without a cache and a mask, transformers reads the positions back
  to look for packed sequences (a host sync it skips only while a stream is being captured, so the captured forward
  would take another path than the eager one).
- :class:`StaticGenerator`: greedy batch-1 generation with a static KV cache (transformers' ``StaticCache``): the
  prompt's forward runs as usual, then each new token is one replay of a captured step (the forward of one token,
  its argmax, the token written into the step's own input, the position advanced, the token stored in the output),
  so the tokens stay on the device until the end.

Nothing in a captured step may read a value back to the host, allocate a shape that depends on values, or copy from
host memory: the step functions are held to that on the ``meta`` device by :class:`tests.syncs.CaptureCheck`
(``tests/core/neuzip/test_capture.py``). The NeuZip corruption flag is checked once after the replays (the model's
per-forward check is deferred while capturing and replaying). Off CUDA (the CPU, the meta stand-in) there is no graph:
the same step functions run eagerly, which is how the tests hold them to the bf16 model's tokens.
"""
from __future__ import annotations

import contextlib

import torch
from torch import nn

__all__ = ["StaticForward", "StaticGenerator", "checks_deferred"]


@contextlib.contextmanager
def checks_deferred(model: nn.Module):
    """While inside, a NeuZip model's forward does not read its corruption flag (a captured forward must not read
    anything back); the flag is read when the block ends (one host sync), and raises if a decode set it."""
    buffer = getattr(model, "_neuzip_buffer", None)
    if buffer is None:
        yield
        return
    before, buffer.deferred = buffer.deferred, True
    try:
        yield
    finally:
        buffer.deferred = before
    if not before:
        buffer.check()


def _capture(fn, device: torch.device, warmup: int, reset=None):
    """Run ``fn`` ``warmup`` times (on a side stream, as CUDA graphs want), then record it as a CUDA graph (None off
    CUDA). ``reset()`` runs before each warm-up call and before the recording, outside it."""
    reset = reset or (lambda: None)
    if device.type != "cuda":
        for _ in range(warmup):
            reset()
            fn()
        return None
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            reset()
            fn()
    torch.cuda.current_stream(device).wait_stream(stream)
    reset()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


class StaticForward:
    """``model(ids).logits`` for ``ids`` of ``example``'s shape, replayed from a CUDA graph on CUDA (eager
    elsewhere). The returned logits are the graph's output buffer: copy them to keep them past the next call."""

    def __init__(self, model: nn.Module, example: torch.Tensor, warmup: int = 2):
        from transformers import StaticCache

        self.model, self.device = model, _device(model)
        self.ids = example.to(self.device).clone()
        self.cache = StaticCache(config=model.config, max_cache_len=self.ids.shape[-1])
        self.positions = torch.arange(self.ids.shape[-1], device=self.device)
        self.logits = None
        with torch.inference_mode(), checks_deferred(model):
            self.graph = _capture(self.step, self.device, warmup)

    def step(self) -> torch.Tensor:
        """The captured work: the cache emptied (in place), one forward of the static input into the static output."""
        self.cache.reset()
        self.logits = self.model(self.ids, past_key_values=self.cache, cache_position=self.positions,
                                 use_cache=True).logits
        return self.logits

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        if tuple(ids.shape) != tuple(self.ids.shape):
            raise ValueError(f"this forward was captured for inputs of shape {tuple(self.ids.shape)}, got "
                             f"{tuple(ids.shape)}")
        with torch.inference_mode(), checks_deferred(self.model):
            self.ids.copy_(ids)
            if self.graph is None:
                return self.step()
            self.graph.replay()
            return self.logits


class StaticGenerator:
    """Greedy generation of ``new_tokens`` tokens after a prompt of ``prompt_len`` tokens, batch 1, with a static KV
    cache; each new token after the first is one replay of the captured step (see the module docstring). Calling it
    with ``ids (1, prompt_len)`` returns ``(1, new_tokens)`` token ids (read back once, at the end)."""

    def __init__(self, model: nn.Module, prompt_len: int, new_tokens: int, warmup: int = 2):
        from transformers import StaticCache

        if new_tokens < 1 or prompt_len < 1:
            raise ValueError("a prompt and at least one new token are needed")
        self.model, self.device = model, _device(model)
        self.prompt_len, self.new_tokens = int(prompt_len), int(new_tokens)
        self.cache = StaticCache(config=model.config, max_cache_len=self.prompt_len + self.new_tokens)
        self.token = torch.zeros(1, 1, dtype=torch.long, device=self.device)  # the step's input, then its output
        self.position = torch.zeros(1, dtype=torch.long, device=self.device)  # its cache position
        self.tokens = torch.zeros(1, self.new_tokens, dtype=torch.long, device=self.device)
        with torch.inference_mode(), checks_deferred(model):
            self._prefill(torch.zeros(1, self.prompt_len, dtype=torch.long, device=self.device))
            self.graph = _capture(self.step, self.device, warmup, reset=self._rewind)

    def _prefill(self, ids: torch.Tensor) -> None:
        """The prompt's forward (eager), its greedy token as the first new one, the step's position after it."""
        self.cache.reset()
        positions = torch.arange(self.prompt_len, device=self.device)
        logits = self.model(ids, past_key_values=self.cache, cache_position=positions, use_cache=True).logits
        self.token.copy_(logits[:, -1:].argmax(-1))
        self.tokens[:, :1].copy_(self.token)
        self.position.fill_(self.prompt_len)

    def _rewind(self) -> None:
        """Before a warm-up call or the recording: an empty cache, the position after the prompt (the cache writes
        where its own count says; transformers' StaticCache keeps that count on the device)."""
        self.cache.reset()
        self.position.fill_(self.prompt_len)

    def step(self) -> None:
        """The captured work: the forward of the current token at ``position``, its argmax stored at
        ``tokens[position - prompt_len + 1]`` and made the next input, the position advanced. No host read."""
        logits = self.model(self.token, past_key_values=self.cache, cache_position=self.position,
                            use_cache=True).logits
        nxt = logits[:, -1:].argmax(-1)
        slot = (self.position - (self.prompt_len - 1)).clamp(max=self.new_tokens - 1)
        self.tokens.index_copy_(1, slot, nxt)
        self.token.copy_(nxt)
        self.position.add_(1)

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        if tuple(ids.shape) != (1, self.prompt_len):
            raise ValueError(f"this generator was built for a prompt of shape (1, {self.prompt_len}), got "
                             f"{tuple(ids.shape)}")
        with torch.inference_mode(), checks_deferred(self.model):
            self._prefill(ids.to(self.device))
            for _ in range(self.new_tokens - 1):
                if self.graph is None:
                    self.step()
                else:
                    self.graph.replay()
            return self.tokens.clone()
