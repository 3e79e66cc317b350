"""Katas for onboarding, one for each of the gallery's first seven cases (none for the
field, speculative-decoding, counter-example and compiled cases after them): a step with a sync;
you rewrite one function; `check(name, your_step)` grades it.

    from dspark_lab.gallery import katas
    print(katas.starter("scalar_item"))      # the step with the sync, to paste and edit
    katas.check("scalar_item", my_step)      # -> a Grade; print(grade) says what passed and why

A solution takes the case's state (`s`) and returns what the pitfall step returns. The grade has
four checks. Output: over `graded_steps` steps whose values change every step (gallery/changing.py),
each step's output equals the reference's (the gallery's fix, on a state advanced alike), both run
synchronized (every non-blocking copy made blocking, the device synchronized after each step). Races:
the same steps run with GPU work queued ahead of each and nothing synchronized (measure/races.py, the
check `inspect --races` and the `races` fixture use) give the outputs of the synchronized run, so a
solution that refills or reads a host buffer its copy has not finished with fails. Guard: the guard
sees no host sync outside the case's allow-list. Faster: the step is measurably faster than the
pitfall (interleaved rounds, paired per round, 95% CI of the difference below zero), except
`pageable_copy`, which asks only that it be no slower. Without CUDA nothing can sync or be in flight,
so only the output can be checked there, and the grade says so. The reference solutions are the
gallery's fixes (`solution(name)`).
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from dspark_lab import guard
from dspark_lab.gallery import cases as C
from dspark_lab.gallery.changing import steps_of
from dspark_lab.gallery.registry import CASES, Case, get
from dspark_lab.measure import loop, races
from dspark_lab.results.rules.stats import compare
from dspark_lab.results.record.sync_sites import distinct_lines

CHECKS = ("output", "races", "guard", "faster")
NEEDS_CUDA = "without CUDA nothing can sync or be sped up by removing a sync: only correctness can be checked here"
NO_RUN_AHEAD = ("without CUDA no GPU work can be queued ahead of the step and no copy can be in flight: "
                "no race can show here")
GRADED_STEPS = 8  # steps of changing values the output and the race check run
RTOL, ATOL = 1e-3, 1e-3  # the fixes reorder float sums (bf16 on CUDA)


@dataclass(frozen=True)
class Kata:
    name: str
    task: str  # what to change, in a sentence or two
    hint: str
    # "faster": measurably faster than the pitfall; "not_slower": where the fix keeps a wait of its own
    # and buys only microseconds on a GPU like the H200 (its inspect diff: no measurable difference).
    speed: str = "faster"

    @property
    def case(self) -> Case:
        return get(self.name)


_KATAS = (
    Kata("scalar_item", "Compute seq_lens_sum without reading a device tensor on the host.",
         "The scheduler keeps a host copy of the lengths in lockstep: s.seq_lens_cpu."),
    Kata("tensor_bool", "Mask the padded positions without asking the host whether any exist.",
         "Masking is cheap on the device: do it unconditionally (torch.where)."),
    Kata("boolean_mask", "Sum each request's accepted scores without an output whose size depends on the data.",
         "Multiply by the mask instead of indexing with it; the shape stays fixed."),
    Kata("host_plan", "Give the planner its index arrays without copying device tensors to the host.",
         "Build qo_indptr, kv_indptr and the lengths on the host from s.seq_lens_cpu."),
    Kata("list_to_device", "Make the per-request draft lengths on the device without a host copy.",
         "A fill kernel (torch.full) needs no host memory at all."),
    Kata("host_split_sizes", "Group the tokens by expert without reading the counts on the host.",
         "Size the receive buffer for the worst case (every token to one expert), so no count is needed."),
    Kata("pageable_copy", "Hand the new lengths to the host without a copy that blocks it.",
         "Copy into pinned memory (s.d2h_pinned), record an event, queue the next work, and wait on the "
         "event only where the value is needed (read_back, an allowed by-design wait).",
         # The fix keeps a by-design wait for the same queued work (read_back, at the step's end): a
         # D2H copy into pageable memory waits for the whole queue at every size (the platform card),
         # and at the kata's scale the step is host-bound, so the fix need not be measurably faster.
         speed="not_slower"),
)
KATAS: dict[str, Kata] = {k.name: k for k in _KATAS}
assert set(KATAS) <= set(CASES), "every kata is built on a gallery case"


def names() -> tuple[str, ...]:
    return tuple(KATAS)


def kata(name: str) -> Kata:
    if not isinstance(name, str) or name not in KATAS:
        raise ValueError(f"kata must be one of {', '.join(KATAS)}; got {name!r:.60}")
    return KATAS[name]


def _helpers_of(fn: Callable) -> list[str]:
    """The gallery helpers `fn` calls (target_verify, host_prep, draft, ...), for the starter's import."""
    return sorted(n for n in fn.__code__.co_names if inspect.isfunction(getattr(C, n, None)))


