/* Helpers shared by CLI subcommands. */
#ifndef SL_CLI_COMMON_H
#define SL_CLI_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Write s as a JSON string (quoted, escaped). */
void sl_cli_json_str(FILE *f, const char *s);
/* VmRSS / VmHWM of this process from /proc/self/status (0 if unknown). */
uint64_t sl_cli_rss_bytes(void);
uint64_t sl_cli_peak_rss_bytes(void);
/* Monotonic seconds. */
double sl_cli_now_s(void);
/* Read a whole small file (at most max bytes) into a NUL-terminated
 * malloc'd string; NULL with errno set (EFBIG when larger). */
char *sl_cli_read_text(const char *path, size_t max);

/* The --fields schema file's text (at most 1 MiB, malloc'd), or NULL with
 * "sluice CMD: --fields PATH: why" printed. */
char *sl_cli_read_fields(const char *cmd, const char *path);

#endif
