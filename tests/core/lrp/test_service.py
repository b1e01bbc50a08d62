"""core.lrp's service (what the MambaLRP tab and CLI compute), its inputs and figures: conservation on the embedded
models, inputs validated with a message naming the fix, truncation said, images normalised, downloads complete,
colours centred; precomputed examples answer at once and a repeated request is a cache hit."""
import json

import numpy as np
import pytest
import torch
from PIL import Image

import core.lrp as api
from core.errors import BadInputError
from core.lrp import figures, inputs, views
from core.lrp.service import EXAMPLES
from core.runner import ExampleStore, recomputing
from core.zoo import fingerprint, registered_names

pytestmark = pytest.mark.usefixtures("single_thread")
needs = pytest.mark.skipif(not {"mamba-sentiment", "mamba-lm", "vision-mamba-mnist"} <= set(registered_names()),
                           reason="embedded Mamba models not committed")
FAST = ["mambalrp", "gradient_x_input", "lrp_ln", "random"]


@needs
def test_text_result_conserves_and_lines_up_with_tokens():
    text = "The plot is predictable and the acting is painfully flat."
    res = api.text_result("mamba-sentiment", text, FAST).data
    json.dumps(res)  # the download is plain JSON
    assert res["tokens"][-1] == "<|endoftext|>" and "".join(res["tokens"][:-1]).strip() == text
    for m in res["methods"].values():
        assert len(m["relevance"]) == len(res["tokens"])
        assert m["target"] == res["target"]
    lrp = res["methods"]["mambalrp"]
    assert lrp["total"] == pytest.approx(lrp["logit"], abs=1e-4)  # bias-free model: relevance is conserved
    assert abs(res["methods"]["lrp_ln"]["absorbed"]) > 1e-3  # the LN-rule alone does not conserve
    top = max(res["predictions"], key=lambda p: p["probability"])
    assert res["target"] == top["id"] and res["target_name"] == top["name"]
    other = api.text_result("mamba-sentiment", text, ["mambalrp"], target=1 - res["target"]).data
    assert other["target"] == 1 - res["target"]
    assert other["methods"]["mambalrp"]["logit"] != pytest.approx(lrp["logit"])


@needs
def test_rule_toggles_change_mambalrp_only_and_leave_the_model_unchanged():
    loaded = inputs.load("mamba-sentiment")
    before = {k: v.clone() for k, v in loaded.model.state_dict().items()}
    text = "A gorgeous, witty and seductive movie."
    full = api.text_result("mamba-sentiment", text, ["mambalrp", "gradient_x_input"]).data
    ablated = api.text_result("mamba-sentiment", text, ["mambalrp", "gradient_x_input"], rules={"ssm": False}).data
    assert not np.allclose(full["methods"]["mambalrp"]["relevance"], ablated["methods"]["mambalrp"]["relevance"])
    assert np.allclose(full["methods"]["gradient_x_input"]["relevance"],
                       ablated["methods"]["gradient_x_input"]["relevance"])
    assert all(torch.equal(before[k], v) for k, v in loaded.model.state_dict().items())
    with pytest.raises(BadInputError, match="Unknown rule"):
        api.text_result("mamba-sentiment", text, ["mambalrp"], rules={"swish": False})
    with pytest.raises(BadInputError, match="gamma"):
        api.text_result("mamba-sentiment", text, ["mambalrp"], rules={"gamma": float("inf")})


@needs
def test_long_text_is_cut_and_says_so():
    loaded = inputs.load("mamba-sentiment")
    ids, pieces, note = inputs.tokenize(loaded, "great fun " * 400, max_tokens=64)
    assert ids.shape == (1, 64) and len(pieces) == 64 and pieces[-1] == "<|endoftext|>" and "first 63" in note
    lm = inputs.load("mamba-lm")
    ids, _, note = inputs.tokenize(lm, "the city of " * 300, max_tokens=32)
    assert ids.shape == (1, 32) and "last 32" in note
    assert inputs.tokenize(loaded, "short")[2] == ""


@needs
@pytest.mark.parametrize("call, match", [
    (lambda: api.text_result("mamba-sentiment", "   \n"), "empty"),
    (lambda: api.text_result("mamba-sentiment", "fine", ["lime"]), "Unknown method"),
    (lambda: api.text_result("mamba-sentiment", "fine", []), "No method"),
    (lambda: api.text_result("mamba-sentiment", "fine", ["mambalrp"], target=2), "out of range"),
    (lambda: api.text_result("mamba-lm", "fine", ["mambalrp"], target=10 ** 6), "out of range"),
    (lambda: api.text_result("vision-mamba-mnist", "fine"), "images, not text"),
    (lambda: api.image_result("mamba-sentiment", sample=0), "not an image model"),
    (lambda: api.image_result(sample=10 ** 6), "out of range"),
    (lambda: api.text_result("", "fine"), "No model"),
])
def test_bad_input_names_the_problem(call, match):
    with pytest.raises(BadInputError, match=match):
        call()


