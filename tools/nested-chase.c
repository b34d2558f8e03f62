// nested-chase: pointer chases that tell apart what a guest's 2 MB pages
// save under nested paging when the host maps the guest with 4 KB pages.
//
// Every chase is one random cycle over one line in each of N chosen 4 KB
// pages (the line's offset in its page rotates so the lines spread over
// the cache sets), timed by the thread's CPU time (time the process was
// off its CPU is not counted; what other processes did to the caches
// is), in ns per dependent load: for `split` and `pressure` the median
// of 7 runs of a layout in a row after one left out (`settled`), for the
// others the median of rounds with the layouts interleaved. Regions are anonymous memory touched page by
// page after madvise: MADV_NOHUGEPAGE gives guest 4 KB pages over the
// frames the guest's allocator hands out (scattered in guest-physical
// memory), MADV_HUGEPAGE guest 2 MB pages.
//
//   cc -O2 -o nested-chase tools/nested-chase.c
//   ./nested-chase regions      each group of four 2 MB pages of a 1 GiB
//                               THP region, all 2048 pages chased, against
//                               as many lines in 64 pages: a group the host
//                               backs with a 2 MB page fits the first TLB
//                               level and costs what the 64 pages cost
//   ./nested-chase tlb1         N = 32 .. 2048 consecutive pages in guest
//                               4 KB and in guest 2 MB pages: where the
//                               first-level TLB's misses start in each (a
//                               TLB that coalesces the 4 KB pieces of a
//                               guest 2 MB page reaches further)
//   ./nested-chase split        N = 4096 .. 32768 pages in guest 4 KB pages
//                               over scattered frames, in guest 4 KB pages
//                               over contiguous frames (a THP split into 4
//                               KB entries by mprotect of one page in each
//                               2 MB: same guest table shape, frames in
//                               order), in guest 2 MB pages, and as many
//                               lines packed in 2 MB pages (no walks)
//   ./nested-chase pressure N L N walked pages in layout L (4k, 2m or split)
//                               mixed into one cycle with M = 0 .. 48K
//                               lines packed in 2 MB pages, against as many
//                               lines all packed: what a walked page's load
//                               costs as other lines push the walk's lines
//                               out of the L2
//   ./nested-chase frames N R S N pages whose frames come from R THP blocks
//                               split into 4 KB entries, S frames apart in
//                               each (moved into place by mremap): R host
//                               page directory entries, and a line of host
//                               entries shared by 8 / S pages
//   ./nested-chase sizes [K]    guest 4 KB against guest 2 MB pages, every
//                               page of 16 MiB .. 1 GiB, K chases at once
//                               (1: dependent loads)
//
// Run it alone on a CPU where other work shares the machine (as root:
// chrt -f 50 taskset -c 1 ./nested-chase ...): the L2 then holds only its
// lines.
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define MB (1ul << 20)
#define REPS 7

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

// A 2 MB-aligned region of `bytes`, every page touched: guest 2 MB pages
// if `huge`, else guest 4 KB pages.
static char *region(size_t bytes, int huge) {
    char *p = mmap(0, bytes + 2 * MB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    p = (char *)(((uintptr_t)p + 2 * MB - 1) & ~(2 * MB - 1));
    if (madvise(p, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE)) {
        perror("madvise");
        exit(1);
    }
    for (size_t i = 0; i < bytes; i += 4096)
        p[i] = 1;
    return p;
}

// A THP region split into 4 KB entries over the same frames: one read-only
// page in each 2 MB (the chases only load).
static char *split_region(size_t bytes) {
    char *p = region(bytes, 1);
    for (size_t o = 0; o < bytes; o += 2 * MB)
        if (mprotect(p + o, 4096, PROT_READ)) {
            perror("mprotect");
            exit(1);
        }
    return p;
}

// kB of AnonHugePages in the mapping holding `p`.
static size_t anon_huge_kb(const char *p) {
    FILE *f = fopen("/proc/self/smaps", "r");
    char l[256];
    int in = 0;
    size_t kb = 0;
    uintptr_t lo, hi;
    while (f && fgets(l, sizeof l, f)) {
        if (sscanf(l, "%lx-%lx ", &lo, &hi) == 2 && l[strspn(l, "0123456789abcdef")] == '-')
            in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        else if (in && !strncmp(l, "AnonHugePages:", 14))
            kb = strtoul(l + 14, 0, 10);
    }
    if (f)
        fclose(f);
    return kb;
}

// Of the region's pages, how many have the frame after the previous one's
// (/proc/self/pagemap; as root, else frames read as 0).
static size_t frames_in_order(const char *p, size_t bytes) {
    FILE *f = fopen("/proc/self/pagemap", "rb");
    size_t n = 0;
    uint64_t prev = 0;
    for (size_t pg = 0; f && pg < bytes / 4096; pg++) {
        uint64_t e;
        if (fseek(f, ((uintptr_t)p / 4096 + pg) * 8, SEEK_SET) || fread(&e, 8, 1, f) != 1)
            break;
        uint64_t pfn = e & ((1ull << 55) - 1);
        n += pg > 0 && pfn != 0 && pfn == prev + 1;
        prev = pfn;
    }
    if (f)
        fclose(f);
    return n;
}

// The line of the i-th chased page `page` (the offset rotates with i).
static uint64_t line(size_t page, size_t i) {
    return (uint64_t)page * 4096 + ((i * 5 + (i >> 6) * 3) % 64) * 64;
}

// The i-th of a run of lines packed into whole pages from byte `at`.
static uint64_t packed(uint64_t at, size_t i) {
    return at + (uint64_t)(i / 64) * 4096 + (i % 64) * 64;
}

// k chases at once over one random cycle through the n lines `base +
// off[i]` (off may be negative, for lines of another region): ns a load.
static double chase(char *base, const int64_t *off, size_t n, size_t loads, int k) {
    size_t *perm = malloc(n * sizeof *perm);
    for (size_t i = 0; i < n; i++)
        perm[i] = i;
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = next() % (i + 1), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (size_t i = 0; i < n; i++)
        *(char **)(base + off[perm[i]]) = base + off[perm[(i + 1) % n]];
    char *p[16];
    for (int j = 0; j < k; j++)
        p[j] = base + off[perm[(j * n) / k]];
    free(perm);
    for (size_t i = 0; i < n && i < loads; i++)
        p[0] = *(char **)p[0];
    size_t steps = loads / k;
    double t = now();
    for (size_t i = 0; i < steps; i++)
        for (int j = 0; j < k; j++)
            p[j] = *(char **)p[j];
    t = now() - t;
    for (int j = 0; j < k; j++)
        if (!p[j])
            puts("");
    return 1e9 * t / (steps * k);
}

static double median(double *v, int n) {
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++)
            if (v[b] < v[a]) {
                double t = v[a];
                v[a] = v[b];
                v[b] = t;
            }
    return v[n / 2];
}

