# The compiled native runner (native/src/module.cpp, pybind11), built into the wheel; mypy
# cannot read the extension, so its API is typed here (tests/test_native_stub.py checks every
# name against the built module). engine/native.py is its one user.
import types

import numpy as np
from numpy.typing import ArrayLike, NDArray

# The columns of Runner.forward's `sampling` matrix (engine/sampling.py SamplingParams fields).
SAMPLING_FIELDS: tuple[str, ...]

# The instruction sets of the runner's own kernels this CPU runs, fastest first: "avx512_vnni", "avx_vnni", "avx2".
def kernel_isas() -> list[str]: ...

# The runner's parts one by one, for the tests (native/src/testing/bindings.cpp); the package never uses it.
testing: types.ModuleType

class StepTimes:
    @property
    def talker_s(self) -> float: ...
    @property
    def subcode_s(self) -> float: ...
    @property
    def codec_s(self) -> float: ...

class RunnerConfig:
    talker_xml: str
    subcode_xml: str
    talker_device: str
    subcode_device: str
    talker_properties: dict[str, str]
    subcode_properties: dict[str, str]
    num_layers: int
    eos: int
    suppress_from: int
    groups: int
    primed_states: int
    own_stacks: bool
    talker_u8_cache: bool
    talker_block_size: int
    threads: int
    kernels: str
    def __init__(self) -> None: ...

class CodecConfig:
    first_xml: dict[int, str]
    steady_xml: dict[int, str]
    device: str
    properties: dict[str, str]
    batch: int
    first_chunk: int
    steady_chunk: int
    def __init__(self) -> None: ...

# The codec decoder's chunk graphs, compiled once and shared by every runner given them.
class CodecGraphs:
    def __init__(self, config: CodecConfig) -> None: ...
    @property
    def load_memory(self) -> list[tuple[str, int, int]]: ...

class Runner:
    # codec None: offline (no codec streams)
    def __init__(self, config: RunnerConfig, codec: CodecGraphs | None = None) -> None: ...
    @property
    def codec(self) -> CodecGraphs | None: ...
    @property
    def block_size(self) -> int: ...
    @property
    def kv_block_bytes(self) -> int: ...
    @property
    def hidden(self) -> int: ...
    @property
    def subcode_runtime(self) -> str: ...
    @property
    def talker_runtime(self) -> str: ...
    @property
    def rows_exact(self) -> bool: ...
    @property
    def times(self) -> StepTimes: ...
    @property
    def load_memory(self) -> list[tuple[str, int, int]]: ...
    @property
    def closed(self) -> bool: ...
    def allocate_kv(self, num_blocks: int) -> None: ...
    def forward(self, copies: ArrayLike, embeds: ArrayLike, positions: ArrayLike, past_lens: ArrayLike,
                begins: ArrayLike, block_indices: ArrayLike, block_begins: ArrayLike, max_context: int,
                sample_rows: ArrayLike, sampling: ArrayLike, history: ArrayLike, history_begins: ArrayLike,
                uniforms: ArrayLike) -> tuple[NDArray[np.int64], NDArray[np.float32]]: ...
    def open_stream(self, stream: int, prefix: ArrayLike | None = None) -> None: ...
    def decode(self, chunks: list[tuple[int, ArrayLike, int]]) -> list[NDArray[np.float32]]: ...
    def close_stream(self, stream: int) -> None: ...
    def close(self) -> None: ...