@needs
def test_the_projects_llama_is_explained_with_attnlrp():
    """mathneuro-tiny (a LlamaForCausalLM) was refused before the transformer decoders had rules."""
    if "mathneuro-tiny" not in registered_names():
        pytest.skip("no Llama model committed")
    res = api.text_result("mathneuro-tiny", "1 + 1 =", ["mambalrp"])
    m = res.data["methods"]["mambalrp"]
    assert res.data["model_kind"] == "lm" and len(m["relevance"]) == len(res.data["tokens"]) > 2
    assert abs(m["total"]) > 0 and m["logit"] == pytest.approx(m["total"] + m["absorbed"])


def test_prepare_image_normalises_and_says_what_it_did(tmp_path):
    digit = np.zeros((56, 56, 3), dtype=np.uint8)
    digit[10:46, 24:32] = 255
    arr, note = inputs.prepare_image(digit)
    assert arr.shape == (28, 28) and arr.dtype == np.float32 and 0 <= arr.min() and arr.max() <= 1
    assert "grey" in note and "56x56" in note and "inverted" not in note
    dark_on_light = Image.fromarray(255 - digit[..., 0])
    arr2, note2 = inputs.prepare_image(dark_on_light)
    assert "inverted" in note2 and np.allclose(arr2, arr, atol=1e-5)
    same, none = inputs.prepare_image(np.zeros((28, 28), dtype=np.uint8))
    assert none == "" and same.shape == (28, 28)
    bad = tmp_path / "notes.png"
    bad.write_text("not a picture")
    for image, match in [(bad, "not an image"), (np.zeros((4, 4)), "too small"), (np.zeros((28, 80)), "square"),
                         (np.zeros((28, 28, 2)), "channels"), (np.array([["a"]], dtype=object), "not an image"),
                         (None, "No image")]:
        with pytest.raises(BadInputError, match=match):
            inputs.prepare_image(image)


@needs
def test_image_result_maps_patches_and_conserves():
    res = api.image_result(sample=3, methods=["mambalrp", "random"]).data
    json.dumps(res)
    assert res["grid"] == [4, 4] and np.asarray(res["image"]).shape == (28, 28)
    lrp = res["methods"]["mambalrp"]
    assert np.asarray(lrp["relevance"]).shape == (4, 4)
    # the patch relevances plus the class token's add up to the logit (LRP-gamma 0.25 is conservative too)
    assert lrp["total"] == pytest.approx(lrp["logit"], rel=1e-4, abs=1e-4)
    assert res["label"] is not None and res["target"] == res["predictions"][0]["id"]
    upload = (np.asarray(res["image"]) * 255).astype(np.uint8)
    again = api.image_result(image=upload, methods=["mambalrp"]).data
    assert again["target"] == res["target"] and again["sample"] is None
    assert np.allclose(again["methods"]["mambalrp"]["relevance"], lrp["relevance"], atol=0.05 * np.abs(
        lrp["relevance"]).max())
    assert len(views.relevance_rows(res)) == 16 and set(views.relevance_rows(res)[0]) == {"row", "col", "mambalrp", "random"}
    assert [r["method"] for r in views.summary_rows(res)] == ["MambaLRP", "Random"]


@needs
def test_target_choices():
    assert api.target_choices("mamba-sentiment") == [("0: negative", 0), ("1: positive", 1)]
    lm = api.target_choices("mamba-lm", "He was born in the city of", k=5)
    assert len(lm) == 5 and all(isinstance(i, int) for _, i in lm)
    assert api.target_choices("mamba-lm", "") == []


@needs
def test_precomputed_examples_are_current_and_found():
    entries = EXAMPLES.entries()
    assert {e["analysis"] for e in entries} == {"lrp/text", "lrp/image", "lrp/flow", "lrp/compare"}
    assert len(entries) == len(api.default_requests())
    kind, inputs_ = api.default_requests()[0]
    found = api.text_result(**inputs_)
    assert found.source == "precomputed", "assets/lrp/examples.json is stale: run python -m core lrp precompute-examples"
    with recomputing():  # neither the examples nor the cache answer
        fresh = api.text_result(**inputs_).data
    assert found.data["target"] == fresh["target"]
    assert np.allclose(found.data["methods"]["mambalrp"]["relevance"], fresh["methods"]["mambalrp"]["relevance"],
                       atol=1e-5)
    e = entries[0]
    stale = ExampleStore.from_entries([{**e, "fingerprint": "0" * 24}])  # other weights: not an answer
    assert stale.get(fingerprint(e["model"]), e["analysis"], e["params"]) is None


