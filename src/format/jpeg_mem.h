/*
 * libjpeg's memory manager, replaced: every allocation of an image (the
 * JPOOL_IMAGE pool: module state, strip buffers, the whole-image
 * coefficient arrays of progressive and multi-scan files) comes from the
 * sample's quota, so from the worker's decode arena, and is refused past
 * its cap with libjpeg's own out-of-memory error. Virtual arrays are kept
 * in memory whole, as jmemnobs.c does: no backing store, no temporary
 * files.
 *
 * The permanent pool (Huffman and quantization tables, the source
 * manager, the marker reader: allocated once for the life of the decoder,
 * a few KiB) stays with libjpeg's own manager, to which those calls are
 * forwarded; it is part of SL_DECODER_SELF.
 *
 * Ownership: sl__jpeg_mm lives inside the decoder object; install it once
 * after jpeg_create_decompress, bind a quota for each decode, unbind after
 * jpeg_abort/jpeg_finish (which free the image pool).
 */
#ifndef SL_JPEG_MEM_H
#define SL_JPEG_MEM_H

#include <stdio.h> /* jpeglib.h needs FILE and size_t first */

#include <jpeglib.h>

#include "format/decode.h"

typedef struct sl__jpeg_block sl__jpeg_block;

typedef struct sl__jpeg_mm {
    struct jpeg_memory_mgr pub;   /* first: cinfo->mem points here */
    struct jpeg_memory_mgr *orig; /* libjpeg's own manager: the permanent pool */
    sl__quota *q;                 /* the decode running now; NULL between decodes */
    sl__jpeg_block *blocks;       /* image-pool blocks, newest first */
    uint8_t *small;               /* current small-object chunk: next free byte */
    size_t small_left;            /* bytes left in it */
    struct jvirt_sarray_control *vs; /* virtual arrays requested for the image */
    struct jvirt_barray_control *vb;
} sl__jpeg_mm;

/* Take over cinfo's memory manager (after jpeg_create_decompress). Cannot
 * fail. */
void sl__jpeg_mm_install(sl__jpeg_mm *m, j_common_ptr cinfo);
/* Image-pool allocations draw on q until unbind. */
void sl__jpeg_mm_bind(sl__jpeg_mm *m, j_common_ptr cinfo, sl__quota *q);
/* Make cinfo->mem ours again (a longjmp out of a forwarded call can leave
 * libjpeg's there), free what is left of the image pool, forget q. */
void sl__jpeg_mm_unbind(sl__jpeg_mm *m, j_common_ptr cinfo);

#endif
