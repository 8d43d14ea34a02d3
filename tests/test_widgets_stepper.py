import pytest

from explainer.widgets import Stepper


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
    assert [c.value for c in s.stack.children] == [str(i) for i in range(7)]


@pytest.mark.parametrize("frames,start", [([], 0), (["x"], 1), (["x"], -1)])
def test_bad_input_is_rejected(frames, start):
    with pytest.raises(ValueError):
        Stepper(frames, start=start)


def test_frontend_links_exist_so_a_static_export_steps_without_a_kernel():
    s = Stepper(["a", "b"])
    links = {(k.source[0], k.source[1], k.target[0], k.target[1]) for k in s.links}
    assert (s.play, "value", s.slider, "value") in links
    assert (s.slider, "value", s.stack, "selected_index") in links
