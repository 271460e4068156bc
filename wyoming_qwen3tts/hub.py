"""huggingface_hub, imported where it is first needed (it comes with the convert extra), its
records going through the application's logging only. At import the library attaches a stderr
handler of its own to its logger, which also propagates to ours: each of its warnings (offline,
one per retry) would be printed twice."""
from __future__ import annotations

import importlib
import logging
from types import ModuleType


def import_hub() -> ModuleType:
    """The huggingface_hub module (ImportError without it), its own handler removed."""
    import huggingface_hub

    # the module that attaches the handler, loaded now (the package imports its parts lazily)
    importlib.import_module("huggingface_hub.utils.logging")
    hub_log = logging.getLogger("huggingface_hub")
    for handler in list(hub_log.handlers):
        hub_log.removeHandler(handler)
    return huggingface_hub
