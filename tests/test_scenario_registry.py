"""Every scenario is written once: its name once, in ``stories.py``; the function that tells it carries
``@tells(ITS_CONSTANT)`` (grep finds it from the constant); the options it takes are declared, and its function
takes exactly those; nothing is looked up by a name built from the scenario's."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from explainer.scenario import registry, stories

PACKAGE = Path(registry.__file__).parent
CODE = {str(p.relative_to(PACKAGE.parent)): p.read_text() for p in PACKAGE.parent.rglob("*.py")}   # explainer/


def test_every_scenario_is_told_by_one_function_marked_with_its_constant():
    constants = {s.name: k for k, s in vars(stories).items() if isinstance(s, stories.Story)}
    assert set(constants) == set(registry.SCENARIOS)
    for name, story in registry.SCENARIOS.items():
        fn = registry.story_function(name)
        source = inspect.getsource(inspect.getmodule(fn))
        assert f"@tells({constants[name]})\ndef {fn.__name__}(" in source, name
        takes = set(inspect.signature(fn).parameters) - {"backend", "shm_ops"}
        assert takes == set(story.options), f"{name}: declares {story.options}, its function takes {takes}"
    assert len(stories.TOLD) == len(registry.SCENARIOS)


def test_each_scenario_name_is_written_once_in_the_code():
    for name in registry.SCENARIOS:
        spelled = [f for f, text in CODE.items() if re.search(rf'"{re.escape(name)}"', text)]
        assert spelled == ["scenario/stories.py"], (name, spelled)
    registry_source = CODE["scenario/registry.py"]
    assert "getattr(" not in registry_source and ".replace(\"-\", \"_\")" not in registry_source
    assert "inspect" not in registry_source                       # what a story takes is declared, not guessed
