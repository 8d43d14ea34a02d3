"""Every scenario's function is named in full in the registry (grep finds it) and lives in the module its story
says; nothing is looked up by a name built from the scenario's."""

from __future__ import annotations

from pathlib import Path

from explainer.scenario import registry

SOURCE = (Path(registry.__file__)).read_text()


def test_every_scenario_runs_the_function_the_registry_names_in_full():
    for name, story in registry.SCENARIOS.items():
        fn = registry.story_function(name)
        assert fn.__module__ == f"explainer.scenario.{story.module}", name
        assert f"{story.module}.{fn.__name__}" in SOURCE, f"{name}: its function is not spelled out in registry.py"
    assert "getattr(" not in SOURCE and ".replace(\"-\", \"_\")" not in SOURCE
