"""The format-3 constants (see :mod:`core.neuzip.pairs` for the format): what the table, the decoders and the codecs
share, in a module that imports nothing (the codecs are below the table, which calls them)."""

LANES = 8
ROUND = 2 * LANES  # pairs per round: each state decodes two, then refills once
CHUNK_MULTIPLE = 2 * ROUND  # weights per chunk are a multiple of this (whole rounds)
PRECISION = 15  # table precision of format 3 (compiled into the CPU decoder)
DEFAULT_CHUNK = 1 << 17  # weights per chunk
MAX_DIRECT = 15  # exponents coded directly; the rest escape
STATE_LOW = 1 << 31  # lower end of a state
WORD_BITS = 32  # bits per word
MAX_COUNT = (1 << 16) - 1
