/* CUDA driver, nvJPEG and NVRTC loaded at run time. See cuda.h. */
#include "gpu/cuda.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

static sl__cuda_api api;
static const sl__cuda_api *api_ok; /* &api once the driver and nvJPEG loaded */
static char api_why[256];
static pthread_once_t api_once = PTHREAD_ONCE_INIT;
static const sl__cuda_api *nvrtc_ok; /* &api once NVRTC is bound too */
static char nvrtc_why[256];
static pthread_once_t nvrtc_once = PTHREAD_ONCE_INIT;

/* Library names, newest first. */
static const char *const cuda_names[] = {"libcuda.so.1", "libcuda.so", NULL};
static const char *const nvjpeg_names[] = {"libnvjpeg.so.13", "libnvjpeg.so.12", "libnvjpeg.so.11", "libnvjpeg.so",
                                           NULL};
static const char *const nvrtc_names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so",
                                          NULL};

/* dlopen name in dir (NULL: the loader's own search). */
static void *open_in(const char *dir, const char *name, char *path, size_t plen) {
    char buf[512];
    if (dir) snprintf(buf, sizeof buf, "%s/%s", dir, name);
    else snprintf(buf, sizeof buf, "%s", name);
    void *h = dlopen(buf, RTLD_NOW | RTLD_LOCAL);
    if (h) sl__msg(path, plen, "%.159s", buf);
    return h;
}

/* Try every name in every folder: $SLUICE_CUDA_PATH, the loader's paths,
 * $CUDA_HOME/lib64, /usr/local/cuda/lib64. */
static void *open_lib(const char *const *names, char *path, size_t plen) {
    const char *env = getenv("SLUICE_CUDA_PATH");
    if (env && *env) {
        char dirs[1024];
        snprintf(dirs, sizeof dirs, "%s", env);
        char *save = NULL;
        for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save))
            for (int i = 0; names[i]; i++) {
                void *h = open_in(d, names[i], path, plen);
                if (h) return h;
            }
    }
    for (int i = 0; names[i]; i++) {
        void *h = open_in(NULL, names[i], path, plen);
        if (h) return h;
    }
    char home[300];
    const char *ch = getenv("CUDA_HOME");
    const char *fixed[] = {NULL, "/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib", NULL};
    if (ch && *ch) {
        snprintf(home, sizeof home, "%s/lib64", ch);
        fixed[0] = home;
    }
    for (int d = 0; d < 3; d++) {
        if (!fixed[d]) continue;
        for (int i = 0; names[i]; i++) {
            void *h = open_in(fixed[d], names[i], path, plen);
            if (h) return h;
        }
    }
    return NULL;
}

/* Resolve name into *slot; required symbols missing make the load fail. */
static int bind(void *dl, void *slot, const char *name, int required, const char **missing) {
    void *p = dlsym(dl, name);
    memcpy(slot, &p, sizeof p);
    if (!p && required && !*missing) *missing = name;
    return p != NULL;
}

#define REQ(dl, field, name) bind(dl, &api.field, name, 1, &missing)
#define OPT(dl, field, name) bind(dl, &api.field, name, 0, &missing)

