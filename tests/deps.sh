#!/bin/sh
# SPDX-License-Identifier: MIT
# Install what pkv builds, tests and runs with, when missing:
# - Debian packages (compilers, OpenCL loader and headers, PoCL, Intel's
#   GPU compiler ocloc, cmocka, the oclgrind simulator, gnuplot for
#   pkv-bench --plot, redis-server and hiredis for the KV store, stunnel4
#   for the connector's TLS through a tunnel, libssl-dev and
#   libxxhash-dev, which the library needs, libpcre2-dev for the GGUF
#   host's byte-level BPE pre-tokenizer, libmicrohttpd-dev,
#   libjansson-dev, libzmq3-dev and libmsgpack-dev for pkv-server (its
#   KV events over ZeroMQ in msgpack), curl for its tests, ...);
# - Intel's OpenCL runtime for CPUs, from PyPI into a virtual environment
#   under $PKV_CACHE (default ~/.cache/pkv), with an ICD file of our own in
#   $PKV_CACHE/intel-icd (the wheel's names a path that does not exist).
#   Downloaded once (about 700 MB), then reused. PKV_NO_INTEL_RUNTIME=1
#   skips it;
# - the GGUF host's two models and their tests' tools, by
#   examples/gguf/setup.sh: Gemma 3 270M (about 240 MB, Gemma terms of
#   use) into $PKV_CACHE/gemma3 and SmolLM2-135M-Instruct (about 93 MB,
#   Apache-2.0) into $PKV_CACHE/smollm2, and ggml, the tensor library the
#   host's matrix products run on (MIT; built once from a pinned
#   llama-cpp-python source package, a 77 MB download and about 100
#   CPU-seconds, into $PKV_CACHE/ggml).
#   Offline without a cached copy, the model's tests and demo are skipped,
#   saying so. PKV_NO_MODEL=1 skips both;
# - PyPI's openai client, which pkv-server's and pkv-router's tests drive
#   them with (tests/server/check_server.py, tests/router/check_router.py),
#   and pyzmq and msgspec, which the router's test publishes KV events
#   with and pkv-server's KV events test decodes them with
#   (tests/server/check_kv_events.py), into a virtual environment in
#   $PKV_CACHE/server/venv (a few MB). Offline, the tests are skipped,
#   saying so.
set -eu
PKV_PACKAGES="cmake make gcc g++ binutils pkg-config ocl-icd-opencl-dev
opencl-headers pocl-opencl-icd intel-opencl-icd libcmocka-dev clang
abigail-tools oclgrind python3 python3-venv gnuplot-nox redis-server
redis-tools libhiredis-dev stunnel4 openssl libssl-dev libxxhash-dev
libpcre2-dev libmicrohttpd-dev libjansson-dev curl libcurl4-openssl-dev
libzmq3-dev libmsgpack-dev"
missing=""
for p in $PKV_PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
        missing="$missing $p"
done
if [ -n "$missing" ]; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO=sudo
    echo "installing:$missing"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q $missing
fi

cache=${PKV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pkv}
if [ "${PKV_NO_INTEL_RUNTIME:-0}" != 1 ]; then
    venv=$cache/intel-opencl
    # Pinned: the version the tests were last checked with.
    INTEL_VERSION=2026.2.0
    if [ ! -f "$venv/lib/libintelocl.so" ]; then
        echo "installing Intel's OpenCL CPU runtime $INTEL_VERSION into $venv"
        rm -rf "$venv"
        /usr/bin/python3 -m venv "$venv"
        "$venv/bin/pip" install -q --disable-pip-version-check \
            "intel-opencl-rt==$INTEL_VERSION" \
            "intel-cmplr-lib-rt==$INTEL_VERSION"
    fi
    mkdir -p "$cache/intel-icd"
    echo "$venv/lib/libintelocl.so" >"$cache/intel-icd/intel-cpu.icd"
fi

# Pinned: the versions the server's and router's tests were last checked
# with.
server_venv=$cache/server/venv
OPENAI_VERSION=3.51.0
PYZMQ_VERSION=27.3.0
MSGSPEC_VERSION=0.22.0
if ! "$server_venv/bin/python" -c "import openai, zmq, msgspec" \
    2>/dev/null; then
    echo "installing PyPI's openai $OPENAI_VERSION, pyzmq $PYZMQ_VERSION" \
        "and msgspec $MSGSPEC_VERSION into $server_venv"
    rm -rf "$server_venv"
    mkdir -p "$cache/server"
    /usr/bin/python3 -m venv "$server_venv"
    if ! "$server_venv/bin/pip" install -q --disable-pip-version-check \
        "openai==$OPENAI_VERSION" "pyzmq==$PYZMQ_VERSION" \
        "msgspec==$MSGSPEC_VERSION"; then
        rm -rf "$server_venv"
        echo "cannot install openai, pyzmq and msgspec (offline?):" \
            "pkv-server's and pkv-router's tests are skipped"
    fi
fi

if [ "${PKV_NO_MODEL:-0}" != 1 ]; then
    PKV_CACHE=$cache sh "$(dirname "$0")/../examples/gguf/setup.sh" ||
        [ $? -eq 77 ]
fi
