"""The scenario layer: every story a notebook tells as a named, runnable scenario (``registry``), the PP stories
(``pp``, with ``pp_summary``) and the communicator ones (``comm``), the held-out accuracy per engine
configuration (``accuracy``) and the stored two-host runs (``hosts_record``). The public face re-exported here
is light: listing the scenarios loads no model.
"""

from explainer.scenario.registry import GATED_SCENARIOS, HOSTS_SCENARIOS, SCENARIO_NAMES, SCENARIOS, available, run
from explainer.scenario.result import OUTCOMES, ScenarioResult

__all__ = ["run", "available", "SCENARIOS", "SCENARIO_NAMES", "HOSTS_SCENARIOS", "GATED_SCENARIOS", "OUTCOMES",
           "ScenarioResult"]
