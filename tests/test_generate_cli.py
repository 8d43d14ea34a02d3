"""``python -m explainer generate``: text from the shipped checkpoint; bad input is one line + exit 2."""

import subprocess
import sys

import pytest

from explainer.model import task
from explainer.cli import main


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "explainer", "generate", *args], capture_output=True, text=True,
                          timeout=120)


def test_generate_prints_the_spelled_number(capsys):
    assert main(["generate", "451", "--seed", "3"]) == 0
    assert capsys.readouterr().out.strip() == task.spell(451)


def test_show_canvas_prints_every_step_of_every_canvas(capsys):
    from explainer.model.checkpoint import metadata

    assert main(["generate", "451", "--show-canvas"]) == 0
    out = capsys.readouterr().out
    for i in (1, 2, 3):
        assert f"canvas {i} " in out
    assert "step  1  cur_step 48" in out and "accept [" in out and "argmax [" in out
    assert out.strip().splitlines()[-1] == f"text: {task.spell(451)}"
    assert metadata()["generation_config"]["max_denoising_steps"] == 48


def test_steps_option_sets_the_denoising_budget(capsys):
    assert main(["generate", "702", "--steps", "1", "--show-canvas"]) == 0
    out = capsys.readouterr().out
    assert "cur_step  1" in out and "step  2 " not in out


@pytest.mark.parametrize("args, needle", [
    (["", ], "prompt is empty"),
    (["4!5~"], "'!' '~' are not in the vocabulary; accepted characters: "),
    (["451", "--steps", "0"], "--steps '0'"),
    (["451", "--steps", "many"], "--steps 'many'"),
    (["451", "--seed", "-1"], "--seed '-1'"),
])
def test_bad_input_is_one_line_and_exit_2(args, needle):
    proc = run_cli(*args)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], proc.stderr
    assert proc.stdout == ""
    if "vocabulary" in needle:
        assert "0123456789" in lines[0]


def test_out_of_task_prompt_generates_with_a_note():
    proc = run_cli("12")
    assert proc.returncode == 0
    assert "trained on numbers 100..999" in proc.stderr
