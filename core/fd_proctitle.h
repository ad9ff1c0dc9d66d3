#ifndef FD_PROCTITLE_H
#define FD_PROCTITLE_H

/* First thing in main(): move argv's strings and environ out of the area
 * the title will use (argv[i] then point to copies). */
int fd_proctitle_init(int argc, char **argv);
/* "master process" (followed by the command line), "worker process", ... */
void fd_proctitle_set(const char *what);

#endif
