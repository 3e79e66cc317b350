"""Property-based tests of three readers of hostile input: lint's parser (generated source: findings
or one LintInputError, never another exception), the run-file reader (generated row values: the row
loaded within its ranges, or skipped with a warning naming file:line and the field; never an
exception) and the output path rules (generated paths: written where the path lands, or one
OutputError; never another exception, never a temporary left). Deterministic (derandomize) and sized
for the 2-core CI: about 10 s together."""
from __future__ import annotations

import json
import os
import tempfile
import warnings
from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st

from dspark_lab.lint.findings import LintInputError
from dspark_lab.lint.run import lint_source
from dspark_lab.lint.source import read_source
from dspark_lab.results.loading.load import DataWarning, load
from dspark_lab.results.record import rows as rows_schema, schema
from dspark_lab.results.record.output import OutputError, write_text_safely
from test_loading_reliability import base, lines, put

FUZZ = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


# -- lint's parser --------------------------------------------------------------------------------
ATOMS = st.sampled_from(["x", "t", "1", "x.item()", "t.cpu()", "torch.cuda.synchronize()", "f(x)", "''", "None"])


def _nested(draw_depth: int, atom: str, shape: str) -> str:
    forms = {"call": "f({})", "sub": "x[{}]", "not": "not {}", "neg": "-{}", "paren": "({})", "list": "[{}]",
             "ifexp": "a if {} else b", "lambda": "lambda: {}", "await": "(await {})"}
    text = atom
    for _ in range(draw_depth):
        text = forms[shape].format(text)
    return text


@st.composite
def sources(draw) -> str:
    """Python-ish source: statements of nested expressions (some far past the depth limit), chains,
    `# sync-ok:` comments with odd reasons, and sometimes random text or a BOM."""
    if draw(st.booleans()) and draw(st.booleans()):
        return draw(st.text(max_size=200))
    body = []
    for _ in range(draw(st.integers(1, 4))):
        depth = draw(st.sampled_from([0, 3, 50, 199, 201, 400, 3000]))
        shape = draw(st.sampled_from(["call", "sub", "not", "neg", "paren", "list", "ifexp", "lambda", "await"]))
        expr = _nested(depth, draw(ATOMS), shape)
        chain = draw(st.sampled_from(["", " + x" * 50, " and x" * 200, " < x" * 100]))
        reason = draw(st.sampled_from(["", "  # sync-ok:", "  # sync-ok: \u200b", "  # sync-ok: \x1b[2J ok",
                                       "  # sync-ok: fine"]))
        body.append(f"    y = {expr}{chain}{reason}")
    text = "import torch\n\ndef step(x, t):\n" + "\n".join(body) + "\n"
    return ("\ufeff" if draw(st.booleans()) else "") + text


@FUZZ
@given(src=sources())
def test_lint_source_of_generated_source_is_findings_or_one_input_error(src):
    try:
        found = lint_source(src, "gen.py")
    except LintInputError as e:
        assert "gen.py" in str(e) and "\n" not in str(e)
        return
    assert all(f.path == "gen.py" and f.line >= 1 for f in found)


@FUZZ
@given(data=st.binary(max_size=300), bom=st.booleans())
def test_read_source_of_generated_bytes_is_text_or_one_input_error(tmp_path, data, bom):
    path = tmp_path / "gen.py"
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + data)
    try:
        text = read_source(str(path))
    except LintInputError as e:
        assert str(e).startswith(f"{path}: ")
        return
    try:
        lint_source(text, str(path))
    except LintInputError:
        pass


# -- the run-file reader --------------------------------------------------------------------------
COLUMNS = st.sampled_from([*schema.ROW_COLUMNS, *schema.RANK_COLUMNS])
VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.sampled_from([0, 1, -1, 2**31, 2**63, 1e308, -1e308]),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12),
    st.sampled_from(["ok", "failed", "s\ndspark-lab: forged", "\x1b[2J", "\u202e"]),
    st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


@FUZZ
@given(changes=st.dictionaries(COLUMNS, VALUES, min_size=1, max_size=4))
def test_a_generated_row_is_loaded_within_its_ranges_or_skipped_naming_its_line(tmp_path, changes):
    with tempfile.TemporaryDirectory(dir=tmp_path) as tmp:
        run = base(Path(tmp), "one")
        ls = lines(run)
        rec = {**json.loads(ls[1]), **changes}
        put(run, [ls[0], json.dumps(rec).encode(), *ls[2:]])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DataWarning)
            loaded = load(run, cache=False)
    skipped = [w for w in loaded.warnings if w.startswith(f"{run}:2: ")]
    problems = rows_schema.row_problems(rec)
    if problems:
        assert len(loaded.rows) == 7 and skipped, (rec, loaded.warnings)
        assert any(p in skipped[0] for p in problems)
        return
    for column, value in changes.items():
        if column in rows_schema.RANGES and isinstance(value, (int, float)) and not isinstance(value, bool):
            low, inclusive, high = rows_schema.RANGES[column]
            assert (value > low or (inclusive and value == low)) and value <= high


# -- the output path rules ------------------------------------------------------------------------
SEGMENTS = st.sampled_from(["..", ".", "missing", "runs", "out", "link", "a\nb", "\u202e", "x" * 255, "x" * 256,
                            "f.jsonl", "plain.txt"])
LAST = st.sampled_from(["r.html", "r.jsonl", "plain.txt", "header.txt", "", ".", "..", "x" * 250 + ".html",
                        "x" * 256, "a\nb.html", "nul\0.html"])


@FUZZ
@given(parts=st.lists(SEGMENTS, max_size=3), last=LAST)
def test_a_generated_output_path_is_written_where_it_lands_or_refused_in_one_error(tmp_path, parts, last):
    with tempfile.TemporaryDirectory(dir=tmp_path) as tmp:
        root = Path(tmp, "l1", "l2", "l3")  # three ".." (the most drawn) stay inside tmp
        base(root / "runs", "one")
        (root / "out").mkdir()
        (root / "link").symlink_to(root / "runs", target_is_directory=True)
        (root / "plain.txt").write_text("the user's")
        (root / "header.txt").write_text('{"kind": "header"}\n')
        before = {p: p.read_bytes() for p in (root / "runs").iterdir()}
        path = root.joinpath(*parts) / last if last else Path(str(root.joinpath(*parts)) + "/")
        try:
            written = write_text_safely(path, "<html></html>")
        except OutputError as e:
            assert "\n" not in str(e).replace("a\nb", "") and str(e)
        else:
            assert written.read_text() == "<html></html>" and written.parent != (root / "runs").resolve()
            assert not written.name.endswith(".jsonl") and written != (root / "header.txt").resolve()
        assert {p: p.read_bytes() for p in (root / "runs").iterdir()} == before
        assert not [p for p in Path(tmp).rglob(".*.tmp")], "a temporary was left"
