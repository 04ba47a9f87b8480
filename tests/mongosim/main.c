/* main.c — mongosim entry point (placeholder until the server lands). */
#include <stdio.h>
int main(void)
{
    fprintf(stderr, "mongosim: not built yet\n");
    return 1;
}
