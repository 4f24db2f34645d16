/*
 * agent.c - HAProxy's agent-check protocol on --agent-port.
 *
 * HAProxy (`server ... agent-check agent-port N agent-inter 1s`) opens a TCP
 * connection to the agent every interval, reads one line and applies it:
 *
 *     ready up 73%    serve, with 73% of the configured weight (the
 *                     admittable share, ready.h's hr_ready_percent)
 *     drain           no new sessions: /ready would answer 503 (memory,
 *                     queue full, or SIGTERM received)
 *     maint           the model is still loading
 *
 * then the agent closes the connection. One thread does it all: poll on the
 * listening socket and a pipe that stops it; accept, evaluate readiness
 * from the same snapshot /ready reads (hr_server_ready: never waits for an
 * engine step), write the line without blocking, close. The listener is
 * bound before the model loads, so a balancer sees `maint` meanwhile, and it
 * keeps answering `drain` after SIGTERM until the process exits (the HTTP
 * listener is closed by then).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/log.h"
#include "server/server-impl.h"

/* The line for the state now (with its newline); returns its length. */
static size_t agent_line(struct hr_server *srv, char *buf, size_t cap)
{
    struct hr_ready_input in;
    const enum hr_ready_reason why = hr_server_ready(srv, &in);
    int n;
    if (why == HR_READY_LOADING)
        n = snprintf(buf, cap, "maint\n");
    else if (why != HR_READY_OK)
        n = snprintf(buf, cap, "drain\n");
    else
        n = snprintf(buf, cap, "ready up %u%%\n", hr_ready_percent(&in));
    return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

static void *agent_main(void *arg)
{
    struct hr_server *srv = arg;
    for (;;) {
        struct pollfd p[2] = {{.fd = srv->agent_fd, .events = POLLIN},
                              {.fd = srv->agent_stop_pipe[0], .events = POLLIN}};
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            hr_log_error("agent", "poll: %s; the agent check stops", strerror(errno));
            return NULL;
        }
        if (p[1].revents)
            return NULL;
        if (!(p[0].revents & POLLIN))
            continue;
        const int c = accept4(srv->agent_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c < 0)
            continue; /* the peer left already, or EMFILE: the next check retries */
        char line[64];
        const size_t n = agent_line(srv, line, sizeof(line));
        /* A fresh socket's buffer holds a short line; a peer that does not
         * read cannot block this thread (non-blocking, sent once). */
        if (n)
            (void)send(c, line, n, MSG_NOSIGNAL);
        close(c);
    }
}

enum hr_status hr_agent_start(struct hr_server *srv, struct hr_err *err)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    char ps[16];
    snprintf(ps, sizeof(ps), "%u", srv->cfg.agent_port);
    const int rc = getaddrinfo(srv->cfg.host, ps, &hints, &res);
    if (rc != 0 || !res)
        return hr_err_set(err, HR_ERR_INVALID, "--agent-port: --host %s: %s", srv->cfg.host,
                          gai_strerror(rc));
    /* Non-blocking: a peer gone between poll and accept must not block the thread. */
    const int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    const int one = 1;
    if (fd >= 0)
        (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (fd < 0 || bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, 64) != 0) {
        const int e = errno;
        freeaddrinfo(res);
        if (fd >= 0)
            close(fd);
        return hr_err_set(err, HR_ERR_IO, "cannot listen on %s:%u (--agent-port): %s",
                          srv->cfg.host, srv->cfg.agent_port, strerror(e));
    }
    freeaddrinfo(res);
    if (pipe2(srv->agent_stop_pipe, O_CLOEXEC) != 0) {
        close(fd);
        return hr_err_set(err, HR_ERR_IO, "--agent-port: pipe: %s", strerror(errno));
    }
    srv->agent_fd = fd;
    if (pthread_create(&srv->agent_thread, NULL, agent_main, srv) != 0)
        return hr_err_set(err, HR_ERR_NOMEM, "cannot start the agent-check thread");
    srv->agent_started = true;
    hr_log_info("server", "HAProxy agent check on %s:%u", srv->cfg.host, srv->cfg.agent_port);
    return HR_OK;
}

void hr_agent_stop(struct hr_server *srv)
{
    if (srv->agent_started) {
        const char b = 1;
        (void)!write(srv->agent_stop_pipe[1], &b, 1);
        pthread_join(srv->agent_thread, NULL);
        srv->agent_started = false;
    }
    for (int i = 0; i < 2; i++)
        if (srv->agent_stop_pipe[i] >= 0) {
            close(srv->agent_stop_pipe[i]);
            srv->agent_stop_pipe[i] = -1;
        }
    if (srv->agent_fd >= 0) {
        close(srv->agent_fd);
        srv->agent_fd = -1;
    }
}
