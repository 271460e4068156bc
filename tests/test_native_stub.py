"""wyoming_qwen3tts/_native.pyi, the types mypy reads for the compiled extension, against the
built module: every public name and class member on one side is on the other (a binding
renamed or dropped in native/src/module.cpp without its stub fails here)."""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

import wyoming_qwen3tts
from wyoming_qwen3tts import _native

STUB = Path(wyoming_qwen3tts.__file__).with_name("_native.pyi")


def stub_names() -> tuple[set[str], dict[str, set[str]]]:
    """The stub's top-level names and each class's members."""
    top: set[str] = set()
    classes: dict[str, set[str]] = {}
    for node in ast.parse(STUB.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            top.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            top.add(node.target.id)
        if isinstance(node, ast.ClassDef):
            members = set()
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and not item.name.startswith("_"):
                    members.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    members.add(item.target.id)
            classes[node.name] = members
    return top, classes


def public(names) -> set[str]:
    return {n for n in names if not n.startswith("_")}


def test_the_stub_names_what_the_module_has():
    top, classes = stub_names()
    assert top == public(dir(_native))
    for name, members in classes.items():
        cls = getattr(_native, name)
        assert inspect.isclass(cls), name
        assert members == public(dir(cls)), name


def test_the_test_only_bindings_live_in_their_own_submodule():
    """The package's module has the runner and what configures it; the parts tests call one
    by one are in _native.testing."""
    assert {"TalkerCpu", "int4_linear", "int8_linear", "infer_with_int4_kernel", "run_subcode_cpu",
            "runner"} <= public(dir(_native.testing))
    assert not {"TalkerCpu", "int4_linear", "infer_with_int4_kernel"} & public(dir(_native))
