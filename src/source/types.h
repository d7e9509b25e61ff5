/*
 * What a source's users and its files share: the source handle, the kinds
 * of values a column holds, column requests, media kinds and an opened
 * sample file. The handle's insides are index.h's, private to src/source/.
 */
#ifndef SL_SOURCE_TYPES_H
#define SL_SOURCE_TYPES_H

#include <stdint.h>

#include "io/object.h"

typedef struct sl__source sl__source;

/* What a column holds for each sample. */
enum { SL__VAL_FILE = 1, SL__VAL_FILES, SL__VAL_INT, SL__VAL_NUMBERS };
enum { SL__COL_FILE = 0, SL__COL_LABEL = 1 };

/* A column request: the key (';' separates alternatives, the first present
 * wins) and the value type wanted. */
typedef struct sl__colreq {
    const char *key;
    int type;
    int media;   /* SL__MEDIA_*: a folder indexes this kind of file for a FILE request */
} sl__colreq;

/* What a folder source indexes: image files (torchvision's extensions) or
 * video files (.mp4 .avi .mkv .webm .mov). */
enum { SL__MEDIA_IMAGE = 0, SL__MEDIA_VIDEO = 1 };

/* An opened sample: bytes [offset, offset+size) of fd, or of the remote
 * object obj (fd -1): read them with sl__sample_read / sl__sample_pread,
 * which keep a local file's pread and make a remote one's ranged GETs. */
typedef struct sl__sample_file {
    int fd;
    uint64_t offset;
    uint64_t size;
    const sl__obj *obj; /* NULL: local */
    void *own;          /* what this open allocated for obj (sl__sample_close frees it) */
} sl__sample_file;

#endif
