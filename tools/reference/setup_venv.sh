#!/usr/bin/env bash
# Create the PyTorch reference's virtual environment (.venv-ref at the repo root) exactly as it was made
# for this project:
#
#     tools/reference/setup_venv.sh            # -> .venv-ref   (about two minutes)
#     tools/reference/setup_venv.sh DIR        # -> DIR
#     tools/reference/setup_venv.sh --force    # remove an existing one first
#
# It must stay separate from our environment: the reference package's import name is `omnivoice`, like ours.
# Steps: python3 -m venv, pip install torch==2.13.0 (CPU wheel), pip install omnivoice==0.2.1 (pulls
# transformers 5.x, torchaudio, pydub, ...), then move torchaudio/lib/*.so aside: PyPI's torchaudio is a CUDA
# build whose extension cannot load beside a CPU torch; without it torchaudio runs in pure-Python mode, and
# the reference only needs torchaudio.functional.resample (see NOTES.md, "Running the reference offline").
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
force=0
target="$repo/.venv-ref"
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    -h|--help) sed -n '2,13p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) target="$arg" ;;
  esac
done

if [[ -e "$target" ]]; then
  if [[ $force -eq 1 ]]; then
    rm -rf "$target"
  elif "$target/bin/python" -c "import omnivoice, torch" >/dev/null 2>&1; then
    echo "$target already holds the reference (use --force to rebuild)" >&2
    exit 0
  else
    echo "error: $target exists but is not a working reference venv; rerun with --force" >&2
    exit 1
  fi
fi

python3 -m venv "$target"
"$target/bin/pip" install torch==2.13.0
"$target/bin/pip" install omnivoice==0.2.1

# torchaudio's compiled extension (CUDA build) fails to load beside the CPU torch: park it
site="$("$target/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
if compgen -G "$site/torchaudio/lib/*.so" >/dev/null; then
  mkdir -p "$target/torchaudio-lib-disabled"
  mv "$site"/torchaudio/lib/*.so "$target/torchaudio-lib-disabled/"
fi

# -I: isolated, so the repo's own omnivoice package (same import name) cannot shadow the reference's
HF_HUB_OFFLINE=1 "$target/bin/python" -I - <<'EOF'
import torch, torchaudio, transformers
from omnivoice.models.omnivoice import OmniVoice  # noqa: F401  (imports torchaudio and transformers' codec)
x = torchaudio.functional.resample(torch.zeros(1, 2400), 24000, 16000)
print(f"reference venv ready: torch {torch.__version__}, transformers {transformers.__version__}, "
      f"resample ok {tuple(x.shape)}")
EOF
