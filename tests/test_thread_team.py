"""The native runner's ThreadTeam (native/include/qwen3tts/thread_team.hpp), on its own: jobs
run on every member, barriers order the stages, share() hands every item to exactly one member,
and a team of more members than cores still finishes. The team has no Python binding, so the
checks are a small C++ program (tests/thread_team_check.cpp) built here against the same
sources with the compiler that builds the module, once plainly and once with ThreadSanitizer
where the compiler has it (a data race in the team's memory ordering fails it). Nothing here
asserts timing: a check that hangs fails on the subprocess's timeout.

The products' use of share() — the same floats whatever the team's size or the chunks' order —
is checked on the real stacks by test_talker_cpu.py and test_subcode_cpu.py."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [ROOT / "native" / "src" / "thread_team.cpp", Path(__file__).with_name("thread_team_check.cpp")]
CXX = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
MEMBERS = (1, 2, 3, 5)  # 3 and 5: more members than a 2-core machine has cores (the barrier yields)


def build(out: Path, *flags: str) -> subprocess.CompletedProcess:
    if CXX is None:
        pytest.fail("no C++ compiler (the native module needs one to build, so CI has one)", pytrace=False)
    return subprocess.run([CXX, "-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", "-pthread", *flags,
                           f"-I{ROOT / 'native' / 'include'}", *map(str, SOURCES), "-o", str(out / "check")],
                          capture_output=True, text=True)


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("plain")
    result = build(out)
    assert result.returncode == 0, f"thread_team_check did not build:\n{result.stderr}"
    return out / "check"


@pytest.fixture(scope="module")
def tsan(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tsan")
    built = build(out, "-fsanitize=thread", "-g")
    ran = subprocess.run([str(out / "check"), "runs", "1"], capture_output=True, text=True) \
        if built.returncode == 0 else None
    if ran is None or ran.returncode != 0:  # GCC's libtsan comes with g++ on Debian: a failure here is real
        pytest.fail(f"{CXX} did not build or run a ThreadSanitizer program:\n"
                    f"{built.stderr if ran is None else ran.stderr}", pytrace=False)
    return out / "check"


def check(exe: Path, name: str, members: int, idle_spin_us: int | None = None) -> None:
    args = [str(exe), name, str(members)] + ([] if idle_spin_us is None else [str(idle_spin_us)])
    result = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stdout + result.stderr


@pytest.mark.parametrize("members", MEMBERS)
@pytest.mark.parametrize("name", ["runs", "barriers", "shares", "stack"])
def test_team(plain, name, members):
    check(plain, name, members)


@pytest.mark.parametrize("idle_spin_us", [0, 1_000_000])
def test_members_that_always_sleep_or_never_do(plain, idle_spin_us):
    """0: every job wakes the members from the condition variable; 1 s: they never sleep between these jobs."""
    for name in ("runs", "stack"):
        check(plain, name, 3, idle_spin_us)


@pytest.mark.parametrize("members", [2, 3])
@pytest.mark.parametrize("name", ["runs", "barriers", "shares", "stack"])
def test_team_has_no_data_race(tsan, name, members):
    check(tsan, name, members, 0 if name == "runs" else None)  # runs: the sleeping path too
