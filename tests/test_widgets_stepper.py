import pytest

from explainer.widgets.stepper import Stepper


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


def test_captions_fixed_height_and_jump_buttons_are_browser_side():
    s = Stepper(["a", "b", "c", "d"], captions=["one", "two", "three", "four"], bookmarks={"≠ first divergence": 2},
                height=300)
    assert s.stack.layout.height == "300px" and s.stack.layout.overflow == "auto"
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


def test_bad_bookmarks_and_captions_are_rejected():
    with pytest.raises(ValueError):
        Stepper(["a"], bookmarks={"x": 3})
    with pytest.raises(ValueError):
        Stepper(["a", "b"], captions=["only one"])
    with pytest.raises(ValueError):
        Stepper(["a", "b"], bookmarks={"x": 1}).jump_to("y")
