"""The static finder's rules, each on a line that syncs (found) and on its look-alike that does not
(not found), the local-name flow, the `# sync-ok: <reason>` syntax, and the input errors."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from dspark_lab.lint import RULES, LintInputError, lint_paths, lint_source
from dspark_lab.lint.exempt import parse


def found(body: str) -> list[tuple[int, str]]:
    """(line in `body`, rule) of each finding not marked by design, `body` being a function's body."""
    src = "import torch\n\ndef step(s, x, n, dev):\n" + textwrap.indent(textwrap.dedent(body), "    ")
    return [(f.line - 3, f.rule) for f in lint_source(src) if not f.exempt]


def rules(body: str) -> set[str]:
    return {r for _, r in found(body)}


# (rule, a line that syncs, its look-alike that does not)
CASES = [
    ("item", "v = torch.sum(s.seq_lens).item()\n", "v = s.seq_lens_cpu.sum().item()\n"),
    ("tolist", "splits = counts.tolist()\n", "splits = torch.tensor([1, 2]).tolist()\n"),
    ("to_host", "qo = qo_indptr.to('cpu')\n", "qo = qo_indptr.to('cpu', non_blocking=True)\n"),
    ("to_host", "a = x.cpu()\n", "a = torch.arange(4).cpu()\n"),
    ("to_host", "a = x.numpy()\n", "a = torch.from_numpy(b).numpy()\n"),
    ("python_scalar", "k = int(s.seq_lens.sum())\n", "k = int(s.seq_lens_cpu.sum())\n"),
    ("python_scalar", "y = x.cuda()\nk = float(y)\n", "k = float(n)\n"),
    ("tensor_condition", "if (s.positions >= s.limit).any():\n    pass\n", "if n > 3:\n    pass\n"),
    ("tensor_condition", "y = x.cuda()\nwhile y:\n    pass\n", "if torch.cuda.is_available():\n    pass\n"),
    ("tensor_condition", "y = x.to(dev)\nz = 1 if y.any() else 2\n", "z = 1 if s.cpu_flag else 2\n"),
    ("tensor_from_host_data", "t = torch.tensor([4] * n, device=dev)\n", "t = torch.tensor([4] * n)\n"),
    ("tensor_from_host_data", "t = torch.tensor(n, dtype=torch.int32, device=dev)\n",
     "t = torch.tensor(n, device='cpu')\n"),
    ("data_dependent_shape", "rows = s.accept.nonzero()\n", "rows = s.accept_cpu.nonzero()\n"),
    ("data_dependent_shape", "i = torch.where(s.accept)\n", "i = torch.where(s.accept, x, 0)\n"),
    ("boolean_mask", "y = x.cuda()\nkept = y[y > 0]\n", "kept = x[0:3]\n"),
    ("boolean_mask", "m = x.cuda() > 0\nkept = s.logits[m]\n", "m = torch.arange(3) > 0\nkept = s.logits[m]\n"),
    ("host_mask_on_device", "m = s.seq_lens_cpu.cuda() >= 2048\nkept = s.logits[m]\n",
     "m = s.seq_lens_cpu >= 2048\nkept = s.logits[m]\n"),
    ("host_mask_on_device", "lens = s.seq_lens_cpu.to(dev)\nkept = s.logits[lens > 3]\n",
     "lens = s.seq_lens.to(dev)\nkept = s.logits[lens > 3]\n"),
    ("unpinned_non_blocking", "t = torch.tensor(n).to(dev, non_blocking=True)\n",
     "t = torch.tensor(n, pin_memory=True).to(dev, non_blocking=True)\n"),
    ("unpinned_non_blocking", "h = torch.from_numpy(a)\nh2 = h * 2\nd = h2.to(dev, non_blocking=True)\n",
     "h = torch.from_numpy(a).pin_memory()\nd = h.to(dev, non_blocking=True)\n"),
    ("unpinned_non_blocking", "s.d2h_pageable.copy_(x, non_blocking=True)\n", "s.d2h_pinned.copy_(x, non_blocking=True)\n"),
    ("blocking_to_device", "n = (s.seq_lens_cpu + 1).to(torch.int32)\nd = n.to(device=dev, dtype=torch.long)\n",
     "n = (s.seq_lens_cpu + 1).to(torch.int32)\nd = n.pin_memory().to(device=dev, non_blocking=True)\n"),
    ("blocking_to_device", "h = torch.tensor(values)\nd = h.cuda()\n", "h = torch.tensor(values)\nd = h.to(torch.int64)\n"),
    ("tensor_as_number", "y = torch.add(x, x, alpha=s.scale.sum())\n", "y = torch.add(x, x, alpha=0.5)\n"),
    ("tensor_as_number", "d = x.cuda()\nf = torch.full((4,), d.max(), device=dev)\n", "f = torch.full((4,), n, device=dev)\n"),
    ("explicit_sync", "torch.cuda.synchronize()\n", "torch.cuda.current_stream()\n"),
    ("repeat_interleave", "rows = torch.repeat_interleave(tokens, repeats)\n",
     "rows = torch.repeat_interleave(tokens, repeats, output_size=n)\n"),
    ("repeat_interleave", "rows = x.repeat_interleave(s.counts, dim=0)\n", "rows = x.repeat_interleave(2, dim=0)\n"),
    ("repeat_interleave", "idx = torch.repeat_interleave(s.counts)\n", "idx = torch.repeat_interleave(s.counts_cpu)\n"),
    ("explicit_sync", "done.synchronize()\n", "done.record()\n"),
]


