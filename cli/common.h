/* Helpers shared by CLI subcommands. */
#ifndef SL_CLI_COMMON_H
#define SL_CLI_COMMON_H

#include <stdint.h>
#include <stdio.h>

/* Write s as a JSON string (quoted, escaped). */
void sl_cli_json_str(FILE *f, const char *s);
/* VmRSS / VmHWM of this process from /proc/self/status (0 if unknown). */
uint64_t sl_cli_rss_bytes(void);
uint64_t sl_cli_peak_rss_bytes(void);

#endif
