"""The repository keeps its promises: CI runs the README's test command, pins agree, the house rules hold."""
import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()


def test_ci_runs_the_readme_full_test_command():
    """The README gives two test commands, the quick tier (plain ``pytest``: the default selection) and the full
    suite; CI runs the full one exactly as written."""
    from tests.conftest import FULL_COMMAND

    commands = re.findall(r"```bash\n(pip install -r requirements-dev\.txt[^\n]*)\n```", README)
    assert len(commands) == 2
    quick, full = commands
    assert quick.endswith("&& python -m pytest") and full == quick.replace("python -m pytest", FULL_COMMAND)
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert full in ci and quick not in ci


# What Hugging Face's ZeroGPU documentation lists (docs/hub/spaces-zerogpu.md, "Supported Versions", as of its
# 2026-08 revision): the Pythons and the torch versions a ZeroGPU Space runs. docs/space.md says where this comes from.
ZEROGPU_PYTHONS = ("3.10.13", "3.12.12")
ZEROGPU_TORCH = ("2.8.0", "2.9.1", "2.10.0", "2.11.0")


def test_space_front_matter_matches_the_pins():
    """The Space asks for a Python ZeroGPU lists, and requirements.txt gives that Python a torch ZeroGPU lists (with
    the triton it needs), while Python 3.11 (this machine, CI) keeps the CPU torch 2.13.0."""
    front = README.split("---")[1]
    reqs = (REPO / "requirements.txt").read_text()
    version = re.search(r"sdk_version: (\S+)", front).group(1)
    assert f"gradio=={version}" in reqs and "app_file: app.py" in front and "sdk: gradio" in front
    python = re.search(r'python_version: "([\d.]+)"', front).group(1)
    assert any(listed.startswith(python + ".") or listed == python for listed in ZEROGPU_PYTHONS), python
    assert 'torch==2.13.0; python_version == "3.11"' in reqs and 'triton==3.9.0; python_version == "3.11"' in reqs
    space_torch = re.search(r'^torch==([\d.]+); python_version != "3.11"', reqs, re.M).group(1)
    assert space_torch in ZEROGPU_TORCH and 'triton==3.6.0; python_version != "3.11"' in reqs
    assert "license: apache-2.0" in front


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_imports_flow_one_way():
    for path in (REPO / "core").rglob("*.py"):
        assert not _imports(path) & {"gradio", "ui", "app"}, f"{path} imports the UI"
    for path in (REPO / "kernels").rglob("*.py"):
        assert not _imports(path) & {"core", "ui", "gradio", "app"}, f"{path} imports above kernels"


from core.papers import names as _paper_names  # noqa: E402

PAPERS = _paper_names()
SHARED = {"core.errors", "core.figures", "core.runner", "core.progress", "core.files", "core.results", "core.checks",
          "core.cli", "core.cli_common", "core.zoo", "core.data", "core.settings",
          "core.paths", "core.cache", "core.examples", "core.batch", "core.batch_cli", "core.analyses", "core.notices", "core.papers"}


def _core_imports(path: Path) -> list[tuple[str, list[str]]]:
    """``(module, imported names)`` of every ``core`` import in a file."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names if a.name.startswith("core")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("core"):
            out.append((node.module, [a.name for a in node.names]))
    return out


def test_tabs_and_clis_use_only_the_packages_public_api():
    """A tab or a paper's CLI imports ``core.<paper>`` (its __init__) and shared core modules; no submodules past
    the package, no private names."""
    files = sorted((REPO / "ui").rglob("*.py")) + [REPO / "core" / p / "cli.py" for p in PAPERS]
    for path in files:
        for module, names in _core_imports(path):
            allowed = module in SHARED or module in {f"core.{p}" for p in PAPERS}
            assert allowed, f"{path.relative_to(REPO)} imports {module}"
            assert not any(n.startswith("_") for n in names), f"{path.relative_to(REPO)} imports a private name"
            if module in {f"core.{p}" for p in PAPERS}:
                for n in names:
                    assert n not in {"service", "demo", "views", "analysis", "runs", "figures", "recipes"}, \
                        f"{path.relative_to(REPO)} imports the submodule {module}.{n}"


def test_one_service_per_paper():
    for paper in PAPERS:
        assert (REPO / "core" / paper / "service.py").is_file(), paper
    assert not (REPO / "core" / "lrp" / "demo.py").exists()
    for tab in (REPO / "ui").rglob("*.py"):
        assert len(tab.read_text().splitlines()) < 200, f"{tab.name}: a tab reads like a small gradio demo"


def test_every_cli_command_is_in_the_docs():
    """The command line page (docs/cli.md) names every command the parser has (a new command needs a line)."""
    from core.cli import all_commands

    page = (REPO / "docs" / "cli.md").read_text()
    lines = [line.split("#", 1)[0] for line in page.splitlines() if "python -m core" in line]
    def named(group, command, line):  # a group that is one command itself is named alone (python -m core site)
        pattern = rf"core {group}( |$)" if not command else rf"core {group} (.*\| )?{re.escape(command)}( |$)"
        return re.search(pattern, line)
    missing = [f"{group} {command}".strip() for group, command, _ in all_commands()
               if not any(named(group, command, line) for line in lines)]
    assert not missing, missing
