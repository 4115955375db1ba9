/*
 * libaenv-compact-mmap.so: linked into the sandbox's copy of node (patchelf --add-needed, first in the
 * search order), it makes the kernel place every anonymous mapping that did not ask for a fixed address.
 *
 * Why: V8 asks for each 256 KB heap page at a random hint address anywhere in 64 TB. Every such page then
 * sits alone under its own page-table pages (PUD, PMD and PTE: 12 KB of kernel memory per 256 KB page),
 * which is ≈ 0.45 MB of page tables per idle envd, charged to the sandbox's memory cgroup. Placed by the
 * kernel, the pages land next to each other and share their page tables. V8 only needs the alignment it
 * asks for, which it gets by over-allocating and trimming whatever address comes back.
 *
 * File mappings and MAP_FIXED / MAP_FIXED_NOREPLACE requests keep their address. Only this node binary
 * links the library: commands that envd starts never load it (no LD_PRELOAD in any environment).
 */
#define _GNU_SOURCE
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
  if ((flags & MAP_ANONYMOUS) && !(flags & (MAP_FIXED | MAP_FIXED_NOREPLACE))) addr = NULL;
  /* syscall() returns -1 with errno set on failure, which is MAP_FAILED. */
  return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off) __attribute__((alias("mmap")));
