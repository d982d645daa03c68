/*
 * fuzz_replay: the API fuzzer's harness (test/fuzz/fuzz_api.c) run without
 * libFuzzer, so the ordinary suite replays it under gcc, ASan+UBSan,
 * ThreadSanitizer and valgrind: every input of the committed corpus
 * (test/fuzz/corpus), then RANDOM_INPUTS inputs drawn from a seed
 * (TERN_SEED, default 0xf022ed). A broken invariant aborts with a message
 * naming it; the harness's watchdog (stress.h) bounds the whole replay.
 *
 * Usage: fuzz_replay [corpus-dir-or-file ...]. Without arguments it finds
 * the corpus from this file's path as the compiler saw it (relative to the
 * build directory, which is two levels above the executable).
 */
#define FUZZ_REPLAY_MAIN
#include "../fuzz/fuzz_api.c"

#include <dirent.h>
#include <libgen.h>
#include <limits.h>
#include <sys/stat.h>

#include "stress.h"

#define REPLAY_SEED UINT64_C(0xf022ed)
#define RANDOM_INPUTS 200

static unsigned replayed;

static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * UINT64_C(2685821657736338717);
}

static void replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        printf("cannot open %s\n", path);
        exit(1);
    }
    uint8_t buf[4096];
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    LLVMFuzzerTestOneInput(buf, n);
    replayed++;
}

static unsigned replay_path(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return 0;
    if (!S_ISDIR(st.st_mode)) {
        replay_file(path);
        return 1;
    }
    DIR *d = opendir(path);
    struct dirent *e;
    unsigned n = 0;
    while (d != NULL && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char full[PATH_MAX];
        snprintf(full, sizeof(full), "%s/%s", path, e->d_name);
        replay_file(full);
        n++;
    }
    if (d != NULL)
        closedir(d);
    return n;
}

/* The corpus beside this source file, wherever the build directory is. */
static unsigned replay_default_corpus(void)
{
    char src[PATH_MAX], path[PATH_MAX];
    snprintf(src, sizeof(src), "%s", __FILE__);
    const char *dir = dirname(src);
    if (dir[0] == '/') {
        snprintf(path, sizeof(path), "%s/../fuzz/corpus", dir);
        return replay_path(path);
    }
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (len <= 0)
        return 0;
    exe[len] = '\0';
    char *build = dirname(dirname(exe)); /* <build>/test/fuzz_replay */
    snprintf(path, sizeof(path), "%s/%s/../fuzz/corpus", build, dir);
    return replay_path(path);
}

int main(int argc, char **argv)
{
    stress_init("fuzz_replay", REPLAY_SEED);
    stress_phase("the corpus and the random inputs replay", 300 * STRESS_SEC);
    int fake_argc = 1;
    char **fake_argv = argv;
    LLVMFuzzerInitialize(&fake_argc, &fake_argv);
    unsigned corpus = 0;
    for (int i = 1; i < argc; i++)
        corpus += replay_path(argv[i]);
    if (argc == 1)
        corpus = replay_default_corpus();
    if (corpus == 0) {
        printf("fuzz_replay: no corpus found\n0 passed, 1 failed\n");
        return 1;
    }
    uint64_t rng = stress_run_seed;
    uint8_t buf[512];
    for (unsigned i = 0; i < RANDOM_INPUTS; i++) {
        size_t n = 16 + (size_t)(rng_next(&rng) % (sizeof(buf) - 16));
        for (size_t k = 0; k < n; k++)
            buf[k] = (uint8_t)rng_next(&rng);
        LLVMFuzzerTestOneInput(buf, n);
        replayed++;
    }
    foreign_quit();
    tern_pool_shutdown(TERN_POOL_DRAIN, UINT64_C(30) * 1000000000u);
    stress_phase_end();
    printf("fuzz_replay: %u corpus inputs and %u random inputs (seed 0x%" PRIx64
           "), every invariant held\n", corpus, RANDOM_INPUTS, stress_run_seed);
    printf("fuzz_replay: admission reached: %u owners opened, %u closed; %u owned requests "
           "accepted, %u refused for the owner's cap; %u with a timeout accepted, %u ended "
           "-ETIMEDOUT\n", adm_seen.owners, adm_seen.closes, adm_seen.owned_accepted,
           adm_seen.owner_cap_refusals, adm_seen.timed_accepted, adm_seen.timed_out);
    printf("fuzz_replay: extended steps reached:");
#define EXTENDED_STEP_NAME(fn) #fn,
    static const char *const names[] = {EXTENDED_STEPS(EXTENDED_STEP_NAME)};
#undef EXTENDED_STEP_NAME
    for (size_t k = 0; k < EXTENDED_COUNT; k++)
        printf(" %s %u", names[k] + 5, extended_seen[k]);
    printf("\n%u passed, 0 failed\n", replayed);
    return 0;
}
