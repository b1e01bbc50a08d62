"""The schemas of stored results (:mod:`core.schema`, issue 38) against the views that read them.

Each committed example is run through its analysis' view with its data wrapped in a recorder of the fields read: the
schema names every field the view reads, a ``None`` put where the view then fails is refused by the schema, and every
committed entry fits its schema and carries a matching checksum (``python -m core cache seal`` writes them).
"""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from core.runner import ExampleStore, Found, committed_stores, example_checksum
from core.schema import ListOf, Num, Opt, Rec, Str, paths, problem
from core.papers import stored_schemas

SCHEMAS = stored_schemas()  # every paper's stored analyses: {stored name: its Analysis.schema}

# the mappings (any keys: methods, datasets) among each analysis' fields, written * in the schema's paths
MAPS = {"lrp/text": ["methods"], "lrp/image": ["methods"],
        "lrp-evaluation": ["conservation", "faithfulness", "labels", "timing.explain_s"],
        "lrp-long-range": ["labels", "methods_stats", "timing.explain_s"],
        "lrp-key-token": ["hit_rate", "hit_rate_max", "hit_rate_min", "hit_rate_std", "hit_rate_per_seed", "labels",
                          "last_token.methods"],
        "lrp-agreement": ["agreement_by_template", "labels", "refused", "scores"],
        "mathneuro-layers": ["by_nonmath"], "mathneuro-effect": ["before", "levels", "metrics"],
        "mathneuro-proportion-sweep": ["levels", "metrics"], "mathneuro-scale-sweep": ["levels", "metrics"],
        "neuzip/throughput": ["skipped"]}


class Recorded(dict):
    """A mapping that notes every field read through ``[]`` or ``get`` (of fields it has)."""

    def __init__(self, d: dict, path: str, log: set):
        super().__init__({k: recorded(v, f"{path}.{k}" if path else str(k), log) for k, v in d.items()})
        self._path, self._log = path, log

    def _note(self, k):
        self._log.add(f"{self._path}.{k}" if self._path else str(k))

    def __getitem__(self, k):
        self._note(k)
        return super().__getitem__(k)

    def get(self, k, default=None):
        if super().__contains__(k):
            self._note(k)
        return super().get(k, default)


def recorded(value, path: str, log: set):
    if isinstance(value, dict):
        return Recorded(value, path, log)
    if isinstance(value, list):
        return [recorded(v, f"{path}[]", log) for v in value]
    return value


def reads(show, data) -> set[str]:
    log: set[str] = set()
    show(recorded(data, "", log))
    return log


def cases() -> list[tuple[str, dict, object]]:
    """(stored analysis, committed data, the view the service builds from it) for every committed example."""
    from core.lrp import bias, committed
    from core.lrp.service import EXAMPLES as LRP
    from core.lrp.views import view as lrp_view
    from core.mathneuro import views as mathneuro_views
    from core.mathneuro.service import EXAMPLES as MATHNEURO
    from core.mixln.compute import STORED as MIXLN_STORED
    from core.analyses import request_for
    from core.mixln.views import ANALYSES as MIXLN, view as mixln_view
    from core.neuzip import views as neuzip_views
    from core.neuzip.service import EXAMPLES as NEUZIP
    from core.paths import ASSETS_DIR

    out = []
    for e in LRP.entries() + committed.evaluation_store().entries() + bias.STORE.entries():
        out.append((e["analysis"], e["data"], lambda d, n=e["analysis"]: lrp_view(n, Found(d, "cache", None))))
    for e in MATHNEURO.entries():
        name = e["analysis"].removeprefix("mathneuro-")
        out.append((e["analysis"], e["data"], lambda d, n=name: mathneuro_views.view(n, Found(d, "cache", ""))))
    stored = {a.stored_as: k for k, a in neuzip_views.ANALYSES.items() if a.stored_as}
    for e in NEUZIP.entries():  # the service names the model in the data it shows
        out.append((e["analysis"], e["data"], lambda d, n=stored[e["analysis"]], m=e["model"]: neuzip_views.view(
            n, Found(_named(d, m), "cache", ""))))
    cached = {a.stored_as: k for k, a in MIXLN.items() if a.stored_as} | {v: k for k, v in MIXLN_STORED.items()}
    for path in sorted((ASSETS_DIR / "mixln").rglob("diagnostics.json"))[:4]:
        run = path.parent.relative_to(ASSETS_DIR / "mixln").as_posix()
        for e in ExampleStore(path).entries():
            name, p = cached[e["analysis"]], e["params"]

            def show(d, name=name, p=p, run=run):
                if name == "removal":
                    return mixln_view(name, Found([d], "cache", ""),
                                      request_for(MIXLN, name, [run], p["samples"], p["seq_len"]))
                return mixln_view(name, Found(d, "cache", ""), request_for(MIXLN, name, run, p["samples"], p["seq_len"]))
            out.append((e["analysis"], e["data"], show))
    return out


