/* server/user_cli.h: `kiln user add|list|remove` and `kiln token add`, the
 * command line's side of users and tokens (issue 15; the rules are
 * server/auth.h's). Each returns an exit status: 0, 1 a failure, 2 a usage
 * error. argv[0] is the command's own name ("user", "token").
 */
#ifndef KILN_SERVER_USER_CLI_H
#define KILN_SERVER_USER_CLI_H

#include <stdio.h>

int user_main(int argc, char **argv);
int token_main(int argc, char **argv);
void user_usage(FILE *f);

#endif
