/*
 * aenv-nft: the node's one nftables session (docs/networking.md, "nftables writes"). Each transaction the node
 * writes (a slot's chains, a sandbox's egress policy, a warm-pool hand-out's policy) used to be one `nft -f -`
 * process, forked from the node's large process; this process applies them through libnftables instead, one
 * script per request, each as one transaction exactly as `nft -f` applies a file.
 *
 * Requests on stdin, answered on stdout in order, one at a time:
 *   request: a 4-byte big-endian length N, then N bytes of nft script
 *   answer:  one byte, '0' applied or '1' refused; a 4-byte big-endian length M; M bytes of nft's error text
 * Exits 0 when stdin closes, 1 on a broken pipe or a truncated request, 2 on a request over the size limit.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <nftables/libnftables.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_SCRIPT (64u << 20)

/* 0: read all of it; 1: end of input before the first byte; -1: error or end of input part way. */
static int read_full(void *buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(STDIN_FILENO, (char *)buf + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) return got == 0 ? 1 : -1;
    got += (size_t)r;
  }
  return 0;
}

static int write_full(const void *buf, size_t n) {
  size_t put = 0;
  while (put < n) {
    ssize_t r = write(STDOUT_FILENO, (const char *)buf + put, n - put);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    put += (size_t)r;
  }
  return 0;
}

static int answer(int refused, const char *text) {
  size_t m = strlen(text);
  unsigned char head[5] = {refused ? '1' : '0', (unsigned char)(m >> 24), (unsigned char)(m >> 16),
                           (unsigned char)(m >> 8), (unsigned char)m};
  return write_full(head, sizeof head) || write_full(text, m) ? -1 : 0;
}

int main(void) {
  struct nft_ctx *ctx = nft_ctx_new(NFT_CTX_DEFAULT);
  if (!ctx) {
    fprintf(stderr, "aenv-nft: cannot open an nftables context\n");
    return 1;
  }
  if (nft_ctx_buffer_output(ctx) != 0 || nft_ctx_buffer_error(ctx) != 0) {
    fprintf(stderr, "aenv-nft: cannot buffer nftables output\n");
    return 1;
  }
  for (;;) {
    unsigned char len[4];
    int r = read_full(len, sizeof len);
    if (r == 1) break;
    if (r < 0) {
      fprintf(stderr, "aenv-nft: reading a request: %s\n", errno ? strerror(errno) : "truncated");
      return 1;
    }
    uint32_t n = (uint32_t)len[0] << 24 | (uint32_t)len[1] << 16 | (uint32_t)len[2] << 8 | len[3];
    if (n > MAX_SCRIPT) {
      fprintf(stderr, "aenv-nft: a script of %u bytes is over the limit of %u\n", n, MAX_SCRIPT);
      return 2;
    }
    char *script = malloc((size_t)n + 1);
    if (!script) {
      fprintf(stderr, "aenv-nft: out of memory for a script of %u bytes\n", n);
      return 1;
    }
    if (read_full(script, n) != 0) {
      fprintf(stderr, "aenv-nft: reading a request: truncated\n");
      return 1;
    }
    script[n] = '\0';
    int rc = nft_run_cmd_from_buffer(ctx, script);
    free(script);
    /* Reading a buffer empties it for the next request; output (nothing, without echo) is dropped. */
    const char *err = nft_ctx_get_error_buffer(ctx);
    (void)nft_ctx_get_output_buffer(ctx);
    const char *text = rc == 0 ? "" : (err && *err ? err : "nft refused the script (no message)");
    if (answer(rc != 0, text) != 0) {
      fprintf(stderr, "aenv-nft: writing an answer: %s\n", strerror(errno));
      return 1;
    }
  }
  nft_ctx_free(ctx);
  return 0;
}
