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


# ---- subject-verb agreement (a ground truth for attributions on language models) ----------------------------------
AGREEMENT_NOUNS = (("author", "authors"), ("pilot", "pilots"), ("doctor", "doctors"), ("teacher", "teachers"),
                   ("farmer", "farmers"), ("senator", "senators"), ("student", "students"), ("manager", "managers"),
                   ("officer", "officers"), ("singer", "singers"), ("driver", "drivers"), ("painter", "painters"),
                   ("lawyer", "lawyers"), ("player", "players"), ("neighbor", "neighbors"), ("customer", "customers"),
                   ("guard", "guards"), ("nurse", "nurses"), ("worker", "workers"), ("friend", "friends"),
                   ("child", "children"), ("woman", "women"), ("man", "men"), ("dog", "dogs"))
AGREEMENT_VERBS = ((" is", " are"), (" was", " were"), (" has", " have"))  # singular, plural: the next token
AGREEMENT_PREPOSITIONS = ("next to", "behind", "near", "with", "beside", "in front of")
AGREEMENT_TRANSITIVE = ("liked", "saw", "met", "hated", "helped", "called", "followed", "knew")
AGREEMENT_TEMPLATES = ("pp", "src", "orc")  # prepositional phrase, subject relative clause, object relative clause
AGREEMENT_LEADS = ("", "I think that ", "Yesterday ", "We heard that ", "In the end ", "Everyone knows that ")
# the lead-ins move the subject away from a fixed position (a ranking by position alone must not find it)


def agreement_sentences(n: int = 300, seed: int = 0, verbs=AGREEMENT_VERBS) -> list:
    """``n`` sentence prefixes whose next word is a verb that must agree with the subject, not with the attractor
    (a noun of the other number in between), cycling through the templates and the two numbers:

    - ``pp``:  "The author next to the senators" -> " is"
    - ``src``: "The authors that liked the senator" -> " are"
    - ``orc``: "The author that the senators liked" -> " is"

    each after a lead-in (:data:`AGREEMENT_LEADS`: "", "I think that the author ...", ...). Nouns, prepositions,
    verbs, lead-ins and the verb pair (``verbs``: (singular, plural) forms) are drawn with a seeded generator; the
    subject and attractor nouns differ. Returns :class:`core.data.records.AgreementSentence`."""
    from core.data.records import AgreementSentence

    rng = random.Random(seed)
    out = []
    for i in range(n):
        template = AGREEMENT_TEMPLATES[i % len(AGREEMENT_TEMPLATES)]
        plural = bool((i // len(AGREEMENT_TEMPLATES)) % 2)
        subject, attractor = rng.sample(AGREEMENT_NOUNS, 2)
        s, a = subject[int(plural)], attractor[int(not plural)]
        verb_pair = verbs[rng.randrange(len(verbs))]
        lead = rng.choice(AGREEMENT_LEADS)
        head = f"{lead}the " if lead else "The "
        if template == "pp":
            middle = f" {rng.choice(AGREEMENT_PREPOSITIONS)} the "
            text = f"{head}{s}{middle}{a}"
        elif template == "src":
            middle = f" that {rng.choice(AGREEMENT_TRANSITIVE)} the "
            text = f"{head}{s}{middle}{a}"
        else:
            middle = " that the "
            text = f"{head}{s}{middle}{a} {rng.choice(AGREEMENT_TRANSITIVE)}"
        start = len(head)
        subject_span = (start, start + len(s))
        attractor_start = subject_span[1] + len(middle)
        out.append(AgreementSentence(text=text, subject=subject_span, attractor=(attractor_start,
                                     attractor_start + len(a)), verb=verb_pair[int(plural)],
                                     wrong=verb_pair[int(not plural)], plural=plural, template=template))
    return out
