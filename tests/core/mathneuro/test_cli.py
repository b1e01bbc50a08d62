"""``python -m core mathneuro ...``: bad input exits 2 with one line naming the fix (K outside (0, 1], a non-finite
factor, an unknown method, model or dataset, a bad --out); identify writes masks with metadata; analyses print JSON,
write JSON / CSV / HTML, and are cached by model fingerprint + parameters."""
import csv
import json

import pytest

from core.cli import main
from core.mathneuro import load_masks, mask_metadata
from core.mathneuro.recipe import DEMO_NAME
from core.zoo import registered_names

pytestmark = pytest.mark.usefixtures("single_thread")
needs_model = pytest.mark.skipif(DEMO_NAME not in registered_names(), reason="mathneuro-tiny not committed")


@pytest.fixture(autouse=True)
def private_cache(fresh_cache):
    return fresh_cache.root


def run_cli(capsys, *args):
    code = main(["mathneuro", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("args, needle", [
    (["identify", "--proportion", "0"], "(0, 1]"),
    (["identify", "--proportion", "1.5"], "(0, 1]"),
    (["identify", "-K", "nan"], "(0, 1]"),
    (["layers", "--proportion", "-0.1"], "(0, 1]"),
    (["scale", "--factor", "nan"], "finite"),
    (["scale", "--factor", "inf"], "finite"),
    (["sweep-scale", "--factors", "1.0", "inf"], "finite"),
    (["identify", "--method", "magic"], "Unknown method"),
    (["effect", "--methods", "mathneuro", "magic"], "Unknown method"),
    (["identify", "--model", "no-such-model-xyz"], "no-such-model-xyz"),
    (["identify", "-n", "0"], "positive integer"),
    (["layers", "--nonmath", "review-sentiment", "movie-sentiment", "mmlu"], "at most two"),  # as in the tab
    (["effect", "--nonmath", "review-sentiment", "movie-sentiment", "mmlu"], "at most two"),
    (["identify", "--out", "no-such-folder/masks.safetensors"], "does not exist"),  # before any work
])
def test_bad_input_exits_2_with_a_message(capsys, args, needle):
    code, out, err = run_cli(capsys, *args)
    assert code == 2
    assert needle in err and "Traceback" not in err
    assert err.strip().count("\n") == 0  # one line


def test_json_errors_are_machine_readable(capsys):
    code, out, err = run_cli(capsys, "identify", "--proportion", "2", "--json")
    assert code == 2 and "(0, 1]" in json.loads(out)["error"]


@needs_model
def test_identify_writes_masks_with_metadata(capsys, tmp_path):
    path = tmp_path / "masks.safetensors"
    code, out, err = run_cli(capsys, "identify", "-n", "8", "-K", "0.05", "--out", str(path), "--json")
    assert code == 0, err
    r = json.loads(out)
    masks = load_masks(path)
    assert sum(int(m.sum()) for m in masks.values()) == r["selected"] > 0
    meta = mask_metadata(path)
    assert meta["method"] == "mathneuro" and float(meta["proportion"]) == 0.05
    assert meta["fingerprint"] == r["fingerprint"]
    code, _, err = run_cli(capsys, "identify", "-n", "8", "--out", str(tmp_path / "masks.json"))
    assert code == 2 and "safetensors" in err
    code, _, err = run_cli(capsys, "identify", "-n", "8", "--math", "no-such-data")
    assert code == 2 and "no-such-data" in err


@needs_model
def test_layers_writes_json_csv_html_and_is_cached(capsys, tmp_path, private_cache):
    args = ["layers", "-n", "6", "-K", "0.1", "--nonmath", "review-sentiment", "arithmetic-words"]
    code, out, err = run_cli(capsys, *args, "--json", "--out", str(tmp_path / "l.json"))
    assert code == 0, err
    r = json.loads(out)
    assert r["source"] == "computed" and set(r["by_nonmath"]) == {"review-sentiment", "arithmetic-words"}
    rows = r["by_nonmath"]["review-sentiment"]["rows"]
    assert {row["module"] for row in rows} == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                               "down_proj"}
    assert sum(row["selected"] for row in rows) == r["by_nonmath"]["review-sentiment"]["selected"] > 0
    # math vs math: nothing is math-specific
    assert r["by_nonmath"]["arithmetic-words"]["selected"] == 0
    assert json.loads((tmp_path / "l.json").read_text())["by_nonmath"] == r["by_nonmath"]
    code, out, _ = run_cli(capsys, *args, "--json", "--out", str(tmp_path / "l.csv"))
    assert code == 0 and json.loads(out)["source"] == "cache"
    with open(tmp_path / "l.csv") as f:
        assert len(list(csv.DictReader(f))) == 2 * len(rows)
    code, _, _ = run_cli(capsys, *args, "--out", str(tmp_path / "l.html"))
    html = (tmp_path / "l.html").read_text()
    assert code == 0 and "plotly" in html.lower() and len(html) > 1_000_000  # plotly.js included
    code, _, err = run_cli(capsys, *args, "--out", str(tmp_path / "l.png"))
    assert code == 2 and ".html" in err


@needs_model
@pytest.mark.slow
def test_prune_and_scale_report_before_and_after(capsys):
    code, out, err = run_cli(capsys, "prune", "-n", "20", "--eval-n", "20", "--json")
    assert code == 0, err
    row = json.loads(out)["rows"][0]
    assert row["method"] == "mathneuro" and row["math_after"] < row["math_before"]
    code, out, err = run_cli(capsys, "scale", "-n", "20", "--eval-n", "20", "--factor", "1.0", "--json")
    assert code == 0, err
    row = json.loads(out)["rows"][0]
    assert row["math_after"] == row["math_before"] and row["nonmath_after"] == row["nonmath_before"]
