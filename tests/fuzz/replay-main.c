/*
 * replay-main.c - runs a fuzz target over files without libFuzzer.
 *
 * `make test` links every tests/fuzz/fuzz-*.c against this driver in the
 * ASan+UBSan build and feeds it the seed corpus and every crash input kept
 * under tests/fuzz/crashes/, so a fixed crash stays fixed. Arguments are
 * files or directories (read one level deep). Prints one line with the count.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return -1;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    /* An exact-size heap copy, so ASan catches a read one byte past the input. */
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    if (!buf || (n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n)) {
        fprintf(stderr, "replay: cannot read %s\n", path);
        fclose(f);
        free(buf);
        return -1;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, (size_t)n);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    int n_files = 0, n_bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0)
            continue; /* an absent crash folder is fine: nothing has crashed yet */
        if (!S_ISDIR(st.st_mode)) {
            n_bad += replay_file(argv[i]) != 0;
            n_files++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            /* Skip dot files and the folder's README.md: documentation, not input. */
            if (e->d_name[0] == '.' || strcmp(e->d_name, "README.md") == 0)
                continue;
            char path[4096];
            snprintf(path, sizeof(path), "%s/%s", argv[i], e->d_name);
            n_bad += replay_file(path) != 0;
            n_files++;
        }
        if (d)
            closedir(d);
    }
    printf("replayed %d inputs\n", n_files);
    return n_bad ? 1 : 0;
}
