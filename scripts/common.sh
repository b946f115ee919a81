# scripts/common.sh - shared by scripts/demo and scripts/test: install what is missing, build.
# Sourced, not run. Works as root or through sudo on Debian 12 / Ubuntu; idempotent.

CT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CT_BUILD=${CT_BUILD:-$CT_ROOT/build}

say() { printf '\n==> %s\n' "$*"; }
die() { printf '\nerror: %s\n' "$*" >&2; exit 1; }

# ct_install PKG... : apt-get install the packages that are not installed yet.
ct_install() {
    local missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    if [ ${#missing[@]} -eq 0 ]; then
        say "packages: all ${#} present"
        return 0
    fi
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || die "need root or sudo to install: ${missing[*]}"
        sudo="sudo"
    fi
    command -v apt-get >/dev/null || die "apt-get not found; install by hand: ${missing[*]}"
    say "installing: ${missing[*]}"
    $sudo apt-get update -qq || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" \
        || die "apt-get install failed for: ${missing[*]}"
}

# The build's dependencies (OpenCL ICD + PoCL as the CPU device, CLBlast, OpenMP via gcc, MPICH)
# and the benchmarks' CPU BLAS reference.
CT_BUILD_PKGS=(cmake make gcc libc6-dev ocl-icd-opencl-dev opencl-headers pocl-opencl-icd clinfo
               libclblast-dev mpich libmpich-dev libopenblas-dev)
# The tests' oracle: PyTorch (Debian's, for Debian's own /usr/bin/python3).
CT_TEST_PKGS=(python3 python3-torch python3-numpy)

ct_build() {
    say "configuring ($CT_BUILD)"
    cmake -S "$CT_ROOT" -B "$CT_BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" || die "cmake configure failed"
    say "building with $(nproc) jobs"
    cmake --build "$CT_BUILD" -j "$(nproc)" || die "build failed"
}
