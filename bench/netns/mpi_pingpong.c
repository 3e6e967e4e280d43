/*
 * mpi_pingpong.c - tiny MPI_Allreduce bandwidth probe for mpirun_shaped.sh.
 *
 * Times MPI_Allreduce(SUM) of a float buffer (default 4 MiB) a few times and
 * prints, on rank 0, the median/min time and the "bus bandwidth" in Mbit/s
 * using the ring model:  busbw = 2*(p-1)/p * bytes * 8 / t.
 * With one rank per tbf-shaped link this should land close to the tbf rate.
 *
 * Build (binary goes to /tmp, never committed):
 *   mpicc -O2 -o /tmp/mpi_pingpong bench/netns/mpi_pingpong.c
 * Usage:
 *   mpi_pingpong [MiB=4] [reps=5] [gap_s=0]
 * gap_s: seconds every rank sleeps before each timed all-reduce, so the link
 * idles that long between them (a method that computes between its
 * collectives) instead of carrying them back to back.
 *
 * Also prints the hostname-independent identity of each rank (its network
 * namespace inode) so one can check that every rank lives in its own netns.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    double mib = argc > 1 ? atof(argv[1]) : 4.0;
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    double gap = argc > 3 ? atof(argv[3]) : 0.0;
    if (mib <= 0 || reps < 1 || gap < 0) {
        if (rank == 0) fprintf(stderr, "usage: %s [MiB>0] [reps>=1] [gap_s>=0]\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    size_t n = (size_t)(mib * 1024 * 1024 / sizeof(float));
    size_t bytes = n * sizeof(float);

    /* Which network namespace am I in?  (inode of /proc/self/ns/net) */
    struct stat st;
    unsigned long netns = stat("/proc/self/ns/net", &st) == 0 ? (unsigned long)st.st_ino : 0;
    unsigned long *all_ns = rank == 0 ? malloc(sizeof(unsigned long) * size) : NULL;
    MPI_Gather(&netns, 1, MPI_UNSIGNED_LONG, all_ns, 1, MPI_UNSIGNED_LONG, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("ranks=%d bytes=%zu reps=%d netns:", size, bytes, reps);
        for (int r = 0; r < size; r++) printf(" %lu", all_ns[r]);
        printf("\n");
        free(all_ns);
    }

    float *buf = malloc(bytes), *out = malloc(bytes);
    if (!buf || !out) MPI_Abort(MPI_COMM_WORLD, 3);
    for (size_t i = 0; i < n; i++) buf[i] = (float)(rank + 1) * 1e-3f;

    /* Warm-up: establishes connections (UCX wires up lazily). */
    MPI_Allreduce(buf, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);

    double *t = malloc(sizeof(double) * reps);
    for (int r = 0; r < reps; r++) {
        if (gap > 0) {
            struct timespec ts = {(time_t)gap, (long)((gap - (double)(time_t)gap) * 1e9)};
            nanosleep(&ts, NULL);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        MPI_Allreduce(buf, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double dt = MPI_Wtime() - t0;
        /* The slowest rank defines the collective's time. */
        MPI_Allreduce(&dt, &t[r], 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    }

    /* Sanity check: sum over ranks of (r+1)*1e-3. */
    float expect = 1e-3f * (float)size * (float)(size + 1) / 2.0f;
    int bad = 0;
    for (size_t i = 0; i < n; i += 4097)
        if (out[i] < expect * 0.999f || out[i] > expect * 1.001f) bad = 1;
    int any_bad = 0;
    MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);

    if (rank == 0) {
        qsort(t, reps, sizeof(double), cmp_double);
        double med = t[reps / 2], best = t[0];
        double factor = size > 1 ? 2.0 * (size - 1) / size : 0.0;
        double bus_med = factor * bytes * 8 / med / 1e6;
        double bus_best = factor * bytes * 8 / best / 1e6;
        double mean = 0;
        for (int r = 0; r < reps; r++) mean += t[r] / reps;
        printf("allreduce %.2f MiB x%d over %d ranks, %.2f s apart: median %.3f s (min %.3f s, mean %.3f s)"
               " busbw median %.1f Mbit/s (best %.1f Mbit/s) check=%s\n",
               bytes / 1048576.0, reps, size, gap, med, best, mean, bus_med, bus_best,
               any_bad ? "FAIL" : "ok");
    }
    free(t);
    free(buf);
    free(out);
    MPI_Finalize();
    return any_bad ? 1 : 0;
}
