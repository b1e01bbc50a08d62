"""Tidy results (core.results.long_frame / Result.frame): one long-format table per result, the same mechanism for
every paper; pivoting it back gives every numeric column of every table exactly, and the downloads hold the same
table as CSV and Parquet that pandas reads back equal."""
from __future__ import annotations

import json
import math

import pandas as pd
import pytest

import core.examples as ex
from core.results import LONG_COLUMNS, Result, long_frame


def _round_trip(res: Result) -> None:
    """Every number of every table is one row of the frame, and pivoting gives the table's numeric columns back."""
    frame = res.frame()
    assert list(frame.columns[:2]) == ["table", "record"] and list(frame.columns[-2:]) == ["measure", "value"]
    for name, rows in res.tables.items():
        part = frame[frame["table"] == name]
        wide = part.pivot(index="record", columns="measure", values="value")
        for measure in wide.columns:
            for i, row in enumerate(rows):
                want = row.get(measure)
                got = wide.loc[i, measure]
                assert (want is None and math.isnan(got)) or got == float(want), (name, i, measure)
        for key in [c for c in part.columns if c not in LONG_COLUMNS and part[c].notna().any()]:
            original = key[:-1] if key.endswith("_") and key[:-1] in LONG_COLUMNS else key
            first = part.drop_duplicates("record").set_index("record")[key]
            want = [json.dumps(v) if isinstance(v, list) else v for v in (row.get(original) for row in rows)]
            assert [first[i] for i in range(len(rows))] == want, (name, key)


def test_hand_made_tables_become_one_row_per_number():
    res = Result("x", {}, tables={
        "relevance": [{"position": 0, "token": "a", "m1": 0.5, "m2": None}, {"position": 1, "token": "b", "m1": -1,
                                                                            "m2": 2.0}],
        "methods": [{"method": "m1", "value": 3, "n": 10, "flag": True, "seeds": [1, 2], "score": 0.25}]}, stem="t")
    frame = res.frame()
    assert list(frame.columns) == ["table", "record", "position", "token", "method", "value_", "n", "flag", "seeds",
                                   "measure", "value"]
    rel = frame[frame.table == "relevance"]
    assert rel[["record", "token", "measure"]].values.tolist() == [[0, "a", "m1"], [0, "a", "m2"], [1, "b", "m1"],
                                                                   [1, "b", "m2"]]
    assert rel["position"].tolist() == [0, 0, 1, 1] and rel["value"].tolist()[::2] == [0.5, -1.0]
    assert math.isnan(rel["value"].iloc[1])  # a missing number stays a row, NaN
    methods = frame[frame.table == "methods"]  # value and n are keys (value renamed value_); flags and lists too
    assert methods[["method", "value_", "n", "flag", "seeds", "measure", "value"]].values.tolist() == [
        ["m1", 3, 10, True, "[1, 2]", "score", 0.25]]
    assert frame.dtypes["value"] == "float64" and frame.dtypes["record"] == "int64"
    _round_trip(res)
    assert long_frame({}).columns.tolist() == list(LONG_COLUMNS) and Result("x", {}).frame().empty


@pytest.mark.parametrize("tab, name", [("lrp", "sentiment-1"), ("lrp", "digit-0"), ("lrp", "faithfulness"),
                                       ("mathneuro", "effect"), ("mathneuro", "proportion-sweep"),
                                       ("mixln", "compare"), ("mixln", "gradnorms"),
                                       ("neuzip", "tradeoff"), ("neuzip", "histograms")])
def test_every_papers_result_frame_round_trips_and_the_downloads_hold_it(tab, name):
    res = ex.show(ex.default_view(tab, name))
    frame = res.frame()
    assert not frame.empty
    _round_trip(res)
    files = {f.rsplit("/", 1)[1]: f for f in res.files()}
    long_csv, long_parquet = files[f"{res.stem}-long.csv"], files[f"{res.stem}-long.parquet"]
    from_parquet = pd.read_parquet(long_parquet)
    pd.testing.assert_frame_equal(from_parquet, frame)
    from_csv = pd.read_csv(long_csv)
    assert from_csv.shape == frame.shape and list(from_csv.columns) == list(frame.columns)
    assert from_csv["value"].tolist() == pytest.approx(frame["value"].tolist(), nan_ok=True)


def test_key_columns_of_the_papers_tables():
    text = ex.show(ex.default_view("lrp", "sentiment-1")).frame()
    assert set(text.columns) == {"table", "record", "position", "token", "measure", "value"}
    assert set(text["measure"]) == {"mambalrp", "gradient_x_input", "integrated_gradients", "mamba_attr"}
    sweep = ex.show(ex.default_view("mathneuro", "proportion-sweep")).frame()
    assert "proportion" in sweep.columns and "proportion" not in set(sweep["measure"])  # a setting, not a measure
    tradeoff = ex.show(ex.default_view("neuzip", "tradeoff")).frame()
    assert {"setting", "family", "pareto"} <= set(tradeoff.columns) and "word_perplexity" in set(tradeoff["measure"])
