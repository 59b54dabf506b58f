/* Table-driven flag parsing for the subcommands (see td_cli_flags.h). */
#include "td_cli_flags.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static void print_choices(FILE *f, const char *const *choices, const char *separator)
{
    for (size_t i = 0; choices[i]; i++)
        fprintf(f, "%s%s", i ? separator : "", choices[i]);
}

/* One flag's value; false after saying what is wrong. */
static bool set_value(const char *command, const td_cli_flag *fl, const char *text)
{
    char *end;
    errno = 0;
    switch (fl->kind) {
    case TD_CLI_STRING:
        if (!*text) {
            fprintf(stderr, "tandem %s: %s expects a non-empty %s\n", command, fl->name, fl->value);
            return false;
        }
        *(const char **)fl->target = text;
        return true;
    case TD_CLI_CHOICE:
        for (size_t i = 0; fl->choices[i]; i++)
            if (strcmp(text, fl->choices[i]) == 0) {
                *(const char **)fl->target = fl->choices[i];
                return true;
            }
        fprintf(stderr, "tandem %s: %s expects one of ", command, fl->name);
        print_choices(stderr, fl->choices, ", ");
        fprintf(stderr, "; got '%s'\n", text);
        return false;
    case TD_CLI_INT: {
        long long v = strtoll(text, &end, 10);
        if (errno || end == text || *end || (double)v < fl->min || (double)v > fl->max) {
            fprintf(stderr, "tandem %s: %s expects an integer in [%.0f, %.0f], got '%s'\n", command, fl->name, fl->min,
                    fl->max, text);
            return false;
        }
        *(int64_t *)fl->target = v;
        return true;
    }
    case TD_CLI_U64: {
        unsigned long long v = strtoull(text, &end, 10);
        if (errno || end == text || *end || text[0] == '-') {
            fprintf(stderr, "tandem %s: %s expects an unsigned 64-bit integer, got '%s'\n", command, fl->name, text);
            return false;
        }
        *(uint64_t *)fl->target = v;
        return true;
    }
    case TD_CLI_FLOAT: {
        float v = strtof(text, &end);
        bool in_range = isfinite(v) && v >= fl->min && (fl->max_open ? v < fl->max : v <= fl->max);
        if (errno || end == text || *end || !in_range) {
            fprintf(stderr, "tandem %s: %s expects a number in [%g, %g%s, got '%s'\n", command, fl->name, fl->min,
                    fl->max, fl->max_open ? ")" : "]", text);
            return false;
        }
        *(float *)fl->target = v;
        return true;
    }
    case TD_CLI_SWITCH:
    default:
        return false;
    }
}

int td_cli_parse(const char *command, int argc, char **argv, const td_cli_flag *flags, size_t n_flags,
                 unsigned *set, const char **positional, int max_positional, int *n_positional)
{
    if (n_positional)
        *n_positional = 0;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0)
            return TD_CLI_HELP;
        if (arg[0] != '-' || arg[1] == '\0') {
            if (!n_positional || *n_positional >= max_positional) {
                fprintf(stderr, "tandem %s: unexpected argument '%s' (see tandem %s --help)\n", command, arg, command);
                return TD_CLI_BAD;
            }
            positional[(*n_positional)++] = arg;
            continue;
        }
        const char *eq = strchr(arg, '=');
        size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
        const td_cli_flag *fl = NULL;
        for (size_t k = 0; k < n_flags && !fl; k++)
            if (strlen(flags[k].name) == name_len && strncmp(flags[k].name, arg, name_len) == 0)
                fl = &flags[k];
        if (!fl) {
            fprintf(stderr, "tandem %s: unknown flag '%.*s' (see tandem %s --help)\n", command, (int)name_len, arg,
                    command);
            return TD_CLI_BAD;
        }
        if (fl->kind == TD_CLI_SWITCH) {
            if (eq) {
                fprintf(stderr, "tandem %s: %s takes no value, got '%s'\n", command, fl->name, eq + 1);
                return TD_CLI_BAD;
            }
            *(bool *)fl->target = true;
        } else {
            const char *value = eq ? eq + 1 : NULL;
            if (!value) {
                if (i + 1 >= argc) {
                    fprintf(stderr, "tandem %s: %s needs a value (%s)\n", command, fl->name, fl->value);
                    return TD_CLI_BAD;
                }
                value = argv[++i];
            }
            if (!set_value(command, fl, value))
                return TD_CLI_BAD;
        }
        if (set)
            *set |= fl->set_bit;
    }
    return TD_CLI_PARSED;
}

const char *td_cli_flag_value(int argc, char **argv, const char *name)
{
    const size_t n = strlen(name);
    const char *value = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], name) == 0 && i + 1 < argc)
            value = argv[++i];
        else if (strncmp(argv[i], name, n) == 0 && argv[i][n] == '=')
            value = argv[i] + n + 1;
    }
    return value;
}

bool td_cli_flag_present(int argc, char **argv, const char *name)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return true;
    return false;
}

void td_cli_print_help(FILE *f, const char *usage, const td_cli_flag *flags, size_t n_flags)
{
    fprintf(f, "%s\n", usage);
    for (size_t k = 0; k < n_flags; k++) {
        const td_cli_flag *fl = &flags[k];
        char left[64];
        if (fl->kind == TD_CLI_SWITCH)
            snprintf(left, sizeof left, "%s", fl->name);
        else
            snprintf(left, sizeof left, "%s %s", fl->name, fl->value);
        fprintf(f, "  %-24s %s", left, fl->help);
        if (fl->kind == TD_CLI_CHOICE) {
            fprintf(f, " (");
            print_choices(f, fl->choices, "|");
            fprintf(f, ")");
        }
        fputc('\n', f);
    }
    fprintf(f, "  %-24s %s\n", "--help", "this text");
}
