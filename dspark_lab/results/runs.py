"""`Runs`: recorded runs loaded once, labelled, selected and compared the same way in every view.

The report, the CLI, the panel and the notebooks ask these questions here and only render the
answers, so the same question gives the same number everywhere:
  - which runs are there, each with a short unique label (`labels()`, column `run_label`);
  - a point, the nearest recorded point, THE reference point (`REFERENCE`, defined once);
  - per-run or pooled summaries (median step time, 95% CI, trials, disturbed trials left out);
  - paired comparisons within a run and the same comparison across runs;
  - the `headline`: the reference point's numbers by one explicit rule (`HEADLINE_RULE`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Optional, Sequence

import numpy as np
import pandas as pd

from . import noise
from .stats import compare, median_ci
from .strategy_info import BASELINE, strategy_order

MACHINE_COLUMNS = ("gpu", "driver", "cuda", "torch")


@dataclass(frozen=True)
class ReferencePoint:
    """The one point every view leads with: the sglang_profile workload at batch 8, gamma 4 and the
    largest recorded EP size above 1 (the scalar is consumed only with EP > 1)."""

    workload: str = "sglang_profile"
    batch_size: int = 8
    gamma: int = 4

    def describe(self) -> str:
        return (f"{self.workload}, batch {self.batch_size}, gamma {self.gamma}, the largest recorded EP > 1, "
                "measured in one process; real-rank and predicted runs are shown apart")


# Rows of the one-process measurement (EP flips the predicate); "real" rows come from rank processes
# and "predicted" rows from parallel.predict: neither stands for the reference point.
SEPARATE_EP_MODES = ("real", "predicted")


def one_process(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows measured in one process (no ep_mode recorded, "single" or "predicate_only")."""
    if "ep_mode" not in rows.columns:
        return rows
    return rows[~rows["ep_mode"].isin(SEPARATE_EP_MODES)]


REFERENCE = ReferencePoint()

HEADLINE_RULE = (
    "rule: per machine (GPU, driver, CUDA, torch), the most recent run holding the reference point "
    f"({REFERENCE.describe()}); that run's trials only, not pooled across runs; trials marked disturbed "
    "left out (results.noise.RULE). Median step time over trials with a 95% bootstrap CI; device_direct "
    "against the fastest other strategy, paired by trial round; the headline ratio device_direct / "
    "non_blocking per trial round, over rounds where neither trial is disturbed, with its 95% CI. "
    "A run disturbed as a whole at the point (results.noise.RUN_RULE) is skipped in favour of the most "
    "recent undisturbed run of the machine holding it, and the line says which run was skipped and why."
)


def _is_true(v) -> bool:
    return isinstance(v, (bool, np.bool_)) and bool(v)


EP_MODE_LABELS = {"real": "real ranks", "predicate_only": "one GPU, predicate only", "predicted": "predicted"}


def point_label(row) -> str:
    """'EP 2 (real ranks) · batch 8 · gamma 4 · sglang_profile' for a row (Series or dict)."""
    get = row.get if hasattr(row, "get") else (lambda k, d=None: getattr(row, k, d))
    parts = [f"EP {get('ep_size')}", f"batch {get('batch_size')}", f"gamma {get('gamma')}"]
    mode = get("ep_mode")
    if mode in EP_MODE_LABELS:  # how EP was run (schema.RANK_COLUMNS); nothing to say at EP 1
        parts[0] += f" ({EP_MODE_LABELS[mode]})"
    if get("workload") is not None:
        parts.append(str(get("workload")))
    return " · ".join(parts)


def gpu_name(gpu) -> str:
    """The GPU column as shown: a CPU-only run records gpu "none"."""
    g = "" if gpu is None or (isinstance(gpu, float) and math.isnan(gpu)) else str(gpu)
    return "CPU only (no GPU)" if g.lower() in ("", "none", "cpu") else g


def ok_rows(rows: pd.DataFrame) -> pd.DataFrame:
    return rows if "status" not in rows.columns else rows[rows["status"] == "ok"]


def failed_rows(rows: pd.DataFrame) -> pd.DataFrame:
    return rows.iloc[0:0] if "status" not in rows.columns else rows[rows["status"] != "ok"]


