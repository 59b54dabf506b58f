/* The command line's flags, described once in a table per subcommand: the
 * same table parses argv and prints --help, so the two cannot disagree.
 * Unknown flags and bad values are errors that name the flag, the value
 * and what was expected. */
#ifndef TD_CLI_FLAGS_H
#define TD_CLI_FLAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum td_cli_flag_kind {
    TD_CLI_SWITCH, /* no value: sets a bool */
    TD_CLI_STRING, /* const char * */
    TD_CLI_INT,    /* int64_t within [min, max] */
    TD_CLI_U64,    /* uint64_t, any */
    TD_CLI_FLOAT,  /* float within [min, max], or [min, max) when max_open */
    TD_CLI_CHOICE, /* const char *, one of choices (NULL-terminated) */
} td_cli_flag_kind;

typedef struct td_cli_flag {
    const char *name; /* "--epochs" */
    td_cli_flag_kind kind;
    void *target;
    double min, max;
    int max_open;
    const char *const *choices;
    unsigned set_bit;   /* or'ed into *set when the flag is given */
    const char *value;  /* the value's name in --help ("N", "DIR") */
    const char *help;
} td_cli_flag;

enum { TD_CLI_PARSED = 0, TD_CLI_HELP = 1, TD_CLI_BAD = 2 };

/* Parses argv[1..argc) (argv[0] is the subcommand) against `flags`;
 * "--name value" and "--name=value" both work. Arguments that do not start
 * with '-' (and "-" itself) are positionals, at most max_positional of them, stored in
 * positional[]. Returns TD_CLI_PARSED, TD_CLI_HELP for --help/-h, or
 * TD_CLI_BAD after printing what is wrong to stderr. */
int td_cli_parse(const char *command, int argc, char **argv, const td_cli_flag *flags, size_t n_flags,
                 unsigned *set, const char **positional, int max_positional, int *n_positional);

/* Before parsing, for a subcommand that picks its flag table by one flag
 * (`tandem train --model gpt`): the value of the last `name VALUE` or
 * `name=VALUE` in argv[1..argc), or NULL; and whether the switch `name`
 * is there. A look, not a parse: the table picked then parses everything
 * and says what is wrong. */
const char *td_cli_flag_value(int argc, char **argv, const char *name);
bool td_cli_flag_present(int argc, char **argv, const char *name);

/* Prints `usage` and then one line per flag. */
void td_cli_print_help(FILE *f, const char *usage, const td_cli_flag *flags, size_t n_flags);

#endif
