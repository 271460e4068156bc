# The compiled native runner (native/src/module.cpp, pybind11), built into the wheel; mypy
# cannot read the extension, so its names are typed as Any here.
from typing import Any

def __getattr__(name: str) -> Any: ...
