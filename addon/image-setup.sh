#!/usr/bin/env bash
# The install steps both images run: the add-on's (addon/Dockerfile, whose build context is
# this folder alone, hence the script lives here) and the standalone container's
# (docker/Dockerfile, built from the repository root, which copies it from addon/).
#
#   image-setup.sh runtime                  Debian's Python and the runtime libraries
#   image-setup.sh venv SPEC [VERSION]      /opt/venv with the package (pip requirement SPEC),
#                                           compiled here; VERSION: the version it must have
#   image-setup.sh intel-drivers            Intel's GPU and NPU user-space drivers
#
# Environment (the Dockerfiles' build arguments): WHEELS_ONLY=true installs from /tmp/wheels
# alone (a build without PyPI); INTEL_DRIVERS=false leaves the drivers out (a CPU-only image,
# or a build that cannot reach GitHub).
set -euo pipefail

apt_install() {
    apt-get update
    apt-get install -y --no-install-recommends "$@"
    apt-get clean
    rm -rf /var/lib/apt/lists/*
}

# Debian's Python (3.13 on trixie). From Debian too: the OpenCL ICD loader (ocl-icd-libopencl1)
# and oneTBB (libtbb12, which the NPU compiler needs).
runtime() {
    apt_install python3 ca-certificates ocl-icd-libopencl1 libtbb12
}

# The native runner compiles against the openvino wheel the package pins, with a compiler the
# image does not keep (this runs in a build stage). /tmp/wheels is searched before PyPI.
venv() {
    local spec="$1" expected="${2:-}" index=()
    apt_install python3-venv python3-dev g++ cmake ninja-build
    if [[ "${WHEELS_ONLY:-false}" == true ]]; then index=(--no-index); fi
    echo "installing ${spec}"
    python3 -m venv /opt/venv
    PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
        /opt/venv/bin/pip install "${index[@]}" --find-links /tmp/wheels "${spec}"
    cd /
    /opt/venv/bin/python -c "import wyoming_qwen3tts._native"
    local installed
    installed="$(/opt/venv/bin/python -c 'import wyoming_qwen3tts; print(wyoming_qwen3tts.__version__)')"
    if [[ -n "${expected}" && "${installed}" != "${expected}" ]]; then
        echo "the image is version ${expected} but ${spec} holds wyoming-qwen3tts ${installed}" >&2
        exit 1
    fi
}

# Debian 13 ships neither: the GPU compute runtime (intel-opencl-icd, libze-intel-gpu1) is only
# in testing, built against a newer glibc, and Intel's NPU driver (linux-npu-driver) is not
# packaged by Debian at all; its Level Zero loader (libze1) is older than the one that driver is
# built against. So these are Intel's release packages (their Ubuntu 24.04 builds, which need
# glibc >= 2.38), pinned by sha256; bump them together. The NPU firmware package only matters on
# the host, whose kernel loads it, but the driver package depends on it.
intel_drivers() {
    if [[ "${INTEL_DRIVERS:-true}" != true ]]; then
        echo "INTEL_DRIVERS=${INTEL_DRIVERS}: no GPU or NPU drivers in this image (CPU only)"
        return
    fi
    local work
    work="$(mktemp -d)"
    cd "${work}"
    apt-get update
    apt-get install -y --no-install-recommends curl
    curl -fsSL --remote-name-all \
        https://github.com/intel/compute-runtime/releases/download/26.31.39395.13/intel-opencl-icd_26.31.39395.13-0_amd64.deb \
        https://github.com/intel/compute-runtime/releases/download/26.31.39395.13/libze-intel-gpu1_26.31.39395.13-0_amd64.deb \
        https://github.com/intel/compute-runtime/releases/download/26.31.39395.13/libigdgmm12_22.10.0_amd64.deb \
        https://github.com/intel/intel-graphics-compiler/releases/download/v2.40.13/intel-igc-core-2_2.40.13+22418_amd64.deb \
        https://github.com/intel/intel-graphics-compiler/releases/download/v2.40.13/intel-igc-opencl-2_2.40.13+22418_amd64.deb \
        https://github.com/oneapi-src/level-zero/releases/download/v1.34.0/libze1_1.34.0+u24.04_amd64.deb \
        https://github.com/intel/linux-npu-driver/releases/download/v1.38.0/linux-npu-driver-v1.38.0.20260910-34487311128-ubuntu2404.tar.gz
    printf '%s  %s\n' \
        5a9c9e8fdca8a2f9e22754b1a4618c7babf21d7c3ab3503c680005007c7a8c44 intel-opencl-icd_26.31.39395.13-0_amd64.deb \
        1722943f81b576b9bb8d61016464208f48ce533dc3bf24ad39605293115cc289 libze-intel-gpu1_26.31.39395.13-0_amd64.deb \
        6031a63d6e8a12ce61c14efc15f2c8e727061286e3820b8594e6d00615e04d54 libigdgmm12_22.10.0_amd64.deb \
        ebd795e9fddf303a9b24b7f04545d8ddd9ad1f85b3d0cb1166476fab24da6d44 intel-igc-core-2_2.40.13+22418_amd64.deb \
        4f990874efc11c3f6091a663b08aef576c4af592dcd8f12e116f8c2fc92d34d9 intel-igc-opencl-2_2.40.13+22418_amd64.deb \
        45210e4549cd965ad7b9f160eefe53cbcdba01af341bea7ac7ba0aedeeb613ba libze1_1.34.0+u24.04_amd64.deb \
        1efcd4b60c22abee751d8f2705962cbcc2a569de45c7e0e670cf08afbfcdc1d2 linux-npu-driver-v1.38.0.20260910-34487311128-ubuntu2404.tar.gz \
        | sha256sum -c
    tar -xzf linux-npu-driver-v1.38.0.20260910-34487311128-ubuntu2404.tar.gz
    apt-get install -y --no-install-recommends \
        ./intel-opencl-icd_*.deb ./libze-intel-gpu1_*.deb ./libigdgmm12_*.deb \
        ./intel-igc-core-2_*.deb ./intel-igc-opencl-2_*.deb ./libze1_*.deb \
        ./intel-level-zero-npu_*.deb ./intel-driver-compiler-npu_*.deb ./intel-fw-npu_*.deb
    apt-get clean
    cd /
    rm -rf "${work}" /var/lib/apt/lists/*
}

case "${1:-}" in
    runtime) runtime ;;
    venv) shift; venv "$@" ;;
    intel-drivers) intel_drivers ;;
    *) echo "usage: $0 runtime | venv SPEC [VERSION] | intel-drivers" >&2; exit 2 ;;
esac
