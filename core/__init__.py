"""Layerwise compute package: models, data, the four methods and the CLI. Never imports gradio."""
from core.settings import configure as _configure

# Offline unless the user opted in; done before anything imports huggingface_hub.
_configure()

# the papers' own model classes, named by model cards, made known to the zoo (imports no paper: core.papers)
from core.papers import register_model_classes as _register_model_classes  # noqa: E402

_register_model_classes()
