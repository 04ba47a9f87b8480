/*
 * dtoa_digits.cc — dtoa_shortest (util/dtoa.h) on libdouble-conversion, whose interface is C++. The rest of
 * util/dtoa is C (dtoa.c); this file only crosses the language line.
 */
#include "util/dtoa.h"

#include <double-conversion/double-to-string.h>

int dtoa_shortest(double d, char digits[DTOA_DIGITS_MAX + 1], int *point)
{
    using double_conversion::DoubleToStringConverter;
    bool negative = false;
    int length = 0;
    DoubleToStringConverter::DoubleToAscii(d, DoubleToStringConverter::SHORTEST, 0, digits, DTOA_DIGITS_MAX + 1,
                                           &negative, &length, point);
    return length;
}
