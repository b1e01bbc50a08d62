"""Seeded synthetic tasks the project generates (nothing third-party; same output on every machine)."""
from __future__ import annotations

import random

from core.data.records import MathProblem, TokenTask

_NAMES = ("Ana", "Ben", "Chloe", "Dev", "Emma", "Farid", "Grace", "Hugo", "Iris", "Jon", "Kira", "Liam")
_ITEMS = ("apples", "books", "coins", "marbles", "pencils", "stamps", "shells", "cards", "eggs", "cookies")


def arithmetic_word_problems(n: int = 3000, seed: int = 0) -> list[MathProblem]:
    """Short word problems with one operation (+, -, x) on two numbers, each with a one-line worked solution.

    The answer is always a non-negative integer; the solution ends in ``#### answer`` like GSM8K.
    """
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
        op = rng.choice("+-*")
        if op == "+":
            a, b = rng.randint(2, 60), rng.randint(2, 60)
            q = f"{name} has {a} {item} and gets {b} more. How many {item} does {name} have now?"
            ans, expr = a + b, f"{a} + {b}"
        elif op == "-":
            a = rng.randint(10, 99)
            b = rng.randint(1, a)
            q = f"{name} has {a} {item} and gives away {b}. How many {item} does {name} have left?"
            ans, expr = a - b, f"{a} - {b}"
        else:
            a, b = rng.randint(2, 12), rng.randint(2, 12)
            q = f"{name} buys {a} bags with {b} {item} in each bag. How many {item} does {name} buy?"
            ans, expr = a * b, f"{a} * {b}"
        out.append(MathProblem(question=q, answer=str(ans), solution=f"{expr} = {ans}\n#### {ans}"))
    return out


KEY_NEGATIVE, KEY_POSITIVE = 1, 2
FIRST_FILLER = 3


def key_token_task(n: int = 2000, seed: int = 0, length: int = 32, vocab_size: int = 64) -> list[TokenTask]:
    """Sequences of random filler tokens with one planted key token that alone decides the label.

    Token ``KEY_POSITIVE`` means label 1 and ``KEY_NEGATIVE`` label 0; it sits at a uniformly random
    position, so a faithful attribution puts that position first (ground truth for attribution methods).
    """
    if vocab_size <= FIRST_FILLER or length < 2:
        raise ValueError("key_token_task needs vocab_size > 3 and length >= 2")
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        tokens = [rng.randrange(FIRST_FILLER, vocab_size) for _ in range(length)]
        label = rng.randint(0, 1)
        pos = rng.randrange(length)
        tokens[pos] = KEY_POSITIVE if label else KEY_NEGATIVE
        out.append(TokenTask(tokens=tuple(tokens), label=label, key_positions=(pos,)))
    return out
