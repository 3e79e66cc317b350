"""The hazards from the field: the race's window and the pageable threshold read from a record
(synthetic counts on CPU), each real-world story beside its measurement, and on CUDA the curves
measured: a refill at once is wrong more often than one 200 us later."""
import pytest

from dspark_lab.measure import hazards as measure_hazards
from dspark_lab.results.analyses import hazards as H


def _record(window=(), race=()) -> dict:
    return {"kind": H.HAZARDS_KIND, "schema": H.HAZARDS_SCHEMA, "fingerprint": {"gpu": "SYNTH"}, "steps": 10,
            "forms": [{"form": f, "wrong": 0 if safe else 10, "n": 10} for f, (_, _, safe, _) in H.FORMS.items()],
            "strategies": [], "window": [{"delay_us": d, "wrong": w, "n": 100} for d, w in window],
            "pageable_race": [{"bytes": b, "raced": r, "n": 20} for b, r in race]}


def test_the_new_forms_have_functions_and_stories():
    for form in ("pinned_freed_in_flight", "graph_staging_reused", "graph_staging_owned"):
        assert form in H.FORMS and form in measure_hazards.FORM_FUNCTIONS
    assert {"pinned_reused", "window", "pageable_race", "graph_staging_reused", "pinned_freed_in_flight"} <= set(H.STORIES)
    assert all("#" in src for src, _ in H.STORIES.values())


def test_the_threshold_is_the_largest_size_at_and_below_which_nothing_raced():
    rec = _record(race=[(4096, 0), (1 << 18, 0), (1 << 20, 3), (1 << 22, 0), (1 << 24, 20)])
    assert H.never_raced_below(rec) == 1 << 18  # a quiet size above a raced one does not count
    assert H.never_raced_below(_record(race=[(4096, 1)])) is None
    words = H.curves_in_words(rec)
    assert words[-1].startswith("pageable non-blocking copies overwritten at once: none raced at or below 256 KiB")
    assert "23 of 60 raced" in words[-1]


def test_the_window_is_read_as_shares_in_delay_order():
    rec = _record(window=[(0.0, 100), (1.0, 97), (5.0, 2), (100.0, 0)])
    f = H.window_frame(rec)
    assert f["share"].tolist() == [1.0, 0.97, 0.02, 0.0]
    assert H.curves_in_words(rec)[0].endswith("wrong 100.0% at 0 us, 97.0% at 1 us, 2.0% at 5 us, 0.0% at 100 us")


def test_each_story_stands_beside_its_measurement_or_says_it_is_not_recorded():
    s = H.stories(_record(window=[(0.0, 5)])).set_index("where")
    assert s.loc["onnxruntime #32121", "measured here"] == "10 of 10 wrong"
    assert s.loc["pytorch #130785", "measured here"] == "0 of 10 wrong"
    assert s.loc["1bit-MONSTER #2344", "measured here"].startswith("refill after the copy")
    assert s.loc["ashalliants/ninfer-3090 #44", "measured here"] == "not in this record"


def test_a_bad_curve_point_names_its_field():
    with pytest.raises(ValueError, match=r"window\[0\] needs a number 'delay_us'"):
        H.validate(_record(window=[(0.0, 101)]))
    with pytest.raises(ValueError, match=r"pageable_race\[0\]"):
        H.validate(_record(race=[("big", 0)]))


def test_the_report_shows_the_curves_and_the_stories():
    from dspark_lab.views.card_report import card_sections

    parts = card_sections(lambda fig: f"<figure>{fig.layout.title.text}</figure>", [],
                          [_record(window=[(0.0, 90), (10.0, 0)], race=[(4096, 0)])])
    html = "\n".join(parts)
    assert "The race's window, measured" in html and "How wide the race's window is" in html
    assert "onnxruntime #32121" in html and "none raced at or below 4 KiB" in html


@pytest.mark.cuda
def test_on_cuda_a_later_refill_is_never_wrong_more_often_than_one_at_once():
    """The window closes with the delay. On an idle H200 a refill from Python never beat the copy (0 of
    100 at 0 µs: the call's own overhead outlasts the window), so only the order is asserted."""
    import torch

    pts = measure_hazards.refill_window(delays_us=(0.0, 200.0), n=100)
    assert all(0 <= p["wrong"] <= p["n"] for p in pts) and pts[1]["wrong"] <= pts[0]["wrong"], pts
    race = measure_hazards.pageable_race(sizes=(4096, 1 << 20), n=3)
    assert [p["bytes"] for p in race] == [4096, 1 << 20] and all(0 <= p["raced"] <= 3 for p in race)
    assert torch.cuda.is_available()


def test_a_form_that_could_not_run_is_kept_with_its_error_and_reported():
    rec = _record()
    rec["forms"][0] = {"form": rec["forms"][0]["form"], "wrong": None, "n": 10, "error": "RuntimeError: capture refused"}
    H.validate(rec)
    assert H.table(rec)["wrong"].iloc[0] == "failed here: RuntimeError: capture refused"
    assert H.surprises(rec)[0].endswith("could not run here (RuntimeError: capture refused)")
