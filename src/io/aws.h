/*
 * AWS configuration (aws.c): credentials, region and endpoint the way the
 * AWS tools take them (environment, ~/.aws/credentials, ~/.aws/config,
 * AWS_PROFILE).
 */
#ifndef SL_IO_AWS_H
#define SL_IO_AWS_H

#include <stddef.h>

#include "base/mem.h"

/* What the AWS tools would use, found once when an engine starts:
 *  credentials  AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN),
 *               else the profile's aws_access_key_id / aws_secret_access_key
 *               (+ aws_session_token) in AWS_SHARED_CREDENTIALS_FILE
 *               (~/.aws/credentials), else in AWS_CONFIG_FILE (~/.aws/config);
 *               none: anonymous (unsigned requests, for public buckets)
 *  profile      AWS_PROFILE, else AWS_DEFAULT_PROFILE, else "default"
 *  region       AWS_REGION, else AWS_DEFAULT_REGION, else the profile's region
 *               in the config file, else us-east-1
 *  endpoint     AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL, else the profile's
 *               endpoint_url: then path-style requests (ENDPOINT/bucket/key),
 *               as MinIO, Ceph and moto need; else AWS's virtual-hosted
 *               https://bucket.s3.REGION.amazonaws.com/key
 * A profile named in AWS_PROFILE that neither file holds is an error (the
 * tools refuse it too), as is half a key pair. */
typedef struct sl__aws {
    char key_id[128], secret[256], token[2048];
    char region[64];
    char endpoint[512];   /* "" : AWS's own */
    char profile[128];
    char from[160];       /* where the credentials came from, for messages */
    int anonymous;        /* no credentials found */
    int path_style;       /* requests name the bucket in the path */
} sl__aws;

/* Fill a from the environment and the files (their text counted in b
 * under SL_MEM_IO while it is read). 0, or SL_EINVAL with a sentence (a
 * named profile missing, half a key pair, an endpoint that is not an
 * http(s) URL, a value too long), SL_EBUDGET. */
int sl__aws_load(sl__aws *a, sl__budget *b, char *err, size_t errlen);

/* The value of key in section [section] of an INI file's text[0, n) as the
 * AWS files write them ("key = value", '#' and ';' comments, sections
 * "[default]", "[profile name]", "[name]"): into out (len bytes). 1 found,
 * 0 not found, SL_EOVERFLOW (too long). has_section (may be NULL) is set
 * when the section exists. Exposed for tests and fuzzing. */
int sl__ini_get(const char *text, size_t n, const char *section, const char *key, char *out, size_t len,
                int *has_section);

#endif
