"""The runtime package is the product: what `pip install .` (and so the add-on image) gets
holds no benchmark or synthetic-checkpoint writer and imports none of the developer stack.
Those live in the tools distribution (tools/), installed beside it for the tests."""
from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import tomllib

import wyoming_qwen3tts

REPO = Path(__file__).resolve().parents[1]

# What only the tools and the tests may bring in.
DEVELOPER_MODULES = ("qwen3tts_tools", "torch", "matplotlib", "qwen_tts", "vox", "transformers", "pytest")

# Imports every module of the runtime package (its __main__ modules would run the programs),
# then prints which modules it imported and which developer packages came with them.
IMPORT_ALL = """
import importlib, json, sys
from pathlib import Path
import wyoming_qwen3tts
root = Path(wyoming_qwen3tts.__file__).parent
names = sorted({".".join(("wyoming_qwen3tts", *p.relative_to(root).with_suffix("").parts)).removesuffix(".__init__")
                for p in root.rglob("*.py") if p.name != "__main__.py"})
for name in names:
    importlib.import_module(name)
developer = sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[1:]))
print(json.dumps({"imported": names, "developer": developer}))
"""


def test_runtime_modules_import_no_developer_stack(tmp_path: Path) -> None:
    """Every runtime module imports, in a fresh interpreter, without the tools package, torch,
    matplotlib or the peers."""
    done = subprocess.run([sys.executable, "-c", IMPORT_ALL, *DEVELOPER_MODULES], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert len(result["imported"]) > 50 and "wyoming_qwen3tts.server.app" in result["imported"], result["imported"]
    assert result["developer"] == [], result["developer"]


def test_runtime_distribution_holds_no_tools() -> None:
    """The installed runtime distribution has no bench or synthetic module, no bench extra,
    and none of the tools' commands; the tools distribution has them."""
    for name in ("wyoming_qwen3tts.bench", "wyoming_qwen3tts.model.synthetic"):
        assert importlib.util.find_spec(name) is None, name
    package = Path(wyoming_qwen3tts.__file__).parent
    assert [p for p in package.rglob("*.py") if {"bench", "synthetic"} & set(p.relative_to(package).parts)] == []
    runtime = importlib.metadata.distribution("wyoming-qwen3tts")
    assert "bench" not in (runtime.metadata.get_all("Provides-Extra") or [])
    tools_scripts = {"qwen3tts-bench", "qwen3tts-synthetic"}
    assert not tools_scripts & {ep.name for ep in runtime.entry_points}
    tools = importlib.metadata.distribution("wyoming-qwen3tts-tools")
    assert {ep.name: ep.value for ep in tools.entry_points if ep.name in tools_scripts} == {
        "qwen3tts-bench": "qwen3tts_tools.bench.cli:main",
        "qwen3tts-synthetic": "qwen3tts_tools.synthetic.cli:main",
    }


def test_tools_go_with_the_runtime_of_their_version() -> None:
    """The tools drive the engine's internals: a release gives them the runtime's version and pins it."""
    tools = tomllib.loads((REPO / "tools/pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert tools["version"] == wyoming_qwen3tts.__version__
    assert f"wyoming-qwen3tts[convert]=={wyoming_qwen3tts.__version__}" in tools["dependencies"]
