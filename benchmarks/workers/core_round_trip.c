// The time for one cache line to go from one CPU to another and back: two threads, each bound to
// one CPU, take turns writing a counter the other spins on. A shared-memory collective is a chain
// of such trips, so this bounds what any stack on the machine can do at small sizes; on a
// virtual machine it also changes from second to second, as the hypervisor moves the virtual CPUs
// between physical cores (siblings, one socket, two sockets).
//
//   core_round_trip CPU_A CPU_B TRIPS   -> prints the mean nanoseconds per round trip
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static _Alignas(64) atomic_long ping;
static _Alignas(64) atomic_long pong;
static long trips;

static int bind_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void* answer(void* cpu) {
  if (bind_to(*(int*)cpu) != 0) exit(3);
  for (long i = 1; i <= trips; i++) {
    while (atomic_load_explicit(&ping, memory_order_acquire) != i) {
    }
    atomic_store_explicit(&pong, i, memory_order_release);
  }
  return NULL;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s CPU_A CPU_B TRIPS\n", argv[0]);
    return 2;
  }
  int a = atoi(argv[1]), b = atoi(argv[2]);
  trips = atol(argv[3]);
  if (bind_to(a) != 0) return 3;
  pthread_t other;
  if (pthread_create(&other, NULL, answer, &b) != 0) return 4;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (long i = 1; i <= trips; i++) {
    atomic_store_explicit(&ping, i, memory_order_release);
    while (atomic_load_explicit(&pong, memory_order_acquire) != i) {
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  pthread_join(other, NULL);
  printf("%.1f\n", ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / (double)trips);
  return 0;
}