// A chase run REPS + 1 times in a row, the first left out: the median
// once the caches hold what the chase leaves in them. (A chase timed
// right after one over other pages costs more, by up to a memory access
// a load, for more than the first pass over its lines.)
static double settled(char *base, const int64_t *off, size_t n) {
    double v[REPS + 1];
    for (int k = 0; k <= REPS; k++)
        v[k] = chase(base, off, n, 600000, 1);
    return median(v + 1, REPS);
}

static void regions(void) {
    size_t bytes = 1024 * MB, n = 4 * 512;
    char *r = region(bytes, 1);
    printf("1 GiB THP region: %zu kB in 2 MB pages\n", anon_huge_kb(r));
    int64_t *off = malloc(n * sizeof *off);
    for (size_t i = 0; i < n; i++)
        off[i] = packed(0, (i % 64) * 64 + i / 64) ;
    double v[REPS];
    for (int k = 0; k < REPS; k++)
        v[k] = chase(r, off, n, 1000000, 1);
    printf("%zu lines in 64 pages: %.2f ns\ngroup of four 2 MB pages: ns a load\n", n, median(v, REPS));
    for (size_t g = 0; g < 512; g += 4) {
        for (size_t i = 0; i < n; i++)
            off[i] = line(g * 512 + i, i);
        for (int k = 0; k < 3; k++)
            v[k] = chase(r, off, n, 1000000, 1);
        printf("%zu\t%.2f\n", g / 4, median(v, 3));
        fflush(stdout);
    }
}

static void tlb1(void) {
    size_t bytes = 64 * MB, ns[] = {32, 48, 64, 72, 80, 96, 128, 192, 256, 384, 512, 1024, 2048};
    char *r[2] = {region(bytes, 0), region(bytes, 1)};
    int64_t off[2048];
    printf("pages\tguest 4K\tguest 2M (ns a load)\n");
    for (size_t a = 0; a < sizeof ns / sizeof *ns; a++) {
        double v[2][REPS];
        for (size_t i = 0; i < ns[a]; i++)
            off[i] = line(i, i);
        for (int k = 0; k < REPS; k++)
            for (int h = 0; h < 2; h++)
                v[h][k] = chase(r[h], off, ns[a], 500000, 1);
        printf("%zu\t%.2f\t%.2f\n", ns[a], median(v[0], REPS), median(v[1], REPS));
        fflush(stdout);
    }
}

static void split(void) {
    size_t bytes = 256 * MB, ns[] = {4096, 8192, 10240, 12288, 16384, 32768};
    char *r[3] = {region(bytes, 0), split_region(bytes), region(bytes, 1)};
    printf("split region: %zu kB in 2 MB pages, %zu of %zu pages on the frame after the previous page's\n", anon_huge_kb(r[1] + 4096), frames_in_order(r[1], bytes), bytes / 4096 - 1);
    int64_t *off = malloc(32768 * sizeof *off), *pk = malloc(32768 * sizeof *pk);
    printf("pages\t4K scattered\t4K contiguous\t2M\tpacked (ns a load)\n");
    for (size_t a = 0; a < sizeof ns / sizeof *ns; a++) {
        size_t n = ns[a];
        for (size_t i = 0; i < n; i++) {
            off[i] = line(i + i / 511 + 1, i);
            pk[i] = packed(128 * MB, i);
        }
        printf("%zu", n);
        for (int h = 0; h < 4; h++)
            printf("\t%.1f", settled(h < 3 ? r[h] : r[2], h < 3 ? off : pk, n));
        printf("\n");
        fflush(stdout);
    }
}

