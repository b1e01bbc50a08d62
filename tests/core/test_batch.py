"""Batch runs (core.batch): one output row per input row in input order, carried columns, refused rows with their
message, resumable after a stop without recomputing a finished row, a clear message for a file or an unfinished batch
that does not fit, bounded parts. A counting kind stands in for an analysis, so the engine is tested in milliseconds;
tests/core/test_batch_cli.py runs the real MambaLRP kind in a process and kills it."""
from __future__ import annotations

import json

import pandas as pd
import pyarrow.parquet as pq
import pytest

from core import batch
from core.errors import BadInputError, Cancelled


def _counting_kind(calls: list):
    """A kind whose row is the text's length and word count; it refuses the text "bad" and records every call."""
    def settings(scale=1):
        if not isinstance(scale, int) or scale < 1:
            raise BadInputError(f"scale must be a whole number >= 1, got {scale!r}.")
        return {"scale": scale}

    def row(_ctx, text, s, progress=None):
        calls.append(text)
        if text == "bad":
            raise BadInputError("The text is bad.", fix="Give a good one.")
        return {"length": s["scale"] * len(text), "words": text.split()}, "computed"

    return batch.BatchKind("count", "lrp", "Counting", "text", settings,
                           lambda s: [batch.Column("length", "int64", "characters x scale"),
                                      batch.Column("words", "list<string>", "the words")],
                           lambda s, progress=None: (None, {"fingerprint": "fixed"}), row,
                           lambda p: None, lambda a: {})


def _csv(path, texts, extra=True):
    pd.DataFrame({"text": texts, **({"label": list(range(len(texts)))} if extra else {})}).to_csv(path, index=False)
    return path


def test_every_row_once_in_order_with_carried_columns_and_refused_rows(tmp_path):
    calls = []
    texts = [f"text number {i}" for i in range(10)] + ["bad", "last one"]
    summary = batch.run(_counting_kind(calls), _csv(tmp_path / "in.csv", texts), tmp_path / "out.parquet", chunk=3)
    out = pd.read_parquet(tmp_path / "out.parquet")
    assert list(out["index"]) == list(range(12)) and list(out["text"]) == texts
    assert list(out["label"]) == [str(i) for i in range(12)]  # carried, as text
    assert list(out["length"][:10]) == [len(t) for t in texts[:10]]
    assert list(out.loc[11, "words"]) == ["last", "one"]
    assert out.loc[10, "error"] == "The text is bad. Fix: Give a good one." and pd.isna(out.loc[10, "length"])
    assert summary["computed"] == 11 and summary["errors"] == 1 and summary["done_now"] == 12
    assert calls == texts and not batch.parts_dir(tmp_path / "out.parquet").exists()
    meta = batch.read_meta(tmp_path / "out.parquet")
    assert meta["kind"] == "count" and meta["settings"] == {"scale": 1} and meta["input"]["rows"] == 12
    assert meta["provenance"] == {"fingerprint": "fixed"} and meta["columns"]["length"] == "characters x scale"
    assert pq.ParquetFile(tmp_path / "out.parquet").metadata.num_rows == 12


def test_stopped_batch_resumes_without_recomputing_a_finished_row(tmp_path):
    calls = []
    texts = [f"t{i}" for i in range(20)]
    source, out = _csv(tmp_path / "in.csv", texts), tmp_path / "out.parquet"
    seen = []

    def stop_after_seven(fraction, message):
        seen.append(message)
        if len(calls) >= 7:
            raise Cancelled("Stopped.")

    with pytest.raises(Cancelled) as stopped:
        batch.run(_counting_kind(calls), source, out, stop_after_seven, chunk=3)
    assert stopped.value.partial["done_now"] == 7 and "7 of 20 rows" in str(stopped.value)
    assert batch.finished_rows(batch.parts_dir(out)) == set(range(7))  # the rows finished before Stop are kept
    assert not out.exists()
    first = list(calls)
    summary = batch.run(_counting_kind(calls), source, out, chunk=3)
    assert summary["finished_before"] == 7 and summary["done_now"] == 13 and summary["attempt"] == 2
    assert calls[len(first):] == texts[7:]  # each finished row was computed exactly once
    result = pd.read_parquet(out)
    assert list(result["index"]) == list(range(20))
    assert list(result["attempt"]) == [1] * 7 + [2] * 13
    again = batch.run(_counting_kind(calls), source, out)  # complete: nothing to do
    assert again["finished_before"] == 20 and again["done_now"] == 0 and len(calls) == 20


def test_jsonl_input_and_a_damaged_part_is_recomputed(tmp_path):
    calls = []
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(json.dumps({"text": f"t{i}", "meta": {"i": i}}) for i in range(6)) + "\n\n")
    out = tmp_path / "out.parquet"
    with pytest.raises(Cancelled):
        batch.run(_counting_kind(calls), source, out,
                  lambda f, m: (_ for _ in ()).throw(Cancelled()) if len(calls) >= 4 else None, chunk=2)
    parts = sorted(batch.parts_dir(out).glob("part-*.parquet"))
    assert len(parts) == 2
    parts[-1].write_bytes(b"not parquet")  # as a file damaged outside the batch's atomic writes would be
    batch.run(_counting_kind(calls), source, out, chunk=2)
    assert calls == ["t0", "t1", "t2", "t3", "t2", "t3", "t4", "t5"]
    assert list(pd.read_parquet(out)["meta"]) == [json.dumps({"i": i}) for i in range(6)]


