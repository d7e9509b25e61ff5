#include "common.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void sl_cli_json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (*p < 0x20) fprintf(f, "\\u%04x", *p);
            else fputc(*p, f);
        }
    }
    fputc('"', f);
}

static uint64_t status_kb(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    uint64_t v = 0;
    size_t n = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, n) && line[n] == ':') {
            unsigned long long kb;
            if (sscanf(line + n + 1, "%llu", &kb) == 1) v = kb * 1024;
            break;
        }
    fclose(f);
    return v;
}

uint64_t sl_cli_rss_bytes(void) { return status_kb("VmRSS"); }
uint64_t sl_cli_peak_rss_bytes(void) { return status_kb("VmHWM"); }

int sl_cli_whole(const char *cmd, const char *flag, const char *v, uint64_t lo, uint64_t hi, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (v[0] < '0' || v[0] > '9' || *end || errno == ERANGE || x < lo || x > hi) {
        fprintf(stderr, "sluice %s: %s takes a whole number from %llu to %llu, not '%s'\n", cmd, flag,
                (unsigned long long)lo, (unsigned long long)hi, v);
        return -1;
    }
    *out = x;
    return 0;
}
