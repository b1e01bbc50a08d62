"""What the fuzz suites share: the bad inputs (hypothesis strategies), the odd files on disk, the checks of one
outcome (a clear message, no leaked path, no traceback) and the tally printed at the end of the session.

Budget: ``LAYERWISE_FUZZ_EXAMPLES`` inputs per endpoint / command (default 4 in CI; e.g. 50 for a long local run),
always with hypothesis' fixed seed (``derandomize``), so a CI run tries the same inputs every time.
"""
from __future__ import annotations

import json
import math
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

from tests.conftest import REPO

EXAMPLES = int(os.environ.get("LAYERWISE_FUZZ_EXAMPLES", "4"))
CALL_LIMIT_S = float(os.environ.get("LAYERWISE_FUZZ_CALL_LIMIT", "120"))  # a call longer than this is a hang

FUZZ_SETTINGS = settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
                         phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))

TINY_MODELS = ["mathneuro-tiny", "mamba-sentiment", "mamba-lm", "vision-mamba-mnist"]  # the embedded models
HUGE_TEXT = "word " * 20_000


@dataclass
class Tally:
    """Outcomes of one surface (the app's endpoints or the CLI's commands)."""

    tried: int = 0
    results: int = 0
    clear_errors: int = 0
    known: list = field(default_factory=list)  # failures another branch fixes (see KNOWN), listed, not counted bad
    bad: list = field(default_factory=list)
    per_target: Counter = field(default_factory=Counter)

    def record(self, target: str, verdict: str, why: str, what: str, bad: list) -> None:
        """Count one input to ``target`` by its ``verdict`` (``result``, ``clear``, ``known``, else bad); ``what``
        describes the input in the lists, a bad outcome goes to ``bad`` (the test's own list)."""
        self.tried += 1
        self.per_target[target] += 1
        if verdict == "result":
            self.results += 1
        elif verdict == "clear":
            self.clear_errors += 1
        elif verdict == "known":
            self.known.append(f"{what[:200]} -> {why}")
        else:
            bad.append(f"{what[:300]} -> {why}")

    def as_dict(self) -> dict:
        return {"inputs_tried": self.tried, "results": self.results, "clear_errors": self.clear_errors,
                "known": len(self.known), "bad_outcomes": len(self.bad), "targets": len(self.per_target)}


TALLIES: dict[str, Tally] = {"app": Tally(), "cli": Tally()}

# Tracebacks known and being fixed elsewhere, matched on (where, words in the error) and counted apart from bad
# outcomes. None are open: the two issue 15 named (MathNeuro given a classifier, a file that is not a tokenizer)
# are fixed and now count as bad outcomes if they come back.
KNOWN: list[tuple[str, str]] = []


def known(where: str, text: str) -> bool:
    return any(w in where and words in text for w, words in KNOWN)


# ---- bad values ------------------------------------------------------------------------------------------------
def numbers(valid: list, finite: bool = False, huge: bool = True) -> st.SearchStrategy:
    """A number parameter: a valid value, or zero, negative, fractional, tiny, a word, nothing; with ``huge``, far
    too large; unless ``finite``, NaN and infinities (JSON, and so ``gradio_client``, cannot send them)."""
    bad = [0, -1, -10**9, 0.5, 1e-30, -0.0, "abc", "", None, [1, 2]]
    bad += [10**12, 2**63, 1e308] if huge else []
    bad += [] if finite else [math.nan, math.inf, -math.inf]
    floats = st.floats(allow_nan=not finite, allow_infinity=not finite) if huge else st.floats(-1e3, 1e3)
    return st.one_of(st.sampled_from(valid), st.sampled_from(bad), st.integers(-5, 5), floats)


def names(valid: list) -> st.SearchStrategy:
    """A name from a list: a valid one, an unknown one, a wrong type, an odd path."""
    bad = ["", "no-such-name", "NONE", " " + str(valid[0]) + " " if valid else " ", 42, None, True, [],
           "../../etc/passwd", "/etc", "x" * 5000, "名前", "\x00"]
    return st.one_of(st.sampled_from(valid), st.sampled_from(bad)) if valid else st.sampled_from(bad)


def name_lists(valid: list) -> st.SearchStrategy:
    """A multi-choice parameter: a valid subset, empty, unknown members, a duplicate, a string instead of a list."""
    subsets = st.lists(st.sampled_from(valid), min_size=1, max_size=min(3, len(valid)), unique=True) if valid \
        else st.just([])
    bad = [[], ["no-such-name"], [valid[0], valid[0]] if valid else [""], "not-a-list", None, [42], [None]]
    return st.one_of(subsets, st.sampled_from(bad))


def texts() -> st.SearchStrategy:
    return st.one_of(st.sampled_from(["", " ", "a", "The quick brown fox.", HUGE_TEXT, "\x00\x01\x02", "🙂" * 300,
                                      "<script>alert(1)</script>", "/etc/passwd", "../../..", "\n" * 1000, 17, None]),
                     st.text(max_size=200))


def booleans() -> st.SearchStrategy:
    return st.one_of(st.booleans(), st.sampled_from([None, "yes", 2, "false"]))


