/*
 * dtoa.c — see dtoa.h.
 */
#include "util/dtoa.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

size_t dtoa_g(double d, int min_prec, char buf[DTOA_G_SIZE])
{
    size_t len = 0;
    if (signbit(d))
        buf[len++] = '-';
    if (d == 0) {
        buf[len++] = '0';
        buf[len] = '\0';
        return len;
    }
    char digits[DTOA_DIGITS_MAX + 1];
    int point;
    int n = dtoa_shortest(d, digits, &point);
    /* %g's rule: with P significant digits and the value's exponent X (d = D.DDD times 10^X), the exponent form when
     * X < -4 or X >= P, else the plain one; trailing zeros and a bare point dropped either way. The shortest digits
     * need P = n; a larger min_prec only moves the switch to the exponent form. */
    int prec = n > min_prec ? n : min_prec, x = point - 1;
    if (x < -4 || x >= prec) {
        buf[len++] = digits[0];
        if (n > 1) {
            buf[len++] = '.';
            memcpy(buf + len, digits + 1, (size_t)n - 1);
            len += (size_t)n - 1;
        }
        buf[len++] = 'e';
        buf[len++] = x < 0 ? '-' : '+';
        int ax = x < 0 ? -x : x;
        if (ax >= 100)
            buf[len++] = (char)('0' + ax / 100);
        buf[len++] = (char)('0' + ax / 10 % 10);
        buf[len++] = (char)('0' + ax % 10);
    } else if (point <= 0) { /* 0.000DDD */
        buf[len++] = '0';
        buf[len++] = '.';
        memset(buf + len, '0', (size_t)-point);
        len += (size_t)-point;
        memcpy(buf + len, digits, (size_t)n);
        len += (size_t)n;
    } else if (point >= n) { /* DDD000: x < prec <= 17, so at most 17 characters */
        memcpy(buf + len, digits, (size_t)n);
        len += (size_t)n;
        memset(buf + len, '0', (size_t)(point - n));
        len += (size_t)(point - n);
    } else { /* DD.DDD */
        memcpy(buf + len, digits, (size_t)point);
        len += (size_t)point;
        buf[len++] = '.';
        memcpy(buf + len, digits + point, (size_t)(n - point));
        len += (size_t)(n - point);
    }
    buf[len] = '\0';
    return len;
}