static const char *bind_driver(void *dl) {
    const char *missing = NULL;
    REQ(dl, cuInit, "cuInit");
    REQ(dl, cuDriverGetVersion, "cuDriverGetVersion");
    REQ(dl, cuDeviceGetCount, "cuDeviceGetCount");
    REQ(dl, cuDeviceGet, "cuDeviceGet");
    REQ(dl, cuDeviceGetName, "cuDeviceGetName");
    REQ(dl, cuDeviceGetAttribute, "cuDeviceGetAttribute");
    REQ(dl, cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    REQ(dl, cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
    REQ(dl, cuCtxSetCurrent, "cuCtxSetCurrent");
    REQ(dl, cuCtxGetCurrent, "cuCtxGetCurrent");
    REQ(dl, cuMemGetInfo, "cuMemGetInfo_v2");
    REQ(dl, cuMemAlloc, "cuMemAlloc_v2");
    REQ(dl, cuMemFree, "cuMemFree_v2");
    REQ(dl, cuMemHostAlloc, "cuMemHostAlloc");
    REQ(dl, cuMemFreeHost, "cuMemFreeHost");
    REQ(dl, cuMemHostRegister, "cuMemHostRegister_v2");
    REQ(dl, cuMemHostUnregister, "cuMemHostUnregister");
    REQ(dl, cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
    REQ(dl, cuMemcpyDtoH, "cuMemcpyDtoH_v2");
    REQ(dl, cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
    REQ(dl, cuStreamCreateWithPriority, "cuStreamCreateWithPriority");
    REQ(dl, cuCtxGetStreamPriorityRange, "cuCtxGetStreamPriorityRange");
    REQ(dl, cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
    REQ(dl, cuStreamDestroy, "cuStreamDestroy_v2");
    REQ(dl, cuStreamSynchronize, "cuStreamSynchronize");
    REQ(dl, cuEventCreate, "cuEventCreate");
    REQ(dl, cuEventDestroy, "cuEventDestroy_v2");
    REQ(dl, cuEventSynchronize, "cuEventSynchronize");
    REQ(dl, cuEventRecord, "cuEventRecord");
    REQ(dl, cuEventElapsedTime, "cuEventElapsedTime");
    REQ(dl, cuModuleLoadData, "cuModuleLoadData");
    REQ(dl, cuModuleUnload, "cuModuleUnload");
    REQ(dl, cuModuleGetFunction, "cuModuleGetFunction");
    REQ(dl, cuLaunchKernel, "cuLaunchKernel");
    REQ(dl, cuGetErrorString, "cuGetErrorString");
    return missing;
}

static const char *bind_nvjpeg(void *dl) {
    const char *missing = NULL;
    REQ(dl, nvjpegGetProperty, "nvjpegGetProperty");
    REQ(dl, nvjpegCreateExV2, "nvjpegCreateExV2");
    REQ(dl, nvjpegDestroy, "nvjpegDestroy");
    REQ(dl, nvjpegSetDeviceMemoryPadding, "nvjpegSetDeviceMemoryPadding");
    REQ(dl, nvjpegSetPinnedMemoryPadding, "nvjpegSetPinnedMemoryPadding");
    REQ(dl, nvjpegJpegStateCreate, "nvjpegJpegStateCreate");
    REQ(dl, nvjpegJpegStateDestroy, "nvjpegJpegStateDestroy");
    REQ(dl, nvjpegJpegStreamCreate, "nvjpegJpegStreamCreate");
    REQ(dl, nvjpegJpegStreamDestroy, "nvjpegJpegStreamDestroy");
    REQ(dl, nvjpegJpegStreamParse, "nvjpegJpegStreamParse");
    REQ(dl, nvjpegJpegStreamParseHeader, "nvjpegJpegStreamParseHeader");
    REQ(dl, nvjpegDecodeParamsCreate, "nvjpegDecodeParamsCreate");
    REQ(dl, nvjpegDecodeParamsDestroy, "nvjpegDecodeParamsDestroy");
    REQ(dl, nvjpegDecodeParamsSetOutputFormat, "nvjpegDecodeParamsSetOutputFormat");
    REQ(dl, nvjpegDecodeParamsSetROI, "nvjpegDecodeParamsSetROI");
    REQ(dl, nvjpegDecodeBatchedInitialize, "nvjpegDecodeBatchedInitialize");
    REQ(dl, nvjpegDecodeBatchedSupportedEx, "nvjpegDecodeBatchedSupportedEx");
    REQ(dl, nvjpegDecodeBatchedEx, "nvjpegDecodeBatchedEx");
    OPT(dl, nvjpegDecodeBatchedPreAllocate, "nvjpegDecodeBatchedPreAllocate");
    OPT(dl, nvjpegGetHardwareDecoderInfo, "nvjpegGetHardwareDecoderInfo");
    REQ(dl, nvjpegDecoderCreate, "nvjpegDecoderCreate");
    REQ(dl, nvjpegDecoderDestroy, "nvjpegDecoderDestroy");
    REQ(dl, nvjpegDecoderJpegSupported, "nvjpegDecoderJpegSupported");
    REQ(dl, nvjpegDecoderStateCreate, "nvjpegDecoderStateCreate");
    REQ(dl, nvjpegBufferPinnedCreateV2, "nvjpegBufferPinnedCreateV2");
    REQ(dl, nvjpegBufferPinnedDestroy, "nvjpegBufferPinnedDestroy");
    REQ(dl, nvjpegBufferDeviceCreateV2, "nvjpegBufferDeviceCreateV2");
    REQ(dl, nvjpegBufferDeviceDestroy, "nvjpegBufferDeviceDestroy");
    REQ(dl, nvjpegStateAttachPinnedBuffer, "nvjpegStateAttachPinnedBuffer");
    REQ(dl, nvjpegStateAttachDeviceBuffer, "nvjpegStateAttachDeviceBuffer");
    REQ(dl, nvjpegDecodeJpegHost, "nvjpegDecodeJpegHost");
    REQ(dl, nvjpegDecodeJpegTransferToDevice, "nvjpegDecodeJpegTransferToDevice");
    REQ(dl, nvjpegDecodeJpegDevice, "nvjpegDecodeJpegDevice");
    return missing;
}

static const char *bind_nvrtc(void *dl) {
    const char *missing = NULL;
    REQ(dl, nvrtcVersion, "nvrtcVersion");
    REQ(dl, nvrtcCreateProgram, "nvrtcCreateProgram");
    REQ(dl, nvrtcDestroyProgram, "nvrtcDestroyProgram");
    REQ(dl, nvrtcCompileProgram, "nvrtcCompileProgram");
    REQ(dl, nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize");
    REQ(dl, nvrtcGetProgramLog, "nvrtcGetProgramLog");
    OPT(dl, nvrtcGetCUBINSize, "nvrtcGetCUBINSize");
    OPT(dl, nvrtcGetCUBIN, "nvrtcGetCUBIN");
    REQ(dl, nvrtcGetPTXSize, "nvrtcGetPTXSize");
    REQ(dl, nvrtcGetPTX, "nvrtcGetPTX");
    REQ(dl, nvrtcGetErrorString, "nvrtcGetErrorString");
    return missing;
}

/* One library: open, bind, or say why not in why (then it is closed again). */
static int load_one(const char *what, const char *const *names, const char *(*binder)(void *), int slot, char *why,
                    size_t wlen) {
    void *dl = open_lib(names, api.paths[slot], sizeof api.paths[slot]);
    if (!dl) {
        snprintf(why, wlen, "%s not found (tried %s, %s; set SLUICE_CUDA_PATH to its folder)", what, names[0],
                 names[1]);
        return -1;
    }
    const char *missing = binder(dl);
    if (missing) {
        snprintf(why, wlen, "%s at %s lacks %s (too old)", what, api.paths[slot], missing);
        dlclose(dl);
        return -1;
    }
    return 0;
}

static void load_all(void) {
    if (load_one("the CUDA driver (libcuda)", cuda_names, bind_driver, 0, api_why, sizeof api_why) ||
        load_one("nvJPEG (libnvjpeg)", nvjpeg_names, bind_nvjpeg, 1, api_why, sizeof api_why))
        return;
    sl_CUresult r = api.cuInit(0);
    if (r != 0) {
        snprintf(api_why, sizeof api_why, "cuInit failed: %s (no usable GPU or driver)", sl__cu_errname(&api, r));
        return;
    }
    int n = 0;
    if (api.cuDeviceGetCount(&n) != 0 || n < 1) {
        snprintf(api_why, sizeof api_why, "the CUDA driver sees no GPU");
        return;
    }
    api.cuDriverGetVersion(&api.driver_version);
    for (int i = 0; i < 3; i++) api.nvjpegGetProperty(i, &api.nvjpeg_version[i]); /* MAJOR, MINOR, PATCH */
    api_ok = &api;
}

const sl__cuda_api *sl__cuda_api_get(char *why, size_t len) {
    pthread_once(&api_once, load_all);
    if (!api_ok) sl__msg(why, len, "%s", api_why);
    return api_ok;
}

static void load_nvrtc(void) {
    if (!sl__cuda_api_get(nvrtc_why, sizeof nvrtc_why) ||
        load_one("NVRTC (libnvrtc)", nvrtc_names, bind_nvrtc, 2, nvrtc_why, sizeof nvrtc_why))
        return;
    api.nvrtcVersion(&api.nvrtc_version[0], &api.nvrtc_version[1]);
    nvrtc_ok = &api;
}

const sl__cuda_api *sl__cuda_nvrtc(char *why, size_t len) {
    pthread_once(&nvrtc_once, load_nvrtc);
    if (!nvrtc_ok) sl__msg(why, len, "%s", nvrtc_why);
    return nvrtc_ok;
}

int sl__cu_primary(const sl__cuda_api *a, int device, sl_CUdevice *dev, sl_CUcontext *ctx, char *name, size_t nlen,
                   char *err, size_t errlen) {
    int n = 0;
    *ctx = NULL;
    a->cuDeviceGetCount(&n);
    if (device < 0 || device >= n) {
        sl__msg(err, errlen, "no CUDA device %d (this machine has %d)", device, n);
        return SL_EUNSUPPORTED;
    }
    const char *what = "cuDeviceGet";
    sl_CUresult r = a->cuDeviceGet(dev, device);
    if (!r && (what = "retaining the device's context", r = a->cuDevicePrimaryCtxRetain(ctx, *dev))) *ctx = NULL;
    if (!r && (what = "cuCtxSetCurrent", r = a->cuCtxSetCurrent(*ctx))) {
        a->cuDevicePrimaryCtxRelease(*dev);
        *ctx = NULL;
    }
    if (r) {
        sl__msg(err, errlen, "%s: %s", what, sl__cu_errname(a, r));
        return SL_EIO;
    }
    if (name && nlen) a->cuDeviceGetName(name, (int)nlen, *dev);
    return 0;
}

int sl__cu_priority(const sl__cuda_api *a, int greatest) {
    int lo = 0, hi = 0;
    if (a->cuCtxGetStreamPriorityRange(&lo, &hi)) return 0;
    return greatest ? hi : lo;
}

const char *sl__cu_errname(const sl__cuda_api *a, sl_CUresult r) {
    const char *s = NULL;
    if (a && a->cuGetErrorString && a->cuGetErrorString(r, &s) == 0 && s) return s;
    return "CUDA error";
}

const char *sl__nvj_errname(sl_nvjStatus s) {
    static const char *names[] = {"success",          "not initialized",        "invalid parameter",
                                  "bad JPEG",         "JPEG not supported",     "allocator failure",
                                  "execution failed", "architecture mismatch",  "internal error",
                                  "implementation not supported", "incomplete bitstream"};
    return s >= 0 && s < (int)(sizeof names / sizeof names[0]) ? names[s] : "nvJPEG error";
}
