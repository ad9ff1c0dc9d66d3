/*
 * One-line commands (fastd reverse-proxy | file-server | respond ...): each
 * turns its arguments into the INI text of a configuration, which the
 * normal loader reads from memory (fd_conf_memory()), so what runs is what
 * --print-config shows and `fastd -c` runs from a file.
 */
#ifndef FD_CLI_H
#define FD_CLI_H

/*
 * argv[0] is the command's name. FD_OK: run the configuration now named
 * *conf (in the foreground); FD_DECLINED: argv[0] names no command;
 * FD_DONE: finished (--help, --print-config, bad arguments), exit with
 * *status.
 */
int fd_cli_command(int argc, char **argv, const char **conf, int *status);

/* The commands' lines for fastd -h. */
void fd_cli_usage(FILE *fp);

#endif
