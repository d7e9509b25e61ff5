/*
 * CUDA driver, nvJPEG and NVRTC, loaded at run time (dlopen): libsluice
 * builds and runs where none of them exists, and never links them.
 *
 * The few types and entry points used are declared here from NVIDIA's
 * documented API (cuda.h, nvjpeg.h, nvrtc.h of CUDA 11-13), under our own
 * names; tests/gpu/check_decls.c compares them with the real headers on a
 * machine that has them. Only stable, C ABI entry points are used (the
 * driver's _v2 names where they exist).
 *
 * Ownership: the libraries are loaded once per process (sl__cuda_api) and
 * stay loaded for its life; unloading a GPU driver while threads of it may
 * still run is unsafe. The driver and nvJPEG are loaded together; NVRTC
 * only when the resize kernels must be compiled (sl__cuda_nvrtc: a
 * process that finds them in the kernel cache never maps it, kernels.c).
 * Each part of the table is read-only once its loading returned.
 */
#ifndef SL_GPU_CUDA_H
#define SL_GPU_CUDA_H

#include <stddef.h>
#include <stdint.h>

/* ---- driver API (cuda.h) ----------------------------------------------- */
typedef int sl_CUresult; /* CUDA_SUCCESS = 0 */
typedef int sl_CUdevice;
typedef unsigned long long sl_CUdeviceptr;
typedef struct sl_CUctx_st *sl_CUcontext;
typedef struct sl_CUmod_st *sl_CUmodule;
typedef struct sl_CUfunc_st *sl_CUfunction;
typedef struct sl_CUstream_st *sl_CUstream; /* = cudaStream_t */
typedef struct sl_CUevent_st *sl_CUevent;

#define SL_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define SL_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76
#define SL_CU_STREAM_NON_BLOCKING 0x1
#define SL_CU_EVENT_DEFAULT 0x0
#define SL_CU_EVENT_BLOCKING_SYNC 0x1 /* cuEventSynchronize sleeps until the GPU signals, not spins */
#define SL_CU_EVENT_DISABLE_TIMING 0x2
#define SL_CU_MEMHOSTREGISTER_PORTABLE 0x1 /* pinned for every context, not only the current one */

/* ---- nvJPEG (nvjpeg.h) -------------------------------------------------- */
typedef int sl_nvjStatus;           /* nvjpegStatus_t, NVJPEG_STATUS_SUCCESS = 0 */
typedef struct sl_nvjHandle *sl_nvjHandle;
typedef struct sl_nvjState *sl_nvjState;
typedef struct sl_nvjStream *sl_nvjStream;
typedef struct sl_nvjParams *sl_nvjParams;
typedef struct sl_nvjDecoder *sl_nvjDecoder;
typedef struct sl_nvjBufPinned *sl_nvjBufPinned;
typedef struct sl_nvjBufDevice *sl_nvjBufDevice;

enum {
    SL_NVJ_STATUS_SUCCESS = 0,
    SL_NVJ_STATUS_BAD_JPEG = 3,
    SL_NVJ_STATUS_JPEG_NOT_SUPPORTED = 4,
    SL_NVJ_STATUS_ALLOCATOR_FAILURE = 5,
    SL_NVJ_STATUS_EXECUTION_FAILED = 6,
    SL_NVJ_STATUS_ARCH_MISMATCH = 7,
    SL_NVJ_STATUS_IMPLEMENTATION_NOT_SUPPORTED = 9,
};
enum { /* nvjpegBackend_t */
    SL_NVJ_BACKEND_DEFAULT = 0,
    SL_NVJ_BACKEND_GPU_HYBRID = 2,
    SL_NVJ_BACKEND_HARDWARE = 3,
};
#define SL_NVJ_FLAGS_HW_DECODE_NO_PIPELINE 1u /* nvjpegCreateExV2: batched calls buffer no images ahead */
enum { SL_NVJ_OUTPUT_RGBI = 5 }; /* nvjpegOutputFormat_t: interleaved RGB */
enum { SL_NVJ_CSS_444 = 0 };     /* nvjpegChromaSubsampling_t */
#define SL_NVJ_MAX_COMPONENT 4

typedef struct sl_nvjImage { /* nvjpegImage_t */
    unsigned char *channel[SL_NVJ_MAX_COMPONENT];
    size_t pitch[SL_NVJ_MAX_COMPONENT];
} sl_nvjImage;

