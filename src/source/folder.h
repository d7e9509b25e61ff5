/*
 * Folder sources (folder.c): the ImageFolder layout, indexed by a pool of
 * threads into one chunk per class.
 */
#ifndef SL_SOURCE_FOLDER_H
#define SL_SOURCE_FOLDER_H

#include <stddef.h>
#include <stdint.h>

#include "source/index.h"

/* Index the folder at root into s (s->b set, base not yet) with up to
 * threads threads. On failure s holds whatever was built;
 * sl__source_close frees it. */
int sl__folder_index(sl__source *s, const char *root, uint32_t threads, char *err, size_t errlen);

/* 1 when name (n bytes) ends, in any case, in one of media's extensions. */
int sl__folder_ext_match(const char *name, size_t n, int media);

#endif
