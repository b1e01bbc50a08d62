"""Every loader on its real offline source, the seeded splits, the synthetic tasks and the hub adapters."""
import collections
import json

import numpy as np
import pytest

from core import data
from core.data import online, registry, sources, synthetic
from core.data.records import ImageLabel, MathProblem, MultipleChoice, Passage, TextLabel, TokenTask
from core.data.splits import split_indices
from core.errors import BadInputError, DataMissingError

OFFLINE = [n for n, s in data.DATASETS.items() if s.storage != "hub"]


@pytest.fixture(scope="module", autouse=True)
def prepared():
    missing = [n for n in OFFLINE if not data.status(n).ready]
    assert not missing, f"run `python -m core data prepare` first (missing: {missing})"


def test_movie_sentiment_matches_the_source_counts():
    recs = data.load("movie-sentiment", "all")
    labels = collections.Counter(r.label for r in recs)
    assert len(recs) == 10_568  # 10,605 rated sentences minus 37 neutral ones
    assert labels == {1: 5_242, 0: 5_326}
    assert all(isinstance(r, TextLabel) and r.text and (r.score > 0) == (r.label == 1) for r in recs)


def test_mnist_5k_is_balanced_28x28():
    recs = data.load("mnist-5k", "all")
    assert len(recs) == 5_000
    assert collections.Counter(r.label for r in recs) == {d: 500 for d in range(10)}
    img = recs[0].image
    assert isinstance(recs[0], ImageLabel) and img.shape == (28, 28) and img.dtype == np.uint8 and img.max() > 200


def test_digits_8x8_rescaled_to_bytes():
    recs = data.load("digits-8x8", "all")
    assert len(recs) == 1_797
    stack = np.stack([r.image for r in recs])
    assert stack.shape == (1_797, 8, 8) and stack.dtype == np.uint8 and stack.max() == 255 and stack.min() == 0


def test_gsm_symbolic_solutions_end_in_the_answer():
    recs = data.load("gsm-symbolic", "all")
    assert len(recs) == sources.GSM_SYMBOLIC_SIZE
    for r in recs[:200]:
        assert isinstance(r, MathProblem)
        final = r.solution.rsplit("####", 1)[1]
        assert float(final.replace(",", "")) == float(r.answer)
        assert r.answer == data.canonical_number(r.answer)


def test_mmlu_full_test_set_without_header_rows():
    recs = data.load("mmlu", "all")
    assert len(recs) == 14_042
    assert len({r.subject for r in recs}) == 57
    assert all(isinstance(r, MultipleChoice) and len(r.choices) == 4 and 0 <= r.answer < 4 for r in recs)
    assert not any(r.question == "question" for r in recs)


def test_logiqa_has_passages_questions_and_four_options():
    recs = data.load("logiqa", "all")
    assert len(recs) == 1_354
    assert all(len(r.choices) == 4 and all(r.choices) and 0 <= r.answer < 4 for r in recs)
    assert sum(bool(r.passage) for r in recs) > 1_300
    assert collections.Counter(r.answer for r in recs).most_common(1)[0][1] < 500  # not all one letter


def test_parse_logiqa_on_a_hand_made_prompt():
    prompt = ("\nPassage: All cats are grey. Tom is a cat.Question: What colour is Tom?\n"
              "A. A.Black.\nB. B.Grey.\nC. C.White.\nD. D.Unknown.\nAnswer:")
    rec = sources.parse_logiqa(prompt, "B")
    assert rec.passage == "All cats are grey. Tom is a cat."
    assert rec.question == "What colour is Tom?"
    assert rec.choices == ("Black.", "Grey.", "White.", "Unknown.") and rec.answer == 1


@pytest.mark.parametrize("name", ["wikipedia-paragraphs", "openwebtext-paragraphs"])
def test_paragraph_corpora(name):
    recs = data.load(name, "all")
    assert len(recs) == 1_000
    assert all(isinstance(r, Passage) and len(r.text) > 20 for r in recs)
    assert sum(len(r.text.split()) for r in recs) > 90_000


def test_pydoc_topics_is_real_prose():
    recs = data.load("pydoc-topics", "all")
    assert sum(len(r.text) for r in recs) > 300_000


@pytest.mark.parametrize("name", OFFLINE)
def test_splits_are_fixed_disjoint_and_cover_everything(name):
    everything = data.load(name, "all")
    parts = {s: data.load(name, s) for s in ("train", "validation", "test")}
    assert sum(map(len, parts.values())) == len(everything)
    assert abs(len(parts["train"]) - 0.8 * len(everything)) <= 1
    idx = split_indices(len(everything), name)
    assert set(np.concatenate(list(idx.values()))) == set(range(len(everything)))
    again = split_indices(len(everything), name)
    assert all(np.array_equal(idx[s], again[s]) for s in idx)
    first = parts["test"][0]
    assert first is everything[idx["test"][0]]


def test_split_depends_on_the_dataset_name():
    a, b = split_indices(1000, "one"), split_indices(1000, "two")
    assert not np.array_equal(a["test"], b["test"])


def test_arithmetic_word_problems_are_correct_and_seeded():
    recs = synthetic.arithmetic_word_problems(300, seed=3)
    assert recs == synthetic.arithmetic_word_problems(300, seed=3)
    assert recs != synthetic.arithmetic_word_problems(300, seed=4)
    for r in recs:
        expr = r.solution.split(" = ")[0]
        assert eval(expr) == int(r.answer) >= 0  # noqa: S307 - our own generated "a op b"
        assert r.solution.endswith(f"#### {r.answer}")


