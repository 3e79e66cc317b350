"""The layers hold: import-linter's contracts in pyproject.toml are all kept (`lint-imports`, the
console script of this environment), and the same check reports a tiny package that breaks a layers
and a forbidden contract as broken, so a kept verdict means something."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10: import-linter brings tomli
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"

pytestmark = pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter (the dev extra) is not installed")


def lint_imports(cwd: Path, pythonpath: Path) -> subprocess.CompletedProcess:
    """`lint-imports` on the config in `cwd`, importing from `pythonpath`; no cache written."""
    env = {**os.environ, "PYTHONPATH": str(pythonpath), "COLUMNS": "400"}  # contract names on one line each
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def test_every_contract_in_pyproject_is_kept():
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert {c["type"] for c in contracts} == {"layers", "forbidden", "acyclic_siblings"}
    r = lint_imports(ROOT, ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    for c in contracts:
        assert f"{c['name']} KEPT" in r.stdout, (c["name"], r.stdout)
    assert f"Contracts: {len(contracts)} kept, 0 broken." in r.stdout


TOY_CONFIG = """
[tool.importlinter]
root_package = "toy"
include_external_packages = true

[[tool.importlinter.contracts]]
id = "layers"
name = "toy layers"
type = "layers"
layers = ["toy.views", "toy.results"]

[[tool.importlinter.contracts]]
id = "no-heavy"
name = "toy results never import heavy"
type = "forbidden"
source_modules = ["toy.results"]
forbidden_modules = ["heavy"]
"""


def _toy(tmp_path: Path, results_source: str) -> Path:
    """A package `toy` (views above results) and an external package `heavy`, with the config above."""
    for name, src in {"toy/__init__.py": "", "toy/views.py": "from toy import results\n",
                      "toy/results.py": results_source, "heavy/__init__.py": ""}.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(src)
    (tmp_path / "pyproject.toml").write_text(TOY_CONFIG)
    return tmp_path


def test_the_check_reports_an_upward_import_and_a_forbidden_one(tmp_path):
    r = lint_imports(_toy(tmp_path, "import heavy\nfrom toy import views\n"), tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "toy layers BROKEN" in r.stdout and "toy results never import heavy BROKEN" in r.stdout
    assert "toy.results -> toy.views" in r.stdout and "toy.results -> heavy" in r.stdout
    assert "Contracts: 0 kept, 2 broken." in r.stdout


def test_the_toy_package_without_those_imports_is_kept(tmp_path):
    """The same toy with results importing only the standard library: both contracts kept."""
    r = lint_imports(_toy(tmp_path, "import json\n"), tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Contracts: 2 kept, 0 broken." in r.stdout


def test_a_function_level_import_counts_too(tmp_path):
    """An import inside a function (the old way to dodge a loop) breaks the layers all the same."""
    r = lint_imports(_toy(tmp_path, textwrap.dedent("""
        def late():
            from toy import views
            return views
    """)), tmp_path)
    assert r.returncode == 1 and "toy layers BROKEN" in r.stdout, r.stdout + r.stderr


def _package_copy(tmp_path: Path) -> Path:
    """The packages the contracts name (dspark_lab, studies) and pyproject.toml copied to `tmp_path`
    (caches left out), for injecting imports."""
    import shutil

    for package in ("dspark_lab", "studies"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _broken_by(tmp_path: Path, module: str, injected: str, contract_id: str) -> str:
    """lint-imports' report on a copy of the packages with `injected` appended to `module` (a path
    under the copy): it fails, naming the contract `contract_id` as broken."""
    root = _package_copy(tmp_path)
    path = root / module
    path.write_text(path.read_text() + injected)
    r = lint_imports(root, root)
    assert r.returncode == 1, r.stdout + r.stderr
    contracts = {c["id"]: c["name"] for c in tomllib.loads((root / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]}
    assert f"{contracts[contract_id]} BROKEN" in r.stdout, r.stdout
    return r.stdout


def test_a_measure_import_in_a_views_module_breaks_the_views_contracts(tmp_path):
    """`from dspark_lab.measure import measure_step` in views/ is an edge to the measurement wing,
    which the views-only-results contract refuses whatever measure's __init__ does on attribute
    access (the no-torch contract sees torch only through edges that are written down)."""
    out = _broken_by(tmp_path, "dspark_lab/views/report.py", "\nfrom dspark_lab.measure import measure_step  # injected\n",
                     "views-import-only-results")
    assert "dspark_lab.views.report -> dspark_lab.measure" in out, out


def test_a_circle_through_a_late_import_breaks_the_no_circles_contract(tmp_path):
    """cli/verify.py imports cli/exits.py; a function-level import back from exits closes a circle
    between two siblings of dspark_lab.cli, which no layers contract sees (both are cli)."""
    out = _broken_by(tmp_path, "dspark_lab/cli/exits.py", "\n\ndef _late():\n    from dspark_lab.cli import verify  # injected\n",
                     "no-circles")
    assert "No cycles are allowed in dspark_lab.cli." in out, out


def test_importing_the_package_loads_no_torch():
    """`import dspark_lab` (which every `import dspark_lab.<module>` runs first) stays light: the
    guard, which needs torch, is imported from dspark_lab.guard."""
    code = "import sys, dspark_lab; sys.exit(2 if hasattr(dspark_lab, 'no_host_syncs') else 'torch' in sys.modules)"
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr or ("torch was imported" if p.returncode == 1 else "dspark_lab has a guard attribute")


def test_the_measurement_step_injected_into_a_views_module_breaks_the_no_torch_contract_too(tmp_path):
    """Imported by its own module (measure's face re-exports nothing), measure_step's edge reaches
    torch in the graph the linter reads: both the views and the no-torch contracts break."""
    root = _package_copy(tmp_path)
    view = root / "dspark_lab" / "views" / "report.py"
    view.write_text(view.read_text() + "\nfrom dspark_lab.measure.step import measure_step  # injected\n")
    r = lint_imports(root, root)
    contracts = {c["id"]: c["name"] for c in tomllib.loads((root / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]}
    for cid in ("views-import-only-results", "no-torch-in-results-and-views"):
        assert f"{contracts[cid]} BROKEN" in r.stdout.replace("\n", " "), r.stdout


def lazy_face_problems(path: Path) -> list[str]:
    """What a package face with a module-level __getattr__ leaves unwritten: each name of its `_LAZY`
    ({name: module}) must be imported from that module under `if TYPE_CHECKING:` (so the linter,
    which reads those imports, sees every edge the face makes at run time), and nothing more."""
    tree = ast.parse(path.read_text())
    lazy = next((ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                 and any(getattr(t, "id", None) == "_LAZY" for t in n.targets)), None)
    if lazy is None:
        return [f"{path.name}: a __getattr__ without a _LAZY table of {{name: module}}"]
    written = {a.asname or a.name: n.module for block in tree.body if isinstance(block, ast.If)
               and getattr(block.test, "id", None) == "TYPE_CHECKING"
               for n in block.body if isinstance(n, ast.ImportFrom) for a in n.names}
    return ([f"{name}: loaded from {mod} but not imported under TYPE_CHECKING" for name, mod in lazy.items()
             if written.get(name) != mod]
            + [f"{name}: imported under TYPE_CHECKING but not in _LAZY" for name in written if name not in lazy])


def test_a_package_face_that_loads_names_lazily_writes_every_edge_down():
    """A package's __init__ hands on names by explicit imports, or (results/, so that its facts
    import without pandas) lazily with every edge written down under TYPE_CHECKING: a __getattr__
    alone would load a module (and torch) behind the linter's back."""
    faces = [p for p in (ROOT / "dspark_lab").rglob("__init__.py") if "def __getattr__" in p.read_text()]
    assert [p.relative_to(ROOT).as_posix() for p in faces] == ["dspark_lab/results/__init__.py"]
    for face in faces:
        assert lazy_face_problems(face) == [], face


