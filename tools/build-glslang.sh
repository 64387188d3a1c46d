#!/usr/bin/env bash
# Builds a glslang that knows GL_NV_cooperative_matrix2 (15.1, Debian 13's source package) into
# .deps/glslang, for the Vulkan backend's workgroup-scope matrix modules (linear_cm2.comp; Debian
# 12's glslang 12 predates the extension). Fetches the source from Debian's archive with a private
# apt list (the machine's own sources are left alone); builds the compiler only (no optimizer, no
# HLSL, no tests): ~2 minutes on 2 cores. Re-run cmake afterwards; it finds .deps/glslang/bin.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
dest=$root/.deps/glslang
if [ -x "$dest/bin/glslang" ]; then echo "glslang: $dest/bin/glslang"; exit 0; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial"
echo "deb-src http://deb.debian.org/debian trixie main" > "$work/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
          -o "Dir::State::Lists=$work/lists" -o APT::Sandbox::User=root)
apt-get "${apt_opts[@]}" update -qq
(cd "$work" && apt-get "${apt_opts[@]}" source --download-only -qq "glslang=15.1.0+1.4.309.0-1")
tar xzf "$work"/glslang_15.1.0+1.4.309.0.orig.tar.gz -C "$work"
cmake -S "$work"/glslang-15.1.0+1.4.309.0 -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DENABLE_OPT=OFF -DENABLE_HLSL=OFF -DGLSLANG_TESTS=OFF -DBUILD_TESTING=OFF \
  -DENABLE_SPVREMAPPER=OFF -DCMAKE_INSTALL_PREFIX="$dest" > /dev/null
cmake --build "$work/build" --target install -- -j"$(nproc)" > /dev/null
echo "glslang: $dest/bin/glslang ($("$dest"/bin/glslang --version | head -1))"
