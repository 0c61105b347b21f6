/* SPDX-License-Identifier: MIT */
/* sema.h - the umbrella header of libsema: include this one. */
#ifndef SEMA_SEMA_H
#define SEMA_SEMA_H

#include "sema/version.h"
#include "sema/error.h"
#include "sema/alloc.h"
#if __has_include("sema/sem.h")
#include "sema/sem.h"
#endif
#if __has_include("sema/keyed.h")
#include "sema/keyed.h"
#endif
#if __has_include("sema/map_limit.h")
#include "sema/map_limit.h"
#endif
#if __has_include("sema/shm.h")
#include "sema/shm.h"
#endif

#endif /* SEMA_SEMA_H */