@pytest.mark.parametrize("content, message", [
    ("words\nhello\n", "no 'text' column"),
    ("text\n", "has no rows"),
    ('{"text": "a"}\n[1, 2]\n', "line 2: a list"),
    ('{"text": "a"}\n{broken\n', "line 2: not JSON"),
])
def test_bad_input_files_get_one_clear_message_before_any_work(tmp_path, content, message):
    calls = []
    source = tmp_path / ("in.jsonl" if content.startswith("{") else "in.csv")
    source.write_text(content)
    with pytest.raises(BadInputError, match=message):
        batch.run(_counting_kind(calls), source, tmp_path / "out.parquet")
    assert calls == []


def test_bad_paths_settings_and_a_foreign_unfinished_batch(tmp_path):
    calls = []
    source = _csv(tmp_path / "in.csv", ["a", "b", "c"])
    kind = _counting_kind(calls)
    with pytest.raises(BadInputError, match=r"\.csv \(with a header row\) or \.jsonl"):
        batch.run(kind, tmp_path / "in.txt", tmp_path / "o.parquet")
    with pytest.raises(BadInputError, match="no input file"):
        batch.run(kind, tmp_path / "missing.csv", tmp_path / "o.parquet")
    with pytest.raises(BadInputError, match="writes a .parquet file"):
        batch.run(kind, source, tmp_path / "o.csv")
    with pytest.raises(BadInputError, match="scale must be"):
        batch.run(kind, source, tmp_path / "o.parquet", scale=0)
    with pytest.raises(BadInputError, match="more than 2 rows"):
        batch.run(kind, source, tmp_path / "o.parquet", max_rows=2)
    with pytest.raises(Cancelled):
        batch.run(kind, source, tmp_path / "o.parquet", lambda f, m: (_ for _ in ()).throw(Cancelled())
                  if calls else None, chunk=1)
    with pytest.raises(BadInputError, match="unfinished batch with other settings"):
        batch.run(kind, source, tmp_path / "o.parquet", scale=2)
    assert batch.run(kind, source, tmp_path / "o.parquet", restart=True, scale=2)["finished_before"] == 0
    assert list(pd.read_parquet(tmp_path / "o.parquet")["length"]) == [2, 2, 2]
    with pytest.raises(BadInputError, match="results of another batch"):
        batch.run(kind, source, tmp_path / "o.parquet", scale=3)


def test_csv_export_keeps_lists_as_json(tmp_path):
    source = _csv(tmp_path / "in.csv", ["one two", "three"], extra=False)
    batch.run(_counting_kind([]), source, tmp_path / "o.parquet")
    back = pd.read_csv(batch.to_csv(tmp_path / "o.parquet", tmp_path / "o.csv"))
    assert [json.loads(w) for w in back["words"]] == [["one", "two"], ["three"]]


def test_the_registry_lists_each_papers_kind_with_its_input_column():
    from core import papers

    found = papers.batch_kinds()
    assert {k: v.column for k, v in found.items()} == {"lrp": "text", "mathneuro": "prompt", "neuzip": "model"}
    with pytest.raises(BadInputError, match="no batch kind"):
        papers.batch_kind("nope")
    with pytest.raises(BadInputError, match="no batch kind"):
        papers.batch_kind("mixln")  # a paper without one


def test_a_duplicated_or_foreign_part_is_dropped_with_a_message_and_each_row_merged_once(tmp_path):
    """Issue 42, item 8: a duplicated part file gave "65 of 60 rows", a part of another schema a traceback at the
    merge. Resuming now checks every part (schema, index range, repeats): a bad one is dropped, said, and its rows are
    computed again; the output holds each input row once."""
    import shutil

    import pyarrow as pa

    calls = []
    texts = [f"t{i}" for i in range(12)]
    source, out = _csv(tmp_path / "in.csv", texts), tmp_path / "out.parquet"
    with pytest.raises(Cancelled):
        batch.run(_counting_kind(calls), source, out,
                  lambda f, m: (_ for _ in ()).throw(Cancelled()) if len(calls) >= 9 else None, chunk=3)
    parts = sorted(batch.parts_dir(out).glob("part-*.parquet"))
    assert [p.name for p in parts] == ["part-000001.parquet", "part-000002.parquet", "part-000003.parquet"]
    shutil.copy(parts[0], parts[0].with_name("part-000004.parquet"))  # rows 0-2 a second time
    pq.write_table(pa.table({"index": [3, 4, 5], "other": ["x", "y", "z"]}), parts[1])  # another schema
    bad_range = pq.read_table(parts[2]).to_pylist()
    for r in bad_range:
        r["index"] += 100  # past the input's 12 rows
    pq.write_table(pa.Table.from_pylist(bad_range, schema=pq.read_schema(parts[2])), parts[2])
    messages = []
    summary = batch.run(_counting_kind(calls), source, out, lambda f, m: messages.append(m), chunk=3)
    result = pd.read_parquet(out)
    assert list(result["index"]) == list(range(12)) and list(result["text"]) == texts  # 12 of 12, once each
    assert summary["finished_before"] == 3 and summary["done_now"] == 9 and calls[9:] == texts[3:]
    assert summary["parts_dropped"] == [
        "part-000002.parquet (its columns are not this batch's)",
        "part-000003.parquet (it holds a row index outside 0-11)",
        "part-000004.parquet (it repeats rows of an earlier part)"]
    assert any(m.startswith("Counting: dropped 3 damaged part files") for m in messages)
