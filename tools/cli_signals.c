/* Stop signals for the training loops (see td_cli_signals.h). */
#include "td_cli_signals.h"

#include <signal.h>
#include <string.h>

#include "td_cli.h"

static volatile sig_atomic_t stop_signal;

static void on_signal(int signo)
{
    stop_signal = signo;
}

void td_cli_catch_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

bool td_cli_stop_requested(void)
{
    return stop_signal != 0;
}

int td_cli_signal_exit(void)
{
    return TD_CLI_EXIT_SIGNAL + (stop_signal ? stop_signal : SIGTERM);
}
