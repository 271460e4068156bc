# The compiled native runner (native/src/module.cpp, pybind11), built into the wheel; mypy
# cannot read the extension, so its API is typed here. engine/native.py is its one user.
import numpy as np
from numpy.typing import ArrayLike, NDArray

# The columns of Runner.forward's `sampling` matrix (engine/sampling.py SamplingParams fields).
SAMPLING_FIELDS: tuple[str, ...]

# The instruction sets of the runner's own kernels this CPU runs, fastest first: "avx512_vnni", "avx_vnni", "avx2".
# The test helpers below take one as `isa` ("": the fastest).
def kernel_isas() -> list[str]: ...
# x [M, K] · Wᵀ by the INT4 kernel, W from OpenVINO's i4 bytes q [N, K/2] and scales [N, groups] (tests).
def int4_linear(q: ArrayLike, scale: ArrayLike, x: ArrayLike, isa: str = "") -> NDArray[np.float32]: ...
# (x [M, K] · Wᵀ by the INT8 kernel, row 0 of W dequantized, the activations' group), W from q [N, K] int8
# and scale [N] (tests).
def int8_linear(q: ArrayLike, scale: ArrayLike, x: ArrayLike, isa: str = ""
                ) -> tuple[NDArray[np.float32], NDArray[np.float32], int]: ...
# (products swapped, f32 and i64 outputs) of one inference of an IR with the INT4 kernel in its products (tests).
def infer_with_int4_kernel(xml: str, inputs: dict[str, NDArray[np.generic]], isa: str = ""
                           ) -> tuple[int, dict[str, NDArray[np.generic]]]: ...
# (codes [k, 15], frame embedding [k, hidden], first step's logits [k, vocab]) of one call of the runner's own
# code predictor over a subcode IR's weights, with `threads` members (tests).
def run_subcode_cpu(xml: str, threads: int, hidden: ArrayLike, code0: ArrayLike, temperature: ArrayLike,
                    top_k: ArrayLike, top_p: ArrayLike, uniform: ArrayLike, isa: str = ""
                    ) -> tuple[NDArray[np.int64], NDArray[np.float32], NDArray[np.float32]]: ...

class StepTimes:
    @property
    def talker_s(self) -> float: ...
    @property
    def subcode_s(self) -> float: ...
    @property
    def codec_s(self) -> float: ...

class TalkerCpu:
    def __init__(self, xml: str, threads: int, u8_cache: bool, block_size: int, isa: str = "") -> None: ...
    @property
    def block_bytes(self) -> int: ...
    def allocate(self, blocks: int) -> None: ...
    def copy_block(self, source: int, target: int) -> None: ...
    def run(self, embeds: ArrayLike, positions: ArrayLike, past_lens: ArrayLike, begins: ArrayLike,
            block_indices: ArrayLike, block_begins: ArrayLike,
            sample_rows: ArrayLike) -> tuple[NDArray[np.float32], NDArray[np.float32]]: ...

class RunnerConfig:
    talker_xml: str
    subcode_xml: str
    first_xml: dict[int, str]
    steady_xml: dict[int, str]
    talker_device: str
    subcode_device: str
    decoder_device: str
    talker_properties: dict[str, str]
    subcode_properties: dict[str, str]
    decoder_properties: dict[str, str]
    decoder_batch: int
    num_layers: int
    first_chunk: int
    steady_chunk: int
    offline: bool
    eos: int
    suppress_from: int
    groups: int
    primed_states: int
    int4_linear: bool
    subcode_cpu: bool
    talker_cpu: bool
    talker_u8_cache: bool
    talker_block_size: int
    subcode_threads: int
    kernels: str
    def __init__(self) -> None: ...

class Runner:
    def __init__(self, config: RunnerConfig) -> None: ...
    @property
    def block_size(self) -> int: ...
    @property
    def kv_block_bytes(self) -> int: ...
    @property
    def hidden(self) -> int: ...
    @property
    def int4_products(self) -> int: ...
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
