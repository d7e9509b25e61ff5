/* Memory timeline SVG from a `sluice top --log` file. Private. */
#ifndef SL_MONITOR_SVG_H
#define SL_MONITOR_SVG_H

#include <stddef.h>
#include <stdio.h>

#include "base/mem.h"

/*
 * Read the JSON lines of log (one sl__top_json object a line; lines that
 * do not parse are skipped and counted in *skipped) and draw tree PSS,
 * usage, the effective limit, the warn line and GPU memory against time
 * into out. Memory comes from b. 0; SL_ENOENT / SL_EIO for the log;
 * SL_EEMPTY when no line holds a sample; SL_EBUDGET.
 */
int sl__svg_timeline(FILE *log, FILE *out, sl__budget *b, size_t *points, size_t *skipped);

#endif
