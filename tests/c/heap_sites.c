/* heap_sites.c: heap_sites.cpp built as C (site_b then allocates with malloc). */
#include "heap_sites.cpp"
