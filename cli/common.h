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

/* Parse v, the value of flag of `sluice cmd`, as a whole number in
 * [lo, hi] (no sign, no suffix). Returns 0 and sets *out, or -1 after
 * printing "sluice cmd: flag takes a whole number from lo to hi, not 'v'". */
int sl_cli_whole(const char *cmd, const char *flag, const char *v, uint64_t lo, uint64_t hi, uint64_t *out);

/* The --fields schema file's text (at most 1 MiB, malloc'd), or NULL with
 * "sluice CMD: --fields PATH: why" printed. */
char *sl_cli_read_fields(const char *cmd, const char *path);

/* Why a library call failed with code rc, into buf (len bytes; returned),
 * the reason said once: err is the library's sentence (it names what failed
 * and why: "/data: no such file or folder"); the code's own words
 * (sl_strerror) go before it only when it does not say them already, and
 * alone when there is no sentence. */
const char *sl_cli_reason(int rc, const char *err, char *buf, size_t len);
/* The same on stderr, as "sluice cmd: REASON". */
void sl_cli_error(const char *cmd, int rc, const char *err);

/* An option `sluice cmd` does not know: prints "sluice cmd: unknown option
 * FLAG" and, where one is close, the option meant: for a DataLoader name the
 * sluice flag that does its job ("--batchsize: did you mean --batch?",
 * "--shuffle: sluice shuffles by default ..."), else the known flag nearest by
 * edit distance. known and more (may be NULL) are the command's flags,
 * NULL-terminated. */
void sl_cli_unknown_flag(const char *cmd, const char *flag, const char *const *known, const char *const *more);
/* Is flag in known or more (NULL-terminated; more may be NULL)? */
int sl_cli_flag_known(const char *flag, const char *const *known, const char *const *more);

/* Of the NULL-terminated lists cands and more (may be NULL), the word
 * closest to word by edit distance (an adjacent swap is one edit; case and
 * '_' for '-' ignored), when it is close: at most 2 edits, or a third of
 * word's length; else the one candidate word is the beginning of. NULL when
 * none is. */
const char *sl_cli_closest(const char *word, const char *const *cands, const char *const *more);

/* dir and name joined by one '/' into buf (len bytes): "shards/" and
 * "shards" both give "shards/NAME", "/" gives "/NAME". 0, or -1 when it does
 * not fit. */
int sl_cli_path_join(char *buf, size_t len, const char *dir, const char *name);

#endif
