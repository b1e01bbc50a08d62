"""Layerwise compute package: models, data, the four methods and the CLI. Never imports gradio."""
from core.settings import configure as _configure

# Offline unless the user opted in; done before anything imports huggingface_hub.
_configure()