def _source(name: str, fn: Callable) -> str:
    imports = ", ".join(["State"] + _helpers_of(fn))  # State: the annotation is evaluated in a cell
    return f"import torch\n\nfrom dspark_lab.gallery.cases import {imports}\n\n\n" + inspect.getsource(fn)


def starter(name: str) -> str:
    """The pitfall step's source, ready to paste into a cell and edit (its imports included)."""
    return _source(name, kata(name).case.step)


def solution(name: str) -> str:
    """A reference solution's source: the gallery's fix."""
    return _source(name, kata(name).case.fix)


# Without CUDA only the value can be checked, and the untouched pitfall returns the right value too:
# that is no pass.
NOT_GRADED = "not graded without CUDA: only the value was checked (the untouched pitfall passes that too)"


@dataclass
class Grade:
    name: str
    results: dict = field(default_factory=dict)  # check -> (True | False | None, detail); None: not checkable here

    @property
    def passed(self) -> bool:
        """Every check that could run passed (see `complete`)."""
        return all(ok is not False for ok, _ in self.results.values())

    @property
    def complete(self) -> bool:
        """Every check could run (a CUDA machine)."""
        return all(ok is not None for ok, _ in self.results.values())

    def failed(self) -> list[str]:
        return [c for c, (ok, _) in self.results.items() if ok is False]

    def __str__(self) -> str:
        mark = {True: "PASS", False: "FAIL", None: "n/a "}
        head = (f"kata {self.name}: " + ("passed" if self.passed and self.complete else
                                          NOT_GRADED if self.passed else
                                          f"failed ({', '.join(self.failed())})"))
        return "\n".join([head] + [f"  [{mark[ok]}] {c}: {d}" for c, (ok, d) in self.results.items()])


def same_output(got, want) -> tuple[bool, str]:
    """Equal values: tensors close (RTOL/ATOL, same shape), anything else equal."""
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return False, f"returned a {type(got).__name__}; the reference returns a tensor"
        g, w = got.detach().float().cpu(), want.detach().float().cpu()
        if g.shape != w.shape:
            return False, f"shape {tuple(g.shape)}; the reference's is {tuple(w.shape)}"
        if not torch.allclose(g, w, rtol=RTOL, atol=ATOL):
            return False, f"values differ from the reference (largest difference {float((g - w).abs().max()):.3g})"
        return True, "equals the reference"
    if isinstance(got, torch.Tensor):
        return False, f"returned a tensor; the reference returns a {type(want).__name__}"
    ok = got == want
    return (True, "equals the reference") if ok else (False, f"returned {got!r}; the reference returns {want!r}")


def _guard_check(case: Case, solution_fn: Callable, state: C.State) -> tuple[bool, str]:
    with guard.no_host_syncs(count=True, allow=case.allow) as g:
        solution_fn(state)
    lines = distinct_lines((s.site, s.seen_by == guard.DEBUG_MODE) for s in g.violations)
    if lines:
        return False, f"host sync at {'; '.join(lines)}"
    return True, "no host sync" + (f" outside the allowed {', '.join(case.allow)}" if case.allow else "")