def test_a_lazy_face_with_an_edge_left_unwritten_is_named(tmp_path):
    face = tmp_path / "__init__.py"
    face.write_text(textwrap.dedent("""
        from typing import TYPE_CHECKING
        if TYPE_CHECKING:
            from pkg.a import A
            from pkg.c import C
        _LAZY = {"A": "pkg.a", "B": "pkg.b"}
        def __getattr__(name): ...
    """))
    assert lazy_face_problems(face) == ["B: loaded from pkg.b but not imported under TYPE_CHECKING",
                                        "C: imported under TYPE_CHECKING but not in _LAZY"]
    face.write_text("def __getattr__(name): ...\n")
    assert lazy_face_problems(face) == ["__init__.py: a __getattr__ without a _LAZY table of {name: module}"]


@pytest.mark.parametrize("argv", [["--help"], ["report", "--help"], ["report", "REPORT"]], ids=["help", "report-help", "report"])
def test_the_report_and_the_help_load_no_torch(argv, tmp_path):
    """`dspark-lab report` reads what GPUs recorded and `--help` prints: neither loads torch, in a
    fresh interpreter (the measuring commands import their bodies when they run)."""
    argv = [str(tmp_path / "r.html") if a == "REPORT" else a for a in argv]
    if argv[-1].endswith("r.html"):
        argv = ["report", str(ROOT / "data" / "runs"), "-o", argv[-1]]
    code = ("import sys\nfrom dspark_lab.cli.main import main\ntry:\n    rc = main(%r)\nexcept SystemExit as e:\n"
            "    rc = e.code\nsys.exit(3 if 'torch' in sys.modules else rc)") % (argv,)
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    if "report" in argv and "--help" not in argv:
        assert (tmp_path / "r.html").stat().st_size > 0
