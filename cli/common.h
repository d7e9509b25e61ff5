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
/* Parse v, the value of flag of `sluice cmd`, as a whole number in
 * [lo, hi] (no sign, no suffix). Returns 0 and sets *out, or -1 after
 * printing "sluice cmd: flag takes a whole number from lo to hi, not 'v'". */
int sl_cli_whole(const char *cmd, const char *flag, const char *v, uint64_t lo, uint64_t hi, uint64_t *out);

#endif
