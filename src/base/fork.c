/* The fork registry. See fork.h for the policy. */
#include "base/fork.h"

#include <pthread.h>
#include <unistd.h>

#include "base/util.h"

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static sl__handle *reg_head; /* reg_mu */
static pthread_once_t reg_once = PTHREAD_ONCE_INIT;

static void on_prepare(void) { pthread_mutex_lock(&reg_mu); }
static void on_parent(void) { pthread_mutex_unlock(&reg_mu); }

/* The child: one thread, the list as it stood (reg_mu was held across). */
static void on_child(void) {
    for (sl__handle *h = reg_head; h; h = h->next) h->forked = 1;
    pthread_mutex_unlock(&reg_mu);
}

static void install(void) { pthread_atfork(on_prepare, on_parent, on_child); }

void sl__fork_track(sl__handle *h) {
    pthread_once(&reg_once, install);
    h->owner_pid = (long)getpid();
    h->forked = 0;
    pthread_mutex_lock(&reg_mu);
    h->next = reg_head;
    reg_head = h;
    pthread_mutex_unlock(&reg_mu);
}

int sl__fork_untrack(sl__handle *h) {
    int found = 0;
    pthread_mutex_lock(&reg_mu);
    for (sl__handle **pp = &reg_head; *pp; pp = &(*pp)->next)
        if (*pp == h) {
            *pp = h->next;
            found = 1;
            break;
        }
    pthread_mutex_unlock(&reg_mu);
    return found;
}

int sl__fork_enter(const sl__handle *h) {
    pthread_mutex_lock(&reg_mu);
    for (const sl__handle *p = reg_head; p; p = p->next)
        if (p == h) return 1;
    pthread_mutex_unlock(&reg_mu);
    return 0;
}

void sl__fork_leave(void) { pthread_mutex_unlock(&reg_mu); }

void sl__fork_reason(const sl__handle *h, const char *what, const char *lost, const char *remedy, char *buf,
                     size_t len) {
    sl__msg(buf, len,
            "this %s was created in process %ld and this is process %ld, a child of fork(): %s, so it cannot be "
            "used here; create %s after the fork",
            what, h->owner_pid, (long)getpid(), lost, remedy);
}
