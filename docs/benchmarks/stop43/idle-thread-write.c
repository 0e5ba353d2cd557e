#define _GNU_SOURCE
#include <pthread.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
static void *idle(void *a){(void)a; pause(); return 0;}
static double run(const char *p){char b[100];memset(b,1,100);unlink(p);int fd=open(p,O_WRONLY|O_CREAT|O_APPEND,0600);double t=now();for(int i=0;i<1000000;i++)write(fd,b,100);double d=now()-t;close(fd);unlink(p);return d;}
int main(void){
  printf("single-threaded: %.3f us/write\n", run("/tmp/wb/d/thr")) ;
  printf("single-threaded: %.3f us/write\n", run("/tmp/wb/d/thr")) ;
  pthread_t t; pthread_create(&t,0,idle,0);
  printf("with an idle thread: %.3f us/write\n", run("/tmp/wb/d/thr"));
  printf("with an idle thread: %.3f us/write\n", run("/tmp/wb/d/thr"));
  return 0;}
