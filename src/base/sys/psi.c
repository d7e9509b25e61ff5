/* PSI parser. See psi.h. */
#include "base/sys/psi.h"

#include <stdlib.h>
#include <string.h>

#include "base/sys/text.h"
#include "sluice.h"

static int parse_line(const char *s, sl__psi_line *l) {
    memset(l, 0, sizeof *l);
    int seen = 0;
    while (*s) {
        while (*s == ' ' || *s == '\t') s++;
        const char *eq = strchr(s, '=');
        if (!eq) break;
        size_t kl = (size_t)(eq - s);
        char *end;
        if (kl == 5 && !strncmp(s, "avg10", 5)) l->avg10 = strtod(eq + 1, &end), seen |= 1;
        else if (kl == 5 && !strncmp(s, "avg60", 5)) l->avg60 = strtod(eq + 1, &end), seen |= 2;
        else if (kl == 6 && !strncmp(s, "avg300", 6)) l->avg300 = strtod(eq + 1, &end), seen |= 4;
        else if (kl == 5 && !strncmp(s, "total", 5)) l->total_us = strtoull(eq + 1, &end, 10), seen |= 8;
        else end = (char *)eq + 1;
        s = end;
        while (*s && *s != ' ') s++;
    }
    l->present = (seen & 1) != 0; /* avg10 is the one `top` shows */
    return l->present ? 0 : SL_EPARSE;
}

int sl__psi_parse(const char *text, size_t len, sl__psi *out) {
    memset(out, 0, sizeof *out);
    char line[256];
    size_t pos = 0;
    while (sl__next_line(text, len, &pos, line, sizeof line)) {
        if (!strncmp(line, "some ", 5)) parse_line(line + 5, &out->some);
        else if (!strncmp(line, "full ", 5)) parse_line(line + 5, &out->full);
    }
    return out->some.present ? 0 : SL_EPARSE;
}