/* nvjpegDevAllocatorV2_t / nvjpegPinnedAllocatorV2_t: allocators with a
 * context pointer (nvJPEG 11.6+). Return 0 on success. */
typedef int (*sl_nvjMallocV2)(void *ctx, void **ptr, size_t size, sl_CUstream stream);
typedef int (*sl_nvjFreeV2)(void *ctx, void *ptr, size_t size, sl_CUstream stream);
typedef struct sl_nvjDevAllocV2 {
    sl_nvjMallocV2 dev_malloc;
    sl_nvjFreeV2 dev_free;
    void *dev_ctx;
} sl_nvjDevAllocV2;
typedef struct sl_nvjPinnedAllocV2 {
    sl_nvjMallocV2 pinned_malloc;
    sl_nvjFreeV2 pinned_free;
    void *pinned_ctx;
} sl_nvjPinnedAllocV2;

/* ---- NVRTC (nvrtc.h) --------------------------------------------------- */
typedef int sl_nvrtcResult; /* NVRTC_SUCCESS = 0 */
typedef struct sl_nvrtcProg *sl_nvrtcProgram;

/* The loaded entry points. Optional ones may be NULL (noted). */
typedef struct sl__cuda_api {
    /* driver */
    sl_CUresult (*cuInit)(unsigned);
    sl_CUresult (*cuDriverGetVersion)(int *);
    sl_CUresult (*cuDeviceGetCount)(int *);
    sl_CUresult (*cuDeviceGet)(sl_CUdevice *, int);
    sl_CUresult (*cuDeviceGetName)(char *, int, sl_CUdevice);
    sl_CUresult (*cuDeviceGetAttribute)(int *, int, sl_CUdevice);
    sl_CUresult (*cuDevicePrimaryCtxRetain)(sl_CUcontext *, sl_CUdevice);
    sl_CUresult (*cuDevicePrimaryCtxRelease)(sl_CUdevice);
    sl_CUresult (*cuCtxSetCurrent)(sl_CUcontext);
    sl_CUresult (*cuCtxGetCurrent)(sl_CUcontext *);
    sl_CUresult (*cuMemGetInfo)(size_t *, size_t *);
    sl_CUresult (*cuMemAlloc)(sl_CUdeviceptr *, size_t);
    sl_CUresult (*cuMemFree)(sl_CUdeviceptr);
    sl_CUresult (*cuMemHostAlloc)(void **, size_t, unsigned);
    sl_CUresult (*cuMemFreeHost)(void *);
    sl_CUresult (*cuMemHostRegister)(void *, size_t, unsigned);
    sl_CUresult (*cuMemHostUnregister)(void *);
    sl_CUresult (*cuMemcpyHtoDAsync)(sl_CUdeviceptr, const void *, size_t, sl_CUstream);
    sl_CUresult (*cuMemcpyDtoH)(void *, sl_CUdeviceptr, size_t);
    sl_CUresult (*cuMemcpyDtoDAsync)(sl_CUdeviceptr, sl_CUdeviceptr, size_t, sl_CUstream);
    sl_CUresult (*cuStreamCreateWithPriority)(sl_CUstream *, unsigned, int);
    sl_CUresult (*cuCtxGetStreamPriorityRange)(int *, int *);
    sl_CUresult (*cuMemcpyDtoHAsync)(void *, sl_CUdeviceptr, size_t, sl_CUstream);
    sl_CUresult (*cuStreamDestroy)(sl_CUstream);
    sl_CUresult (*cuStreamSynchronize)(sl_CUstream);
    sl_CUresult (*cuEventCreate)(sl_CUevent *, unsigned);
    sl_CUresult (*cuEventDestroy)(sl_CUevent);
    sl_CUresult (*cuEventSynchronize)(sl_CUevent);
    sl_CUresult (*cuEventRecord)(sl_CUevent, sl_CUstream);
    sl_CUresult (*cuEventElapsedTime)(float *, sl_CUevent, sl_CUevent);
    sl_CUresult (*cuModuleLoadData)(sl_CUmodule *, const void *);
    sl_CUresult (*cuModuleUnload)(sl_CUmodule);
    sl_CUresult (*cuModuleGetFunction)(sl_CUfunction *, sl_CUmodule, const char *);
    sl_CUresult (*cuLaunchKernel)(sl_CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                  unsigned, sl_CUstream, void **, void **);
    sl_CUresult (*cuGetErrorString)(sl_CUresult, const char **);
    /* nvJPEG */
    sl_nvjStatus (*nvjpegGetProperty)(int, int *);
    sl_nvjStatus (*nvjpegCreateExV2)(int, sl_nvjDevAllocV2 *, sl_nvjPinnedAllocV2 *, unsigned, sl_nvjHandle *);
    sl_nvjStatus (*nvjpegDestroy)(sl_nvjHandle);
    sl_nvjStatus (*nvjpegSetDeviceMemoryPadding)(size_t, sl_nvjHandle);
    sl_nvjStatus (*nvjpegSetPinnedMemoryPadding)(size_t, sl_nvjHandle);
    sl_nvjStatus (*nvjpegJpegStateCreate)(sl_nvjHandle, sl_nvjState *);
    sl_nvjStatus (*nvjpegJpegStateDestroy)(sl_nvjState);
    sl_nvjStatus (*nvjpegJpegStreamCreate)(sl_nvjHandle, sl_nvjStream *);
    sl_nvjStatus (*nvjpegJpegStreamDestroy)(sl_nvjStream);
    sl_nvjStatus (*nvjpegJpegStreamParse)(sl_nvjHandle, const unsigned char *, size_t, int, int, sl_nvjStream);
    sl_nvjStatus (*nvjpegJpegStreamParseHeader)(sl_nvjHandle, const unsigned char *, size_t, sl_nvjStream);
    sl_nvjStatus (*nvjpegDecodeParamsCreate)(sl_nvjHandle, sl_nvjParams *);
    sl_nvjStatus (*nvjpegDecodeParamsDestroy)(sl_nvjParams);
    sl_nvjStatus (*nvjpegDecodeParamsSetOutputFormat)(sl_nvjParams, int);
    sl_nvjStatus (*nvjpegDecodeParamsSetROI)(sl_nvjParams, int, int, int, int);
    /* hardware batched decode */
    sl_nvjStatus (*nvjpegDecodeBatchedInitialize)(sl_nvjHandle, sl_nvjState, int, int, int);
    sl_nvjStatus (*nvjpegDecodeBatchedSupportedEx)(sl_nvjHandle, sl_nvjStream, sl_nvjParams, int *);
    sl_nvjStatus (*nvjpegDecodeBatchedEx)(sl_nvjHandle, sl_nvjState, const unsigned char *const *, const size_t *,
                                          sl_nvjImage *, sl_nvjParams *, sl_CUstream);
    sl_nvjStatus (*nvjpegDecodeBatchedPreAllocate)(sl_nvjHandle, sl_nvjState, int, int, int, int, int); /* optional */
    sl_nvjStatus (*nvjpegGetHardwareDecoderInfo)(sl_nvjHandle, unsigned *, unsigned *);               /* optional */
    /* decoupled decode (GPU hybrid backend) */
    sl_nvjStatus (*nvjpegDecoderCreate)(sl_nvjHandle, int, sl_nvjDecoder *);
    sl_nvjStatus (*nvjpegDecoderDestroy)(sl_nvjDecoder);
    sl_nvjStatus (*nvjpegDecoderJpegSupported)(sl_nvjDecoder, sl_nvjStream, sl_nvjParams, int *);
    sl_nvjStatus (*nvjpegDecoderStateCreate)(sl_nvjHandle, sl_nvjDecoder, sl_nvjState *);
    sl_nvjStatus (*nvjpegBufferPinnedCreateV2)(sl_nvjHandle, sl_nvjPinnedAllocV2 *, sl_nvjBufPinned *);
    sl_nvjStatus (*nvjpegBufferPinnedDestroy)(sl_nvjBufPinned);
    sl_nvjStatus (*nvjpegBufferDeviceCreateV2)(sl_nvjHandle, sl_nvjDevAllocV2 *, sl_nvjBufDevice *);
    sl_nvjStatus (*nvjpegBufferDeviceDestroy)(sl_nvjBufDevice);
    sl_nvjStatus (*nvjpegStateAttachPinnedBuffer)(sl_nvjState, sl_nvjBufPinned);
    sl_nvjStatus (*nvjpegStateAttachDeviceBuffer)(sl_nvjState, sl_nvjBufDevice);
    sl_nvjStatus (*nvjpegDecodeJpegHost)(sl_nvjHandle, sl_nvjDecoder, sl_nvjState, sl_nvjParams, sl_nvjStream);
    sl_nvjStatus (*nvjpegDecodeJpegTransferToDevice)(sl_nvjHandle, sl_nvjDecoder, sl_nvjState, sl_nvjStream,
                                                     sl_CUstream);
    sl_nvjStatus (*nvjpegDecodeJpegDevice)(sl_nvjHandle, sl_nvjDecoder, sl_nvjState, sl_nvjImage *, sl_CUstream);
    /* NVRTC (sl__cuda_nvrtc) */
    sl_nvrtcResult (*nvrtcVersion)(int *, int *);
    sl_nvrtcResult (*nvrtcCreateProgram)(sl_nvrtcProgram *, const char *, const char *, int, const char *const *,
                                         const char *const *);
    sl_nvrtcResult (*nvrtcDestroyProgram)(sl_nvrtcProgram *);
    sl_nvrtcResult (*nvrtcCompileProgram)(sl_nvrtcProgram, int, const char *const *);
    sl_nvrtcResult (*nvrtcGetProgramLogSize)(sl_nvrtcProgram, size_t *);
    sl_nvrtcResult (*nvrtcGetProgramLog)(sl_nvrtcProgram, char *);
    sl_nvrtcResult (*nvrtcGetCUBINSize)(sl_nvrtcProgram, size_t *); /* optional (11.1+) */
    sl_nvrtcResult (*nvrtcGetCUBIN)(sl_nvrtcProgram, char *);       /* optional (11.1+) */
    sl_nvrtcResult (*nvrtcGetPTXSize)(sl_nvrtcProgram, size_t *);
    sl_nvrtcResult (*nvrtcGetPTX)(sl_nvrtcProgram, char *);
    const char *(*nvrtcGetErrorString)(sl_nvrtcResult);

    int driver_version;           /* e.g. 13000 */
    int nvjpeg_version[3];        /* major, minor, patch */
    int nvrtc_version[2];         /* once sl__cuda_nvrtc loaded it */
    char paths[3][160];           /* where each library was found */
} sl__cuda_api;

