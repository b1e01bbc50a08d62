"""The repository keeps its promises: CI runs the README's test command, pins agree, the house rules hold."""
import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()


def test_ci_runs_the_readme_test_command():
    commands = re.findall(r"```bash\n(pip install -r requirements-dev\.txt[^\n]*)\n```", README)
    assert len(commands) == 1
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert commands[0] in ci


def test_space_front_matter_matches_the_pins():
    front = README.split("---")[1]
    reqs = (REPO / "requirements.txt").read_text()
    version = re.search(r"sdk_version: (\S+)", front).group(1)
    assert f"gradio=={version}" in reqs and "app_file: app.py" in front and "sdk: gradio" in front
    assert "torch==2.13.0" in reqs


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