def _named(data: dict, model: str) -> dict:
    """``data`` naming its model, as :func:`core.analyses.named` gives it to the view (in place, so a recorded mapping
    keeps recording)."""
    if "model" not in data:
        dict.__setitem__(data, "model", model)
    return data


@pytest.fixture(scope="module")
def examples():
    return cases()


def test_every_committed_entry_fits_its_schema_and_is_sealed():
    seen = set()
    for path in committed_stores():
        report = ExampleStore.seal(path, check_only=True, schemas=SCHEMAS)
        assert report["unsealed"] == 0, f"{path}: run `python -m core cache seal`"
        assert report["schema_problems"] == [], report["schema_problems"][:3]
        seen |= {e["analysis"] for e in json.loads(path.read_text())["entries"]}
    assert not seen - set(SCHEMAS), f"no schema for {seen - set(SCHEMAS)}"
    assert len(committed_stores()) >= 5


def test_every_cached_analysis_has_a_schema():
    from core.mathneuro.views import ANALYSES as MATHNEURO
    from core.mixln.compute import STORED as MIXLN_STORED
    from core.mixln.views import ANALYSES as MIXLN
    from core.neuzip.views import ANALYSES as NEUZIP

    from core.lrp.views import ANALYSES as LRP

    stored = set(LRP) | {f"mathneuro-{n}" for n in MATHNEURO} | {a.stored_as for a in MIXLN.values() if a.stored_as}
    stored |= set(MIXLN_STORED.values()) | {a.stored_as for a in NEUZIP.values() if a.stored_as and a.cached}
    missing = sorted(n for n in stored if SCHEMAS.get(n) is None)
    assert not missing, missing


def test_a_schema_names_every_field_its_view_reads(examples):
    """The recorder sees the fields a view reads from a committed example; each is in the schema (so a field the view
    needs can never be missing or of the wrong type in a result that is served)."""
    unnamed = {}
    for analysis, data, show in examples:
        declared = paths(SCHEMAS[analysis])
        maps = MAPS.get(analysis, [])
        for path in reads(show, copy.deepcopy(data)):
            generic = _generic(path, maps)
            if generic not in declared:
                unnamed.setdefault(analysis, set()).add(generic)
    assert not unnamed, {k: sorted(v)[:8] for k, v in unnamed.items()}


def _generic(path: str, maps: list[str]) -> str:
    """``methods.mambalrp.logit`` -> ``methods.*.logit`` where ``methods`` is a mapping of the analysis."""
    segs, out = path.split("."), []
    for seg in segs:
        prefix = ".".join(out)
        out.append("*" if prefix in maps else seg)
    return ".".join(out)


def _set_none(data, path: str):
    """A copy of ``data`` with the first value at the schema path ``path`` (``*`` and ``[]`` take the first) set to
    None; None when there is no such value."""
    d = copy.deepcopy(data)
    segs = re.findall(r"[^.\[\]]+|\[\]", path.replace("[]", ".[]"))
    cur = d
    for i, seg in enumerate(segs):
        last = i == len(segs) - 1
        if seg in ("[]", "*"):
            if not cur:
                return None
            k = 0 if seg == "[]" else next(iter(cur))
        else:
            if not isinstance(cur, dict) or seg not in cur:
                return None
            k = seg
        if last:
            cur[k] = None
        else:
            cur = cur[k]
    return d


