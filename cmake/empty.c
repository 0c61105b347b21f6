/* SPDX-License-Identifier: MIT */
/* empty.c - placeholder translation unit for a library whose sources do not exist yet. */
typedef int sema__empty_unit;
