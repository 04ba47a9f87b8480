/*
 * dtoa.h — doubles as the shortest decimal text that reads back as the same double.
 *
 * JSON, Prometheus and text columns all want a double written with no more digits than it needs (0.1 as 0.1, not
 * 0.1000000000000000055511151231257827). Finding those digits is the costly part: printf at 15, 16 and 17 digits, each
 * read back with strtod, took 44% of the copy's reading thread on documents of random doubles (docs/benchmarks.md,
 * "Doubles in their fewest digits"). libdouble-conversion finds them directly; dtoa_shortest is a thin C face on it
 * (src/util/dtoa_digits.cc, the project's only C++) and dtoa_g writes them the way printf's %g would.
 */
#ifndef OPLOG2PG_UTIL_DTOA_H
#define OPLOG2PG_UTIL_DTOA_H

#include <stddef.h>

/* The most significant digits a double ever needs to read back as itself. */
#define DTOA_DIGITS_MAX 17

/* Room for any dtoa_g text and its NUL: a sign, 17 digits, a point, "e-308", or 0.000 and 17 digits. */
#define DTOA_G_SIZE 32

#ifdef __cplusplus
extern "C" {
#endif

/* d finite: the fewest significant decimal digits that read back as d (the closest such decimal to d, a tie going
 * away from zero), without sign, leading or trailing zeros, NUL-terminated in digits; *point places the decimal
 * point: |d| reads as 0.DIGITS times 10^point. Zero gives "0" and point 1. Returns the number of digits (1 to 17). */
int dtoa_shortest(double d, char digits[DTOA_DIGITS_MAX + 1], int *point);

#ifdef __cplusplus
}
#endif

/* d finite: the text printf("%.*g", p, d) writes for the smallest p >= min_prec (1 to 17) at which that text reads
 * back as d: at min_prec 15, the shortest of %.15g, %.16g and %.17g. The digits are dtoa_shortest's, so no printf
 * or strtod runs, and they are never more than printf's: below the normal range, where %.15g keeps digits the double
 * does not have, and at some powers of two, where a digit fewer than printf's closest still reads back, they are
 * fewer (5e-324, not 4.94065645841247e-324). buf holds DTOA_G_SIZE bytes; the text is NUL-terminated; returns its
 * length. */
size_t dtoa_g(double d, int min_prec, char buf[DTOA_G_SIZE]);

#endif
