/* Pressure stall information (/proc/pressure/memory, cgroup memory.pressure). Private. */
#ifndef SL_SYS_PSI_H
#define SL_SYS_PSI_H

#include <stddef.h>
#include <stdint.h>

typedef struct sl__psi_line {
    int present;
    double avg10, avg60, avg300; /* percent of wall time stalled */
    uint64_t total_us;           /* cumulative stall time */
} sl__psi_line;

typedef struct sl__psi {
    sl__psi_line some, full;
} sl__psi;

/* Parse "some avg10=0.00 avg60=0.00 avg300=0.00 total=0" and the "full"
 * line. 0, or SL_EPARSE when no "some" line is present (the full line
 * is absent on old kernels for cpu; optional here too). */
int sl__psi_parse(const char *text, size_t len, sl__psi *out);

#endif
