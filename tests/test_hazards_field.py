"""The hazards from the field: the race's window and the pageable threshold read from a record
(synthetic counts on CPU), each real-world story beside its measurement, and on CUDA the curves
measured: the window is the GPU work queued ahead of the copy."""
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
    assert f["share"].tolist() == [1.0, 0.97, 0.02, 0.0] and f["queued_us"].tolist() == [0.0] * 4  # an older record
    assert H.curves_in_words(rec)[0].endswith(
        "nothing queued ahead: wrong 100.0% at 0 us, 97.0% at 1 us, 2.0% at 5 us, 0.0% at 100 us; none wrong from 100 us on")


def test_each_queue_ahead_of_the_copy_is_its_own_curve_and_closes_where_it_last_was_wrong():
    rec = _record()
    rec["window"] = [{"queued_us": q, "delay_us": d, "wrong": w, "n": 100}
                     for q, d, w in ((0.0, 0.0, 0), (0.0, 50.0, 0), (100.0, 0.0, 100), (100.0, 50.0, 98),
                                     (100.0, 200.0, 0), (100.0, 20.0, 0))]
    f = H.window_frame(rec)
    assert H.window_closes_us(f[f.queued_us == 0.0]) == 0.0
    assert H.window_closes_us(f[f.queued_us == 100.0]) == 200.0  # a quiet 20 us below a wrong 50 us does not count
    assert H.window_closes_us(f[f.queued_us == 100.0].iloc[:2]) is None
    words = H.curves_in_words(rec)[0]
    assert "nothing queued ahead: wrong 0.0% at 0 us, 0.0% at 50 us; none wrong from 0 us on" in words
    assert "100 us of GPU work queued ahead: wrong 100.0% at 0 us" in words and "none wrong from 200 us on" in words
    from dspark_lab.views.figures import hazards as fig_hazards

    names = [t.name for t in fig_hazards.curves(rec).data if t.type == "scatter"]
    assert names == ["nothing queued ahead", "100 us queued ahead"]
    bad = _record()
    bad["window"] = [{"queued_us": "lots", "delay_us": 0.0, "wrong": 0, "n": 10}]
    with pytest.raises(ValueError, match=r"window\[0\] needs a number 'queued_us'"):
        H.validate(bad)


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
def test_on_cuda_the_window_is_the_queue_ahead_of_the_copy():
    """With 200 us of GPU work queued ahead, a refill at once beats the copy almost always and one 2 ms
    later never does. (Nothing queued, a refill from Python rarely beats the copy on an H200: the call's
    own overhead outlasts the copy's latency; that curve is recorded, not asserted.)"""
    from dspark_lab.measure import probe

    probe.calibrate_sleep()
    at_once, late = measure_hazards.refill_window(delays_us=(0.0, 2000.0), n=50, queued_us=(200.0,))
    assert at_once["wrong"] >= 45 and late["wrong"] == 0, (at_once, late)
    race = measure_hazards.pageable_race(sizes=(4096, 1 << 20), n=3)
    assert [p["bytes"] for p in race] == [4096, 1 << 20] and all(0 <= p["raced"] <= 3 for p in race)
