// The proxy's splice relay: Linux system calls that Swift's Glibc module leaves out (epoll, eventfd)
// or declares only under _GNU_SOURCE (splice, pipe2, accept4). _GNU_SOURCE itself is not defined
// here: the system types must stay the ones Glibc's module has, so these calls are declared as the
// kernel's ABI has them and wrapped under names of our own.
#include <fcntl.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>

extern ssize_t splice(int, __off64_t *, int, __off64_t *, size_t, unsigned int);
extern int pipe2(int[2], int);
extern int accept4(int, struct sockaddr *, socklen_t *, int);

static const unsigned int httpdns_splice_flags = 1 | 2; /* SPLICE_F_MOVE | SPLICE_F_NONBLOCK */
static const int httpdns_f_setpipe_sz = 1031;            /* F_SETPIPE_SZ */
static const int httpdns_f_getpipe_sz = 1032;            /* F_GETPIPE_SZ */

static inline ssize_t httpdns_splice(int in, int out, size_t length) { return splice(in, 0, out, 0, length, httpdns_splice_flags); }
static inline int httpdns_pipe2(int fds[2], int flags) { return pipe2(fds, flags); }
static inline int httpdns_accept4(int fd, int flags) { return accept4(fd, 0, 0, flags); }

/* Names the calling thread (what top -H, ps -L and perf show; 15 bytes at most). Foundation's
   Thread.name does not reach the kernel on Linux when set before the thread starts. */
static inline void httpdns_name_thread(const char *name) { prctl(PR_SET_NAME, (unsigned long)name, 0, 0, 0); }