static void pressure(size_t n, const char *layout) {
    size_t bytes = 256 * MB, ms[] = {0, 2048, 4096, 8192, 16384, 32768, 49152};
    char *w = !strcmp(layout, "split") ? split_region(bytes) : region(bytes, !strcmp(layout, "2m"));
    char *d = region(bytes, 1);
    int64_t at = d - w, *off = malloc((n + 49152) * sizeof *off), *pk = malloc((n + 49152) * sizeof *pk);
    printf("%zu walked pages (%s) with M packed lines\nM\tmixed\tall packed\ta walked page's load over a packed one (ns)\n", n, layout);
    for (size_t a = 0; a < sizeof ms / sizeof *ms; a++) {
        size_t t = n + ms[a];
        for (size_t i = 0; i < t; i++) {
            off[i] = i < n ? (int64_t)line(i + i / 511 + 1, i) : at + (int64_t)packed(0, i);
            pk[i] = at + (int64_t)packed(0, i);
        }
        double mixed = settled(w, off, t), all = settled(w, pk, t);
        printf("%zu\t%.2f\t%.2f\t%.1f\n", ms[a], mixed, all, (mixed - all) * t / n);
        fflush(stdout);
    }
}

static void frames(size_t n, size_t r, size_t stride) {
    if (r == 0 || stride == 0 || (n / r - 1) * stride >= 511) {
        fprintf(stderr, "frames: %zu pages from %zu blocks %zu apart do not fit 511 pages a block\n", n, r, stride);
        exit(2);
    }
    char *src = split_region(r * 2 * MB);
    char *dst = mmap(0, n * 4096 + 2 * MB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    dst = (char *)(((uintptr_t)dst + 2 * MB - 1) & ~(2 * MB - 1));
    for (size_t k = 0; k < n; k++) {
        // Page k: block k % r, frame (k / r) * stride + 1 (frame 0 is the read-only one).
        char *from = src + (k % r) * 2 * MB + ((k / r) * stride + 1) * 4096;
        if (mremap(from, 4096, 4096, MREMAP_MAYMOVE | MREMAP_FIXED, dst + k * 4096) == MAP_FAILED) {
            perror("mremap");
            exit(1);
        }
    }
    int64_t *off = malloc(n * sizeof *off);
    for (size_t i = 0; i < n; i++)
        off[i] = line(i, i);
    printf("%zu pages from %zu blocks, %zu apart: %.1f ns a load\n", n, r, stride, settled(dst, off, n));
}

static void sizes(int k) {
    size_t mbs[] = {16, 32, 64, 128, 256, 512, 1024};
    char *r[2] = {region(1024 * MB, 0), region(1024 * MB, 1)};
    int64_t *off = malloc(1024 * MB / 4096 * sizeof *off);
    printf("MiB\tguest 4K\tguest 2M\tratio (ns a load, %d chase%s)\n", k, k > 1 ? "s" : "");
    for (size_t a = 0; a < sizeof mbs / sizeof *mbs; a++) {
        size_t n = mbs[a] * MB / 4096;
        for (size_t i = 0; i < n; i++)
            off[i] = line(i, i);
        double v[2][5];
        for (int j = 0; j < 5; j++)
            for (int h = 0; h < 2; h++)
                v[h][j] = chase(r[h], off, n, 1000000 * (k > 1 ? 2 : 1), k);
        double g4 = median(v[0], 5), g2 = median(v[1], 5);
        printf("%zu\t%.1f\t%.1f\t%.3f\n", mbs[a], g4, g2, g4 / g2);
        fflush(stdout);
    }
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "regions"))
        regions();
    else if (!strcmp(mode, "tlb1"))
        tlb1();
    else if (!strcmp(mode, "split"))
        split();
    else if (!strcmp(mode, "pressure") && argc > 3)
        pressure(strtoul(argv[2], 0, 10), argv[3]);
    else if (!strcmp(mode, "frames") && argc > 4)
        frames(strtoul(argv[2], 0, 10), strtoul(argv[3], 0, 10), strtoul(argv[4], 0, 10));
    else if (!strcmp(mode, "sizes"))
        sizes(argc > 2 ? atoi(argv[2]) : 1);
    else {
        fprintf(stderr, "usage: %s regions | tlb1 | split | pressure N 4k|2m|split | frames N R S | sizes [K]\n", argv[0]);
        return 2;
    }
    return 0;
}
