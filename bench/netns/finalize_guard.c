/*
 * finalize_guard.c - LD_PRELOAD workaround used by mpirun_shaped.sh.
 *
 * Problem: with Debian's MPICH 4.0.2 (ch4:ucx) + UCX 1.13.1 and UCX_TLS=tcp,
 * jobs of >= 4 ranks hang in MPI_Finalize in roughly half of the runs. This
 * also happens without network namespaces (plain `mpiexec -n 4` with
 * UCX_TLS=tcp,self); 2 and 3 ranks never hung in our tests. What gdb and
 * UCX_LOG_LEVEL=debug show: one rank spins in the endpoint-disconnect loop of
 * MPI_Finalize (ucp_disconnect_nb, then ucp_worker_progress until done), waiting
 * for an endpoint flush to complete. Every other rank has already finished its
 * own disconnects and is blocked in the PMI barrier that 4.0.2 runs after them,
 * reading its PMI socket. It no longer progresses UCX but keeps its TCP
 * connections open, so the spinning rank never sees the peer go away.
 * (Later MPICH moved that barrier before the disconnects.) If the parked ranks
 * close their TCP connections, the spinning rank sees "connection dropped by
 * the peer", its flush completes, it joins the barrier, and every rank
 * finalizes and exits normally with its own exit status.
 *
 * Workaround: wrap MPI_Finalize:
 *   1. MPI_Barrier(MPI_COMM_WORLD): all application traffic is complete.
 *   2. Start a watchdog thread, then call the real PMPI_Finalize.
 *   3. If PMPI_Finalize has not returned after MPIRUN_SHAPED_FINALIZE_GUARD
 *      seconds (default 2; 0 disables the wrapper), the watchdog checks if the
 *      main thread is parked in read() on the PMI fd (/proc/self/task/<pid>/syscall).
 *      If it is, this rank is done with UCX, so the watchdog shuts down the
 *      connected TCP sockets UCX opened. It skips the listening socket, the
 *      PMI socket (a Unix socket), and every socket the process inherited at
 *      start: hydra's proxy-to-mpiexec TCP control connection leaks into the
 *      ranks, and shutting that down kills the job. A rank still spinning in
 *      UCX is left alone.
 * If PMPI_Finalize returns normally, the watchdog does nothing.
 *
 * Build (mpirun_shaped.sh does this in its temp dir):
 *   mpicc -shared -fPIC -O2 -o libfinalize_guard.so finalize_guard.c -lpthread
 */
#define _GNU_SOURCE
#include <mpi.h>
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static atomic_int finalize_returned;
static double guard_secs;
static int pmi_fd = -1;

/* Sockets inherited at exec time (e.g. hydra's proxy<->mpiexec control
 * connection, which leaks into the ranks): never touch those. */
#define MAX_INHERITED 64
static ino_t inherited[MAX_INHERITED];
static int n_inherited;

__attribute__((constructor)) static void remember_inherited_sockets(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return;
    struct dirent *e;
    struct stat st;
    while ((e = readdir(d)) != NULL && n_inherited < MAX_INHERITED) {
        if (e->d_name[0] != '.' && fstat(atoi(e->d_name), &st) == 0 && S_ISSOCK(st.st_mode))
            inherited[n_inherited++] = st.st_ino;
    }
    closedir(d);
}

static int is_inherited(int fd)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return 1;
    for (int i = 0; i < n_inherited; i++)
        if (inherited[i] == st.st_ino)
            return 1;
    return 0;
}

static void sleep_secs(double s)
{
    struct timespec ts;
    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* Is the main thread blocked in read(pmi_fd, ...)? */
static int main_thread_in_pmi_read(void)
{
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", (int)getpid());
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    long nr = -1;
    unsigned long arg0 = 0;
    int ok = fgets(buf, sizeof buf, f) && sscanf(buf, "%ld %lx", &nr, &arg0) == 2;
    fclose(f);
    return ok && nr == SYS_read && (pmi_fd < 0 || (long)arg0 == pmi_fd);
}

/* shutdown() every connected TCP socket of this process; returns the count. */
static int shutdown_tcp_sockets(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int fd = atoi(e->d_name);
        if (e->d_name[0] == '.' || fd == dirfd(d) || fd == pmi_fd || is_inherited(fd))
            continue;
        int dom = 0, listening = 0;
        socklen_t len = sizeof dom;
        if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &len) != 0)
            continue; /* not a socket */
        if (dom != AF_INET && dom != AF_INET6)
            continue;
        len = sizeof listening;
        if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 && listening)
            continue;
        if (shutdown(fd, SHUT_RDWR) == 0)
            n++;
    }
    closedir(d);
    return n;
}

static void *watchdog(void *arg)
{
    (void)arg;
    sleep_secs(guard_secs);
    while (!atomic_load(&finalize_returned)) {
        if (main_thread_in_pmi_read()) {
            int n = shutdown_tcp_sockets();
            fprintf(stderr,
                    "finalize_guard: pid %d parked in the MPI_Finalize PMI barrier for %.1f s "
                    "(MPICH 4.0.2 + UCX TCP disconnect hang); shut down %d TCP socket(s) to "
                    "release the peer still disconnecting\n",
                    (int)getpid(), guard_secs, n);
            return NULL;
        }
        sleep_secs(0.2);
    }
    return NULL;
}

int MPI_Finalize(void)
{
    const char *env = getenv("MPIRUN_SHAPED_FINALIZE_GUARD");
    guard_secs = env ? atof(env) : 2.0;
    if (guard_secs > 0) {
        const char *fd = getenv("PMI_FD");
        pmi_fd = fd ? atoi(fd) : -1;
        PMPI_Barrier(MPI_COMM_WORLD);
        pthread_attr_t attr;
        pthread_t tid;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&tid, &attr, watchdog, NULL) != 0)
            fprintf(stderr, "finalize_guard: could not start the watchdog thread\n");
        pthread_attr_destroy(&attr);
    }
    int rc = PMPI_Finalize();
    atomic_store(&finalize_returned, 1);
    return rc;
}
