import pytest

from explainer.widgets.stepper import ALL_UP_TO, SIZERS, Stepper, tallest


def test_slider_moves_the_stack_and_current_frame():
    s = Stepper(["<b>a</b>", "<b>b</b>", "<b>c</b>"])
    assert s.current == "<b>a</b>"
    s.slider.value = 2
    assert s.stack.selected_index == 2
    assert s.current == "<b>c</b>"
    assert s.step(-1) == "<b>b</b>"
    assert s.step(+10) == "<b>c</b>"  # clamped at the last frame


def test_play_and_slider_span_the_frames():
    s = Stepper([str(i) for i in range(7)], start=3)
    assert (s.play.max, s.slider.max, s.slider.value) == (6, 6, 3)
    assert [c.value.split("</div>", 1)[1] for c in s.stack.children] == [str(i) for i in range(7)]


@pytest.mark.parametrize("frames,start", [([], 0), (["x"], 1), (["x"], -1)])
def test_bad_input_is_rejected(frames, start):
    with pytest.raises(ValueError):
        Stepper(frames, start=start)


def test_frontend_links_exist_so_a_static_export_steps_without_a_kernel():
    s = Stepper(["a", "b"])
    links = {(k.source[0], k.source[1], k.target[0], k.target[1]) for k in s.links}
    assert (s.play, "value", s.slider, "value") in links
    assert (s.slider, "value", s.stack, "selected_index") in links


def test_captions_and_jump_buttons_are_browser_side():
    s = Stepper(["a", "b", "c", "d"], captions=["one", "two", "three", "four"], bookmarks={"≠ first divergence": 2})
    assert [c.value.split("</div>")[0].split(">")[-1] for c in s.stack.children][2] == "frame 3 of 4 · three"
    assert s.caption == "frame 1 of 4 · one"
    # the jump control: one option per frame, its index jslinked to the slider (equal values), so a click
    # moves the slider, and the slider the stack, with no kernel
    links = {(lk.source[0], lk.source[1], lk.target[0], lk.target[1]) for lk in s.links}
    assert (s.jump, "index", s.slider, "value") in links
    assert len(s.jump.options) == 4 and s.jump.options[2] == ("≠ first divergence", 2)
    assert s.jump_to("≠ first divergence") == "c" and s.slider.value == 2 and s.stack.selected_index == 2
    s.slider.value = 1
    assert s.jump.index == 1                  # the buttons follow the slider (none of the bookmarks pressed)
    # only the bookmarked button is shown: a scoped style hides the others
    style = next(c.value for c in s.widget.children if "<style>" in str(getattr(c, "value", "")))
    assert "nth-of-type(3)" in style and "display:none" in style
    # one row of controls: play, slider and the jump buttons side by side, right above the frames
    row = next(c for c in s.widget.children if "xp-controls" in c._dom_classes)
    assert list(row.children) == [s.play, s.slider, s.jump]
    assert s.widget.children[-1].children[0] is s.stack


def test_the_frame_box_is_as_tall_as_the_tallest_frame_and_stores_each_frame_once():
    """The box is one grid cell holding the Stack and, hidden, the tallest frames again: the same HTML models
    (the notebook stores each frame once), so its height is the tallest frame's at any page width."""
    short, tall = "<div>x</div>", "<table>" + "<tr><td>row</td></tr>" * 30 + "</table>"
    s = Stepper([short, short, tall, short, short, short, short])
    box = s.widget.children[-1]
    stack, sizer = box.children
    assert stack is s.stack and "xp-sizer" in sizer._dom_classes and sizer.layout.visibility == "hidden"
    assert stack.layout.grid_area == sizer.layout.grid_area            # one cell: its height is the taller one's
    assert all(any(p is c for c in stack.children) for p in sizer.children)   # the same models, not copies
    assert list(sizer.children) == list(stack.children)               # a short stepper keeps every frame: exact
    many = Stepper([short] * ALL_UP_TO + [tall] + [short] * 3)
    kept = many.widget.children[-1].children[1].children
    assert len(kept) == SIZERS and many.stack.children[ALL_UP_TO] in kept      # a long one: the tallest ones
    assert tallest([short, tall, short]) == [0, 1, 2] and tallest([short] * 9 + [tall], k=1) == [9]


def test_the_play_control_has_no_rewinding_stop_button_and_styles_stay_scoped():
    """ipywidgets' ■ rewinds to frame 1: it is hidden, so ▶ (⏸ while playing) is the only play control; and
    each stepper's style names a class made from its own frames, so two notebooks open side by side in
    JupyterLab (one page) never style each other's steppers."""
    a, b = Stepper(["a", "b"], bookmarks={"x": 1}), Stepper(["c", "d"], bookmarks={"y": 0})
    assert a.play.show_repeat is False
    uid = next(c for c in a.widget._dom_classes if c.startswith("xp-stepper-"))
    style = next(c.value for c in a.widget.children if "<style>" in str(getattr(c, "value", "")))
    assert f".{uid} .widget-play > button:nth-child(2){{display:none}}" in style
    assert all(rule.strip().startswith(f".{uid} ") for rule in style[7:-8].split("}") if rule.strip())
    assert uid not in b.widget._dom_classes
    assert uid in Stepper(["a", "b"], bookmarks={"x": 1}).widget._dom_classes     # stable from run to run


def test_bad_bookmarks_and_captions_are_rejected():
    with pytest.raises(ValueError):
        Stepper(["a"], bookmarks={"x": 3})
    with pytest.raises(ValueError):
        Stepper(["a", "b"], captions=["only one"])
    with pytest.raises(ValueError):
        Stepper(["a", "b"], bookmarks={"x": 1}).jump_to("y")
