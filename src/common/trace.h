#pragma once
#include <stdint.h>
#include <time.h>
extern int64_t sl_tr[32];
static inline int64_t sl_tr_now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1000000LL+t.tv_nsec/1000;}
#define TR(i) (sl_tr[i]=sl_tr_now())