# ---- odd files on disk -----------------------------------------------------------------------------------------
def odd_files(root: Path) -> dict[str, Path]:
    """Files and folders that are wrong for what they are given to (all under ``root``)."""
    root.mkdir(parents=True, exist_ok=True)
    out = {}
    out["text_file"] = root / "notes.txt"
    out["text_file"].write_text("not a model, not a tokenizer, not an image\n")
    out["empty_file"] = root / "empty.bin"
    out["empty_file"].write_bytes(b"")
    out["random_bytes"] = root / "random.png"
    out["random_bytes"].write_bytes(os.urandom(3000))
    out["empty_dir"] = root / "empty-dir"
    out["empty_dir"].mkdir(exist_ok=True)
    bad_json = root / "bad-json-model"
    bad_json.mkdir(exist_ok=True)
    (bad_json / "config.json").write_text("{not json")
    (bad_json / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{\"a\":1}")
    out["bad_json_model"] = bad_json
    truncated = root / "truncated-model"
    truncated.mkdir(exist_ok=True)
    (truncated / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 8}))
    (truncated / "model.safetensors").write_bytes(b"\xff" * 64)
    out["truncated_model"] = truncated
    foreign = root / "foreign-class-model"
    foreign.mkdir(exist_ok=True)
    (foreign / "config.json").write_text("{}")
    (foreign / "card.json").write_text(json.dumps({"model_class": "core.cache:ResultsCache"}))
    (foreign / "model.safetensors").write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00{}")
    out["foreign_class_model"] = foreign
    pickle_only = root / "pickle-model"
    pickle_only.mkdir(exist_ok=True)
    (pickle_only / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    (pickle_only / "pytorch_model.bin").write_bytes(b"\x80\x04not really a pickle")
    out["pickle_model"] = pickle_only
    out["bad_tokenizer"] = root / "tokenizer.json"
    out["bad_tokenizer"].write_text("<html>not a tokenizer</html>")
    return out


def odd_paths(files: dict[str, Path]) -> list[str]:
    """Paths to give where a model folder, a tokenizer or a checkpoint is expected (reading only)."""
    return [str(p) for p in files.values()] + ["/etc", "/etc/passwd", "../..", "/dev/null", "/nonexistent/x",
                                               "~", "", "C:\\Windows", "nul"]


# ---- checks of one outcome -------------------------------------------------------------------------------------
_PATH = re.compile(r"(?<![\w.:/~-])/(?:[\w.@+-]+/)*[\w.@+-]+")


def allowed_roots() -> list[str]:
    from core.paths import home
    roots = {str(REPO), str(home()), str(Path.home() / ".cache" / "layerwise")}
    for p in list(roots):
        roots.add(os.path.realpath(p))
    return sorted(roots)


def leaked_paths(message: str, inputs, extra_roots=()) -> list[str]:
    """Absolute paths in ``message`` outside the project's folders (and not a path the user gave, under it, or one of
    its folders)."""
    given = _PATH.findall(json.dumps(inputs, default=str, ensure_ascii=False).replace("\\/", "/"))
    roots = [*allowed_roots(), *map(str, extra_roots), *(g for g in given if g.count("/") >= 2)]
    leaks = []
    for m in _PATH.findall(message):
        if m.count("/") < 2 or any(m == r or m.startswith(r.rstrip("/") + "/") for r in roots):
            continue
        if any(g.startswith(m.rstrip("/") + "/") for g in given):  # a folder of a path the user gave
            continue
        leaks.append(m)
    return leaks


_CHAINED = ("The above exception was the direct cause of the following exception",
            "During handling of the above exception, another exception occurred")


_EXCEPTION_LINE = re.compile(r"[A-Za-z_][\w.]*(:( |$)|$)")


def raised_exceptions(log: str) -> list[str]:
    """The exception line (``module.Type: message``) of every traceback in ``log`` that was finally raised
    (not the causes printed before a chained one)."""
    out = []
    for block in log.split("Traceback (most recent call last):")[1:]:
        if any(c in block for c in _CHAINED):
            continue
        lines = block.splitlines()
        # the exception line: the first unindented ``module.Type`` or ``module.Type: message`` line (another
        # thread's output, e.g. a progress bar, can land inside a traceback; it is not the exception)
        at = next((i for i, ln in enumerate(lines) if i and _EXCEPTION_LINE.match(ln)), len(lines) - 1)
        where = [ln.strip() for ln in lines[:at] if ln.strip().startswith("File ")][-2:]
        out.append(f"{lines[at] if lines else '?'}  [at {' <- '.join(reversed(where))}]")
    return out


def summary_lines() -> list[str]:
    lines = []
    for name, t in TALLIES.items():
        if not t.tried:
            continue
        lines.append(f"fuzz {name}: {json.dumps(t.as_dict())}")
        for k in t.known:
            lines.append(f"  known (fixed on another branch): {k}")
        for b in t.bad[:20]:
            lines.append(f"  BAD: {b}")
    return lines


def cache_problems(root: Path) -> list[str]:
    """Half-written or unreadable entries in a results-cache folder (every entry must open whole)."""
    from safetensors import safe_open

    problems = [f"temporary file left: {p.name}" for p in root.glob(".*.tmp")]
    for p in root.glob("*.safetensors"):
        try:
            with safe_open(str(p), framework="pt") as f:
                json.loads((f.metadata() or {}).get("data", "null"))
                for k in f.keys():
                    f.get_tensor(k)
        except Exception as exc:  # noqa: BLE001 - any failure to read is the finding
            problems.append(f"unreadable entry {p.name}: {exc}")
    return problems
