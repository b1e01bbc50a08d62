"""``python -m core mixln ...``: a quick training run writes a loadable run folder whose history holds the logged
per-layer gradient norms, --resume continues it exactly, diagnostics write JSON/CSV/HTML, and bad input exits 2."""
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from core.cli import main
import core.mixln as mixln
from core.mixln import MixLNForCausalLM, launch, retrain, runs

REPO = Path(__file__).resolve().parents[3]
needs_runs = pytest.mark.skipif(not runs.list_runs(), reason="no committed runs in assets/mixln")


def run_cli(capsys, *args):
    code = main(["mixln", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mixln") / "quick"
    assert main(["mixln", "train", "--quick", "--norm", "mix", "--alpha", "0.25", "--out", str(folder)]) == 0
    return folder


@pytest.mark.slow
def test_quick_train_writes_a_loadable_run_with_grad_norms(quick_run):
    meta = json.loads((quick_run / "run.json").read_text())
    hist = json.loads((quick_run / "history.json").read_text())
    assert meta["status"] == hist["status"] == "finished" and meta["steps_done"] == 6
    assert [r["step"] for r in hist["train"]] == list(range(1, 7))
    # logged at initialisation (step 1) and every k = 2 steps, one value per layer for both norms
    assert [g["step"] for g in hist["grad_norms"]] == [1, 2, 4, 6]
    for g in hist["grad_norms"]:
        assert len(g["param"]) == len(g["input"]) == 4
        assert all(math.isfinite(x) and x > 0 for x in g["param"] + g["input"])
    assert [e["step"] for e in hist["eval"]] == [3, 6]
    model = MixLNForCausalLM.from_pretrained(quick_run)
    assert model.config.layer_norms() == ["post", "pre", "pre", "pre"]  # floor(0.25 * 4) = 1 Post-LN layer
    # the saved weights give the recorded final held-out perplexity
    assert runs.evaluate_run(str(quick_run))["perplexity"] == pytest.approx(meta["final_eval_perplexity"], rel=1e-4)


@pytest.mark.slow
def test_resume_continues_from_the_checkpoint(quick_run, tmp_path, capsys):
    import shutil
    copy = tmp_path / "resumed"
    shutil.copytree(quick_run, copy)
    code, out, _ = run_cli(capsys, "train", "--steps", "8", "--resume", str(copy), "--json")
    assert code == 0
    meta = json.loads(out)
    hist = json.loads((copy / "history.json").read_text())
    assert meta["steps_done"] == 8 and [r["step"] for r in hist["train"]] == list(range(1, 9))
    original = json.loads((quick_run / "history.json").read_text())
    assert hist["train"][:6] == original["train"]  # the first six steps are kept, not retrained


def test_bad_alpha_and_unknown_run_exit_2(capsys):
    for alpha in ("1.5", "-0.1", "nan"):
        code, out, err = run_cli(capsys, "train", "--alpha", alpha, "--out", "/tmp/never-written", "--quick")
        assert code == 2 and "outside [0, 1]" in err and not Path("/tmp/never-written").exists()
    for cmd in ("angular", "removal"):
        code, _, err = run_cli(capsys, cmd, "--run", "no-such-run")
        assert code == 2 and "unknown run" in err
    code, _, err = run_cli(capsys, "gradnorms", "--runs", "no-such-run")
    assert code == 2 and "unknown run" in err
    code, _, err = run_cli(capsys, "reproduce", "--only", "no-such-run")
    assert code == 2 and "unknown run" in err
    code, _, err = run_cli(capsys, "train", "--norm", "mix")
    assert code == 2 and "--out" in err


@pytest.mark.parametrize("job", [runs.Job("main", "deepnorm", 1), runs.Job("depth-24", "mix-ln-0.25", 0),
                                 runs.Job("lr-sweep", "post-ln", 0, 3e-3), runs.Job("main", "deepnorm-deepnet", 2),
                                 runs.Job("init-0.02", "lns", 1)], ids=lambda j: j.key)
def test_recipe_command_trains_exactly_the_recipe_run(job, monkeypatch, capsys):
    """The printed `mixln train` command of a recipe run passes the same model and training settings."""
    seen = {}

    def fake_train_run(out, norm, alpha, sizes, tcfg, tokenizer, resume, **kw):
        seen.update(out=out, norm=norm, alpha=alpha, sizes=sizes, tcfg=tcfg)
        return {"status": "finished", "norm": norm, "alpha": alpha, "steps_done": 0, "wall_seconds": 0,
                "train_tokens_per_s": 0, "final_eval_perplexity": None, "final_eval_loss": None, "message": ""}

    monkeypatch.setattr(launch, "train_run", fake_train_run)
    args = runs.recipe_command(job.name, job).split()[3:]    # drop "python -m core"
    assert main(args) == 0
    spec = runs.RECIPE[job.name]
    assert (seen["norm"], seen["alpha"]) == (spec["norm"], spec["alpha"])
    assert seen["sizes"] == job.model and seen["tcfg"] == job.train
    assert seen["out"].endswith(job.relative_folder.as_posix())


def test_reproduce_picks_sets_placements_and_seeds(monkeypatch, tmp_path, capsys):
    done, hooks = [], set()
    monkeypatch.setattr(retrain, "train_job", lambda job, root, progress=None, keep_all_weights=False, diagnostics=None:
                        done.append(job) or hooks.add(diagnostics)
                        or {"status": "finished", "final_eval_perplexity": 1.0, "wall_seconds": 0})
    (tmp_path / "tokenizer.json").write_text("{}")
    levels = []
    monkeypatch.setattr(mixln.reference, "write_reference", lambda root=None: levels.append(root))
    code, out, _ = run_cli(capsys, "reproduce", "--out", str(tmp_path), "--set", "depth-24", "--seeds", "1", "2",
                           "--only", "pre-ln", "--json")
    assert code == 0
    assert [(j.set, j.name, j.seed) for j in done] == [("depth-24", "pre-ln", 1)]  # the 24-layer set: seeds 0, 1
    assert set(json.loads(out)["commands"]) == {j.key for j in done}
    assert hooks == {mixln.write_run_diagnostics}  # each run's diagnostics, computed while its weights are there
    assert [str(r) for r in levels] == [str(tmp_path)]               # and the charts' reference levels, once
    # everything `mixln reproduce` retrains: 12 layers (DeepNorm with the authors' constants: 2 seeds), 24 layers (Pre-LN
    # 2 seeds), the learning-rate sweep, the embedding-init set (Pre-LN and Mix-LN 0.25 at 5 seeds, LNS at 3)
    assert len(runs.recipe_jobs()) == 9 * 3 + 2 + (7 + 1) + 3 * 2 + (5 + 5 + 3)


def test_each_pending_command_trains_exactly_its_pending_runs(monkeypatch, tmp_path, capsys):
    """docs/mixln-reproduces.md lists the recipe runs not committed yet with the command that trains them: each
    command trains exactly its row's runs, and the rows together are recipe.PENDING."""
    from core.mixln import reproduces
    rows = reproduces.pending_rows()
    assert sum(len(r["seeds"].split(", ")) for r in rows) == len(runs.PENDING)
    monkeypatch.setattr(mixln.reference, "write_reference", lambda root=None: None)
    for row in rows:
        done = []
        monkeypatch.setattr(retrain, "train_job", lambda job, root, progress=None, keep_all_weights=False,
                            diagnostics=None: done.append(job) or {"status": "finished", "wall_seconds": 0,
                                                                   "final_eval_perplexity": 1.0})
        args = row["command"].split()[4:] + ["--out", str(tmp_path)]
        code, _, _ = run_cli(capsys, *args)
        assert code == 0 and done and {j.key for j in done} <= runs.PENDING
        assert {(j.set, j.name) for j in done} == {(row["set"], row["run"])}
        assert [str(j.seed) for j in done] == row["seeds"].split(", ")


@pytest.mark.slow  # over 5 s on the 2-core machine (docs/testing.md)
def test_exit_code_2_from_the_real_command():
    out = subprocess.run([sys.executable, "-m", "core", "mixln", "train", "--alpha", "2", "--out", "x"], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "alpha" in out.stderr and "Traceback" not in out.stderr


@needs_runs
def test_diagnostics_write_json_csv_html(tmp_path, capsys):
    code, out, _ = run_cli(capsys, "compare", "--json", "--out", str(tmp_path / "c.csv"))
    rows = json.loads(out)
    assert code == 0 and {r["run"] for r in rows} >= {"pre-ln", "post-ln", "mix-ln-0.25"}
    assert (tmp_path / "c.csv").read_text().startswith("run,norm,placement,alpha")
    sets = {runs.RUN_SETS[s].model["num_layers"]: s for s in ("main", "depth-24")}
    committed = {(layers, r): [k for k in runs.RUN_SETS[s].seeds_of(r) if not runs.Job(s, r, k).pending]
                 for layers, s in sets.items() for r in runs.RECIPE}  # the recipe's seeds, less the pending ones
    assert all(r["n_seeds"] + r["diverged"] == len(committed[r["layers"], r["run"]]) for r in rows
               if r["run"] in runs.RECIPE)
    code, out, _ = run_cli(capsys, "sweep", "--json", "--out", str(tmp_path / "s.html"))
    rows = json.loads(out)
    assert code == 0 and [r["layers"] for r in rows] == [12] * 5 + [24] * 3  # alpha 0, 0.25, 1 at 24 layers
    for layers in (12, 24):
        alphas = [r["alpha"] for r in rows if r["layers"] == layers]
        assert alphas == sorted(alphas) and 0.25 in alphas
    html = (tmp_path / "s.html").read_text()
    assert "plotly" in html.lower() and "Alpha sweep" in html
    for cmd, title in (("curves", "Held-out loss over seeds"), ("lr-sweep", "Learning-rate sweep"),
                       ("depth", "Depth: what each layer does")):
        code, out, _ = run_cli(capsys, cmd, "--json", "--out", str(tmp_path / f"{cmd}.html"))
        assert code == 0 and json.loads(out) and title in (tmp_path / f"{cmd}.html").read_text()
    code, out, _ = run_cli(capsys, "gradnorms", "--json", "--out", str(tmp_path / "g.json"))
    res = json.loads(out)
    assert code == 0 and [r["run"] for r in res] == ["pre-ln", "post-ln", "mix-ln-0.25"]
    assert all(len(r["init"]) == len(r["final"]) == 12 for r in res)
    code, out, _ = run_cli(capsys, "angular", "--run", "mix-ln-0.25", "--json", "--out", str(tmp_path / "a.csv"))
    res = json.loads(out)
    assert code == 0 and len(res["raw"]) == len(res["block_sizes"]) == 12
    code, _, err = run_cli(capsys, "compare", "--out", str(tmp_path / "c.png"))
    assert code == 2 and ".html" in err


def test_quick_refuses_the_flags_it_would_override(tmp_path, capsys):
    """``--quick`` sets its own sizes and steps; a flag it would override is refused (exit 2, nothing written), not
    silently replaced, even one given with the recipe's default value."""
    from core.mixln import RECIPE_MODEL

    out = tmp_path / "run"
    code = main(["mixln", "train", "--quick", "--layers", "8", "--hidden", str(RECIPE_MODEL["hidden_size"]),
                 "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    assert f"cannot be combined with --layers 8, --hidden {RECIPE_MODEL['hidden_size']}" in err and "Traceback" not in err
