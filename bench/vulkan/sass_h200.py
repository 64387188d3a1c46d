#!/usr/bin/env python3
"""The NVIDIA driver's machine code for the Vulkan pipelines (inspection only).

GEMMA_VULKAN_PIPE_DUMP=dir writes each pipeline's cache data to dir/<n>_<shader>.bin. On the
NVIDIA driver seen on the H200 (580-series) that blob is a 32-byte Vulkan cache header, a small
driver header and a zstd frame; the frame holds an "NVDANVVMNVuc" container whose code section
size is the u32 at 0x4c (the "Binary Size" that GEMMA_VULKAN_PIPE_STATS prints) and whose code
starts 8 bytes after the u64 offset at 0x50. (Found by inspection, not documented; checked by
the first instruction being S2R and the size matching the driver's statistic.)

  sass_h200.py extract DUMP_DIR CODE_DIR   # the dump's .raw files, else the zstd CLI (Debian: zstd)
  sass_h200.py disasm CODE_DIR             # nvdisasm -b SM90 (the CUDA toolkit on the H200)
"""
import glob, os, shutil, struct, subprocess, sys


def extract(dump, out):
    os.makedirs(out, exist_ok=True)
    for path in sorted(glob.glob(os.path.join(dump, "*.bin"))):
        name = os.path.basename(path)[:-4]
        if os.path.exists(path[:-4] + ".raw"):  # decompressed by the dump itself (libzstd)
            raw = open(path[:-4] + ".raw", "rb").read()
        else:
            blob = open(path, "rb").read()
            z = blob.find(bytes.fromhex("28b52ffd"))  # zstd frame magic
            if z < 0:
                print(f"{name}: {len(blob)} bytes, no zstd frame")
                continue
            raw = subprocess.run(["zstd", "-d", "-c"], input=blob[z:], capture_output=True).stdout
        if raw[:12] != b"NVDANVVMNVuc":
            print(f"{name}: unknown container {raw[:12]!r}")
            continue
        size, off = struct.unpack_from("<IQ", raw, 0x4C)
        code = raw[off + 8:off + 8 + size]
        open(os.path.join(out, name + ".code"), "wb").write(code)
        print(f"{name}: code {size} bytes, first opcode 0x{struct.unpack_from('<Q', code)[0] & 0xfff:03x}")


def disasm(code_dir):
    tool = shutil.which("nvdisasm") or "/usr/local/cuda/bin/nvdisasm"
    for path in sorted(glob.glob(os.path.join(code_dir, "*.code"))):
        r = subprocess.run([tool, "-b", "SM90", path], capture_output=True, text=True)
        open(path[:-5] + ".sass", "w").write(r.stdout if r.returncode == 0 else r.stderr)
        print(f"{os.path.basename(path)}: rc {r.returncode}")


if __name__ == "__main__":
    if sys.argv[1] == "extract":
        extract(sys.argv[2], sys.argv[3])
    else:
        disasm(sys.argv[2])
