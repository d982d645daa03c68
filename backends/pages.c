/* Memory below the fault seam on POSIX (pages.h). */
#include <stdlib.h>
#include <sys/mman.h>

#include "pages.h"

void *tern__pages_lazy(size_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void tern__pages_free(void *p, size_t size)
{
    munmap(p, size);
}

void *tern__aligned_alloc(size_t align, size_t size)
{
    return aligned_alloc(align, size);
}

void tern__free_aligned(void *p)
{
    free(p);
}
