"""The small stream every NeuZip decode kernel's self-check runs on: skewed pairs (escapes included) in chunks of 8
interleaved states, encoded by a plain Python rANS encoder (the inverse of the decode loop in
:mod:`kernels.neuzip_rans`), laid out in segments. A private helper of the kernel modules."""
from __future__ import annotations

import torch

from kernels._rans_kernel import L_MIN, LANES, ROUND, SHIFT


def check_stream_inputs(device, dtype, n: int = 700, chunk_size: int = 128, precision: int = 10,
                        segment: int = 64) -> tuple:
    """A small valid stream for the self-check: skewed pairs (escapes included) in chunks of 8 interleaved states,
    encoded by a plain rANS encoder (the inverse of the decode loop in the module docstring; pad pairs 0), laid out
    in segments of ``segment`` weights (the encoder's states between rounds are where the decoder's start); the
    last element is ``segment``."""
    marker = 255
    pairs = [(120, 121), (121, 121), (122, marker), (marker, 119)]
    freq = [500, 300, 150, 74]  # sums to 2**precision
    cdf = [sum(freq[:i]) for i in range(len(freq))]
    g = torch.Generator().manual_seed(0)
    symbols = torch.multinomial(torch.tensor(freq, dtype=torch.float), n // 2, replacement=True, generator=g).tolist()
    states, offsets, words, escapes, escape_offsets = [], [0], [], [], [0]
    per = segment // 2 // ROUND  # rounds per segment
    for start in range(0, n // 2, chunk_size // 2):
        chunk = symbols[start:start + chunk_size // 2]
        rounds = -(-len(chunk) // ROUND)
        padded = chunk + [0] * (rounds * ROUND - len(chunk))
        x, out, marks = [L_MIN] * LANES, [], {}
        for r in reversed(range(rounds)):
            for lane in reversed(range(LANES)):
                a, b = padded[r * ROUND + lane], padded[r * ROUND + LANES + lane]
                if x[lane] >> (2 * SHIFT - 1 - 2 * precision) >= freq[a] * freq[b]:
                    out.append(x[lane] & 0xFFFFFFFF)
                    x[lane] >>= SHIFT
                for s in (b, a):
                    x[lane] = ((x[lane] // freq[s]) << precision) + x[lane] % freq[s] + cdf[s]
            if r % per == 0:
                marks[r] = (list(x), len(out))  # the decoder's states at round r, and the words it has not read
        taken = [e == marker for s in chunk for e in pairs[s]]
        for r in sorted(marks):
            x_r, left = marks[r]
            states.append(x_r)
            offsets.append(len(words) + len(out) - left)
            escape_offsets.append(len(escapes) + sum(taken[:2 * r * ROUND]))
        words += out[::-1]
        escapes += [7 + (i % 100) for i, s in enumerate(chunk) for e in pairs[s] if e == marker]
    offsets, escape_offsets = offsets[1:] + [len(words)], escape_offsets[1:] + [len(escapes)]
    slot_pair = torch.repeat_interleave(torch.arange(len(freq)), torch.tensor(freq)).to(torch.uint8)
    info = torch.tensor([f | ((a | (b << 8)) << 16) | (c << 48) for f, (a, b), c in zip(freq, pairs, cdf)])
    w = torch.tensor(words, dtype=torch.int64)
    return (torch.tensor(states, dtype=torch.int64, device=device), torch.tensor(offsets, device=device),
            torch.where(w >= 2**31, w - 2**32, w).to(torch.int32).to(device), slot_pair.to(device), info.to(device),
            torch.tensor(escapes, dtype=torch.uint8, device=device), torch.tensor(escape_offsets, device=device),
            marker, n, chunk_size, precision, segment)


def check_run(fn, args):
    """The check's call: the stream's arguments, then its segment length as the keyword."""
    return fn(*args[:-1], segment=args[-1])

