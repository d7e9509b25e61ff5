/*
 * The loader tests' fixtures in one include (first, before any system
 * header: dataset.h defines _GNU_SOURCE):
 *   dataset.h   temporary ImageFolder trees of real JPEGs, files, folders
 *   run.h       a configuration, a loader, epochs recorded and compared,
 *               checksums, resume, a thread on the read side
 *   records.h   error records
 *   programs.h  the sluice CLI, python3 scripts, the fields demo data
 * Other concerns have their own header: check.h (cases and checks),
 * clock.h, files.h (file-backed samples, allocation failure in a source),
 * bigimg.h (large images, resident memory), cache_fixture.h, tarw.h,
 * webpw.h, video_fixture.h.
 */
#ifndef SL_FIXTURE_H
#define SL_FIXTURE_H

#include "dataset.h"
#include "programs.h"
#include "records.h"
#include "run.h"

#endif