@needs
def test_examples_answer_without_loading_and_a_repeat_is_a_cache_hit(fresh_cache):
    from core.zoo import clear_loaded, loading

    clear_loaded()
    for kind, kwargs in api.default_requests():
        res = {"text": api.text_result, "image": api.image_result, "flow": api.flow_result,
               "compare": api.compare_result}[kind](**kwargs)
        assert res.source == "precomputed"
        assert res.files() and res.figures and (res.views.get("summary") or res.views.get("shares")
                                                or res.tables.get("models"))  # and downloads
    assert not loading._loaded  # no model was loaded to compare a fingerprint
    text = "A long, slow and oddly moving film."
    first = api.text_result("mamba-sentiment", text, ["mambalrp"], rules={"gate": False})
    second = api.text_result("mamba-sentiment", text, ["mambalrp"], rules={"gate": False})
    assert (first.source, second.source) == ("computed", "cache") and first.key == second.key
    assert second.data["methods"] == first.data["methods"] and second.files() == first.files()
    image = api.image_result(sample=7, methods=["random"])
    assert image.source == "computed" and api.image_result(sample=7, methods=["random"]).source == "cache"


def test_colours_are_centred_and_the_heatmap_escapes_tokens():
    assert figures.colour(0) == "rgb(255,255,255)"
    r, g, b = (int(x) for x in figures.colour(1)[4:-1].split(","))
    assert r > 150 and b < 80
    r, g, b = (int(x) for x in figures.colour(-1)[4:-1].split(","))
    assert b > 150 and r < 80
    assert figures.colour(5) == figures.colour(1)
    res = {"tokens": ["<b>", " ok", "\n"], "target": 1, "target_name": "positive", "model": "m",
           "methods": {"mambalrp": {"label": "MambaLRP", "relevance": [1.0, -0.5, 0.0]}}}
    page = figures.token_html(res)
    assert "&lt;b&gt;" in page and "<b>" not in page.replace("<b>positive</b>", "")
    assert "linear-gradient" in page and "MambaLRP" in page and "⏎" in page
    fig = figures.token_figure(res)
    assert fig.layout.title.text and fig.layout.xaxis.title.text and fig.data[0].zmid == 0


def test_an_image_is_refused_by_its_header_before_it_is_decoded(tmp_path, monkeypatch):
    """Issue 42, item 2: a 657 KB PNG of 13,000 x 13,000 pixels took the server from 0.8 to 5.95 GB, decoded whole
    before the app cut it to 28 x 28. Now the header's size is checked first: over the cap nothing is decoded."""
    from PIL import ImageFile

    from core.budget import max_image_pixels
    from tests.pngs import png_bomb

    bomb = png_bomb(tmp_path / "bomb.png", rows=4)  # the header says 13,000 x 13,000; the data is never read
    decoded = []
    monkeypatch.setattr(ImageFile.ImageFile, "load", lambda self: decoded.append(self.size))
    with pytest.raises(BadInputError, match=r"13,000 x 13,000 pixels \(169 Mpx\); this app decodes at most 16.8"):
        inputs.prepare_image(str(bomb))
    assert decoded == []
    monkeypatch.undo()
    monkeypatch.setenv("LAYERWISE_MAX_IMAGE_PIXELS", "1000")
    assert max_image_pixels() == 1000
    with pytest.raises(BadInputError, match="40 x 40 pixels"):  # the same cap for an image already in memory
        inputs.prepare_image(np.zeros((40, 40), dtype=np.uint8))


def test_a_large_jpeg_is_decoded_at_a_reduced_scale(tmp_path):
    """A JPEG much larger than the model's input is decoded by its DCT scaling (no full-size copy), and reads as
    the full decode does."""
    digit = np.zeros((2048, 2048), dtype=np.uint8)
    digit[400:1650, 900:1150] = 255
    Image.fromarray(digit).save(tmp_path / "digit.jpg", quality=95)
    arr, note = inputs.prepare_image(str(tmp_path / "digit.jpg"))
    full, _ = inputs.prepare_image(np.asarray(Image.open(tmp_path / "digit.jpg")))
    assert note == "The image was resized from 2048x2048 to 28x28." and np.abs(arr - full).max() < 0.05
