#!/bin/sh
# SPDX-License-Identifier: MIT
# Install the Debian packages pkv builds, tests and runs with, when missing.
set -eu
PKV_PACKAGES="cmake make gcc g++ binutils pkg-config ocl-icd-opencl-dev
opencl-headers pocl-opencl-icd intel-opencl-icd libcmocka-dev clang
abigail-tools"
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
