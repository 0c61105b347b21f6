/* SPDX-License-Identifier: MIT */
/* version.h - sema's version and the export macro every public header uses. */
#ifndef SEMA_VERSION_H
#define SEMA_VERSION_H

#define SEMA_VERSION_MAJOR 0
#define SEMA_VERSION_MINOR 1
#define SEMA_VERSION_PATCH 0
#define SEMA_VERSION_STRING "0.1.0"

#if defined(__GNUC__)
#define SEMA_EXTERN __attribute__((visibility("default")))
#else
#define SEMA_EXTERN
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The version of the linked library, e.g. "0.1.0". */
SEMA_EXTERN const char *sema_version(void);

#ifdef __cplusplus
}
#endif
#endif /* SEMA_VERSION_H */
