"""The widgets layer: thin ipywidgets apps over a recorder, a trace or a run (``stepper.Stepper`` and the
apps of each notebook); the pictures come from ``explainer.render``."""