def test_key_token_label_is_decided_by_the_key():
    recs = synthetic.key_token_task(200, seed=1, length=16, vocab_size=20)
    for r in recs:
        assert isinstance(r, TokenTask) and len(r.tokens) == 16
        (pos,) = r.key_positions
        assert r.tokens[pos] == (synthetic.KEY_POSITIVE if r.label else synthetic.KEY_NEGATIVE)
        others = [t for i, t in enumerate(r.tokens) if i != pos]
        assert min(others) >= synthetic.FIRST_FILLER


def test_bad_names_and_splits_are_user_errors():
    with pytest.raises(BadInputError, match="unknown dataset"):
        data.load("no-such-data")
    with pytest.raises(BadInputError, match="unknown split"):
        data.load("mmlu", "dev")


def test_hub_dataset_offline_names_the_fix():
    with pytest.raises(DataMissingError) as err:
        data.load("sst2", "test")
    assert "--online" in err.value.fix


def test_missing_prepared_dataset_names_the_command(tmp_path, monkeypatch):
    monkeypatch.setenv("LAYERWISE_HOME", str(tmp_path))
    registry._load_all.cache_clear()
    try:
        st = data.status("mmlu")
        assert not st.ready and st.fix == "python -m core data prepare --only mmlu"
        with pytest.raises(DataMissingError, match="not available"):
            data.load("mmlu", "test")
    finally:
        registry._load_all.cache_clear()


def _fake_spec(build):
    return registry.DatasetSpec("fake-sentiment", "fake", "sentiment", TextLabel, "prepared", build, "test", "none")


def test_prepare_round_trips_and_is_atomic(tmp_path, monkeypatch):
    monkeypatch.setenv("LAYERWISE_HOME", str(tmp_path))
    recs = [TextLabel("good", 1, 2.5), TextLabel("bad \u00e9", 0, -1.0)] * 10

    def broken():
        raise RuntimeError("source vanished mid-way")

    monkeypatch.setitem(registry.DATASETS, "fake-sentiment", _fake_spec(broken))
    with pytest.raises(RuntimeError):
        data.prepare(["fake-sentiment"])
    assert not data.status("fake-sentiment").ready  # nothing half-written looks ready
    monkeypatch.setitem(registry.DATASETS, "fake-sentiment", _fake_spec(lambda: recs))
    assert data.prepare(["fake-sentiment"])["fake-sentiment"] >= 0
    registry._load_all.cache_clear()
    assert data.load("fake-sentiment", "all") == recs
    assert data.prepare(["fake-sentiment"]) == {"fake-sentiment": 0.0}  # idempotent
    registry._load_all.cache_clear()


# ---- the online paths, on generated fixtures shaped like the hub's rows ---------------------------

FIXTURES = {
    "sst2": {"train": [{"idx": i, "sentence": f"s{i} ", "label": i % 2} for i in range(20)],
             "validation": [{"idx": 0, "sentence": "fine", "label": 1}],
             "test": [{"idx": 0, "sentence": "hidden", "label": -1}]},
    "gsm8k": {"train": [{"question": f"q{i}", "answer": f"2+2=4\n#### {1000 + i:,}"} for i in range(10)],
              "test": [{"question": "q", "answer": "so\n#### 7"}]},
    "race": {s: [{"example_id": "x", "article": "A text.", "question": "Why?", "options": ["a", "b", "c", "d"],
                  "answer": "C"}] for s in ("train", "validation", "test")},
    "mmlu-hub": {s: [{"question": "2+2?", "subject": "math", "choices": ["3", "4", "5", "6"], "answer": 1}]
                 for s in ("dev", "validation", "test")},
    "wikitext-2": {s: [{"text": " = Title = \n"}, {"text": ""}, {"text": " Some prose here . \n"}]
                   for s in ("train", "validation", "test")},
}


def fake_loader(name):
    def load_dataset(path, config=None, split=None):
        assert path == online.HUB_SOURCES[name].path
        return FIXTURES[name][split]
    return load_dataset


@pytest.mark.parametrize("name", list(online.HUB_SOURCES))
def test_hub_adapters_give_the_same_record_types(name):
    spec = data.get_spec(name)
    for split in ("train", "validation", "test"):
        recs = online.load_hub(name, split, loader=fake_loader(name))
        assert all(isinstance(r, spec.record_type) for r in recs)


def test_hub_adapters_convert_fields():
    sst = online.load_hub("sst2", "test", loader=fake_loader("sst2"))
    assert sst == [TextLabel("fine", 1)]
    train = online.load_hub("sst2", "train", loader=fake_loader("sst2"))
    val = online.load_hub("sst2", "validation", loader=fake_loader("sst2"))
    assert len(train) == 18 and len(val) == 2 and not {r.text for r in train} & {r.text for r in val}
    gsm = online.load_hub("gsm8k", "train", loader=fake_loader("gsm8k"))
    assert all(r.answer.isdigit() and int(r.answer) >= 1000 for r in gsm)  # "1,000" -> "1000"
    race = online.load_hub("race", "test", loader=fake_loader("race"))[0]
    assert race.answer == 2 and race.passage == "A text." and race.choices == ("a", "b", "c", "d")
    wiki = online.load_hub("wikitext-2", "test", loader=fake_loader("wikitext-2"))
    assert [p.text for p in wiki] == ["Some prose here ."]


def test_canonical_number():
    assert [data.canonical_number(x) for x in ("1,000", "168.0", "2.50", " 7 ", "abc")] == \
        ["1000", "168", "2.5", "7", "abc"]


def test_record_rows_are_json():
    for name in ("mnist-5k", "mmlu", "key-token"):
        json.dumps(data.record_to_row(data.load(name, "test", limit=1)[0]))
