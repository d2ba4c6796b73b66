/*
 * The hot path's ceiling: the least a FUSE server can do per file.
 *
 * A minimal libfuse3 low-level, multi-threaded server that serves a list of
 * files from memory, the way redirfs serves samples (uncached attributes,
 * direct_io per handle) but with no decision, no loading and no JS. The
 * benchmark reads the same files through it, through redirfs and from the
 * page cache in one run, so redirfs is judged against what FUSE itself costs
 * on this machine.
 *
 *   memfs <mountpoint> <root> <list> [threads]
 *
 * (list: relative paths, one per line; threads: FUSE threads, default 16.)
 *
 * Every listed file is read into memory first.
 * Runs in the foreground until unmounted; prints "ready" once mounted.
 */
#define FUSE_USE_VERSION 312
#include <fuse3/fuse_lowlevel.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct node {
  char *name;
  fuse_ino_t parent;
  int is_dir;
  char *data;
  size_t size;
};

static struct node *nodes;
static size_t count, capacity;

/* (parent, name) -> inode, open addressing; lookups must cost what a real server's do: O(1). */
#define SLOTS (1u << 20)
static fuse_ino_t *slots;

static size_t slot_of(fuse_ino_t parent, const char *name) {
  size_t h = parent * 1099511628211u;
  for (const char *c = name; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211u;
  return h & (SLOTS - 1);
}

static fuse_ino_t find(fuse_ino_t parent, const char *name) {
  for (size_t s = slot_of(parent, name); slots[s] != 0; s = (s + 1) & (SLOTS - 1)) {
    struct node *n = &nodes[slots[s] - 1];
    if (n->parent == parent && strcmp(n->name, name) == 0) return slots[s];
  }
  return 0;
}

static fuse_ino_t add(fuse_ino_t parent, const char *name, int is_dir) {
  fuse_ino_t known = parent ? find(parent, name) : 0;
  if (known) return known;
  if (count == capacity) {
    capacity = capacity ? capacity * 2 : 1024;
    nodes = realloc(nodes, capacity * sizeof *nodes);
  }
  nodes[count] = (struct node){strdup(name), parent, is_dir, NULL, 0};
  fuse_ino_t ino = ++count;
  if (parent) {
    size_t s = slot_of(parent, name);
    while (slots[s] != 0) s = (s + 1) & (SLOTS - 1);
    slots[s] = ino;
  }
  return ino;
}

static void attributes(fuse_ino_t ino, struct stat *st) {
  memset(st, 0, sizeof *st);
  st->st_ino = ino;
  st->st_mode = nodes[ino - 1].is_dir ? S_IFDIR | 0555 : S_IFREG | 0444;
  st->st_nlink = 1;
  st->st_size = (off_t)nodes[ino - 1].size;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name) {
  fuse_ino_t ino = find(parent, name);
  if (ino == 0) { fuse_reply_err(req, ENOENT); return; }
  struct fuse_entry_param e;
  memset(&e, 0, sizeof e);
  e.ino = ino;
  attributes(ino, &e.attr);
  e.entry_timeout = nodes[ino - 1].is_dir ? 3600 : 0;
  e.attr_timeout = nodes[ino - 1].is_dir ? 3600 : 0;
  fuse_reply_entry(req, &e);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  (void)fi;
  if (ino < 1 || ino > count) { fuse_reply_err(req, ENOENT); return; }
  struct stat st;
  attributes(ino, &st);
  fuse_reply_attr(req, &st, 0);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  if (nodes[ino - 1].is_dir) { fuse_reply_err(req, EISDIR); return; }
  fi->direct_io = 1;
  fuse_reply_open(req, fi);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
  (void)fi;
  struct node *n = &nodes[ino - 1];
  if ((size_t)off >= n->size) { fuse_reply_buf(req, NULL, 0); return; }
  fuse_reply_buf(req, n->data + off, n->size - off < size ? n->size - off : size);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  (void)ino; (void)fi;
  fuse_reply_err(req, 0);
}

static char *read_whole(const char *path, size_t *size) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return NULL;
  struct stat st;
  fstat(fd, &st);
  char *data = malloc(st.st_size ? st.st_size : 1);
  size_t done = 0;
  while (done < (size_t)st.st_size) {
    ssize_t n = read(fd, data + done, st.st_size - done);
    if (n <= 0) break;
    done += n;
  }
  close(fd);
  *size = done;
  return data;
}

int main(int argc, char **argv) {
  if (argc != 4 && argc != 5) { fprintf(stderr, "usage: memfs <mountpoint> <root> <list> [threads]\n"); return 2; }
  int threads = argc == 5 ? atoi(argv[4]) : 16;
  if (threads < 1) { fprintf(stderr, "memfs: threads must be at least 1\n"); return 2; }
  slots = calloc(SLOTS, sizeof *slots);
  add(0, "", 1);  /* the root, inode 1 */
  FILE *list = fopen(argv[3], "r");
  if (list == NULL) { perror(argv[3]); return 1; }
  char line[4096], path[8192];
  while (fgets(line, sizeof line, list)) {
    line[strcspn(line, "\n")] = 0;
    if (!*line) continue;
    snprintf(path, sizeof path, "%s/%s", argv[2], line);
    fuse_ino_t parent = 1;
    char *rest = line, *slash;
    while ((slash = strchr(rest, '/')) != NULL) {
      *slash = 0;
      parent = add(parent, rest, 1);
      rest = slash + 1;
    }
    fuse_ino_t file = add(parent, rest, 0);
    nodes[file - 1].data = read_whole(path, &nodes[file - 1].size);
    if (nodes[file - 1].data == NULL) { perror(path); return 1; }
  }
  fclose(list);

  struct fuse_lowlevel_ops ops = {
    .lookup = op_lookup, .getattr = op_getattr, .open = op_open, .read = op_read, .release = op_release,
  };
  char *args_v[] = {argv[0], "-o", "fsname=memfs,ro"};
  struct fuse_args args = FUSE_ARGS_INIT(3, args_v);
  struct fuse_session *se = fuse_session_new(&args, &ops, sizeof ops, NULL);
  if (se == NULL || fuse_session_mount(se, argv[1]) != 0) return 1;
  fprintf(stdout, "ready\n");
  fflush(stdout);
  struct fuse_loop_config *config = fuse_loop_cfg_create();
  fuse_loop_cfg_set_max_threads(config, threads);
  fuse_loop_cfg_set_idle_threads(config, threads);
  int rc = fuse_session_loop_mt(se, config);
  fuse_session_unmount(se);
  fuse_session_destroy(se);
  return rc;
}
