#!/bin/sh
# SPDX-License-Identifier: MIT
# Set up, build and run the demo. Usage: sh examples/demo.sh (from the repo
# root or anywhere).
set -eu
cd "$(dirname "$0")/.."
sh tests/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)" >/dev/null
# Until the llama-architecture host lands, the demo is the KV memory
# workload: static max-length allocation against paged block tables.
./build/bench/pkv-bench memory
