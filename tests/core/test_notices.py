"""LICENSE and NOTICE.md: the project's licence, and the third-party terms read from the registries (a model or a
dataset added to a registry without a line in NOTICE.md fails here, with the command that rewrites it)."""
from pathlib import Path

from core.data import DATASETS
from core.notices import check, dataset_rows, model_rows, notice_markdown
from core.zoo import registered_names

REPO = Path(__file__).resolve().parents[2]


def test_notice_md_is_what_the_registries_say():
    problem = check()
    assert problem is None, problem


def test_every_model_and_dataset_is_listed_with_a_licence():
    assert [r["model"] for r in model_rows()] == registered_names()
    assert [r["dataset"] for r in dataset_rows()] == list(DATASETS)
    text = notice_markdown()
    for row in model_rows() + dataset_rows():
        assert row["licence"] and row["licence"] != "not stated", row
        assert f"| {row.get('model') or row.get('dataset')} | " in text
    assert "smollm2-135m | SmolLM2-135M-Instruct | Apache-2.0" in text and "| wikipedia-paragraphs |" in text


def test_the_lrp_patent_statement_and_the_licence_are_where_a_deployer_reads():
    text = notice_markdown()
    assert "patented" in text and "personal and scientific" in text and "LRP-eXplains-Transformers" in text
    licence = (REPO / "LICENSE").read_text()
    assert licence.lstrip().startswith("Apache License") and "Version 2.0, January 2004" in licence
    readme = (REPO / "README.md").read_text()
    assert "](LICENSE)" in readme and "](NOTICE.md)" in readme and "license: apache-2.0" in readme.split("---")[1]
    space = (REPO / "docs" / "space.md").read_text()
    assert "`NOTICE.md`" in space and "`LICENSE`" in space and "patented" in space
