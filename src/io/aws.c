/*
 * Credentials, region and endpoint as the AWS tools find them (aws.h).
 * Read once when an engine starts; the files are small text read into a
 * bounded stack buffer (a file over 64 KiB is read up to that: credentials
 * files never come near it).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "base/util.h"
#include "io/aws.h"
#include "io/url.h"

#define INI_MAX (64 << 10)

/* Trim blanks (and a CR) from [*s, *s + *n). */
static void trim(const char **s, size_t *n) {
    while (*n && (**s == ' ' || **s == '\t')) (*s)++, (*n)--;
    while (*n && ((*s)[*n - 1] == ' ' || (*s)[*n - 1] == '\t' || (*s)[*n - 1] == '\r')) (*n)--;
}

/* Does the header text h[0, n) (between the brackets) name section? The
 * config file writes "profile NAME" for every profile but "default"; the
 * credentials file writes NAME. Both are accepted in both files. */
static int section_is(const char *h, size_t n, const char *section) {
    trim(&h, &n);
    size_t sl = strlen(section);
    if (n == sl && !memcmp(h, section, sl)) return 1;
    if (n > 8 && !memcmp(h, "profile", 7) && (h[7] == ' ' || h[7] == '\t')) {
        const char *p = h + 8;
        size_t m = n - 8;
        trim(&p, &m);
        return m == sl && !memcmp(p, section, sl);
    }
    return 0;
}

int sl__ini_get(const char *text, size_t n, const char *section, const char *key, char *out, size_t len,
                int *has_section) {
    int in = 0, found = 0;
    size_t kl = strlen(key);
    if (has_section) *has_section = 0;
    for (size_t at = 0; at < n;) {
        const char *line = text + at;
        const char *nl = memchr(line, '\n', n - at);
        size_t ll = nl ? (size_t)(nl - line) : n - at;
        at += ll + (nl != NULL);
        trim(&line, &ll);
        if (ll == 0 || line[0] == '#' || line[0] == ';') continue;
        if (line[0] == '[') {
            const char *close = memchr(line, ']', ll);
            in = close && section_is(line + 1, (size_t)(close - line - 1), section);
            if (in && has_section) *has_section = 1;
            continue;
        }
        if (!in || (line[0] == ' ' || line[0] == '\t')) continue;
        const char *eq = memchr(line, '=', ll);
        if (!eq) continue;
        const char *k = line, *v = eq + 1;
        size_t kn = (size_t)(eq - line), vn = ll - kn - 1;
        trim(&k, &kn);
        trim(&v, &vn);
        if (kn != kl || strncasecmp(k, key, kl)) continue;
        if (vn >= len) return SL_EOVERFLOW;
        memcpy(out, v, vn);
        out[vn] = 0;
        found = 1; /* the last one wins, as in Python's configparser... which refuses duplicates; keep reading */
    }
    return found;
}

/* A file's text (at most INI_MAX bytes) into buf: its length, or -1 when
 * it cannot be read (missing is not an error: the tools skip it). */