def _speed_check(case: Case, solution_fn: Callable, state: C.State, rounds: int, steps: int) -> tuple[bool, str]:
    timed = loop.run_rounds({"pitfall": lambda: case.step(state), "yours": lambda: solution_fn(state)},
                            loop.FixedRounds(rounds), steps=steps, warmup=3, sync=torch.cuda.synchronize).timings
    c = compare([t.step_ms for t in timed["yours"]], [t.step_ms for t in timed["pitfall"]], "yours", "the pitfall")
    if kata(case.name).speed == "not_slower":
        return not (c["measurable"] and c["pct"] > 0), c["verdict"] + " (this kata asks: no slower)"
    return c["measurable"] and c["pct"] < 0, c["verdict"]


def _plain_hooks(cuda: bool) -> races.Hooks:
    """The synchronized run's hooks: nothing queued ahead, the device synchronized after each step."""
    return races.Hooks(ahead=lambda: None, sync=torch.cuda.synchronize if cuda else (lambda: None))


RAISED = "raised "


def _raised(e: Exception) -> tuple[bool, str]:
    return False, f"{RAISED}{type(e).__name__}: {e}"


def output_check(case: Case, solution_fn: Callable, scale: str, steps: int, hooks: races.Hooks) -> tuple[bool, str]:
    """Each of `steps` synchronized steps of changing values returns what the case's fix returns."""
    want = races.outputs(steps_of(case.fix, scale), steps, hooks)
    try:
        got = races.outputs(steps_of(solution_fn, scale), steps, hooks)
    except Exception as e:  # noqa: BLE001 -- the learner's step failing is a failed check, not a crash
        return _raised(e)
    for i, (g, w) in enumerate(zip(got, want)):
        if len(g) != len(w):
            return False, f"step {i}: returned {len(g)} value(s); the reference returns {len(w)}"
        for (path, gv), (_, wv) in zip(g, w):
            ok, why = same_output(gv, wv)
            if not ok:
                return False, f"step {i}" + ("" if path == "output" else f", value {path}") + f": {why}"
    return True, f"equals the reference at each of {steps} steps (the values change every step)"


def race_check(solution_fn: Callable, scale: str, steps: int, hooks: Optional[races.Hooks]) -> tuple[Optional[bool], str]:
    """The same steps under run-ahead (GPU work queued ahead of each, nothing synchronized) against the
    synchronized run: any output that differs is a race. `hooks` None: CUDA's (none can run without it)."""
    if hooks is None and not torch.cuda.is_available():
        return None, NO_RUN_AHEAD
    try:
        rep = races.check(steps_of(solution_fn, scale), steps=steps, hooks=hooks)
    except Exception as e:  # noqa: BLE001
        return _raised(e)
    if rep["clean"]:
        return True, f"no race in {steps} steps with GPU work queued ahead of each (the values change every step)"
    return False, races.describe(rep).replace("\n", ";")


def check(name: str, solution_fn: Callable[[C.State], object], *, scale: Optional[str] = None,
          rounds: int = 10, steps: int = 20, graded_steps: int = GRADED_STEPS,
          hooks: Optional[races.Hooks] = None) -> Grade:
    """Grade `solution_fn(state)` for kata `name` (see the module's doc for the four checks). `hooks`:
    the race check's (measure.races.Hooks), for a test without CUDA; None: CUDA's, or none."""
    case = kata(name).case
    cuda = torch.cuda.is_available()
    scale = scale or ("gpu" if cuda else "smoke")
    grade = Grade(name)
    grade.results["output"] = output_check(case, solution_fn, scale, graded_steps, hooks or _plain_hooks(cuda))
    if grade.results["output"][1].startswith(RAISED):  # the other checks would run it again
        return grade
    grade.results["races"] = race_check(solution_fn, scale, graded_steps, hooks)
    if not cuda:
        grade.results["guard"] = grade.results["faster"] = (None, NEEDS_CUDA)
        return grade
    state = C.make_state(scale_name=scale)
    for _ in range(2):  # warm up outside the guard: first calls allocate
        solution_fn(state)
    torch.cuda.synchronize()
    grade.results["guard"] = _guard_check(case, solution_fn, state)
    grade.results["faster"] = _speed_check(case, solution_fn, state, rounds, steps)
    return grade
