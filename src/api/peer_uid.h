/* The host uid behind the peer of an accepted TCP connection (sock_diag).
 * Thread-safe; one short-lived netlink socket per call. */
#ifndef SL_API_PEER_UID_H
#define SL_API_PEER_UID_H

#include <sys/types.h>

/* 0: *uid is the uid of the process that opened the peer's socket (it is
 * on this host, in this network namespace); 1: no such socket here (the
 * peer is another machine); -1: the lookup failed (errno). */
int sl_peer_uid(int fd, uid_t *uid);

#endif
