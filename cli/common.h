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
 * malloc'd string; NULL with errno set (EFBIG when larger, EINVAL when not
 * a regular file). */
char *sl_cli_read_text(const char *path, size_t max);

/* Open path for reading without ever blocking (O_NONBLOCK | O_NOCTTY: a
 * FIFO or a terminal named like an image must not hang the command) and
 * accept only a regular file of at most max bytes, checked before anything
 * is read or allocated (`sluice decode /dev/zero` must not read until
 * memory runs out). 0 with *fd (the caller closes it) and *size, or a code
 * (SL_ENOENT, SL_EIO for what is not a regular file, SL_ELIMIT) and a
 * sentence in err. */
int sl_cli_open_file(const char *path, uint64_t max, int *fd, uint64_t *size, char *err, size_t errlen);
/* Read all size bytes of fd into buf: 0 or SL_EIO with a sentence. */
int sl_cli_read_fd(int fd, void *buf, uint64_t size, char *err, size_t errlen);
/* Both, into a malloc'd buffer (*data, freed by the caller). */
int sl_cli_read_file(const char *path, uint64_t max, unsigned char **data, size_t *len, char *err, size_t errlen);

/* Open path for reading without ever blocking (O_NONBLOCK | O_NOCTTY: a
 * FIFO or a terminal named like an image must not hang the command) and
 * accept only a regular file of at most max bytes, checked before anything
 * is read or allocated (`sluice decode /dev/zero` must not read until
 * memory runs out). 0 with *fd (the caller closes it) and *size, or a code
 * (SL_ENOENT, SL_EIO for what is not a regular file, SL_ELIMIT) and a
 * sentence in err. */
int sl_cli_open_file(const char *path, uint64_t max, int *fd, uint64_t *size, char *err, size_t errlen);
/* Read all size bytes of fd into buf: 0 or SL_EIO with a sentence. */
int sl_cli_read_fd(int fd, void *buf, uint64_t size, char *err, size_t errlen);
/* Both, into a malloc'd buffer (*data, freed by the caller). */
int sl_cli_read_file(const char *path, uint64_t max, unsigned char **data, size_t *len, char *err, size_t errlen);
/* Parse v, the value of flag of `sluice cmd`, as a whole number in
 * [lo, hi] (no sign, no suffix). Returns 0 and sets *out, or -1 after
 * printing "sluice cmd: flag takes a whole number from lo to hi, not 'v'". */
int sl_cli_whole(const char *cmd, const char *flag, const char *v, uint64_t lo, uint64_t hi, uint64_t *out);

/* The --fields schema file's text (at most 1 MiB, malloc'd), or NULL with
 * "sluice CMD: --fields PATH: why" printed. */
char *sl_cli_read_fields(const char *cmd, const char *path);

#endif
