"""The weight-decay widget in the built page, with no kernel: moving the decay changes the AdamW view
and leaves the StiefelAdam readout exactly as it was; the numbers shown are the library's.

Run after ``bash scripts/build_book.sh``::

    pytest tests/browser/test_weight_decay_widget.py -m browser
"""

from __future__ import annotations

import dataclasses

import pytest

from bookpaths import BUILD

pytestmark = pytest.mark.browser

PAGE = "book/weight_decay.html"

# The readouts and images of the widget frame that is visible now (Stack hides the others).
VISIBLE_JS = """() => {
    const root = document.querySelector('.wd-widget');
    if (!root) return null;
    const out = {readouts: {}, images: {}, frame: null};
    for (const f of root.querySelectorAll('.wd-frame')) {
        if (f.checkVisibility()) out.frame = {wd: f.dataset.wd, step: f.dataset.step};
    }
    for (const r of root.querySelectorAll('.wd-readout')) {
        if (!r.checkVisibility()) continue;
        const vals = {};
        for (const s of r.querySelectorAll('span[data-key]')) {
            vals[s.dataset.key] = s.textContent;
            if (s.dataset.value !== undefined) vals[s.dataset.key + '_value'] = s.dataset.value;
        }
        out.readouts[r.dataset.arm] = vals;
    }
    for (const img of root.querySelectorAll('img.wd-image')) {
        if (img.checkVisibility()) out.images[img.dataset.arm] = img.getAttribute('src');
    }
    return out;
}"""


@pytest.fixture
def page(fresh_visit):
    """The widget's page, ready (tests/browser/conftest.py), in a context of its own: the tests move it."""
    if not (BUILD / PAGE).is_file():
        pytest.skip(f"{PAGE} is not in the built book")
    v = fresh_visit(PAGE)
    v.page.locator(".wd-widget .widget-slider .noUi-handle").first.wait_for(state="visible")
    v.page.errors = v.errors
    return v.page


def _state(pg):
    state = pg.evaluate(VISIBLE_JS)
    assert state is not None, "no .wd-widget on the page"
    assert set(state["readouts"]) == {"adamw", "stiefel"}, state
    assert set(state["images"]) == {"adamw", "stiefel"}, list(state["images"])
    return state


def _move(pg, handle, key, before):
    handle.focus()
    handle.press(key)
    pg.wait_for_function(
        f"(b) => JSON.stringify(({VISIBLE_JS})().frame) !== b", arg=__import__("json").dumps(before["frame"]),
        timeout=10_000,
    )
    return _state(pg)


def test_decay_moves_adamw_and_not_stiefeladam(page):
    handles = page.locator(".wd-widget .widget-slider .noUi-handle")
    assert handles.count() == 2  # weight decay, training step
    wd_handle = handles.nth(0)
    wd_handle.scroll_into_view_if_needed()
    start = _state(page)
    assert float(start["frame"]["wd"]) == 0.0 and int(start["frame"]["step"]) > 0
    assert start["readouts"]["stiefel"]["max_change"] == "0 (bitwise equal)"

    seen = [start]
    state = _move(page, wd_handle, "End", start)
    seen.append(state)
    for _ in range(2):
        state = _move(page, wd_handle, "ArrowLeft", state)
        seen.append(state)
    wds = [float(s["frame"]["wd"]) for s in seen]
    assert len(set(wds)) == len(wds), wds

    for s in seen[1:]:
        # StiefelAdam: exactly the same readout (norm, change, entropy, bits) and the same picture.
        assert s["readouts"]["stiefel"] == start["readouts"]["stiefel"], (s["frame"], s["readouts"]["stiefel"])
        assert s["images"]["stiefel"] == start["images"]["stiefel"]
        # AdamW: the decay shows.
        assert s["readouts"]["adamw"]["norm_q"] != start["readouts"]["adamw"]["norm_q"]
        assert float(s["readouts"]["adamw"]["max_change_value"]) > 0
        assert s["images"]["adamw"] != start["images"]["adamw"]
    # More decay, smaller AdamW ||W_Q||: the sweep's largest decay shows the smallest norm.
    norms = {float(s["frame"]["wd"]): float(s["readouts"]["adamw"]["norm_q"]) for s in seen}
    assert norms[max(norms)] < norms[0.0]
    assert not page.errors, page.errors


def test_displayed_numbers_are_the_librarys(page):
    """Re-run the chapter's configuration with stiefel_mini and compare with what the page shows."""
    from stiefel_mini.experiments.weight_decay import config as wd_config
    from stiefel_mini.experiments.weight_decay import experiment as wd_experiment
    from stiefel_mini.experiments.weight_decay import readouts as wd_readouts

    cfg = dataclasses.replace(wd_config.CHAPTER_CONFIG, arms=("adamw", "stiefel"))
    history = wd_experiment.sweep(cfg)
    handles = page.locator(".wd-widget .widget-slider .noUi-handle")
    wd_handle = handles.nth(0)
    state = _state(page)
    checked = 0
    for i in range(len(cfg.weight_decays)):
        i_wd = list(cfg.weight_decays).index(float(state["frame"]["wd"]))
        i_snap = list(cfg.run.snapshot_steps).index(int(state["frame"]["step"]))
        ref = wd_readouts.widget_readouts(history, i_wd, i_snap)
        for arm in ("adamw", "stiefel"):
            shown = state["readouts"][arm]
            assert float(shown["norm_q"]) == pytest.approx(ref[arm]["norm_q"], rel=1e-5, abs=2e-6)
            assert float(shown["entropy"]) == pytest.approx(ref[arm]["entropy"], rel=1e-4, abs=2e-6)
            assert float(shown["max_change_value"]) == pytest.approx(ref[arm]["max_change"], rel=1e-4, abs=1e-7)
        assert (float(shown["max_change_value"]) == 0.0) == (ref["stiefel"]["max_change"] == 0.0)
        checked += 1
        if i < len(cfg.weight_decays) - 1:
            state = _move(page, wd_handle, "ArrowRight", state)
    assert checked == len(cfg.weight_decays)
