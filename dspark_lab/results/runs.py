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
from pathlib import Path
from dataclasses import dataclass, field
from typing import Iterable, Optional, Sequence

import numpy as np
import pandas as pd

from dspark_lab.results import noise
from dspark_lab.results.stats import compare, median_ci
from dspark_lab.results.load import TimelineSource, load
from dspark_lab.results.paths import default_data_dir
from dspark_lab.results.strategy_info import BASELINE, strategy_order

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
# and "predicted" rows from results.ep_predict: neither stands for the reference point.
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


MAX_COMPARED = 4  # runs drawn side by side by default (report, panel "all selected"); the rest in tables
_DATE = __import__("re").compile(r"^\d{4}(-\d{2}(-\d{2}([T ]\d{2}(:\d{2}(:\d{2})?)?)?)?)?$")


def _date_text(field: str, value) -> str:
    """A date filter as the ISO prefix it compares with: "2026-11-30", "2026-11", a date or datetime."""
    text = value.isoformat() if hasattr(value, "isoformat") else str(value)
    text = text.replace(" ", "T")[:19]
    if not _DATE.match(text):
        raise ValueError(f"{field} must be a date like 2026-11-30 (or 2026-11, or a datetime), got {value!r}")
    return text


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

    def __init__(self, rows: pd.DataFrame, timelines=None,
                 headers: Optional[Sequence[dict]] = None, warnings: Iterable[str] = (), *,
                 disturbed: Optional[pd.Series] = None, labels: Optional[dict] = None):
        """`timelines`: a DataFrame of segments, or a load.TimelineSource that reads them when asked.
        `disturbed`: the verdict per row when already known (the loader's, per file); `labels`: run
        labels to keep (a selection keeps the labels of the runs it was chosen from)."""
        self.headers = list(headers or [])
        rows = rows.reset_index(drop=True)
        if "run_id" not in rows.columns:
            rows = rows.assign(run_id="")
        self._labels = dict(labels) if labels is not None else run_labels(self.headers, rows)
        # Every row gets a verdict: the recorded one, or the rule applied to runs recorded before it
        # (results.noise), so every view leaves out the same trials.
        if disturbed is not None and len(disturbed) == len(rows):
            flags = pd.Series(np.asarray(disturbed, dtype=bool), index=rows.index)
        else:
            flags = noise.disturbed_flags(rows) if len(rows) else pd.Series(dtype=bool)
        self.rows = rows.assign(run_label=rows["run_id"].astype(str).map(self._labels), disturbed=flags)
        self._source = timelines if isinstance(timelines, TimelineSource) else None
        self._timelines = None if self._source is not None else (
            timelines if timelines is not None else pd.DataFrame()).reset_index(drop=True)
        self.warnings = list(warnings)

    @classmethod
    def load(cls, paths=None, *, cache=None) -> "Runs":
        """Load run files or folders (default: the data dir, data/ or $DSPARK_DATA), through the
        columnar cache (results/cache.py; `cache=False` parses every file)."""
        loaded = load(paths, default=default_data_dir(), cache=cache)
        return cls(loaded.rows, loaded.timeline_source, loaded.headers, loaded.warnings, disturbed=loaded.disturbed)

    # -- timelines (read only when asked for) ---------------------------------------------------
    @property
    def timelines(self) -> pd.DataFrame:
        """Every run's timeline segments; reading them all is the slow path: prefer `timeline()`."""
        if self._timelines is None:
            self._timelines = self._source.all(self.run_ids())
        return self._timelines

    @timelines.setter
    def timelines(self, value: pd.DataFrame) -> None:
        self._source, self._timelines = None, value

    def timeline(self, run_id: str, point_id: Optional[str] = None) -> pd.DataFrame:
        """One run's timeline segments (one point's when `point_id` is given), read only for it."""
        if self._timelines is None:
            return self._source.get(str(run_id), point_id)
        tl = self._timelines
        if tl.empty:
            return tl
        keep = pd.Series(True, index=tl.index)
        if "run_id" in tl.columns:
            keep &= tl["run_id"].astype(str) == str(run_id)
        if point_id is not None and "point_id" in tl.columns:
            keep &= tl["point_id"] == point_id
        return tl[keep]

    # -- runs ------------------------------------------------------------------------------------
    def labels(self) -> dict:
        """run_id -> short unique label, oldest run first."""
        return {rid: self._labels[rid] for rid in self.run_ids()}

    def run_ids(self) -> list[str]:
        memo = (id(self.rows), len(self.rows), len(self.headers))  # recomputed if rows/headers are replaced
        if getattr(self, "_run_ids_memo", (None,))[0] != memo:
            when = {str(h.get("run_id")): str(h.get("created_at") or h.get("recorded_at") or "") for h in self.headers}
            ids = list(pd.unique(self.rows["run_id"].astype(str))) if len(self.rows) else []
            seen = set(ids)
            ids += [r for r in when if r not in seen]
            self._run_ids_memo = (memo, sorted(ids, key=lambda r: (when.get(r, ""), r)))
        return list(self._run_ids_memo[1])

    def table(self) -> pd.DataFrame:
        """One row per run: label, machine, when, points (failed too), model / workload, sweep."""
        out = []
        by_id = {str(h.get("run_id")): h for h in self.headers}
        rows = self.rows
        rid = rows["run_id"].astype(str)
        points = rows.groupby(rid, sort=False)["point_id"].nunique() if len(rows) else {}
        bad = failed_rows(rows)
        failed = bad.groupby(bad["run_id"].astype(str), sort=False)["point_id"].nunique() if len(bad) else {}
        mw: dict = {}
        if len(rows) and "model" in rows.columns and "workload" in rows.columns:
            pairs = pd.DataFrame({"r": rid, "m": rows["model"], "w": rows["workload"]}).drop_duplicates()
            for r, m, w in zip(pairs["r"], pairs["m"], pairs["w"]):
                mw.setdefault(r, set()).add(f"{m} / {w}")
        rd = self.run_disturbance()
        disturbed_at = rd[rd["run_disturbed"]].groupby("run_id")["point_id"].nunique().to_dict() if len(rd) else {}
        judged = rd[rd["reference_run_id"].notna()].groupby("run_id")["point_id"].nunique().to_dict() if len(rd) else {}
        for rid_ in self.run_ids():
            h = by_id.get(rid_, {})
            fp = h.get("fingerprint") or h
            sweep = h.get("sweep") or {}
            out.append({
                "run": self._labels.get(rid_, rid_), "run id": rid_, "GPU": gpu_name(fp.get("gpu")),
                "driver": fp.get("driver"), "CUDA": fp.get("cuda"), "torch": fp.get("torch"),
                "recorded": h.get("created_at") or h.get("recorded_at"), "points": int(points.get(rid_, 0)),
                "failed points": int(failed.get(rid_, 0)),
                "model / workload": ", ".join(sorted(mw.get(rid_, ()))),
                "sweep": (f"EP {sweep.get('ep_size')} × batch {sweep.get('batch_size')} × gamma {sweep.get('gamma')}"
                          if sweep else ""),
                # results.noise.RUN_RULE: points where this whole run is disturbed, of those with a peer run to judge by
                "disturbed run at": (f"{int(disturbed_at.get(rid_, 0))} of {int(judged[rid_])} points"
                                     if rid_ in judged else "not judged"),
            })
        return pd.DataFrame(out)

    # -- choosing runs to compare ----------------------------------------------------------------
    def run_info(self) -> pd.DataFrame:
        memo = (id(self.rows), len(self.rows), len(self.headers))
        if getattr(self, "_run_info_memo", (None,))[0] != memo:
            self._run_info_memo = (memo, self._run_info())
        return self._run_info_memo[1].copy()

    def _run_info(self) -> pd.DataFrame:
        """One row per run (oldest first): run_id, label, name, file (its stem), gpu, driver, cuda, torch, created."""
        by_id = {str(h.get("run_id")): h for h in self.headers}
        first = self.rows.drop_duplicates("run_id").set_index(self.rows.drop_duplicates("run_id")["run_id"].astype(str)) \
            if len(self.rows) else pd.DataFrame()
        out = []
        for rid in self.run_ids():
            h = by_id.get(rid)
            if h is not None:
                fp = h.get("fingerprint") or h
                vals = {k: fp.get(k) for k in MACHINE_COLUMNS}
                created, name = h.get("created_at") or h.get("recorded_at") or "", h.get("name")
                file = Path(str(h["path"])).stem if h.get("path") else ""
            else:
                file = ""
                r = first.loc[rid] if rid in first.index else {}
                vals = {k: r.get(k) for k in MACHINE_COLUMNS}
                created, name = (r.get("recorded_at") if len(r) else "") or "", None
            out.append({"run_id": rid, "label": self._labels.get(rid, rid), "name": name or "", "file": file,
                        **{k: "unknown" if v is None or v != v else str(v) for k, v in vals.items()},
                        "created": str(created).replace(" ", "T")})
        return pd.DataFrame(out, columns=["run_id", "label", "name", "file", *MACHINE_COLUMNS, "created"])

    def ranked_run_ids(self) -> list[str]:
        """Runs in the order views offer them: the latest run of each machine (GPU, driver, CUDA,
        torch), newest machine first; then every other run, newest first."""
        info = self.run_info().iloc[::-1]  # newest first (run_ids is oldest first)
        latest = info.drop_duplicates(list(MACHINE_COLUMNS))["run_id"].tolist()
        first = set(latest)
        return latest + [r for r in info["run_id"] if r not in first]

    def default_selection(self, limit: int = MAX_COMPARED) -> list[str]:
        """The runs compared when none are chosen: the latest run of each machine, then, while there
        is room, the next most recent runs; at most `limit` (ranked_run_ids)."""
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ValueError(f"limit must be a positive integer, got {limit!r}")
        return self.ranked_run_ids()[:limit]

    def select(self, *, gpu: Optional[str] = None, driver: Optional[str] = None, cuda: Optional[str] = None,
               torch: Optional[str] = None, since=None, until=None, name: Optional[str] = None,
               run_id=None, latest_per_machine: bool = False, limit: Optional[int] = None) -> "Runs":
        """The runs matching every filter given, as a Runs (labels kept; timelines still read lazily).

        gpu, name: case-insensitive substring (of the GPU; of the run's label, recorded name or file name);
        driver, cuda, torch: a version or its prefix ("2.11" matches "2.11.0+cu130");
        since, until: dates ("2026-11-30", "2026-11", a datetime), both days included;
        run_id: one id or a list; latest_per_machine: keep each machine's most recent run;
        limit: keep the first `limit` runs in ranked_run_ids order.
        A filter no run matches raises ValueError naming it and the recorded values."""
        info = self.run_info()
        keep = pd.Series(True, index=info.index)

        def fail(field, want, values):
            vals = sorted({str(v) for v in values})
            shown = ", ".join(vals[:20]) + (f" … ({len(vals)} in all)" if len(vals) > 20 else "")
            raise ValueError(f"{field}={want!r} matches no recorded run; recorded {field}: {shown}")

        def contains(col_values, want):
            return col_values.str.lower().str.contains(str(want).lower(), regex=False)

        def version(col_values, want):
            w = str(want)
            return col_values.map(lambda v: v == w or (v.startswith(w) and v[len(w):len(w) + 1] in ".+-_ "))

        for key, want, how, col in (("gpu", gpu, contains, "gpu"), ("driver", driver, version, "driver"),
                                    ("cuda", cuda, version, "cuda"), ("torch", torch, version, "torch")):
            if want is None:
                continue
            values = info[col].map(gpu_name) if col == "gpu" else info[col]
            hit = how(values, want) | (how(info[col], want) if col == "gpu" else False)
            if not hit.any():
                fail(key, want, values)
            keep &= hit
        if name is not None:
            hit = contains(info["label"], name) | contains(info["name"], name) | contains(info["file"], name)
            if not hit.any():
                fail("name", name, info["label"])
            keep &= hit
        if run_id is not None:
            ids = [run_id] if isinstance(run_id, str) else [str(r) for r in run_id]
            known = set(info["run_id"])
            unknown = [r for r in ids if r not in known]
            if unknown:
                fail("run_id", unknown[0], info["run_id"])
            keep &= info["run_id"].isin(ids)
        for field, want in (("since", since), ("until", until)):
            if want is None:
                continue
            w = _date_text(field, want)
            day = info["created"].str.slice(0, len(w))
            hit = day >= w if field == "since" else day <= w
            if not hit.any():
                fail(field, w, info["created"].str.slice(0, 10))
            keep &= hit
        chosen = info[keep]
        if chosen.empty:
            asked = {k: v for k, v in dict(gpu=gpu, driver=driver, cuda=cuda, torch=torch, since=since, until=until,
                                            name=name, run_id=run_id).items() if v is not None}
            raise ValueError("no recorded run matches " + ", ".join(f"{k}={v!r}" for k, v in asked.items())
                             + " together")
        ids = set(chosen["run_id"])
        ranked = [r for r in self.ranked_run_ids() if r in ids]
        if latest_per_machine:
            per = chosen.iloc[::-1].drop_duplicates(list(MACHINE_COLUMNS))["run_id"]
            per = set(per)
            ranked = [r for r in ranked if r in per]
        if limit is not None:
            if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
                raise ValueError(f"limit must be a positive integer, got {limit!r}")
            ranked = ranked[:limit]
        return self.subset(ranked)

    def subset(self, run_ids: Iterable[str]) -> "Runs":
        """These runs only, as a Runs with the same labels and verdicts; timelines read lazily."""
        ids = [str(r) for r in run_ids]
        known = set(self.run_ids())
        unknown = [r for r in ids if r not in known]
        if unknown:
            raise ValueError(f"run_id {unknown[0]!r} is not a recorded run; recorded: {', '.join(self.run_ids()[:20])}")
        rows = self.rows[self.rows["run_id"].astype(str).isin(ids)]
        wanted = set(ids)
        headers = [h for h in self.headers if str(h.get("run_id")) in wanted]
        tl = self._source.subset(ids) if self._source is not None else (
            self._timelines[self._timelines["run_id"].astype(str).isin(ids)]
            if "run_id" in self._timelines.columns else self._timelines)
        return Runs(rows, tl, headers, self.warnings, disturbed=rows["disturbed"], labels=self._labels)

    def machines(self) -> pd.DataFrame:
        """One row per machine (GPU, driver, CUDA, torch): how many runs, first and last, the latest run."""
        info = self.run_info()
        out = []
        for key, g in info.groupby(list(MACHINE_COLUMNS), sort=False):
            out.append({"GPU": gpu_name(key[0]), "driver": key[1], "CUDA": key[2], "torch": key[3], "runs": len(g),
                        "first": g["created"].min()[:16].replace("T", " "),
                        "last": g["created"].max()[:16].replace("T", " "), "latest run": g["label"].iloc[-1]})
        df = pd.DataFrame(out, columns=["GPU", "driver", "CUDA", "torch", "runs", "first", "last", "latest run"])
        return df.sort_values("last", ascending=False, kind="stable").reset_index(drop=True)

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
