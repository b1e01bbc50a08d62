"""The registry of the views a speaker shows (core.examples): every tab has precomputed examples that draw without a
model, every link reads back as the view it was written from, and nothing in a link fails."""
from urllib.parse import parse_qsl, urlsplit

import pytest

import core.examples as ex
from core.errors import BadInputError

TABS = {"models_data": "Models & data", "lrp": "MambaLRP", "mathneuro": "MathNeuro", "mixln": "Mix-LN",
        "neuzip": "NeuZip"}
ALL = [(tab, e.name) for tab, exs in ex.registry().items() for e in exs]


def query(link: str) -> dict:
    return dict(parse_qsl(urlsplit(link).query))


def test_every_paper_tab_lists_its_examples_once():
    reg = ex.registry()
    assert set(reg) == {"lrp", "mathneuro", "mixln", "neuzip"}
    for tab, exs in reg.items():
        assert len(exs) >= 4, tab
        assert len({e.name for e in exs}) == len(exs) and len({e.title for e in exs}) == len(exs), tab
        for e in exs:
            assert {p.name for p in e.params} == set(e.defaults), (tab, e.name)


@pytest.fixture
def no_model_loads(monkeypatch):
    """Any model load fails the test: a precomputed view must be drawn from the committed files alone."""
    import core.zoo
    import core.zoo.loading

    def refuse(*args, **kwargs):
        raise AssertionError(f"a precomputed view loaded a model: {args}")
    monkeypatch.setattr(core.zoo.loading, "load_model", refuse)
    monkeypatch.setattr(core.zoo, "load_model", refuse)


@pytest.mark.parametrize("tab,name", ALL)
def test_every_example_is_precomputed_and_draws_its_chart_without_a_model(tab, name, no_model_loads):
    view = ex.default_view(tab, name)
    assert view.precomputed
    res = ex.show(view)  # how fast: bench/talk.py (examples_draw)
    fig = res.figures[view.example.figure]
    assert fig.layout.title.text and len(fig.data) > 0, (tab, name)
    assert res.source in ("precomputed", "computed", "cache"), res.source


@pytest.mark.parametrize("tab,name", ALL)
def test_a_link_reads_back_as_the_view_it_was_written_from(tab, name):
    view = ex.default_view(tab, name)
    opened = ex.resolve(query(view.query()), TABS)
    assert (opened.tab, opened.view.example.name, dict(opened.view.values), opened.notice) == \
        (tab, name, dict(view.values), "")
    assert query(view.query(talk=True))["view"] == "talk"


def test_a_link_with_other_inputs_keeps_them_and_is_not_precomputed():
    opened = ex.resolve({"tab": "neuzip", "example": "bits", "k": "3", "B": "64"}, TABS)
    assert opened.notice == "" and dict(opened.view.values) == {"model": "smollm2-135m", "k": 3, "B": 64}
    assert not opened.view.precomputed
    assert query(opened.view.query()) == {"tab": "neuzip", "example": "bits", "model": "smollm2-135m", "k": "3",
                                          "B": "64"}
    runs = ex.resolve({"tab": "mixln", "example": "loss", "placement": "deepnorm,pre-ln"}, TABS).view
    assert runs.values["placement"] == ["deepnorm", "pre-ln"] and not runs.precomputed


def test_tabs_are_named_by_id_or_title_and_an_example_finds_its_tab():
    assert ex.resolve({"tab": "Mix-LN"}, TABS).tab == "mixln"
    assert ex.resolve({"tab": "neuZIP", "example": "tradeoff"}, TABS).view.example.name == "tradeoff"
    found = ex.resolve({"example": "digit-2"}, TABS)
    assert (found.tab, found.view.example.name, found.notice) == ("lrp", "digit-2", "")
    models = ex.resolve({"tab": "models_data"}, TABS)
    assert (models.tab, models.view, models.notice) == ("models_data", None, "")