@pytest.mark.slow
def test_a_none_the_view_cannot_show_is_refused_by_the_schema(examples):
    """For every field a schema names, the first committed example with a ``None`` there: if its view then fails (the
    issue's "unsupported format string passed to NoneType.__format__"), the schema refuses the data first."""
    firsts, let_through, probed = {}, [], 0
    for analysis, data, show in examples:
        firsts.setdefault(analysis, (data, show))
    for analysis, (data, show) in firsts.items():
        schema = SCHEMAS[analysis]
        for path in sorted(paths(schema)):
            planted = _set_none(data, path)
            if planted is None:
                continue
            probed += 1
            try:
                show(planted)
            except Exception as exc:  # noqa: BLE001 - the view failing is what the schema must prevent
                if problem(schema, planted) is None:
                    let_through.append(f"{analysis} {path}: {type(exc).__name__}: {exc}"[:200])
    print(f"\n{probed} fields set to None in {len(firsts)} analyses")
    assert probed > 150 and not let_through, let_through[:5]


def test_the_schema_language():
    s = Rec({"a": Num, "b": Opt(Str), "c": ListOf(Num, 1)}, optional={"d": Num}, same_length=(("c", "e"),))
    good = {"a": 1.5, "b": None, "c": [1, 2], "e": [0, 0]}
    assert problem(s, good) is None
    assert problem(s, {**good, "a": None}) == "data.a is None, not a finite number"
    assert problem(s, {**good, "a": True}).startswith("data.a is a bool")
    assert problem(s, {**good, "a": float("inf")}).startswith("data.a is a float")
    assert problem(s, {k: v for k, v in good.items() if k != "a"}) == "data.a is missing"
    assert problem(s, {**good, "c": []}) == "data.c has 0 items, fewer than 1"
    assert problem(s, {**good, "d": "x"}).startswith("data.d is a str")
    assert problem(s, {**good, "e": [0]}) == "data: c has 2, e has 1 items (they must agree)"
    assert paths(s) == {"a", "b", "c", "d"}


def test_a_corrupted_example_is_computed_instead_of_served(tmp_path, caplog, fresh_cache):
    from core.mixln.schemas import REMOVAL
    from core.runner import lookup

    data = {"subject": "m", "baseline_loss": 1.0, "baseline_perplexity": 2.7, "layers": [0], "losses": [1.5],
            "loss_increase": [0.5], "perplexities": [4.5], "perplexity_increase": [1.8]}
    entry = {"model": "m", "fingerprint": "fp", "analysis": "mixln/removal", "params": {"n": 1}, "data": data}
    path = tmp_path / "examples.json"
    ExampleStore.write(path, [entry])
    found = lookup("fp", "mixln/removal", {"n": 1}, lambda: 1 / 0, examples=ExampleStore(path), schema=REMOVAL)
    assert found.source == "precomputed"
    doc = json.loads(path.read_text())
    doc["entries"][0]["data"]["baseline_perplexity"] = 561_864.6  # a wrong finite value, the checksum left stale
    path.write_text(json.dumps(doc))
    right = {**data, "baseline_perplexity": 49_813_310.3}
    with caplog.at_level("WARNING"):
        found = lookup("fp", "mixln/removal", {"n": 1}, lambda: right, examples=ExampleStore(path), schema=REMOVAL)
    assert (found.source, found.data) == ("computed", right)
    assert [r for r in caplog.records if "not served" in r.getMessage()]
    doc["entries"][0]["data"]["baseline_perplexity"] = None  # a null field, sealed anew: the schema refuses it
    doc["entries"][0]["checksum"] = example_checksum(doc["entries"][0])
    path.write_text(json.dumps(doc))
    fresh_cache.clear()
    found = lookup("fp", "mixln/removal", {"n": 1}, lambda: right, examples=ExampleStore(path), schema=REMOVAL)
    assert (found.source, found.data) == ("computed", right)

