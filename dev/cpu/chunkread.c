// chunkread.c -- read bandwidth of a buffer read as shuffled chunks (the access pattern of a paged KV
// cache whose pages hold CHUNK bytes), 2 threads, AVX-512 loads, with and without software prefetch
// PF chunks ahead (0, 2, 8, 32). Session 39 (NOTES.md) used it to explain bench_decode --page.
// Build: cc -O2 -mavx512f -pthread dev/cpu/chunkread.c -o chunkread
// Run:   ./chunkread MIB HUGE CHUNK      e.g. ./chunkread 2048 1 2048
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <immintrin.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
typedef struct {const char*base;const int32_t*perm;size_t n,chunk;uint64_t s;int pf;} job;
static void*run(void*a){job*j=a;__m512i acc=_mm512_setzero_si512();
 for(size_t i=0;i<j->n;i++){const char*c=j->base+(size_t)j->perm[i]*j->chunk;
  if(j->pf&&i+j->pf<j->n){const char*nx=j->base+(size_t)j->perm[i+j->pf]*j->chunk;for(size_t o=0;o<j->chunk;o+=64)_mm_prefetch(nx+o,_MM_HINT_T0);}
  for(size_t o=0;o<j->chunk;o+=64)acc=_mm512_add_epi64(acc,_mm512_load_si512(c+o));}
 j->s=_mm512_reduce_add_epi64(acc);return NULL;}
int main(int argc,char**argv){size_t bytes=(size_t)atoi(argv[1])<<20;char*p;posix_memalign((void**)&p,1<<21,bytes);
 if(atoi(argv[2]))madvise(p,bytes,MADV_HUGEPAGE);memset(p,1,bytes);
 size_t ch=atoi(argv[3]);int pfs[]={0,2,8,32};
 for(int pi=0;pi<4;pi++){size_t n=bytes/ch;int32_t*perm=malloc(4*n);for(size_t i=0;i<n;i++)perm[i]=i;
  uint64_t r=1;for(size_t i=n-1;i>0;i--){r=r*6364136223846793005ull+1442695040888963407ull;size_t k=(r>>33)%(i+1);int32_t x=perm[i];perm[i]=perm[k];perm[k]=x;}
  double t[5];for(int rep=0;rep<5;rep++){pthread_t th[2];job J[2];for(int q=0;q<2;q++)J[q]=(job){p,perm+q*(n/2),n/2,ch,0,pfs[pi]};
   double t0=now();for(int q=0;q<2;q++)pthread_create(&th[q],0,run,&J[q]);for(int q=0;q<2;q++)pthread_join(th[q],0);t[rep]=bytes/(now()-t0)*1e-9;}
  printf("%s MB, huge %s, chunk %s, prefetch %2d chunks ahead: ",argv[1],argv[2],argv[3],pfs[pi]);for(int rep=0;rep<5;rep++)printf("%.1f ",t[rep]);printf("GB/s\n");free(perm);}
}