@pytest.mark.parametrize("rule,syncs,look_alike", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_each_rule_finds_the_sync_and_leaves_its_look_alike(rule, syncs, look_alike):
    assert rule in rules(syncs), found(syncs)
    assert rule not in rules(look_alike), found(look_alike)


def test_every_rule_has_a_positive_and_a_negative_example():
    assert {c[0] for c in CASES} | {"sync_ok_without_reason"} == set(RULES)


def test_the_flow_follows_a_tensor_through_local_names_within_a_function():
    body = "a = torch.tensor(n)\nb = a + 1\nc = b.view(1)\nd = c.to(dev, non_blocking=True)\n"
    assert found(body) == [(4, "unpinned_non_blocking")]
    # The same name made pinned on the way is not a pageable copy; a later reassignment counts.
    assert found("a = torch.tensor(n)\na = a.pin_memory()\nd = a.to(dev, non_blocking=True)\n") == []
    # x.cpu_tensor is the host's: its .cuda() is a blocking copy, and after it `a` is a device tensor
    assert found("a = x.cpu_tensor\na = a.cuda()\nv = a.item()\n") == [(2, "blocking_to_device"), (3, "item")]


def test_a_module_that_never_imports_torch_is_not_checked():
    assert lint_source("def f(df):\n    return df[df.x == 1].sum().item()\n") == []


def test_pandas_and_numpy_look_alikes_in_a_torch_module_are_left_alone():
    assert found("ok = ev[ev.cat == 'kernel']\nm = float(np.median(v))\nc = report.device == 'cuda'\n"
                 "if not c:\n    pass\n") == []


def test_a_finding_names_its_file_line_function_code_and_fix():
    [f] = lint_source("import torch\ndef step(s):\n    return s.x.item()\n", "pkg/m.py")
    assert (f.path, f.line, f.function, f.code, f.rule) == ("pkg/m.py", 3, "step", "return s.x.item()", "item")
    assert f.fix == RULES["item"].fix and f.fix in f.describe() and f.describe().startswith("pkg/m.py:3:")


@pytest.mark.parametrize("comment,reason", [
    ("# sync-ok: the host needs the count", "the host needs the count"),
    ("#sync-ok:readback", "readback"),
    ("# sync-ok", ""),
    ("# sync-ok:   ", ""),
    ("# sync: documented", None),
    ("# nothing here", None),
])
def test_the_reason_syntax(comment, reason):
    assert parse(comment) == reason


def test_sync_ok_with_a_reason_exempts_its_line_and_keeps_the_reason():
    src = "import torch\ndef step(x):\n    return x.item()  # sync-ok: the result is returned to the caller\n"
    [f] = lint_source(src)
    assert f.exempt and f.exempt_reason == "the result is returned to the caller"


def test_sync_ok_on_the_first_line_of_a_statement_over_several_lines():
    src = "import torch\ndef step(x, d):\n    t = torch.tensor(  # sync-ok: set-up, once\n        x, device=d)\n"
    [f] = lint_source(src)
    assert f.rule == "tensor_from_host_data" and f.exempt_reason == "set-up, once"


def test_a_bare_sync_ok_exempts_nothing_and_is_itself_a_finding():
    src = "import torch\ndef step(x):\n    return x.item()  # sync-ok\n"
    got = {(f.line, f.rule, f.exempt) for f in lint_source(src)}
    assert got == {(3, "item", False), (3, "sync_ok_without_reason", False)}


def test_a_sync_ok_inside_a_string_is_not_a_comment():
    src = "import torch\ndef step(x):\n    return x.item(), '# sync-ok: not a comment'\n"
    assert [f.exempt for f in lint_source(src)] == [False]


def test_a_file_that_does_not_parse_is_an_input_error_naming_file_and_line():
    with pytest.raises(LintInputError, match=r"bad\.py:2: cannot lint a file that does not parse"):
        lint_source("import torch\ndef f(:\n", "bad.py")


# --- the fixes: safe under host run-ahead, and withheld where they would change what the code does ---
def fix_of(body: str, rule: str) -> str:
    src = "import torch\n\ndef step(s, x, n, dev):\n" + textwrap.indent(textwrap.dedent(body), "    ")
    [f] = [f for f in lint_source(src) if f.rule == rule]
    assert f.describe().endswith(f"fix: {f.fix}") and f.to_dict()["fix"] == f.fix
    return f.fix


@pytest.mark.parametrize("body", ["assert (s.positions >= 0).all()\n", "assert s.accept.any(), 'none accepted'\n",
                                  "y = x.cuda()\nwhile y.any():\n    y = y - 1\n",
                                  "y = x.cuda()\nwhile (y > 0).any() and n:\n    y = y - 1\n"])
def test_tensor_conditions_fix_is_not_offered_on_an_assert_or_a_while(body):
    fix = fix_of(body, "tensor_condition")
    assert fix.startswith("none offered") and "torch.where" not in fix


@pytest.mark.parametrize("body", ["assert (\n    n > 0\n    and (s.positions >= 0).all()\n), 'bad positions'\n",
                                  "y = x.cuda()\nwhile (n > 0 and\n       y.any()):\n    y = y - 1\n",
                                  "if n:\n    assert (s.positions\n            >= 0).all()\n"])
def test_the_fix_is_withheld_for_a_test_continued_onto_later_lines_of_an_assert_or_a_while(body):
    """The finding's line holds only part of the test (the statement opened lines above): the finder
    reads the statement from the tree, not from the finding's line."""
    fix = fix_of(body, "tensor_condition")
    assert fix.startswith("none offered") and "torch.where" not in fix


def test_an_if_whose_test_spans_lines_still_gets_the_rules_fix():
    fix = fix_of("if (n > 0 and\n        (s.positions >= s.limit).any()):\n    pass\n", "tensor_condition")
    assert "torch.where" in fix


@pytest.mark.parametrize("body", ["if (s.positions >= s.limit).any():\n    pass\n",
                                  "y = x.to(dev)\nz = 1 if y.any() else 2\n"])
def test_tensor_conditions_fix_is_offered_on_an_if_and_says_when_it_applies(body):
    fix = fix_of(body, "tensor_condition")
    assert "torch.where" in fix and "raises, returns or skips work" in fix


def test_explicit_syncs_fix_keeps_the_waits_that_guard_buffer_reuse_in_the_kits_safe_forms():
    hazards = Path(__file__).resolve().parents[1] / "dspark_lab" / "measure" / "hazards.py"
    guarding = [f for f in lint_paths([hazards]) if f.rule == "explicit_sync"
                and f.function in ("pinned_double_buffer", "graph_staging_owned")]
    assert len(guarding) == 2
    for f in guarding:
        assert "keep it with `# sync-ok: guards buffer reuse`" in f.fix, f.fix


def test_the_copy_fixes_state_when_a_pinned_source_may_be_refilled():
    h2d = fix_of("t = torch.tensor(n).to(dev, non_blocking=True)\n", "unpinned_non_blocking")
    assert "refill a pinned buffer only after the copy that reads it has run" in h2d and "event" in h2d
    blocking = fix_of("h = torch.tensor(values)\nd = h.cuda()\n", "blocking_to_device")
    assert "keep that source alive" not in blocking and "do not refill that source until the copy has run" in blocking


# --- a mask on the host is no sync (PyTorch #156384); a device mask made from host values gets that fix ---
@pytest.mark.parametrize("body", [
    "mask = s.seq_lens_cpu >= 2048\nkept = s.logits[mask]\n",  # a comparison of the host mirror
    "kept = s.logits[s.seq_lens_cpu >= 2048]\n",  # the same, inline
    "mask = torch.tensor([True, False, True])\nkept = s.logits[mask]\n",  # a CPU tensor from a list, no device
    "mask_cpu = s.accept.cpu()\nkept = s.logits[mask_cpu]\n",  # .cpu() of a device mask (that copy is its own finding)
    "kept = s.logits[s.accept_cpu]\n",  # a `_cpu` mirror
])
def test_indexing_with_a_mask_known_to_be_on_the_host_is_not_flagged(body):
    assert not {"boolean_mask", "host_mask_on_device"} & rules(body), found(body)


def test_a_device_mask_made_from_host_values_is_offered_the_host_mask_fix():
    f = [x for x in lint_source("import torch\n\ndef step(s, flags, dev):\n"
                                "    mask = torch.tensor(flags, dtype=torch.bool).to(dev)\n"
                                "    return s.logits[~mask]\n") if x.rule.endswith("mask_on_device")]
    assert [x.line for x in f] == [5] and "x[mask_cpu]" in f[0].fix and "PyTorch #156384" in f[0].fix


def test_a_mask_from_device_values_keeps_the_fixed_shape_fix():
    body = "lens = s.seq_lens_cpu.to(dev)\nkept = s.logits[(lens > 3) & (x.cuda() > 0)]\n"
    assert "boolean_mask" in rules(body) and "host_mask_on_device" not in rules(body), found(body)
    assert RULES["boolean_mask"].fix != RULES["host_mask_on_device"].fix