@pytest.mark.parametrize("q,tab,example,words", [
    ({"tab": "nope"}, None, None, ["no tab 'nope'", "tabs: models_data, lrp"]),
    ({"tab": "neuzip", "example": "nope"}, "neuzip", "bits", ["no example 'nope' in NeuZip", "examples: bits"]),
    ({"tab": "neuzip", "example": "bits", "k": "9"}, "neuzip", "bits", ["k=9 is not one of 7, 3, 1, 0",
                                                                        "showing k=7"]),
    ({"tab": "neuzip", "example": "tradeoff", "B": "100", "log": "maybe"}, "neuzip", "tradeoff",
     ["B=100 is not one of none, 32", "log=maybe is not 0 or 1"]),
    ({"tab": "mathneuro", "example": "effect", "k": "2", "colour": "red"}, "mathneuro", "effect",
     ["k=2 is outside", "effect has no input 'colour'"]),
    ({"tab": "mixln", "example": "loss", "placement": "pre-ln,nonsense"}, "mixln", "loss",
     ["nonsense is not among"]),
    ({"tab": "lrp", "example": "digit-1", "method": ""}, "lrp", "digit-1", ["method= names none of"]),
    ({"tab": "models_data", "example": "x", "k": "3"}, "models_data", None, ["has no examples", "ignored k"]),
    ({"tab": "lrp", "view": "slides"}, "lrp", "sentiment-1", ["view=slides is not talk or lab"]),
    ({"foo": "1"}, None, None, ["ignored foo"]),
])
def test_a_bad_link_opens_what_it_can_with_one_line_naming_each_problem(q, tab, example, words):
    opened = ex.resolve(q, TABS)
    assert opened.tab == tab
    assert (opened.view.example.name if opened.view else None) == example
    assert opened.notice.startswith("This link: ") and "\n" not in opened.notice
    for w in words:
        assert w in opened.notice, (w, opened.notice)
    if opened.view is not None:  # what could not be read is at its precomputed default
        assert all(opened.view.values[k] == v for k, v in opened.view.example.defaults.items() if k in q)


def test_gradio_and_spaces_parameters_are_not_problems():
    opened = ex.resolve({"tab": "lrp", "__sign": "abc", "__theme": "dark", "deep_link": "x", "view": "talk"}, TABS)
    assert opened.notice == "" and opened.view.example.name == "sentiment-1"


def test_params_parse_and_format_both_ways():
    b = ex.Param("B", "B", "choice", (None, 32, 64), none="none")
    assert b.parse("none") is None and b.parse("64") == 64 and b.format(None) == "none"
    with pytest.raises(BadInputError):
        b.parse("65")
    assert ex.Param("model", "model", "choice", ("a",), open=True).parse("my/folder") == "my/folder"
    k = ex.Param("k", "K", "number", low=0.001, high=1.0)
    assert k.parse("0.05") == 0.05 and k.format(0.05) == "0.05"
    for bad in ("nan", "0", "1.5", "x"):
        with pytest.raises(BadInputError):
            k.parse(bad)
    n = ex.Param("n", "n", "number", low=1, high=10, whole=True)
    assert n.parse("3") == 3 and isinstance(n.parse("3"), int)
    with pytest.raises(BadInputError):
        n.parse("2.5")
    multi = ex.Param("m", "m", "multi", ("a", "b", "c"))
    assert multi.parse("c, a,c") == ["c", "a"] and multi.format(["c", "a"]) == "c,a"
    assert ex.Param("f", "f", "flag").parse("1") is True and ex.Param("f", "f", "flag").format(False) == "0"


def test_view_checks_inputs_it_is_given():
    with pytest.raises(BadInputError, match="has no input"):
        ex.view("neuzip", "bits", {"colour": "red"})
    with pytest.raises(BadInputError, match="no example"):
        ex.view("neuzip", "nope")
    assert ex.view("mixln", "angular", {"run": "deepnorm"}).values == {"run": "deepnorm"}


def test_a_method_subset_of_a_precomputed_explanation_is_drawn_from_it(no_model_loads):
    shown = ex.show(ex.view("lrp", "sentiment-2", {"method": "integrated_gradients,mambalrp"}))
    assert shown.source == "precomputed"
    assert list(shown.data["methods"]) == ["integrated_gradients", "mambalrp"]
    assert list(shown.figures["heatmap"].data[0].y) == ["Integrated Gradients", "MambaLRP"]


def test_the_talks_page_names_every_example_and_its_inputs():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    page = (root / "docs" / "talks.md").read_text()
    # the talks page's table, and the docs pages that add examples of their own (issue 37: docs/*.md)
    section = page.split("## Links", 1)[1].split("\n## ", 1)[0] + "".join(
        p.read_text() for p in sorted((root / "docs").glob("*.md")) if p.name != "talks.md")
    for tab, exs in ex.registry().items():
        assert f"`{tab}`" in section, tab
        for e in exs:
            assert f"`{e.name}`" in section, (tab, e.name)
            for p in e.params:
                assert f"`{p.name}=" in section, (tab, e.name, p.name)
