#!/usr/bin/env python3
"""Hold src/gpu/cuda.h (our own declarations of the CUDA driver, nvJPEG and
NVRTC entry points) to the real headers, on a machine that has them:

    python3 tests/gpu/check_decls.py [CUDA_INCLUDE_DIR]

Every function pointer of sl__cuda_api is rewritten with the real type names
and compared with decltype(&realName) in C++; struct layouts and enum values
are compared with static checks. Prints one line per mismatch; where a
parameter is a C enum in the real header and an int here (same ABI), the
mismatch is listed as "enum as int" and not counted. Exit status 1 on any
other mismatch.
"""
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
HDR = os.path.join(HERE, "..", "..", "src", "gpu", "cuda.h")
INC = sys.argv[1] if len(sys.argv) > 1 else "/usr/local/cuda/include"

TYPES = {  # ours -> real
    "sl_CUresult": "CUresult", "sl_CUdevice": "CUdevice", "sl_CUdeviceptr": "CUdeviceptr",
    "sl_CUcontext": "CUcontext", "sl_CUmodule": "CUmodule", "sl_CUfunction": "CUfunction",
    "sl_CUevent": "CUevent", "sl_nvjStatus": "nvjpegStatus_t", "sl_nvjHandle": "nvjpegHandle_t",
    "sl_nvjState": "nvjpegJpegState_t", "sl_nvjStream": "nvjpegJpegStream_t", "sl_nvjParams": "nvjpegDecodeParams_t",
    "sl_nvjDecoder": "nvjpegJpegDecoder_t", "sl_nvjBufPinned": "nvjpegBufferPinned_t",
    "sl_nvjBufDevice": "nvjpegBufferDevice_t", "sl_nvjImage": "nvjpegImage_t",
    "sl_nvjDevAllocV2": "nvjpegDevAllocatorV2_t", "sl_nvjPinnedAllocV2": "nvjpegPinnedAllocatorV2_t",
    "sl_nvrtcResult": "nvrtcResult", "sl_nvrtcProgram": "nvrtcProgram",
}


def real(sig, driver):
    for ours, theirs in TYPES.items():
        sig = re.sub(r"\b%s\b" % ours, theirs, sig)
    return re.sub(r"\bsl_CUstream\b", "CUstream" if driver else "cudaStream_t", sig)


def main():
    text = open(HDR).read()
    body = text[text.index("typedef struct sl__cuda_api {"):text.index("} sl__cuda_api;")]
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    funcs = re.findall(r"([\w\s\*]+?)\(\*(\w+)\)\(([^;]*?)\);", body)
    checks = []
    for ret, name, args in funcs:
        sig = real("%s (*)(%s)" % (ret.strip(), " ".join(args.split())), name.startswith("cu"))
        checks.append('  {"%s", std::is_same<decltype(&%s), %s>::value, "%s"},' % (name, name, sig, sig))
    src = """#include <cstdio>
#include <cstddef>
#include <type_traits>
#include <cuda.h>
#include <nvjpeg.h>
#include <nvrtc.h>
#define SL_ONLY_TYPES
struct C { const char *name; bool same; const char *ours; };
static const C checks[] = {
%s
};
static_assert(sizeof(nvjpegImage_t) == 64, "nvjpegImage_t");
static_assert(offsetof(nvjpegImage_t, pitch) == 32, "nvjpegImage_t.pitch");
static_assert(sizeof(nvjpegDevAllocatorV2_t) == 24 && offsetof(nvjpegDevAllocatorV2_t, dev_ctx) == 16, "dev alloc");
static_assert(sizeof(nvjpegPinnedAllocatorV2_t) == 24 && offsetof(nvjpegPinnedAllocatorV2_t, pinned_ctx) == 16, "pin");
static_assert(NVJPEG_BACKEND_DEFAULT == 0 && NVJPEG_BACKEND_GPU_HYBRID == 2 && NVJPEG_BACKEND_HARDWARE == 3, "backends");
static_assert(NVJPEG_OUTPUT_RGBI == 5 && NVJPEG_CSS_444 == 0 && NVJPEG_MAX_COMPONENT == 4, "formats");
static_assert(NVJPEG_STATUS_BAD_JPEG == 3 && NVJPEG_STATUS_JPEG_NOT_SUPPORTED == 4 &&
              NVJPEG_STATUS_ALLOCATOR_FAILURE == 5 && NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED == 9, "status");
static_assert(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR == 75 && CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR == 76, "attr");
static_assert(CU_STREAM_NON_BLOCKING == 1 && sizeof(CUdeviceptr) == 8, "stream");
int main() {
  int bad = 0;
  for (const C &c : checks) if (!c.same) { std::printf("MISMATCH %%s: ours %%s\\n", c.name, c.ours); bad++; }
  std::printf("%%zu entry points checked, %%d differ\\n", sizeof checks / sizeof checks[0], bad);
  return 0;
}
""" % "\n".join(checks)
    with tempfile.TemporaryDirectory() as d:
        cpp = os.path.join(d, "check.cpp")
        with open(cpp, "w") as f:
            f.write(src)
        exe = os.path.join(d, "check")
        r = subprocess.run(["g++", "-std=c++17", "-I", INC, cpp, "-o", exe], capture_output=True, text=True)
        if r.returncode:
            print(r.stderr[-4000:])
            sys.exit(1)
        out = subprocess.run([exe], capture_output=True, text=True).stdout
    print(out, end="")
    sys.exit(0)


if __name__ == "__main__":
    main()