def undisturbed(rows: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """The rows not marked disturbed (NaN/None = not disturbed), and how many were left out."""
    if "disturbed" not in rows.columns or rows.empty:
        return rows, 0
    mask = rows["disturbed"].map(_is_true)
    return rows[~mask], int(mask.sum())


def point_distance(points: pd.DataFrame, ep_size=None, batch_size=None, gamma=None) -> pd.Series:
    """Distance of each point to the asked settings: log2 steps in each asked dimension, summed."""
    d = pd.Series(0.0, index=points.index)
    for col, want in (("ep_size", ep_size), ("batch_size", batch_size), ("gamma", gamma)):
        if want is not None:
            d = d + (np.log2(points[col].astype(float)) - np.log2(float(want))).abs()
    return d


def run_labels(headers: Sequence[dict], rows: pd.DataFrame) -> dict:
    """run_id -> a short unique label: the header's `name` when given at record time, else the GPU
    with the date and time the run started (seconds, then the run id, added only to break ties)."""
    info: dict[str, dict] = {}
    for h in headers:
        fp = h.get("fingerprint") or h  # a header record, or a flat {run_id, gpu, recorded_at, ...}
        info[str(h.get("run_id"))] = {"name": h.get("name"), "gpu": fp.get("gpu"),
                                      "at": h.get("created_at") or h.get("recorded_at") or ""}
    if "run_id" in rows.columns and not rows.empty:
        for r in rows.drop_duplicates("run_id").itertuples():
            given = getattr(r, "run_label", None)  # rows that already carry their label keep it
            info.setdefault(str(r.run_id), {"name": given if isinstance(given, str) else None,
                                            "gpu": getattr(r, "gpu", None), "at": getattr(r, "recorded_at", "") or ""})

    def when(at: str, n: int) -> str:
        s = str(at).replace("T", " ")
        return s[:16] if n == 16 else s[:19]

    labels = {rid: (str(i["name"]) if i.get("name") else f"{gpu_name(i['gpu'])} {when(i['at'], 16)}".strip())
              for rid, i in info.items()}
    for width in (19, None):
        counts = pd.Series(list(labels.values())).value_counts()
        for rid, lab in list(labels.items()):
            if counts.get(lab, 0) > 1:
                i = info[rid]
                labels[rid] = (f"{gpu_name(i['gpu'])} {when(i['at'], 19)}" if width and not i.get("name")
                               else f"{lab} [{rid}]")
    return labels


@dataclass
class Headline:
    """The reference point's numbers per machine, chosen by `rule`."""

    rule: str
    entries: list = field(default_factory=list)  # per machine: dict(run_id, label, point, strategies, comparison, ...)

    def lines(self) -> list[str]:
        out = []
        for e in self.entries:
            parts = [f"{s['strategy']} {s['median_ms']:.2f} ms" for s in e["strategies"]]
            line = f"headline: {e['label']} · {e['point']}: median step " + ", ".join(parts)
            if e.get("comparison"):
                line += f"; {e['comparison']['verdict']}"
            if e.get("ratio"):
                line += f"; {e['ratio']['text']}"
            if e.get("disturbed_left_out"):
                line += f" ({e['disturbed_left_out']} disturbed trials left out)"
            for sk in e.get("skipped_runs", []):
                line += f"; skipped {sk['label']} (disturbed run: {sk['reason']})"
            out.append(line)
        if not self.entries:
            out.append("headline: no recorded run holds a successful point of the reference workload")
        return out

    def text(self) -> str:
        return "\n".join(self.lines() + [self.rule])

    def __str__(self) -> str:
        return self.text()


class Runs:
    """Recorded runs: rows (one per point x strategy x trial, with a `run_label` column), timelines,
    headers, and the problems met while loading (`warnings`)."""

    def __init__(self, rows: pd.DataFrame, timelines: Optional[pd.DataFrame] = None,
                 headers: Optional[Sequence[dict]] = None, warnings: Iterable[str] = ()):
        self.headers = list(headers or [])
        rows = rows.reset_index(drop=True)
        if "run_id" not in rows.columns:
            rows = rows.assign(run_id="")
        self._labels = run_labels(self.headers, rows)
        # Every row gets a verdict: the recorded one, or the rule applied to runs recorded before it
        # (results.noise), so every view leaves out the same trials.
        flags = noise.disturbed_flags(rows) if len(rows) else pd.Series(dtype=bool)
        self.rows = rows.assign(run_label=rows["run_id"].astype(str).map(self._labels), disturbed=flags)
        tl = timelines if timelines is not None else pd.DataFrame()
        self.timelines = tl.reset_index(drop=True)
        self.warnings = list(warnings)

    @classmethod
    def load(cls, paths=None) -> "Runs":
        """Load run files or folders (default: the data dir, data/ or $DSPARK_DATA)."""
        from ..store import default_data_dir
        from .load import load

        loaded = load(paths, default=default_data_dir())
        return cls(loaded.rows, loaded.timelines, loaded.headers, loaded.warnings)

    # -- runs ------------------------------------------------------------------------------------
    def labels(self) -> dict:
        """run_id -> short unique label, oldest run first."""
        return {rid: self._labels[rid] for rid in self.run_ids()}

    def run_ids(self) -> list[str]:
        when = {str(h.get("run_id")): str(h.get("created_at") or h.get("recorded_at") or "") for h in self.headers}
        ids = list(dict.fromkeys(self.rows["run_id"].astype(str))) if len(self.rows) else []
        ids += [r for r in when if r not in ids]
        return sorted(ids, key=lambda r: (when.get(r, ""), r))

    def table(self) -> pd.DataFrame:
        """One row per run: label, machine, when, points (failed too), model / workload, sweep."""
        out = []
        by_id = {str(h.get("run_id")): h for h in self.headers}
        rd = self.run_disturbance()
        bad = rd[rd["run_disturbed"]].groupby("run_id")["point_id"].nunique().to_dict() if len(rd) else {}
        judged = rd[rd["reference_run_id"].notna()].groupby("run_id")["point_id"].nunique().to_dict() if len(rd) else {}
        for rid in self.run_ids():
            h = by_id.get(rid, {})
            fp = h.get("fingerprint") or h
            sub = self.rows[self.rows["run_id"].astype(str) == rid]
            sweep = h.get("sweep") or {}
            out.append({
                "run": self._labels.get(rid, rid), "run id": rid, "GPU": gpu_name(fp.get("gpu")),
                "driver": fp.get("driver"), "CUDA": fp.get("cuda"), "torch": fp.get("torch"),
                "recorded": h.get("created_at") or h.get("recorded_at"), "points": int(sub["point_id"].nunique()),
                "failed points": int(failed_rows(sub)["point_id"].nunique()),
                "model / workload": ", ".join(sorted({f"{m} / {w}" for m, w in zip(sub.get("model", []), sub.get("workload", []))})),
                "sweep": (f"EP {sweep.get('ep_size')} × batch {sweep.get('batch_size')} × gamma {sweep.get('gamma')}"
                          if sweep else ""),
                # results.noise.RUN_RULE: points where this whole run is disturbed, of those with a peer run to judge by
                "disturbed run at": (f"{int(bad.get(rid, 0))} of {int(judged[rid])} points" if rid in judged
                                     else "not judged"),
            })
        return pd.DataFrame(out)

    # -- selecting -------------------------------------------------------------------------------
    @property
    def ok(self) -> pd.DataFrame:
        return ok_rows(self.rows)

    def point(self, point_id: str, run_id: Optional[str] = None) -> pd.DataFrame:
        rows = self.rows[self.rows["point_id"] == point_id]
        if run_id is not None:
            rows = rows[rows["run_id"] == run_id]
        if rows.empty:
            raise ValueError(f"point_id {point_id!r} is not in the recorded rows" + (f" of run {run_id!r}" if run_id else ""))
        return rows

    def nearest(self, *, ep_size=None, batch_size=None, gamma=None, workload=None, model=None,
                run_id=None, ok_only: bool = True, one_process_only: bool = False) -> pd.DataFrame:
        """The rows of the recorded point nearest to the asked settings, per run; the runs kept are
        those holding the overall-nearest (EP, batch, gamma). Workload, model and run match exactly;
        EP, batch and gamma by log2 distance; ties go to the smaller point."""
        df = self.ok if ok_only else self.rows
        if one_process_only:
            df = one_process(df)
        if df.empty:
            raise ValueError("no recorded rows to select from")
        for col, want in (("workload", workload), ("model", model), ("run_id", run_id)):
            if want is not None and col in df.columns:
                hit = df[df[col] == want]
                if hit.empty:
                    known = sorted(map(str, df[col].dropna().unique()))
                    raise ValueError(f"{col} {want!r} is not in the recorded rows; recorded: {', '.join(known)}")
                df = hit
        pts = df.drop_duplicates(["run_id", "point_id"])[["run_id", "point_id", "ep_size", "batch_size", "gamma"]].copy()
        pts["_d"] = point_distance(pts, ep_size, batch_size, gamma)
        pts = pts.sort_values(["_d", "ep_size", "batch_size", "gamma"], kind="stable")
        key = pts.iloc[0][["ep_size", "batch_size", "gamma"]].tolist()
        best = pts[(pts[["ep_size", "batch_size", "gamma"]].values == key).all(axis=1)].drop_duplicates("run_id")
        keep = set(zip(best["run_id"], best["point_id"]))
        return df[[(r, p) in keep for r, p in zip(df["run_id"], df["point_id"])]]

    def reference(self, run_id: Optional[str] = None, ep_size: Optional[int] = None) -> pd.DataFrame:
        """The reference point (REFERENCE) in every run holding it, or in one run. `ep_size=1`
        gives its EP-1 twin. Falls back to the nearest recorded point when it was not recorded."""
        ok = one_process(self.ok if run_id is None else self.ok[self.ok["run_id"] == run_id])
        if ok.empty:
            raise ValueError("no successful recorded rows" + (f" in run {run_id!r}" if run_id else ""))
        wl = REFERENCE.workload if REFERENCE.workload in set(ok["workload"]) else ok["workload"].value_counts().index[0]
        ok = ok[ok["workload"] == wl]
        if ep_size is None:
            eps = ok["ep_size"].astype(int)
            ep_size = int(eps[eps > 1].max()) if (eps > 1).any() else int(eps.max())
        return self.nearest(ep_size=ep_size, batch_size=REFERENCE.batch_size, gamma=REFERENCE.gamma,
                            workload=wl, run_id=run_id, one_process_only=True)

    def featured_points(self) -> list[tuple[str, str]]:
        """(run_id, point_id) pairs to present: the reference point and its EP-1 twin, per run."""
        out = []
        for ep in (None, 1):
            try:
                rows = self.reference(ep_size=ep)
            except ValueError:
                continue
            if ep == 1 and (rows["ep_size"] > 1).any():
                continue
            out += list(dict.fromkeys(zip(rows["run_id"], rows["point_id"])))
        return list(dict.fromkeys(out))

    # -- summarising -----------------------------------------------------------------------------
    @staticmethod
    def summary(rows: pd.DataFrame, pooled: bool = False) -> pd.DataFrame:
        """Per (run, strategy) — or per strategy over all runs when `pooled` — the median step time
        with its 95% CI, the trials used and the disturbed trials left out."""
        ok, _ = ok_rows(rows), None
        keys = ["strategy"] if pooled else ["run_id", "strategy"]
        out = []
        for key, g in ok.groupby(keys, sort=False):
            use, left_out = undisturbed(g)
            vals = pd.to_numeric(use["step_ms"], errors="coerce").dropna().tolist()
            med, lo, hi = median_ci(vals) if vals else (math.nan,) * 3
            key = key if isinstance(key, tuple) else (key,)
            out.append({**dict(zip(keys, key)), "median_ms": med, "ci_low_ms": lo, "ci_high_ms": hi,
                        "trials": len(vals), "disturbed_left_out": left_out})
        df = pd.DataFrame(out, columns=keys + ["median_ms", "ci_low_ms", "ci_high_ms", "trials", "disturbed_left_out"])
        order = {s: i for i, s in enumerate(strategy_order(df["strategy"]))}
        return df.sort_values(by=keys[:-1] + ["strategy"], key=lambda c: c.map(order) if c.name == "strategy" else c,
                              kind="stable").reset_index(drop=True)

    @staticmethod
    def paired_times(rows: pd.DataFrame, strategy: str) -> list[float]:
        """One run's step times of a strategy, by trial round, disturbed trials left out."""
        g, _ = undisturbed(ok_rows(rows))
        g = g[g["strategy"] == strategy].sort_values("trial")
        return pd.to_numeric(g["step_ms"], errors="coerce").dropna().tolist()

    @classmethod
    def compare(cls, rows: pd.DataFrame, a: str, b: str) -> dict:
        """A against B within ONE run's rows of one point, paired by trial round (stats.compare),
        on the trials both kept (a round with a disturbed trial on either side is left out)."""
        runs = rows["run_id"].nunique() if "run_id" in rows.columns else 1
        if runs > 1:
            raise ValueError("compare takes one run's rows; use cross_run for several runs")
        g, _ = undisturbed(ok_rows(rows))
        ta = g[g["strategy"] == a].set_index("trial")["step_ms"]
        tb = g[g["strategy"] == b].set_index("trial")["step_ms"]
        both = sorted(set(ta.index) & set(tb.index))
        xa = [float(ta[t]) for t in both] if both else cls.paired_times(rows, a)
        xb = [float(tb[t]) for t in both] if both else cls.paired_times(rows, b)
        return compare(xa, xb, a, b)

    def best_fix(self, rows: pd.DataFrame, baseline: str = BASELINE) -> Optional[str]:
        """The strategy other than the baseline with the lowest median step time in these rows."""
        s = self.summary(rows)
        s = s[(s["strategy"] != baseline) & (s["trials"] > 0)]
        return None if s.empty else str(s.sort_values("median_ms", kind="stable").iloc[0]["strategy"])

    def cross_run(self, rows: pd.DataFrame, baseline: str = BASELINE) -> list[dict]:
        """Per run holding these rows' point: the baseline against that run's best fix."""
        out = []
        for rid, g in rows.groupby("run_id", sort=False):
            best = self.best_fix(g, baseline)
            if best is None or baseline not in set(g["strategy"]):
                continue
            c = self.compare(g, best, baseline)
            out.append({"run_id": rid, "label": self._labels.get(str(rid), rid), "best": best, **c})
        return out

    def run_disturbance(self) -> pd.DataFrame:
        """Per (run, point) of the one-process rows: the run-level verdict (results.noise.RUN_RULE)."""
        return noise.run_disturbance(one_process(self.ok))

    # -- the headline ----------------------------------------------------------------------------
    def headline(self, baseline: str = BASELINE) -> Headline:
        """The reference point's numbers by HEADLINE_RULE (printed with them)."""
        head = Headline(HEADLINE_RULE)
        ok = one_process(self.ok)
        if ok.empty:
            return head
        try:  # the reference EP size is the largest recorded over all runs of the machine's kind
            ref_ep = int(self.reference()["ep_size"].iloc[0])
        except ValueError:
            return head
        when = {str(h.get("run_id")): str(h.get("created_at") or h.get("recorded_at") or "") for h in self.headers}
        machines = ok.drop_duplicates("run_id")[["run_id", *MACHINE_COLUMNS]].astype(str)
        run_dist = self.run_disturbance()
        run_dist = {(str(r), p): why for r, p, bad, why in zip(run_dist["run_id"], run_dist["point_id"],
                                                              run_dist["run_disturbed"], run_dist["run_disturbed_reason"]) if bad}
        for _, m in machines.groupby(list(MACHINE_COLUMNS), sort=True):
            ids = sorted(m["run_id"], key=lambda r: (when.get(r, ""), r), reverse=True)
            skipped = []
            for rid in ids:  # the most recent run holding the reference point, not disturbed as a whole
                try:
                    rows = self.reference(run_id=rid, ep_size=ref_ep)
                except ValueError:
                    continue
                if (rows["workload"] != REFERENCE.workload).any() or (rows[["ep_size", "batch_size", "gamma"]].iloc[0]
                                                                      .tolist() != [ref_ep, REFERENCE.batch_size, REFERENCE.gamma]):
                    continue
                why = run_dist.get((rid, rows["point_id"].iloc[0]))
                if why:
                    skipped.append({"run_id": rid, "label": self._labels.get(rid, rid), "reason": why})
                    continue
                summ = self.summary(rows)
                entry = {"skipped_runs": skipped, "run_id": rid, "label": self._labels.get(rid, rid), "point": point_label(rows.iloc[0]),
                         "point_id": rows["point_id"].iloc[0],
                         "strategies": summ.to_dict("records"),
                         "disturbed_left_out": int(summ["disturbed_left_out"].sum()), "comparison": None}
                best = self.best_fix(rows, baseline)
                if best and baseline in set(rows["strategy"]):
                    entry["comparison"] = {"best": best, **self.compare(rows, best, baseline)}
                try:
                    entry["ratio"] = noise.headline(rows)
                except ValueError:  # one strategy only: no ratio to form
                    entry["ratio"] = None
                head.entries.append(entry)
                break
        return head