/* The process-wide table, loaded on first use. NULL when CUDA cannot be
 * used here; then why (if not NULL) says what is missing, e.g. "libnvjpeg
 * not found (tried libnvjpeg.so.13, ...)". Thread-safe; the answer never
 * changes within a process. Directories in $SLUICE_CUDA_PATH (colon-
 * separated) are searched first, then the loader's paths, then CUDA_HOME,
 * /usr/local/cuda. Never fails for a GPU-less machine in any other way. */
const sl__cuda_api *sl__cuda_api_get(char *why, size_t len);
/* The same table with NVRTC's entry points bound, loading NVRTC on first
 * use (the same search); NULL with why when the driver or NVRTC cannot be
 * loaded. Thread-safe. */
const sl__cuda_api *sl__cuda_nvrtc(char *why, size_t len);

/* Device ordinal `device`'s primary context (the one PyTorch uses),
 * retained and made current on the calling thread; its name into name
 * (nlen bytes). 0, or SL_EUNSUPPORTED (no such device) / SL_EIO with err;
 * on failure *ctx is NULL and nothing is retained. The caller releases it
 * with cuDevicePrimaryCtxRelease(*dev). */
int sl__cu_primary(const sl__cuda_api *api, int device, sl_CUdevice *dev, sl_CUcontext *ctx, char *name, size_t nlen,
                   char *err, size_t errlen);

/* The current context's least stream priority (greatest 0: that of default
 * streams, 0) or its greatest (e.g. -5); 0 where the range cannot be read. */
int sl__cu_priority(const sl__cuda_api *api, int greatest);
/* The driver's description of a result, e.g. "out of memory" (never NULL). */
const char *sl__cu_errname(const sl__cuda_api *api, sl_CUresult r);
/* Name of an nvJPEG status (never NULL). */
const char *sl__nvj_errname(sl_nvjStatus s);

#endif