static ssize_t read_file(const char *path, char *buf, size_t cap) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return -1;
    size_t got = 0;
    while (got < cap) {
        ssize_t r = read(fd, buf + got, cap - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    return (ssize_t)got;
}

/* The path of an AWS file: env, else ~/.aws/NAME. 0, or -1 (no home). */
static int aws_path(const char *env, const char *name, char *out, size_t len) {
    const char *p = getenv(env);
    if (p && *p) {
        if (p[0] == '~' && p[1] == '/' && getenv("HOME")) snprintf(out, len, "%s/%s", getenv("HOME"), p + 2);
        else snprintf(out, len, "%s", p);
        return 0;
    }
    const char *home = getenv("HOME");
    if (!home || !*home) return -1;
    snprintf(out, len, "%s/.aws/%s", home, name);
    return 0;
}

static int copy_env(const char *name, char *out, size_t len) {
    const char *v = getenv(name);
    if (!v || !*v) return 0;
    if (strlen(v) >= len) return SL_EOVERFLOW;
    memcpy(out, v, strlen(v) + 1);
    return 1;
}

static int load(sl__aws *a, char *ctext, char *ftext, char *err, size_t errlen);

int sl__aws_load(sl__aws *a, sl__budget *b, char *err, size_t errlen) {
    memset(a, 0, sizeof *a);
    /* both files' text, counted while they are read */
    char *ctext = sl__alloc(b, 2 * (size_t)INI_MAX, SL_MEM_IO), *ftext = ctext + INI_MAX;
    if (!ctext) {
        int rc = SL_EBUDGET;
        sl__msg(err, errlen, "no room in the budget to read the AWS configuration files (%d KiB)", 2 * INI_MAX >> 10);
        return rc;
    }
    int rc = load(a, ctext, ftext, err, errlen);
    sl__free(b, ctext);
    return rc;
}

static int load(sl__aws *a, char *ctext, char *ftext, char *err, size_t errlen) {
    const char *prof = getenv("AWS_PROFILE");
    int named = prof && *prof;
    if (!named) prof = getenv("AWS_DEFAULT_PROFILE");
    if (!prof || !*prof) prof = "default";
    else named = 1;
    if (strlen(prof) >= sizeof a->profile) {
        sl__msg(err, errlen, "AWS_PROFILE is longer than %zu bytes", sizeof a->profile - 1);
        return SL_EINVAL;
    }
    snprintf(a->profile, sizeof a->profile, "%s", prof);

    char cpath[512] = "", fpath[512] = "";
    ssize_t cn = aws_path("AWS_SHARED_CREDENTIALS_FILE", "credentials", cpath, sizeof cpath) ? -1
                                                                                             : read_file(cpath, ctext, INI_MAX);
    ssize_t fn = aws_path("AWS_CONFIG_FILE", "config", fpath, sizeof fpath) ? -1 : read_file(fpath, ftext, INI_MAX);
    int in_c = 0, in_f = 0, rc;
    char tmp[8];
    if (cn > 0) sl__ini_get(ctext, (size_t)cn, a->profile, "aws_access_key_id", tmp, 1, &in_c);
    if (fn > 0) sl__ini_get(ftext, (size_t)fn, a->profile, "region", tmp, 1, &in_f);
    if (named && !in_c && !in_f) {
        sl__msg(err, errlen, "AWS profile '%s' is in neither %s nor %s (set AWS_PROFILE to a profile they hold, or "
                "unset it)", a->profile, cpath[0] ? cpath : "~/.aws/credentials", fpath[0] ? fpath : "~/.aws/config");
        return SL_EINVAL;
    }

    /* credentials: the environment, then the credentials file, then the config file */
    int have_id = 0, have_secret = 0;
    if ((rc = copy_env("AWS_ACCESS_KEY_ID", a->key_id, sizeof a->key_id)) < 0) goto toolong;
    have_id = rc;
    if ((rc = copy_env("AWS_SECRET_ACCESS_KEY", a->secret, sizeof a->secret)) < 0) goto toolong;
    have_secret = rc;
    if (have_id || have_secret) {
        if (!have_id || !have_secret) {
            sl__msg(err, errlen, "AWS_%s is set but AWS_%s is not: set both, or neither (then ~/.aws/credentials "
                    "is read)", have_id ? "ACCESS_KEY_ID" : "SECRET_ACCESS_KEY",
                    have_id ? "SECRET_ACCESS_KEY" : "ACCESS_KEY_ID");
            return SL_EINVAL;
        }
        if ((rc = copy_env("AWS_SESSION_TOKEN", a->token, sizeof a->token)) < 0) goto toolong;
        snprintf(a->from, sizeof a->from, "AWS_ACCESS_KEY_ID in the environment");
    } else {
        const char *texts[2] = {cn > 0 ? ctext : NULL, fn > 0 ? ftext : NULL};
        size_t lens[2] = {cn > 0 ? (size_t)cn : 0, fn > 0 ? (size_t)fn : 0};
        const char *paths[2] = {cpath, fpath};
        for (int k = 0; k < 2 && !have_id; k++) {
            if (!texts[k]) continue;
            int i = sl__ini_get(texts[k], lens[k], a->profile, "aws_access_key_id", a->key_id, sizeof a->key_id, NULL);
            int s = sl__ini_get(texts[k], lens[k], a->profile, "aws_secret_access_key", a->secret, sizeof a->secret,
                                NULL);
            if (i < 0 || s < 0) goto toolong;
            if (i != s) {
                sl__msg(err, errlen, "%s: profile '%s' has aws_%s but no aws_%s", paths[k], a->profile,
                        i ? "access_key_id" : "secret_access_key", i ? "secret_access_key" : "access_key_id");
                return SL_EINVAL;
            }
            if (i) {
                have_id = 1;
                if (sl__ini_get(texts[k], lens[k], a->profile, "aws_session_token", a->token, sizeof a->token, NULL) < 0)
                    goto toolong;
                snprintf(a->from, sizeof a->from, "profile '%.60s' of %.80s", a->profile, paths[k]);
            }
        }
    }
    a->anonymous = !a->key_id[0];
    if (a->anonymous) snprintf(a->from, sizeof a->from, "none found (anonymous requests)");

    /* region */
    if ((rc = copy_env("AWS_REGION", a->region, sizeof a->region)) < 0) goto toolong;
    if (!rc && (rc = copy_env("AWS_DEFAULT_REGION", a->region, sizeof a->region)) < 0) goto toolong;
    if (!rc && fn > 0 && sl__ini_get(ftext, (size_t)fn, a->profile, "region", a->region, sizeof a->region, NULL) < 0)
        goto toolong;
    if (!a->region[0]) snprintf(a->region, sizeof a->region, "us-east-1");
    for (const char *p = a->region; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-')) {
            sl__msg(err, errlen, "AWS region '%s' is not a region name (like us-east-1)", a->region);
            return SL_EINVAL;
        }

    /* endpoint: a custom one means path-style requests */
    if ((rc = copy_env("AWS_ENDPOINT_URL_S3", a->endpoint, sizeof a->endpoint)) < 0) goto toolong;
    if (!rc && (rc = copy_env("AWS_ENDPOINT_URL", a->endpoint, sizeof a->endpoint)) < 0) goto toolong;
    if (!rc && fn > 0 &&
        sl__ini_get(ftext, (size_t)fn, a->profile, "endpoint_url", a->endpoint, sizeof a->endpoint, NULL) < 0)
        goto toolong;
    if (a->endpoint[0]) {
        int sch = sl__url_scheme(a->endpoint);
        sl__url u;
        if ((sch != SL__URL_HTTP && sch != SL__URL_HTTPS) || sl__url_parse(a->endpoint, &u, NULL, 0)) {
            sl__msg(err, errlen, "AWS endpoint '%.200s' is not an http:// or https:// URL (AWS_ENDPOINT_URL)",
                    a->endpoint);
            return SL_EINVAL;
        }
        size_t n = strlen(a->endpoint);
        while (n > 0 && a->endpoint[n - 1] == '/') a->endpoint[--n] = 0;
        a->path_style = 1;
    }
    return 0;
toolong:
    sl__msg(err, errlen, "an AWS setting (environment or ~/.aws file) is longer than sluice reads");
    return SL_EINVAL;
}
